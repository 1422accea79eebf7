"""Bad lines in a run's files, said once and in one line that names the file and the line.

The run files are the truth, but a person (or a crash, or a hostile editor) can
leave anything in them: a cut line, bytes that are not UTF-8, JSON that is valid
but not an event, ``abc`` where a number belongs. Readers skip what they cannot
use and keep going; each problem is a one-line message ``<file> line <n>: ...``.

A caller that wants the messages (the engine reports them as ``repaired``
events) passes a list and gets them appended. Without a list they go to the
``autokernel_tui`` logger as warnings, once per message per process (a viewer
that re-reads a file every second must not repeat itself).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

_log = logging.getLogger("autokernel_tui")
_seen: set[str] = set()
_lock = threading.Lock()
_MAX_SEEN = 10000


def at(path: Path | str, lineno: int) -> str:
    return f"{path} line {lineno}"


def report(problems: list[str] | None, message: str) -> None:
    """Add ``message`` to ``problems``, or log it once when there is no list."""
    if problems is not None:
        problems.append(message)
        return
    with _lock:
        if message in _seen:
            return
        if len(_seen) >= _MAX_SEEN:
            _seen.clear()
        _seen.add(message)
    _log.warning("autokernel-tui: warning: %s", message)


def decode_line(raw: bytes, path: Path | str, lineno: int, problems: list[str] | None) -> str:
    """One line as text; bytes that are not UTF-8 are replaced (and reported)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        report(problems, f"{at(path, lineno)}: bytes that are not UTF-8 (at column {exc.start + 1}); "
                         "read with them replaced")
        return raw.decode("utf-8", "replace")


def short(value: object, limit: int = 40) -> str:
    """A bad value, quoted and cut, for a one-line message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
