"""Start `autokernel-tui run --headless` as a real subprocess with the engine fakes."""

import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def engine_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOKERNEL_")}
    env.pop("ANTHROPIC_API_KEY", None)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["AUTOKERNEL_HARNESS_FACTORY"] = "enginefakes:make_harness"
    env["TRITON_INTERPRET"] = "1"
    env.update(extra)
    return env


def run_args(ws, *flags: str, agent: str = "enginefakes:make_agent") -> list:
    return [sys.executable, "-m", "autokernel_tui", "run", "--headless", "-C", str(ws), "--agent", agent, *flags]


def start(ws, *flags: str, env: dict | None = None, agent: str = "enginefakes:make_agent") -> subprocess.Popen:
    return subprocess.Popen(run_args(ws, *flags, agent=agent), env=env or engine_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def wait_socket(ws, proc, timeout=30.0) -> None:
    sock = Path(ws) / ".autokernel" / "control.sock"
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise AssertionError(f"engine exited {proc.returncode}: {proc.stdout.read()}")
        if sock.exists():
            return
        time.sleep(0.05)
    raise AssertionError("the engine never served its control socket")


def git(ws, *args, check=True):
    return subprocess.run(["git", "-C", str(ws), *args], capture_output=True, text=True, check=check).stdout.strip()


def check_consistent(ws, tag, final=False, base_ref="main", journal_lost=()):
    """The invariants that must hold at ANY moment, even with one experiment still open:
    rows numbered 1..n once each, one result event per row, the branch holding exactly the
    kept commits (plus, at most, the open experiment once its keep is journaled: the branch
    never holds a candidate that was not kept), every commit at its ref.
    ``journal_lost``: experiments whose events a test deleted (rebuilt from git: no start event)."""
    from autokernel_tui.ledger.events import read_events
    from autokernel_tui.ledger.results import read_rows

    rd = Path(ws) / ".autokernel" / "runs" / tag
    rows = read_rows(rd / "results.tsv", typed=True)
    ns = [r["experiment"] for r in rows]
    assert ns == list(range(1, len(ns) + 1)), f"rows not contiguous: {ns}"
    events = read_events(rd / "events.jsonl")
    results = [e["row"]["experiment"] for e in events if e["type"] == "result"]
    assert sorted(results) == results and len(set(results)) == len(results), "a result event was duplicated"
    assert set(ns) - set(results) <= ({ns[-1]} if ns and not final else set()), "a row lost its result event"
    started = {e["n"] for e in events if e["type"] == "experiment_started"}
    assert set(ns) - set(journal_lost) <= started
    base = git(ws, "rev-parse", base_ref)
    chain = git(ws, "rev-list", "--first-parent", "--reverse", f"{base}..autokernel/{tag}").split()
    kept = [r["commit"] for r in rows if r["status"] in ("keep", "reverted")]
    if chain != kept:
        assert not final and chain[:-1] == kept, f"branch {chain} vs kept rows {kept}"
        assert git(ws, "log", "-1", "--format=%s", chain[-1]).startswith(f"exp {len(rows) + 1}:")
        decided = {e["n"] for e in events if e["type"] == "decision" and e["action"] in ("keep", "revert")}
        assert len(rows) + 1 in decided, "the branch holds a candidate that was never kept"
    for r in rows:
        if r["commit"]:  # every experiment's commit is at its ref (kept ones on the branch too)
            assert git(ws, "rev-parse", f"refs/autokernel/{tag}/exp-{r['experiment']}") == r["commit"]
            assert git(ws, "log", "-1", "--format=%s", r["commit"]).startswith(f"exp {r['experiment']}:")
    return rows
