"""Retries with exponential backoff and full jitter, for both API backends.

The SDKs' own retries are switched off (max_retries=0) so that every retry is
ours: announced to the user as a progress event, bounded by the settings, and
ending in AgentUnavailable with a message that never carries a credential.
"""

from __future__ import annotations

import random
import time
from typing import Callable, TypeVar

from autokernel_tui.agents.base import AgentEvent, AgentUnavailable, Emit

T = TypeVar("T")


class Retryable(Exception):
    """Raised by a backend's call wrapper for a transient failure (429, 529, 5xx, network)."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


def backoff_s(attempt: int, base_s: float, max_s: float, rng: random.Random) -> float:
    """Delay before retry ``attempt`` (0-based): half fixed, half jitter, doubling each time."""
    cap = min(max_s, base_s * (2 ** attempt))
    return cap / 2 + rng.uniform(0, cap / 2)


def call_with_retries(call: Callable[[], T], *, what: str, max_retries: int, base_s: float, max_s: float,
                      emit: Emit, sleep: Callable[[float], None] = time.sleep,
                      rng: random.Random | None = None) -> T:
    """Run ``call``; on Retryable wait and try again, at most ``max_retries`` more times."""
    rng = rng or random.Random()
    attempt = 0
    while True:
        try:
            return call()
        except Retryable as exc:
            if attempt >= max_retries:
                raise AgentUnavailable(f"{what} unavailable after {attempt + 1} attempts: {exc}") from None
            delay = backoff_s(attempt, base_s, max_s, rng)
            if exc.retry_after_s is not None:
                delay = max(delay, min(exc.retry_after_s, max_s))
            emit(AgentEvent("progress", f"{what}: {exc}; retry {attempt + 1}/{max_retries} in {delay:.1f}s"))
            sleep(delay)
            attempt += 1


def retry_after(headers) -> float | None:
    """Seconds from a Retry-After header, when it is a number."""
    try:
        value = headers.get("retry-after") if headers is not None else None
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def scrub(text: str, *secrets: str | None) -> str:
    """Remove credentials from text that may reach the screen (belt and braces)."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text
