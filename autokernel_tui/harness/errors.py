"""The exception that stops an evaluation with a verdict (stdlib only)."""

from __future__ import annotations


class Verdict(Exception):
    """Stop the stages here: ``status`` (FAIL/CRASH/REJECTED...), the ``stage`` and a one-line reason."""

    def __init__(self, status: str, stage: str, reason: str, restart: bool = False) -> None:
        super().__init__(reason)
        self.status = status
        self.stage = stage
        self.reason = reason
        self.restart = restart  # the worker's state is unsafe (e.g. a poisoned CUDA context)
