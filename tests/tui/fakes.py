"""A test double of the engine client API (docs/ARCHITECTURE.md, "Engine") and a fixture workspace.

FakeClient behaves like a small engine: commands change its state and push the
events a real engine would, so the app is driven through its real code paths.
Everything is deterministic: fixed clock, fixed data.
"""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

from autokernel_tui.tui.workspace_files import RESULTS_COLUMNS

T0 = 1_764_000_000.0  # fixed "run started" time
NOW = T0 + 3723.0  # the fixed clock: 01:02:03 elapsed
TAG = "night-1"

DIFF = """--- a/kernels/rmsnorm/kernel.py
+++ b/kernels/rmsnorm/kernel.py
@@ -1,9 +1,9 @@
 import torch
 import triton
 import triton.language as tl
-NUM_WARPS = 4
-ROW_BLOCK_ELEMS = 2048
+NUM_WARPS = 8
+ROW_BLOCK_ELEMS = 4096
 
 @triton.jit
 def _rmsnorm(x_ptr, w_ptr, y_ptr, N, eps, BLOCK: tl.constexpr):
     row = tl.program_id(0)
"""


def report(status="PASS", stage="timing", speed=1.18):
    shapes = [
        {"shape": "tiny-odd", "dims": {"M": 37, "N": 1000}, "dtype": "bfloat16", "passed": True,
         "max_abs_err": 0.01, "rel_l2_err": 0.001, "median_us": 41.5, "p20_us": 40.9, "p80_us": 42.3,
         "baseline_us": 49.0, "compile_ref_us": 45.0, "speedup_vs_baseline": speed, "speedup_vs_compile": 1.08,
         "gbps": 812.0, "tflops": 0.1, "pct_roofline": 0.62},
        {"shape": "looped", "dims": {"M": 3, "N": 20011}, "dtype": "float32", "passed": True,
         "max_abs_err": 1e-5, "rel_l2_err": 1e-6, "median_us": 1210.0, "p20_us": 1190.0, "p80_us": 1234.0,
         "baseline_us": 1300.0, "compile_ref_us": 1250.0, "speedup_vs_baseline": 1.07, "speedup_vs_compile": 1.03,
         "gbps": 640.0, "tflops": 0.05, "pct_roofline": 0.48},
    ]
    return {"status": status, "reason": "" if status == "PASS" else "max_abs_err 3.2 > atol 0.03 at tiny-odd",
            "stage": stage, "task": "rmsnorm", "device": "NVIDIA H200", "timing_meaningful": True,
            "shapes": shapes, "summary": {"latency_us": 224.1, "speedup_vs_baseline": 1.12, "speedup_vs_compile": 1.05,
                                          "pct_roofline": 0.55, "worst_shape": "looped", "worst_speedup": 1.07,
                                          "gbps": 721.0, "tflops": 0.07},
            "compile_s": 1.2, "wall_s": 3.4, "peak_vram_mb": 512.0, "stderr_tail": ""}


COMPARISON = {"speedup": 1.09, "ci_low": 1.05, "ci_high": 1.13, "faster": True, "n_samples": 40, "method": "paired bootstrap of medians"}


def row(n, status, task="rmsnorm", speed="1.05", description="tune warps"):
    values = {
        "experiment": str(n), "timestamp": f"2026-12-02T01:{n:02d}:00", "task": task, "commit": f"abc{n:04d}",
        "status": status, "correctness": "pass" if status in ("keep", "discard", "vetoed") else "fail",
        "latency_us": "224.1", "speedup_vs_baseline": speed, "speedup_vs_incumbent": "1.03", "ci_low": "1.01",
        "ci_high": "1.06", "pct_roofline": "0.55", "tflops": "0.07", "gbps": "721", "peak_vram_mb": "512",
        "agent": "tuner", "tokens": "0", "cost_usd": "0", "description": description,
    }
    return {c: values[c] for c in RESULTS_COLUMNS}


ROWS = [
    row(1, "keep", speed="1.04", description="baseline kernel.py"),
    row(2, "discard", speed="1.01", description="BLOCK 1024"),
    row(3, "keep", speed="1.12", description="NUM_WARPS 8"),
    row(4, "fail", speed="", description="drop the mask"),
    row(5, "crash", task="softmax", speed="", description="out of bounds"),
    row(6, "vetoed", task="softmax", speed="1.30", description="two-pass online softmax"),
]


def snapshot(**over):
    snap = {
        "run": TAG, "state": "running", "policy": "manual", "experiment": 7, "task": "rmsnorm",
        "tasks": [{"name": "rmsnorm", "share": 0.18, "state": "active"},
                  {"name": "softmax", "share": 0.31, "state": "plateaued", "speedup": 1.0},
                  {"name": "matmul", "share": 0.42, "state": "queued"}],
        "best": {"rmsnorm": 1.12}, "tokens": 123456, "cost_usd": 1.87, "device": "NVIDIA H200",
        "pending": None, "started_at": T0,
    }
    snap.update(over)
    return snap


def pending_event(n=7):
    return {"t": NOW, "type": "awaiting_approval", "run": TAG, "n": n, "task": "rmsnorm", "diff": DIFF,
            "report": report(), "comparison": COMPARISON, "deadline": NOW + 900}


KERNEL = "import torch\nimport triton\nimport triton.language as tl\nNUM_WARPS = {w}\nROW_BLOCK_ELEMS = {b}\n"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "GIT_AUTHOR_DATE": "2026-12-02T00:00:00Z", "GIT_COMMITTER_DATE": "2026-12-02T00:00:00Z", "PATH": "/usr/bin:/bin"}


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True,
                          env=GIT_ENV).stdout.strip()


def _commit_kernel(root: Path, task: str, n: int) -> str:
    path = root / "kernels" / task / "kernel.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(KERNEL.format(w=2 ** (n % 5), b=1024 * n))
    _git(root, "add", str(path))
    _git(root, "commit", "-q", "-m", f"exp {n}: {task}")
    return _git(root, "rev-parse", "HEAD")


def make_workspace(root: Path, rows=ROWS, events=None) -> Path:
    """A git repository with kernels/, one commit per experiment, and one run's files (results, events,
    reports, agent text), like the engine would leave it. Deterministic: fixed dates and contents."""
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    _commit_kernel(root, "rmsnorm", 0)
    _commit_kernel(root, "softmax", 0)
    rows = [dict(r) for r in rows]
    for r in rows:
        r["commit"] = _commit_kernel(root, r["task"], int(r["experiment"]))
    run = root / ".autokernel" / "runs" / TAG
    (run / "reports").mkdir(parents=True, exist_ok=True)
    (run / "agent").mkdir(parents=True, exist_ok=True)
    for r in rows:
        n = int(r["experiment"])
        failed = r["status"] in ("fail", "crash")
        # The engine's format: {"report": Report, "comparison": Comparison | null} (none for a failure).
        (run / "reports" / f"exp-{n}.json").write_text(json.dumps(
            {"report": report("FAIL" if failed else "PASS", "smoke" if failed else "timing"),
             "comparison": None if failed else {**COMPARISON, "speedup": float(r["speedup_vs_incumbent"]),
                                                 "ci_low": float(r["ci_low"]), "ci_high": float(r["ci_high"])}}))
        (run / "agent" / f"exp-{n}.md").write_text(f"# exp {n}\n\nTry {r['description']}: fewer passes over x.\n")
    with open(run / "results.tsv", "w", encoding="utf-8") as handle:
        handle.write("\t".join(RESULTS_COLUMNS) + "\n")
        for r in rows:
            handle.write("\t".join(r[c] for c in RESULTS_COLUMNS) + "\n")
    events = events if events is not None else [
        {"t": T0, "type": "run_started", "run": TAG},
        {"t": T0 + 1, "type": "experiment_started", "run": TAG, "n": 7, "task": "rmsnorm"},
        {"t": T0 + 2, "type": "agent", "run": TAG, "n": 7, "kind": "thinking",
         "text": "The looped path reloads x twice; a larger block keeps the row in registers. "},
        {"t": T0 + 3, "type": "agent", "run": TAG, "n": 7, "kind": "text",
         "text": "Raise NUM_WARPS to 8 and ROW_BLOCK_ELEMS to 4096."},
        {"t": T0 + 4, "type": "proposal", "run": TAG, "n": 7, "description": "NUM_WARPS 8, block 4096",
         "hypothesis": "more warps hide latency", "diff": DIFF},
    ]
    with open(run / "events.jsonl", "w", encoding="utf-8") as handle:
        for e in events:
            handle.write(json.dumps(e) + "\n")
    (run / "run.json").write_text(json.dumps({"tag": TAG}))
    return root


class FakeClient:
    """The engine client API: snapshot / subscribe / send / close."""

    def __init__(self, snap: dict | None = None) -> None:
        self.snap = snap or snapshot()
        self.sent: list[tuple[str, dict]] = []
        self.callbacks = []
        self.closed = False
        self._lock = threading.Lock()
        self.next_exp = int(self.snap["experiment"]) + 1

    def snapshot(self) -> dict:
        return json.loads(json.dumps(self.snap))

    def subscribe(self, callback) -> None:
        self.callbacks.append(callback)

    def emit(self, event: dict) -> None:
        event = {"t": NOW, "run": TAG, **event}
        with self._lock:
            if event["type"] == "state":
                self.snap["state"] = event["state"]
            if event["type"] == "awaiting_approval":
                self.snap["pending"] = event
            for cb in list(self.callbacks):
                cb(event)

    def send(self, cmd: str, **args) -> dict:
        self.sent.append((cmd, args))
        pending = self.snap.get("pending")
        if cmd in ("approve", "veto"):
            if not pending:
                return {"ok": False, "error": "nothing awaits approval"}
            self.snap["pending"] = None
            action = "keep" if cmd == "approve" else "veto"
            self.emit({"type": "decision", "n": pending["n"], "action": action, "by": "human", "reason": ""})
            self.emit({"type": "result", "row": row(pending["n"], "keep" if cmd == "approve" else "vetoed",
                                                    speed="1.18", description="NUM_WARPS 8, block 4096")})
            self.emit({"type": "state", "state": "running"})
        elif cmd == "pause":
            self.emit({"type": "state", "state": "paused"})
        elif cmd == "resume":
            self.emit({"type": "state", "state": "running"})
        elif cmd == "set_policy":
            self.snap["policy"] = args["policy"]
            self.emit({"type": "policy", "policy": args["policy"]})
        elif cmd == "skip":
            self.emit({"type": "task_selected", "task": "softmax", "reason": "skipped by human"})
        elif cmd == "stop":
            self.emit({"type": "run_finished", "reason": "stopped by human"})
        elif cmd == "revert":
            self.emit({"type": "result", "row": row(99, "reverted", description=f"revert exp {args.get('n')}")})
        else:
            return {"ok": False, "error": f"unknown command {cmd}"}
        return {"ok": True}

    def close(self) -> None:
        self.closed = True


def screen_text(app) -> str:
    """What the terminal shows right now, as plain text (for asserting on rendered content)."""
    import io

    from rich.console import Console

    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), force_terminal=True,
                      color_system="truecolor", record=True, legacy_windows=False, safe_box=False)
    console.print(app.screen._compositor.render_update(full=True))
    return console.export_text()
