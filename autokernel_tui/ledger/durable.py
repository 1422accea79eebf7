"""Crash-safe append-only text files (results.tsv, events.jsonl).

Every record is one line written with a single ``write`` and then flushed and
fsynced, so after a ``kill -9`` or a power cut the file holds whole lines plus
at most one torn tail. ``repair_torn_tail`` cuts that tail on open. A write
that fails half-way (disk full) is truncated back, so a failed append leaves
the file exactly as it was.
"""

from __future__ import annotations

import os
from pathlib import Path


def repair_torn_tail(path: Path) -> int:
    """Drop bytes after the last newline; returns how many bytes were cut."""
    if not path.exists():
        return 0
    with open(path, "rb+") as fh:
        data = fh.read()
        if not data or data.endswith(b"\n"):
            return 0
        keep = data.rfind(b"\n") + 1
        fh.truncate(keep)
        fh.flush()
        os.fsync(fh.fileno())
        return len(data) - keep


def append_line(path: Path, line: str) -> None:
    """Append one line durably; on failure the file is left as it was."""
    if "\n" in line:
        raise ValueError("a record must be a single line")
    data = (line + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            written = os.write(fd, data)
            while written < len(data):  # short writes happen on full disks
                written += os.write(fd, data[written:])
            os.fsync(fd)
        except BaseException:
            try:
                os.ftruncate(fd, size)
            except OSError:
                pass  # the torn tail is repaired on the next open
            raise
    finally:
        os.close(fd)


def write_file_atomic(path: Path, text: str | bytes) -> None:
    """Write a whole file via a temp file + rename, so readers never see half of it."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(text if isinstance(text, bytes) else text.encode("utf-8"))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
