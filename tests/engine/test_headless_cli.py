"""`run --headless --detach` survives SIGHUP (closed SSH), stops cleanly on SIGTERM after the
current experiment, refuses a second engine, and `status` reads the run live or from disk."""

import json
import os
import signal
import subprocess
import sys
import time

from autokernel_tui.engine.lock import live_pid
from autokernel_tui.ledger.events import read_events
from autokernel_tui.ledger.results import read_rows
from subproc import engine_env, run_args


def cli(*args, env):
    return subprocess.run([sys.executable, "-m", "autokernel_tui", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def wait_for(pred, timeout=20.0):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_detached_run_survives_sighup_and_stops_on_sigterm(workspace):
    env = engine_env(AUTOKERNEL_TEST_SCRIPT="90,95", AUTOKERNEL_TEST_AGENT_DELAY="0.1")
    out = subprocess.run(run_args(workspace, "--detach", "--policy", "auto", "--tag", "bg"), env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    pid = live_pid(workspace)
    assert pid and f"pid {pid}" in out.stdout
    assert os.getsid(pid) == pid  # its own session: the terminal's hang-up does not reach it
    results = workspace / ".autokernel/runs/bg/results.tsv"
    try:
        wait_for(lambda: len(read_rows(results)) >= 1)
        os.kill(pid, signal.SIGHUP)
        time.sleep(0.3)
        assert live_pid(workspace) == pid  # still running

        second = cli("run", "--headless", "-C", str(workspace), "--agent", "enginefakes:make_agent", env=env)
        assert second.returncode == 2 and f"another engine (pid {pid})" in second.stderr

        status = cli("status", "-C", str(workspace), "--json", env=env)
        live = json.loads(status.stdout)
        assert live["live"] and live["run"] == "bg" and live["state"] in ("running", "idle")

        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: live_pid(workspace) is None)
    finally:
        if live_pid(workspace):
            os.kill(pid, signal.SIGKILL)
    events = read_events(workspace / ".autokernel/runs/bg/events.jsonl")
    assert events[-1]["type"] == "session_ended" and events[-1]["reason"] == "stopped by request"
    rows = read_rows(results)
    started = [e["n"] for e in events if e["type"] == "experiment_started"]
    assert [int(r["experiment"]) for r in rows] == started  # the current experiment was finished, not cut
    log = (workspace / ".autokernel/runs/bg/engine.log").read_text()
    assert "SIGTERM: stopping after the current experiment" in log

    status = cli("status", str(workspace), env=env)
    assert status.returncode == 0 and "run bg: stopped" in status.stdout
    assert cli("status", str(workspace / "kernels"), env=env).returncode == 2
