"""Where a workspace keeps things: every ``.autokernel/...`` path, spelled once.

A workspace is a git repository with task folders under ``kernels/``; its run state lives
in ``.autokernel/`` (git-excluded, see ``gitrepo.exclude_state_dir``)::

    .autokernel/
      runs/<tag>/results.tsv          one row per experiment
      runs/<tag>/events.jsonl         everything else a viewer needs
      runs/<tag>/agent/exp-<N>.md     the agent's full text of experiment N
      runs/<tag>/reports/exp-<N>.json the harness verdict of experiment N
      runs/<tag>/run.json             run metadata
      runs/<tag>/reports/start-<T>.json what task T's starting kernel measured
      runs/<tag>/engine.log           output of a `run --headless --detach` engine
      runs/<tag>/verify.json          `verify` of the run's kept kernels (the report shows it)
      runs/<tag>/report.html|md       `autokernel-tui report`'s default output
      worktrees/<tag>/                the run branch's git worktree
      control.sock                    the live engine's control channel
      control.token                   its random token (a request without it is refused)
      engine.lock                     the live engine's pid (an flock)
      headless.log                    output of the engine the app hands a run to

Every reader and writer (engine, ledger, app, commands) builds these paths here. Stdlib only:
the app, the engine and the commands all import it.
"""

from __future__ import annotations

import shlex
from pathlib import Path

KERNELS = "kernels"
STATE_DIR = ".autokernel"
RUNS = Path(STATE_DIR) / "runs"  # relative to the workspace
WORKTREES = Path(STATE_DIR) / "worktrees"
LOCK_FILE = "engine.lock"
SOCKET_FILE = "control.sock"
TOKEN_FILE = "control.token"  # beside the socket: the control channel's random token
HEADLESS_LOG = "headless.log"

# Inside a run folder (runs/<tag>/).
RESULTS_FILE = "results.tsv"
EVENTS_FILE = "events.jsonl"
RUN_META_FILE = "run.json"
ENGINE_LOG = "engine.log"
AGENT_DIR = "agent"
REPORTS_DIR = "reports"
VERIFY_FILE = "verify.json"


def state_dir(workspace: str | Path) -> Path:
    return Path(workspace) / STATE_DIR


def runs_dir(workspace: str | Path) -> Path:
    return Path(workspace) / RUNS


def run_dir(workspace: str | Path, tag: str) -> Path:
    return runs_dir(workspace) / tag


def results_path(workspace: str | Path, tag: str) -> Path:
    return run_dir(workspace, tag) / RESULTS_FILE


def events_path(workspace: str | Path, tag: str) -> Path:
    return run_dir(workspace, tag) / EVENTS_FILE


def run_meta_path(workspace: str | Path, tag: str) -> Path:
    return run_dir(workspace, tag) / RUN_META_FILE


def engine_log_path(workspace: str | Path, tag: str) -> Path:
    return run_dir(workspace, tag) / ENGINE_LOG


def report_path(run_folder: str | Path, n: int) -> Path:
    """``reports/exp-N.json`` of a run folder."""
    return Path(run_folder) / REPORTS_DIR / f"exp-{n}.json"


def start_report_path(run_folder: str | Path, task: str) -> Path:
    """``reports/start-TASK.json`` of a run folder: what the task's starting kernel measured."""
    return Path(run_folder) / REPORTS_DIR / f"start-{task}.json"


def verify_result_path(workspace: str | Path, tag: str) -> Path:
    """``runs/<tag>/verify.json``: a `verify` of the run's kept kernels, for the morning report."""
    return run_dir(workspace, tag) / VERIFY_FILE


def agent_text_path(run_folder: str | Path, n: int) -> Path:
    """``agent/exp-N.md`` of a run folder."""
    return Path(run_folder) / AGENT_DIR / f"exp-{n}.md"


def worktree_dir(workspace: str | Path, tag: str) -> Path:
    return Path(workspace) / WORKTREES / tag


def lock_path(workspace: str | Path) -> Path:
    return state_dir(workspace) / LOCK_FILE


# A Unix socket's path holds at most 107 bytes (108 with its NUL) on Linux; a workspace deeper than
# that keeps its socket in a private folder of the temp dir named by a hash of the workspace's path
# (the engine and every client compute the same one; the engine makes it 0700 and checks its owner).
MAX_SOCKET_PATH = 100


def socket_path(workspace: str | Path) -> Path:
    beside = state_dir(Path(workspace).resolve()) / SOCKET_FILE
    if len(str(beside).encode()) <= MAX_SOCKET_PATH:
        return beside
    import hashlib

    digest = hashlib.sha256(str(beside.parent).encode()).hexdigest()[:16]
    return socket_home() / digest / SOCKET_FILE


def socket_home() -> Path:
    """The temp dir's folder for sockets of workspaces too deep to hold their own."""
    import os
    import tempfile

    return Path(tempfile.gettempdir()) / f"autokernel-{os.getuid()}"


def private_socket_dir(sock: Path) -> None:
    """Make the folder of a socket that ``socket_path`` put outside the workspace: every level it
    creates 0700, and the last one refused unless it is this user's and no one else's."""
    import os
    import stat

    from autokernel_tui.errors import WorkspaceError

    old = os.umask(0o077)
    try:
        sock.parent.mkdir(parents=True, exist_ok=True)
    finally:
        os.umask(old)
    for folder in (sock.parent.parent, sock.parent):
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise WorkspaceError(f"{folder} (the control socket's folder) is not a private folder of yours: "
                                 "remove it, or move the workspace to a shorter path")


def headless_log_path(workspace: str | Path) -> Path:
    return state_dir(workspace) / HEADLESS_LOG


def is_workspace(path: str | Path) -> bool:
    """A workspace is a git repository with a kernels/ folder (see ledger.workspace)."""
    path = Path(path)
    return (path / ".git").exists() and (path / KERNELS).is_dir()


def init_hint(path: str | Path) -> str:
    """A command that creates a workspace at ``path`` (and works as typed: it names tasks)."""
    return f"autokernel-tui init {shlex.quote(str(path))} --task rmsnorm --task softmax"
