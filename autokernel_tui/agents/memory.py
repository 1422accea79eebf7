"""A bounded digest of a task's experiment history, for the model's context.

Hundreds of experiments must not grow the prompt without bound, and the model
needs the lessons more than the log: what is kept (the lineage), what was tried
and did not help, and what failed and why (grouped, most frequent first). The
last few experiments are shown in full. The whole digest never exceeds
``max_chars``; older detail is dropped first.
"""

from __future__ import annotations

import re
from collections import Counter

RECENT = 6  # experiments shown line by line
FAILED = ("fail", "crash", "timeout", "rejected")


def _num(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _x(value) -> str:
    v = _num(value)
    return f"{v:.3f}x" if v is not None else "-"


def _clip(text, limit: int) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _reason_key(reason: str) -> str:
    """Group failure reasons that differ only in numbers, names of shapes or addresses."""
    reason = re.sub(r"0x[0-9a-fA-F]+", "ADDR", reason)
    reason = re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", reason)
    return _clip(reason, 140)


def _row_line(row: dict) -> str:
    status = str(row.get("status", "?"))
    numbers = f"vs baseline {_x(row.get('speedup_vs_baseline'))}, vs incumbent {_x(row.get('speedup_vs_incumbent'))}"
    if status in FAILED:
        numbers = _clip(row.get("reason") or "no reason recorded", 200)
    return f"- exp {row.get('experiment', '?')} [{status}] {_clip(row.get('description'), 100)}: {numbers}"


def digest(history: list[dict], max_chars: int = 6000) -> str:
    if not history:
        return "No experiments on this task yet: the incumbent is the starter kernel."
    counts = Counter(str(r.get("status", "?")) for r in history)
    head = f"{len(history)} experiments on this task so far: " + ", ".join(
        f"{n} {s}" for s, n in counts.most_common()) + "."
    kept = [r for r in history if r.get("status") == "keep"]
    lineage = ["Kept (each became the incumbent), oldest first:"] + [_row_line(r) for r in kept[-10:]] if kept else []
    recent = ["Most recent:"] + [_row_line(r) for r in history[-RECENT:]]
    older = history[:-RECENT]
    no_gain = [r for r in older if r.get("status") in ("discard", "vetoed", "reverted")]
    tried = ["Tried earlier without a gain (do not repeat):"] + [
        f"- {_clip(r.get('description'), 90)} ({_x(r.get('speedup_vs_incumbent'))})" for r in reversed(no_gain)]
    failures = Counter(_reason_key(str(r.get("reason") or r.get("status"))) for r in older
                       if r.get("status") in FAILED)
    failed = ["Earlier failures, most frequent first:"] + [f"- {n}x {reason}" for reason, n in failures.most_common()]

    sections = [[head], lineage, recent, failed if failures else [], tried if no_gain else []]
    # Drop lines from the least important end (old no-gain ideas, then old failures) until it fits.
    while True:
        text = "\n".join("\n".join(s) for s in sections if s)
        if len(text) <= max_chars:
            return text
        # (section, which line goes first): old ideas and rare failures, then the oldest kept/recent.
        for idx, at in ((4, -1), (3, -1), (1, 1), (2, 1)):
            if len(sections[idx]) > 1:
                sections[idx].pop(at)
                if len(sections[idx]) == 1:
                    sections[idx] = []
                break
        else:
            return text[: max_chars - 1] + "…"
