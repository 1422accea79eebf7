"""A test double of the engine client API (docs/ARCHITECTURE.md, "Engine") and a fixture workspace.

FakeClient behaves like a small engine: commands change its state and push the
events a real engine would, so the app is driven through its real code paths.
Everything is deterministic: fixed clock, fixed data.

Nothing here invents a shape. Reports and comparisons are the harness's own
dataclasses; results rows come from the engine's ``make_row`` and are written by
the ledger's ``ResultsLog``; the kernel ranking comes from the engine's
``Orchestrator``; and every event, row, report and snapshot is checked against
``ledger.schema``, the schema the engine checks its own output against
(tests/tui/test_fixture_schema.py), so a fake that drifts fails.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import threading
from pathlib import Path

from autokernel_tui.config import Settings
from autokernel_tui.engine.runrecord import Spend, make_row
from autokernel_tui.engine.orchestrator import PLATEAU, Orchestrator
from autokernel_tui.harness.report import Comparison, Report, ShapeResult, Summary
from autokernel_tui.ledger import schema
from autokernel_tui.ledger.results import ResultsLog

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


PROPOSAL = {"agent": "tuner", "tokens": 0, "cost_usd": 0.0}  # what make_row takes from a proposal
FAILED = {"fail": "FAIL", "crash": "CRASH", "timeout": "TIMEOUT", "rejected": "REJECTED"}  # gate.FAILED_STATUS reversed


def checked(problems: list[str], value):
    """``value`` if the engine's schema has nothing against it; a fake that drifted fails loudly."""
    assert not problems, "fake drifted from the engine's schema: " + "; ".join(problems)
    return value


def report(status="PASS", stage="timing", speed=1.18, summary_speed=1.12, task="rmsnorm", cpu=False):
    """A harness Report dict, built by the harness's own dataclasses. roofline_pct is percent (0-100),
    as the harness writes it. A failed report has no timing and no summary, as the harness's.
    ``cpu``: as the Triton interpreter reports it (no roofline; speedups vs eager torch ~0.003x)."""
    if cpu:
        return cpu_report(status, stage, summary_speed, task)
    timed = status == "PASS"
    shapes = [
        ShapeResult(shape="tiny-odd", dims={"M": 37, "N": 1000}, dtype="bfloat16", passed=timed, max_abs_err=0.01,
                    rel_l2_err=0.001, **(dict(median_us=41.5, p20_us=40.9, p80_us=42.3, baseline_us=49.0,
                                              compile_ref_us=45.0, speedup_vs_baseline=speed, speedup_vs_compile=1.08,
                                              gbps=812.0, tflops=0.1, roofline_pct=62.0) if timed else {})),
        ShapeResult(shape="looped", dims={"M": 3, "N": 20011}, dtype="float32", passed=timed, max_abs_err=1e-5,
                    rel_l2_err=1e-6, **(dict(median_us=1210.0, p20_us=1190.0, p80_us=1234.0, baseline_us=1300.0,
                                             compile_ref_us=1250.0, speedup_vs_baseline=1.07, speedup_vs_compile=1.03,
                                             gbps=640.0, tflops=0.05, roofline_pct=48.0) if timed else {})),
    ]
    summary = Summary(latency_us=224.1, speedup_vs_baseline=summary_speed, speedup_vs_compile=1.05, roofline_pct=55.0,
                      worst_shape="looped", worst_speedup=1.07, gbps=721.0, tflops=0.07) if timed else None
    rep = Report(status=status, reason="" if timed else "max_abs_err 3.2 > atol 0.03 at tiny-odd", stage=stage,
                 task=task, device="NVIDIA H200", timing_meaningful=True, shapes=shapes, summary=summary,
                 compile_s=1.2, wall_s=3.4, peak_vram_mib=512.0 if timed else 0.0).to_dict()
    return checked(schema.check_report(rep), rep)


def cpu_report(status="PASS", stage="timing", summary_speed=0.0033, task="rmsnorm"):
    """The CPU interpreter's report: quick mode (one dtype) on the test shapes, timings not meaningful."""
    timed = status == "PASS"
    shapes = [ShapeResult(shape=name, dims=dims, dtype="float16", passed=timed, max_abs_err=1e-3, rel_l2_err=1e-4,
                          **(dict(median_us=us, p20_us=us * 0.95, p80_us=us * 1.05, baseline_us=base,
                                  speedup_vs_baseline=base / us, gbps=0.001) if timed else {}))
              for name, dims, us, base in (("tiny-odd", {"M": 37, "N": 1000}, 196223.0, 392.9),
                                           ("gpt2-row", {"M": 8, "N": 768}, 24143.8, 113.8),
                                           ("looped", {"M": 3, "N": 20011}, 76645.2, 363.2))]
    summary = Summary(latency_us=70000.0, speedup_vs_baseline=summary_speed, speedup_vs_compile=None,
                      roofline_pct=None, worst_shape="tiny-odd float16", worst_speedup=0.002, gbps=0.001,
                      tflops=1e-6) if timed else None
    rep = Report(status=status, reason="" if timed else "max_abs_err 3.2 > atol 0.01 at tiny-odd", stage=stage,
                 task=task, device="CPU (Triton interpreter)", timing_meaningful=False, shapes=shapes,
                 summary=summary, compile_s=2.4, wall_s=13.9, peak_vram_mib=0.0).to_dict()
    return checked(schema.check_report(rep), rep)


CPU_DEVICE = {"name": "CPU (Triton interpreter)", "timing_meaningful": False}


def cpu_experiment(n, status, vs_incumbent, task="rmsnorm", description="RESIDENT_MAX_KB 32 -> 0"):
    """(row, report, comparison) of a CPU experiment, made by the engine's make_row."""
    comp = None
    if vs_incumbent is not None:
        comp = Comparison(speedup=vs_incumbent, ci_low=vs_incumbent * 0.9, ci_high=vs_incumbent * 1.1,
                          faster=vs_incumbent > 1.01, n_samples=12,
                          method="CPU wall clock under the Triton interpreter (not meaningful)").to_dict()
    if status == "reverted":
        rep, comp = None, None
        r = make_row(n, task, f"cpu{n:04d}", status, None, None, None, description)
    else:
        rep = cpu_report("PASS" if status not in FAILED else FAILED[status], summary_speed=0.0033 * (vs_incumbent or 1))
        r = make_row(n, task, f"cpu{n:04d}", status, Report.from_dict(rep),
                     Comparison.from_dict(comp) if comp else None, Spend(**PROPOSAL), description)
    r["timestamp"] = f"2026-12-02T01:{n:02d}:00Z"
    return checked(schema.check_row(r), r), rep, comp


# Comparisons against the incumbent (the harness's Comparison): the pending candidate's, and each row's.
COMPARISON = Comparison(speedup=1.09, ci_low=1.05, ci_high=1.13, faster=True, n_samples=40,
                        method="paired bootstrap of medians").to_dict()
ROW_COMPARISON = Comparison(speedup=1.03, ci_low=1.01, ci_high=1.06, faster=True, n_samples=40,
                            method="paired bootstrap of medians").to_dict()


def experiment(n, status, task="rmsnorm", speed=1.05, description="tune warps", commit=None):
    """(results row, report, comparison) of experiment ``n`` as the engine records them: the row is
    made by the engine's own ``make_row``, from a report and comparison of the harness's dataclasses."""
    if status == "reverted":
        rep = comp = None
        r = make_row(n, task, commit or f"abc{n:04d}", status, None, None, None, description)
    else:
        failed = status in FAILED
        rep = report(FAILED.get(status, "PASS"), "smoke" if failed else "timing", summary_speed=speed, task=task)
        comp = None if failed else ROW_COMPARISON
        r = make_row(n, task, commit or f"abc{n:04d}", status, Report.from_dict(rep),
                     Comparison.from_dict(comp) if comp else None, Spend(**PROPOSAL), description)
    r["timestamp"] = f"2026-12-02T01:{n:02d}:00Z"  # fixed clock
    return checked(schema.check_row(r), r), rep, comp


def row(n, status, task="rmsnorm", speed=1.05, description="tune warps"):
    """A results row, typed as the engine's ``result`` events carry it."""
    return experiment(n, status, task, speed, description)[0]


EXPERIMENTS = [
    (1, "keep", "rmsnorm", 1.04, "baseline kernel.py"),
    (2, "discard", "rmsnorm", 1.01, "BLOCK 1024"),
    (3, "keep", "rmsnorm", 1.12, "NUM_WARPS 8"),
    (4, "fail", "rmsnorm", None, "drop the mask"),
    (5, "crash", "softmax", None, "out of bounds"),
    (6, "vetoed", "softmax", 1.30, "two-pass online softmax"),
]
ROWS = [row(n, status, task, speed, description) for n, status, task, speed, description in EXPERIMENTS]
DEVICE = {"name": "NVIDIA H200", "timing_meaningful": True}  # the harness's device_info()


def ranking(current="rmsnorm"):
    """snapshot()["tasks"] / task_selected "ranking", from the engine's own Orchestrator."""
    orch = Orchestrator({"rmsnorm": 0.18, "softmax": 0.31, "matmul": 0.42}, plateau=8)
    orch.set_start("rmsnorm", 55.0, 1.12, True)  # percent of roofline, as the harness reports it
    orch.set_start("softmax", 40.0, 1.0, True)
    orch.mark("softmax", PLATEAU)
    orch.current = current
    return checked([p for t in orch.ranked() for p in schema.check_task(t)], orch.ranked())


def snapshot(**over):
    snap = {
        "run": TAG, "state": "running", "policy": "manual", "experiment": 7, "task": "rmsnorm",
        "tasks": ranking(), "best": {"rmsnorm": 1.12}, "tokens": 123456, "cost_usd": 1.87, "device": DEVICE,
        "pending": None, "started_at": T0, "experiments": len(ROWS), "branch": f"autokernel/{TAG}",
        "workspace": "/fixture/ws", "pid": 4242, "repairs": [],
    }
    snap.update(over)
    return checked(schema.check_snapshot(snap), snap)


def pending_event(n=7):
    event = {"t": NOW, "type": "awaiting_approval", "run": TAG, "n": n, "task": "rmsnorm", "diff": DIFF,
             "report": report(), "comparison": COMPARISON, "deadline": NOW + 900}
    return checked(schema.check_event(event), event)


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


def make_workspace(root: Path, rows=ROWS, events=None, cpu=False) -> Path:
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
        failed = r["status"] in FAILED
        rep = report(FAILED.get(r["status"], "PASS"), "smoke" if failed else "timing", task=r["task"],
                     summary_speed=r["speedup_vs_baseline"], cpu=cpu)
        # as the engine saves it (engine.runrecord: reports/exp-N.json)
        (run / "reports" / f"exp-{n}.json").write_text(json.dumps(
            {"report": rep, "comparison": None if failed else ROW_COMPARISON}))
        (run / "agent" / f"exp-{n}.md").write_text(f"# exp {n}\n\nTry {r['description']}: fewer passes over x.\n")
    log = ResultsLog(run / "results.tsv")  # the engine's writer: header, cell format, checks
    for r in rows:
        log.append(checked(schema.check_row(r), r))
    events = events if events is not None else [
        {"t": T0, "type": "run_started", "run": TAG, "resumed": False, "tasks": ["rmsnorm", "softmax"],
         "policy": "manual", "device": CPU_DEVICE if cpu else DEVICE, "branch": f"autokernel/{TAG}", "pid": 4242},
        {"t": T0 + 1, "type": "experiment_started", "run": TAG, "n": 7, "task": "rmsnorm"},
        {"t": T0 + 2, "type": "agent", "run": TAG, "n": 7, "kind": "thinking",
         "text": "The looped path reloads x twice; a larger block keeps the row in registers. "},
        {"t": T0 + 3, "type": "agent", "run": TAG, "n": 7, "kind": "text",
         "text": "Raise NUM_WARPS to 8 and ROW_BLOCK_ELEMS to 4096."},
        {"t": T0 + 4, "type": "proposal", "run": TAG, "n": 7, "description": "NUM_WARPS 8, block 4096",
         "hypothesis": "more warps hide latency", "diff": DIFF, **PROPOSAL},
    ]
    with open(run / "events.jsonl", "w", encoding="utf-8") as handle:
        for e in events:
            handle.write(json.dumps(checked(schema.check_event(e), e)) + "\n")
    meta = {"tag": TAG, "branch": f"autokernel/{TAG}", "base": _git(root, "rev-parse", "HEAD"),
            "tasks": ["rmsnorm", "softmax"], "owned_hashes": {}, "settings": dataclasses.asdict(Settings()),
            "created_at": T0, "finished": False}
    (run / "run.json").write_text(json.dumps(checked(schema.check_run_meta(meta), meta)))
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
        return json.loads(json.dumps(checked(schema.check_snapshot(self.snap), self.snap)))

    def subscribe(self, callback) -> None:
        self.callbacks.append(callback)

    def emit(self, event: dict) -> None:
        """Push an event to the subscribers, as the engine would: it must pass the engine's schema."""
        event = {"t": NOW, "run": TAG, **event}
        checked(schema.check_event(event), event)
        with self._lock:
            if event["type"] == "state":
                self.snap["state"] = event["state"]
            if event["type"] == "awaiting_approval":
                self.snap["pending"] = {k: event[k] for k in schema.PENDING_KEYS}
            for cb in list(self.callbacks):
                cb(event)

    def send(self, cmd: str, **args) -> dict:
        """What the engine does on each command, in the order it emits its events."""
        self.sent.append((cmd, args))
        pending = self.snap.get("pending")
        if cmd in ("approve", "veto"):
            if not pending:
                return {"ok": False, "error": "no candidate is awaiting approval"}
            self.snap["pending"] = None
            action = "keep" if cmd == "approve" else "veto"
            self.emit({"type": "state", "state": "running"})
            self.emit({"type": "decision", "n": pending["n"], "action": action, "by": "human",
                       "reason": "approved" if cmd == "approve" else "vetoed"})
            self.emit({"type": "result", "row": row(pending["n"], "keep" if cmd == "approve" else "vetoed",
                                                    speed=1.18, description="NUM_WARPS 8, block 4096")})
            self.emit({"type": "budget", "tokens": self.snap["tokens"], "cost_usd": self.snap["cost_usd"]})
        elif cmd == "pause":
            self.emit({"type": "state", "state": "paused"})
        elif cmd == "resume":
            self.emit({"type": "state", "state": "running"})
        elif cmd == "set_policy":
            self.snap["policy"] = args["policy"]
            self.emit({"type": "policy", "policy": args["policy"]})
        elif cmd == "skip":
            self.emit({"type": "task_selected", "task": "softmax", "reason": "skipped by human",
                       "ranking": ranking(current="softmax")})
        elif cmd == "stop":  # a stop ends the session (the run resumes later): no run_finished
            self.emit({"type": "state", "state": "stopped"})
            self.emit({"type": "session_ended", "reason": "stopped by request"})
        elif cmd == "revert":
            n = 99
            self.emit({"type": "experiment_started", "n": n, "task": "rmsnorm", "revert_of": args.get("n")})
            self.emit({"type": "committed", "n": n, "commit": f"abc{n:04d}"})
            self.emit({"type": "decision", "n": n, "action": "revert", "by": "human",
                       "reason": f"revert of experiment {args.get('n')}"})
            self.emit({"type": "result", "row": row(n, "reverted", description=f"revert exp {args.get('n')}")})
        else:
            return {"ok": False, "error": f"unknown command {cmd!r}"}
        return {"ok": True, "state": self.snap["state"]}

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
