"""kill -9 the headless engine at many points, resume with the same command each time,
and check after every kill that git, results.tsv and events.jsonl agree."""

import random
import signal
import subprocess
import time

from autokernel_tui.ledger.events import read_events
from autokernel_tui.ledger.results import read_rows
from subproc import engine_env, run_args, start

TAG = "night"
SCRIPT = "90,95,80,85/FAIL,70,75,60,65"


def git(ws, *args, check=True):
    return subprocess.run(["git", "-C", str(ws), *args], capture_output=True, text=True, check=check).stdout.strip()


def check_consistent(ws, final=False):
    """The invariants that must hold at ANY moment, even with one experiment still open."""
    rd = ws / ".autokernel" / "runs" / TAG
    rows = read_rows(rd / "results.tsv", typed=True)
    ns = [r["experiment"] for r in rows]
    assert ns == list(range(1, len(ns) + 1)), f"rows not contiguous: {ns}"
    events = read_events(rd / "events.jsonl")
    results = [e["row"]["experiment"] for e in events if e["type"] == "result"]
    assert sorted(results) == results and len(set(results)) == len(results), "a result event was duplicated"
    assert set(ns) - set(results) <= ({ns[-1]} if ns and not final else set()), "a row lost its result event"
    started = {e["n"] for e in events if e["type"] == "experiment_started"}
    assert set(ns) <= started
    # The branch holds exactly the kept (and revert) commits, in order; at most one open candidate on top.
    base = git(ws, "rev-parse", "main")
    chain = git(ws, "rev-list", "--first-parent", "--reverse", f"{base}..autokernel/{TAG}").split()
    kept = [r["commit"] for r in rows if r["status"] in ("keep", "reverted")]
    if chain != kept:
        assert not final and chain[:-1] == kept, f"branch {chain} vs kept rows {kept}"
        open_n = len(rows) + 1
        assert git(ws, "log", "-1", "--format=%s", chain[-1]).startswith(f"exp {open_n}:")
    for r in rows:
        if r["status"] not in ("keep", "reverted") and r["commit"]:
            assert git(ws, "rev-parse", f"refs/autokernel/{TAG}/exp-{r['experiment']}") == r["commit"]
        if r["commit"]:
            assert git(ws, "log", "-1", "--format=%s", r["commit"]).startswith(f"exp {r['experiment']}:")
    return rows


def test_sigkill_anywhere_then_resume(workspace):
    git(workspace, "branch", "-M", "main")
    rng = random.Random(4)
    env = engine_env(AUTOKERNEL_TEST_SCRIPT=SCRIPT)
    points = ["agent", "committed", "evaluated", "decided", "ref-kept", "torn-row", "row-written",
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
