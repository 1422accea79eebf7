"""On the GPU: a real headless night in miniature. The offline tuner on rmsnorm and softmax with
the real harness on CUDA, one kill -9 in the middle and a resume, then the ledger checked.

Run on the device machine (gitpython from the carried wheels):
    python -m pytest -m gpu tests/engine/test_gpu_run.py -q -s
It prints one line per experiment and writes the run folder to $OUT/engine-gpu-run if $OUT is set.
"""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from autokernel_tui.ledger.events import read_events
from autokernel_tui.ledger.results import read_rows
from subproc import check_consistent, git

pytestmark = pytest.mark.gpu
TAG = "gpu"


def test_gpu_night_in_miniature(tmp_path):
    from autokernel_tui.ledger.workspace import init_workspace

    ws = init_workspace(tmp_path / "ws", tasks=["rmsnorm", "softmax"])
    git(ws, "branch", "-M", "main")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOKERNEL_", "ANTHROPIC", "TRITON_INTERPRET"))}
    cmd = [sys.executable, "-m", "autokernel_tui", "run", "--headless", "-C", str(ws), "--agent", "tuner",
           "--policy", "auto", "--tag", TAG, "--max-experiments", "6"]
    results = ws / ".autokernel" / "runs" / TAG / "results.tsv"
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t0 = time.time()
    while len(read_rows(results)) < 2 and proc.poll() is None and time.time() - t0 < 400:
        time.sleep(0.5)
    time.sleep(1.0)  # land somewhere inside experiment 3
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    check_consistent(ws, TAG)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = check_consistent(ws, TAG, final=True)
    assert len(rows) == 6
    events = read_events(ws / ".autokernel" / "runs" / TAG / "events.jsonl")
    device = next(e["device"] for e in events if e["type"] == "run_started")
    assert device["timing_meaningful"] is True and "NVIDIA" in device["name"]
    print(f"\n{device['name']}  run {TAG}: {time.time() - t0:.0f} s for 6 experiments with one kill -9")
    print(f"{'exp':>3} {'task':<8} {'status':<8} {'vs inc':>7} {'CI':>15} {'vs base':>8} {'%roof':>6}  description")
    for r in rows:
        sp, lo, hi = r["speedup_vs_incumbent"], r["ci_low"], r["ci_high"]
        base, roof = r["speedup_vs_baseline"], r["roofline_pct"]
        ci = f"[{lo:.3f},{hi:.3f}]" if lo else "-"
        sp_s = f"{sp:.3f}" if sp else "-"
        base_s = f"{base:.3f}" if base else "-"
        roof_s = f"{roof:.0f}" if roof else "-"
        print(f"{r['experiment']:>3} {r['task']:<8} {r['status']:<8} {sp_s:>7} {ci:>15} {base_s:>8} {roof_s:>6}  "
              f"{r['description']}")
    assert all(r["correctness"] in ("PASS", "") for r in rows if r["status"] in ("keep", "discard"))
    if os.environ.get("OUT"):
        shutil.copytree(ws / ".autokernel" / "runs" / TAG, os.path.join(os.environ["OUT"], "engine-gpu-run"))
