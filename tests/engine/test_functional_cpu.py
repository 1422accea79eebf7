"""Done-when: a headless run on the CPU with the real harness (Triton interpreter, isolated
worker) and the real offline tuner, for several experiments; then git, refs, results and events."""

import json
import os
import subprocess
import sys

import pytest

from autokernel_tui.ledger.events import read_events
from autokernel_tui.ledger.history import load_runs
from autokernel_tui.ledger.results import read_rows

pytestmark = pytest.mark.slow


def git(ws, *args):
    return subprocess.run(["git", "-C", str(ws), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_headless_run_with_real_harness_and_tuner(workspace):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOKERNEL_", "ANTHROPIC", "OPENAI"))}
    env.update(TRITON_INTERPRET="1", AUTOKERNEL_HARNESS_QUICK="1")  # quick: fewer timing rounds on the CPU
    out = subprocess.run([sys.executable, "-m", "autokernel_tui", "run", "--headless", "-C", str(workspace),
                          "--agent", "tuner", "--policy", "auto", "--max-experiments", "2", "--tag", "cpu"],
                         env=env, capture_output=True, text=True, timeout=420)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "finished: experiment budget reached (2)" in out.stdout

    rd = workspace / ".autokernel" / "runs" / "cpu"
    rows = read_rows(rd / "results.tsv", typed=True)
    assert [r["experiment"] for r in rows] == [1, 2]
    assert all(r["agent"] == "tuner" and r["correctness"] == "PASS" for r in rows), rows
    assert all(r["status"] in ("keep", "discard") for r in rows)
    assert all(r["speedup_vs_incumbent"] and r["ci_low"] <= r["speedup_vs_incumbent"] <= r["ci_high"] for r in rows)
    # Git: kept experiments on the branch, every other one under its ref; trailers carry the numbers.
    base = git(workspace, "rev-parse", "HEAD")
    chain = git(workspace, "rev-list", "--first-parent", "--reverse", f"{base}..autokernel/cpu").split()
    assert chain == [r["commit"] for r in rows if r["status"] == "keep"]
    for r in rows:
        body = git(workspace, "log", "-1", "--format=%B", r["commit"])
        assert body.startswith(f"exp {r['experiment']}: {r['description']}")
        assert "Autokernel-Status: PASS" in body and "Autokernel-Speedup: " in body
        if r["status"] != "keep":
            assert git(workspace, "rev-parse", f"refs/autokernel/cpu/exp-{r['experiment']}") == r["commit"]
        # the tuner edits knob constants only: one or two lines of kernel.py change
        diff = git(workspace, "diff", f"{r['commit']}^", r["commit"], "--stat")
        assert "kernels/rmsnorm/kernel.py" in diff
    # Events: the whole story a viewer needs, in order, with the real harness report.
    events = read_events(rd / "events.jsonl")
    kinds = [e["type"] for e in events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert events[0]["device"]["name"] == "CPU (Triton interpreter)"
    assert kinds.count("experiment_started") == 2 and kinds.count("result") == 2
    assert any(e["type"] == "baseline" and e["report"]["status"] == "PASS" for e in events)
    verdicts = [e for e in events if e["type"] == "verdict"]
    assert all(v["report"]["device"] == "CPU (Triton interpreter)" and v["comparison"]["n_samples"] > 0
               for v in verdicts)
    assert any(e["type"] == "agent" for e in events)  # the tuner explains its moves
    (run,) = load_runs(workspace)
    assert run.diff(1).startswith("diff --git") and run.report(1)["status"] == "PASS"
    assert json.loads((rd / "run.json").read_text())["finished"] is True
    assert git(workspace, "status", "--porcelain") == ""
