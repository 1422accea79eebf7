"""The exception that stops an evaluation with a verdict, and one-line reasons (stdlib only)."""

from __future__ import annotations


class Verdict(Exception):
    """Stop the stages here: ``status`` (FAIL/CRASH/REJECTED...), the ``stage`` and a one-line reason."""

    def __init__(self, status: str, stage: str, reason: str, restart: bool = False) -> None:
        super().__init__(reason)
        self.status = status
        self.stage = stage
        self.reason = reason
        self.restart = restart  # the process that raised it is unsafe now (e.g. a poisoned CUDA context)


def one_line(text: str, limit: int = 240) -> str:
    """The first line (and the last, if there are several) of ``text``, at most ``limit`` characters."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    if not lines:
        return ""
    line = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return line if len(line) <= limit else line[: limit - 3] + "..."
