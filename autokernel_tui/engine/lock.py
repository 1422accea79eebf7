"""engine.lock: one live engine per workspace.

An exclusive ``flock`` held for the engine's life; the kernel drops it when the
process dies, even by ``kill -9``, so a stale lock never blocks a resume. The
file holds the owner's pid for humans and for ``status``.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from autokernel_tui.errors import WorkspaceError
from autokernel_tui.ledger import paths


def lock_path(workspace: Path) -> Path:
    return paths.lock_path(workspace)


class EngineLock:
    def __init__(self, workspace: Path):
        self.path = lock_path(workspace)
        self.fd: int | None = None

    def acquire(self) -> "EngineLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid = live_pid(self.path.parent.parent)
            raise WorkspaceError(f"another engine (pid {pid or '?'}) is running on this workspace; "
                                 "attach to it with `autokernel-tui attach`") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fsync(fd)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            os.close(self.fd)  # closing drops the flock
            self.fd = None


def live_pid(workspace: Path) -> int | None:
    """The pid of the engine holding the workspace, or None when no engine holds it."""
    path = lock_path(workspace)
    if not path.exists():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = path.read_text().strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
