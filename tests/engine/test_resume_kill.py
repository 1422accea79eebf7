"""kill -9 the headless engine at many points, resume with the same command each time,
and check after every kill that git, results.tsv and events.jsonl agree."""

import random
import signal
import subprocess
import time

from autokernel_tui.ledger.results import read_rows
from subproc import check_consistent as _check, engine_env, git, run_args, start

TAG = "night"


def check_consistent(ws, final=False):
    return _check(ws, TAG, final=final)


SCRIPT = "90,95,80,85/FAIL,70,75,60,65"


def test_sigkill_anywhere_then_resume(workspace):
    git(workspace, "branch", "-M", "main")
    rng = random.Random(4)
    env = engine_env(AUTOKERNEL_TEST_SCRIPT=SCRIPT)
    points = ["agent", "committed", "evaluated", "decided", "advanced", "ref-kept", "torn-row", "row-written",
              "committed", "decided", "agent"]
    killed = []
    for point in points:
        n = len(read_rows(workspace / ".autokernel" / "runs" / TAG / "results.tsv")) + 1
        # Armed for the next experiments: the first one that reaches the point dies there
        # (e.g. "ref-kept" only exists in experiments that are not kept).
        crash = ",".join(f"{point}:{k}" for k in range(n, n + 12))
        proc = subprocess.run(run_args(workspace, "--policy", "auto", "--tag", TAG, "--max-experiments", "100"),
                              env={**env, "AUTOKERNEL_TEST_CRASH": crash}, capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
        rows = check_consistent(workspace)
        if point in ("agent", "committed"):  # the open experiment is closed on the next start: look then
            killed.append((point, len(rows) + 1))
    # Two kills from outside at random moments of a slower run.
    slow = {**env, "AUTOKERNEL_TEST_AGENT_DELAY": "0.15", "AUTOKERNEL_TEST_HARNESS_DELAY": "0.05"}
    for _ in range(2):
        proc = start(workspace, "--policy", "auto", "--tag", TAG, "--max-experiments", "100", env=slow)
        time.sleep(rng.uniform(0.8, 2.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        check_consistent(workspace)

    rows = read_rows(workspace / ".autokernel" / "runs" / TAG / "results.tsv", typed=True)
    total = len(rows) + 3
    done = subprocess.run(run_args(workspace, "--policy", "auto", "--tag", TAG, "--max-experiments", str(total)),
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = check_consistent(workspace, final=True)
    assert len(rows) == total
    for point, n in killed:  # killed during the agent call / between commit and verdict: one crash row
        r = rows[n - 1]
        assert r["status"] == "crash" and r["description"].startswith("interrupted"), (point, r)
        assert bool(r["commit"]) == (point == "committed")
    assert git(workspace, "status", "--porcelain") == ""  # the user's checkout never moved
    wt = workspace / ".autokernel" / "worktrees" / TAG
    assert git(wt, "status", "--porcelain") == ""
