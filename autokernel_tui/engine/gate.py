"""The approval gate: who decides whether a measured candidate is kept.

``manual``    a human decides every candidate the harness calls faster.
``auto``      the harness decides: passed and faster = keep.
``threshold`` keep automatically when passed and the lower bound of the
              speedup interval clears ``run.threshold``; ask a human when it is
              faster but not by that much.
Under every policy a candidate that failed a check or is not faster is
discarded without asking, and a question nobody answers by its deadline gets
``run.timeout_action`` so a night never stalls.

``decide`` is the policy (a pure function of the typed report and comparison);
``ApprovalGate`` owns the question put to a human: the pending candidate, the
answer (``approve`` / ``veto`` commands), the deadline, and a policy changed
while it waits.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from autokernel_tui.config import POLICIES
from autokernel_tui.errors import ConfigError, EngineError
from autokernel_tui.harness.report import Comparison, Report

# Harness status -> results status for candidates that never reach the gate.
FAILED_STATUS = {"FAIL": "fail", "CRASH": "crash", "TIMEOUT": "timeout", "REJECTED": "rejected"}


@dataclass(frozen=True)
class Verdict:
    action: str  # keep | discard | ask
    reason: str


@dataclass(frozen=True)
class Decision:
    action: str  # keep | discard | veto
    by: str      # human | policy | timeout
    reason: str


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise ConfigError(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    return policy


def status_of(report: Report | None) -> str:
    """The results status of a candidate that was not kept: its failure, else ``discard``."""
    return FAILED_STATUS.get(report.status, "discard") if report is not None else "discard"


def decide(policy: str, report: Report, comparison: Comparison | None, threshold: float) -> Verdict:
    verdict = _decide(policy, report, comparison, threshold)
    return Verdict(verdict.action, verdict.reason + _retaken(comparison))


def _decide(policy: str, report: Report, comparison: Comparison | None, threshold: float) -> Verdict:
    if report.status != "PASS":
        return Verdict("discard", f"{report.status}: {report.reason or 'no reason given'}")
    if comparison is None or not comparison.faster:
        if comparison is not None and comparison.screen:  # faster or undecided once, then not by the confirming one
            return Verdict("discard", f"not confirmed: {comparison.reason}")
        sp = comparison.speedup if comparison is not None else None
        return Verdict("discard", "not faster than the incumbent" + (f" ({sp:.3f}x)" if sp else ""))
    speed = f"{comparison.speedup or 0:.3f}x [{comparison.ci_low or 0:.3f}, {comparison.ci_high or 0:.3f}]"
    if policy == "auto":
        return Verdict("keep", f"faster: {speed}")
    if policy == "threshold" and (comparison.ci_low or 0) >= threshold:
        return Verdict("keep", f"faster: {speed} clears the {threshold:.3f}x threshold")
    return Verdict("ask", f"faster: {speed}; awaiting a human decision")


def _retaken(comparison: Comparison | None) -> str:
    """Said beside a verdict whose timing the judge retook: its clock objected to the first take (a disturbed
    host, or hidden work that the retake did not show), so the row tells the morning's reader."""
    if comparison is not None and (comparison.cross_check or {}).get("retaken"):
        return " (timing retaken once: the judge's clock objected to the first take)"
    return ""


@dataclass(frozen=True)
class Pending:
    """The candidate awaiting a human decision."""
    n: int
    task: str
    diff: str
    report: Report
    comparison: Comparison | None
    deadline: float

    def to_dict(self) -> dict[str, Any]:
        """As the snapshot's ``pending`` and the ``awaiting_approval`` event carry it (JSON)."""
        return {"n": self.n, "task": self.task, "diff": self.diff, "report": self.report.to_dict(),
                "comparison": self.comparison.to_dict() if self.comparison else None, "deadline": self.deadline}


class ApprovalGate:
    """Decides each measured candidate: by the policy, or by a human before a deadline.

    Shares the engine's condition variable: commands (``answer``, a new ``policy``, a stop)
    change state under it and notify, and ``decide`` waits on it.
    """

    def __init__(self, cv: threading.Condition, policy: str, run_settings: Any):
        self._cv = cv
        self.policy = check_policy(policy)
        self.rs = run_settings
        self.pending: Pending | None = None
        self._answer: Decision | None = None

    def set_policy(self, policy: str) -> str:
        with self._cv:
            self.policy = check_policy(policy)
            self._cv.notify_all()
            return self.policy

    def decide(self, n: int, task: str, diff: str, report: Report, comparison: Comparison | None, *,
               stopping: Callable[[], bool], on_ask: Callable[[Pending], None],
               on_answered: Callable[[], None]) -> Decision:
        """The decision on experiment ``n``. When the policy asks a human, ``on_ask(pending)``
        announces the question (under the lock), the wait ends with an answer, a policy that no
        longer asks, a stop or the deadline, and ``on_answered()`` follows (outside the lock)."""
        rs = self.rs
        verdict = decide(self.policy, report, comparison, rs.threshold)
        if verdict.action != "ask":
            return Decision(verdict.action, "policy", verdict.reason)
        deadline = time.time() + rs.approval_timeout_s
        with self._cv:
            self._answer = None
            self.pending = Pending(n, task, diff, report, comparison, deadline)
            on_ask(self.pending)
            try:
                while self._answer is None:
                    again = decide(self.policy, report, comparison, rs.threshold)
                    if again.action != "ask":  # the policy changed while we waited
                        self._answer = Decision(again.action, "policy", again.reason)
                        break
                    if stopping():
                        self._answer = Decision(rs.timeout_action, "timeout", "run stopped while awaiting approval")
                        break
                    left = deadline - time.time()
                    if left <= 0:
                        self._answer = Decision(rs.timeout_action, "timeout",
                                                f"no decision within {rs.approval_timeout_s:.0f} s")
                        break
                    self._cv.wait(min(left, 0.5))
                decision = self._answer
            finally:
                self.pending = None
                self._answer = None
        on_answered()
        return decision

    def answer(self, approve: bool, n: Any = None, reason: Any = None) -> None:
        """A human's answer (the ``approve`` / ``veto`` commands); ``n``, when given, must be the
        pending experiment's number."""
        with self._cv:
            if self.pending is None:
                raise EngineError("no candidate is awaiting approval")
            if n is not None and int(n) != self.pending.n:
                raise EngineError(f"experiment {n} is not the one awaiting approval ({self.pending.n})")
            self._answer = Decision("keep" if approve else "veto", "human",
                                    str(reason or ("approved" if approve else "vetoed")))
            self._cv.notify_all()
