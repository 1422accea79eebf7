"""The approval gate: who decides whether a measured candidate is kept.

``manual``    a human decides every candidate the harness calls faster.
``auto``      the harness decides: passed and faster = keep.
``threshold`` keep automatically when passed and the lower bound of the
              speedup interval clears ``run.threshold``; ask a human when it is
              faster but not by that much.
Under every policy a candidate that failed a check or is not faster is
discarded without asking, and a question nobody answers by its deadline gets
``run.timeout_action`` so a night never stalls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autokernel_tui.config import POLICIES
from autokernel_tui.errors import ConfigError

# Harness status -> results status for candidates that never reach the gate.
FAILED_STATUS = {"FAIL": "fail", "CRASH": "crash", "TIMEOUT": "timeout", "REJECTED": "rejected"}


@dataclass(frozen=True)
class Verdict:
    action: str  # keep | discard | ask
    reason: str


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise ConfigError(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    return policy


def decide(policy: str, report: dict[str, Any], comparison: dict[str, Any] | None, threshold: float) -> Verdict:
    status = report.get("status")
    if status != "PASS":
        return Verdict("discard", f"{status}: {report.get('reason') or 'no reason given'}")
    if not comparison or not comparison.get("faster"):
        sp = (comparison or {}).get("speedup")
        if (comparison or {}).get("screen"):  # called faster once, then not by the confirming comparison
            return Verdict("discard", f"not confirmed: {comparison.get('reason')}")
        return Verdict("discard", "not faster than the incumbent" + (f" ({sp:.3f}x)" if sp else ""))
    speed = f"{comparison.get('speedup', 0):.3f}x [{comparison.get('ci_low', 0):.3f}, {comparison.get('ci_high', 0):.3f}]"
    if policy == "auto":
        return Verdict("keep", f"faster: {speed}")
    if policy == "threshold" and (comparison.get("ci_low") or 0) >= threshold:
        return Verdict("keep", f"faster: {speed} clears the {threshold:.3f}x threshold")
    return Verdict("ask", f"faster: {speed}; awaiting a human decision")
