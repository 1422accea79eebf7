"""Named points where a test can make the engine die as if by ``kill -9``.

``AUTOKERNEL_TEST_CRASH=<point>:<experiment>`` (comma-separated for several)
sends SIGKILL to this process when it reaches that point in that experiment.
It exists so the resume tests hit the narrow windows (between a commit and its
verdict, half-way through a results row) deterministically; unset, it costs one
dictionary lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "AUTOKERNEL_TEST_CRASH"
POINTS = (
    "agent",           # during the agent call
    "committed",       # candidate committed, not yet evaluated
    "evaluated",       # verdict known, commit not yet amended with metrics
    "decided",         # decision journaled, git not yet updated (a keep: the branch not yet advanced)
    "advanced",        # kept: the branch advanced to the candidate, results row not yet written
    "ref-kept",        # not kept (the commit at its ref since it was made), worktree not yet cleaned
    "torn-row",        # half of the results row written
    "row-written",     # results row written, result event not yet
)


def armed(point: str, n: int) -> bool:
    spec = os.environ.get(ENV)
    return bool(spec) and f"{point}:{n}" in spec.split(",")


def crash_point(point: str, n: int) -> None:
    if armed(point, n):
        os.kill(os.getpid(), signal.SIGKILL)
