"""How the app reaches an engine: attach to a live one, start one in-process, hand over to headless.

The one place that knows the engine's client API (docs/ARCHITECTURE.md, "Engine").
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from autokernel_tui.errors import WorkspaceError
from autokernel_tui.ledger import paths
from autokernel_tui.tui import workspace_files


def attach(workspace: Path):
    """A client of the headless engine that owns this workspace."""
    if not workspace_files.engine_is_live(workspace):
        raise WorkspaceError(f"no live engine in {workspace} (start one with: autokernel-tui run --headless -C {workspace})")
    from autokernel_tui.engine.client import connect

    return connect(workspace)


def start_in_process(workspace: Path, settings, **engine_kwargs):
    """Start (or resume) the run in this process; the app is its in-process client.
    ``engine_kwargs``: tag, new, tasks, agent, as the run flags give them (commands.common.engine_kwargs)."""
    from autokernel_tui.engine.client import LocalClient

    return LocalClient(workspace, settings, **engine_kwargs)


def last_run_finished(workspace: Path) -> bool | None:
    """None: no run yet; True: the newest run ended (run_finished); False: it can be resumed."""
    tags = workspace_files.run_tags(workspace)
    if not tags:
        return None
    events = workspace_files.tail_events(workspace_files.events_path(workspace, tags[-1]), max_bytes=64 * 1024)
    return any(e.get("type") == "run_finished" for e in events[-50:])


def stop_and_close(client, wait_s: float = 600.0) -> None:
    """Ask the engine to stop after its current step, then close the client (which waits for it)."""
    try:
        client.send("stop")
    except Exception:
        pass
    client.close()


def spawn_headless(workspace: Path, log_name: str = paths.HEADLESS_LOG, extra_args: list[str] | tuple = ()) -> int:
    """Start ``autokernel-tui run --headless`` detached from this terminal; it resumes the run.
    ``extra_args``: the `run` flags this session was started with (limits, agent, tasks)."""
    log = paths.state_dir(workspace) / log_name
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "autokernel_tui", "run", "--headless", "-C", str(workspace), *extra_args],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=str(workspace),
            start_new_session=True,  # survives the SSH session and the terminal's SIGHUP
            env={**os.environ},
        )
    # Give it a moment to take the lock so "attach" works right away.
    deadline = time.time() + 20
    while time.time() < deadline and proc.poll() is None and not workspace_files.engine_is_live(workspace):
        time.sleep(0.2)
    if proc.poll() is not None:
        raise WorkspaceError(f"the headless run exited at once (code {proc.returncode}); see {log}")
    return proc.pid


def offline_revert(workspace: Path, tag: str, n: int, settings=None) -> dict:
    """Revert a kept experiment with no live engine: open that run's engine idle, let it revert, close."""
    from autokernel_tui.config import load_settings
    from autokernel_tui.engine.client import LocalClient

    client = LocalClient(workspace, settings or load_settings(workspace), start=False, serve=False, tag=tag)
    try:
        reply = client.send("revert", run=tag, n=n)
    finally:
        client.close()
    if not reply.get("ok", True):
        raise WorkspaceError(reply.get("error") or "the engine refused the revert")
    return reply
