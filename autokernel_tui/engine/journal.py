"""What the journal (events.jsonl + results.tsv) says about a run: the resume side.

An experiment is *open* when its ``experiment_started`` has neither a results
row nor an ``experiment_abandoned`` after it: the engine died inside it. The
engine finishes it exactly once on the next start, from what was journaled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The events come from ``ledger.events.read_events``, which has checked each type's fields
# (``n`` a whole number, ``row`` a checked results row ...). These functions still read them
# defensively (``.get`` with defaults), so a hand-made list cannot make them raise.


def _n(ev: dict[str, Any]) -> int | None:
    n = ev.get("n")
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def _row_n(ev: dict[str, Any]) -> int | None:
    row = ev.get("row")
    n = row.get("experiment") if isinstance(row, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def _t(ev: dict[str, Any]) -> float:
    t = ev.get("t", 0.0)
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else 0.0


@dataclass
class OpenExperiment:
    n: int
    task: str
    revert_of: int | None = None
    events: dict[str, dict[str, Any]] = field(default_factory=dict)  # type -> last event of that type


def open_experiment(events: list[dict[str, Any]], recorded: set[int]) -> OpenExperiment | None:
    current: OpenExperiment | None = None
    for ev in events:
        kind = ev.get("type")
        if kind == "experiment_started" and _n(ev) is not None:
            current = OpenExperiment(_n(ev), str(ev.get("task") or ""), ev.get("revert_of"))
        elif current is not None and _n(ev) == current.n:
            if kind == "experiment_abandoned":
                current = None
            else:
                current.events[kind] = ev
        if kind == "result" and current is not None and _row_n(ev) == current.n:
            current = None
    if current is not None and current.n in recorded:
        return None
    return current


def rows_missing_result_event(events: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen = {_row_n(ev) for ev in events if ev.get("type") == "result"}
    return [r for r in rows if r["experiment"] not in seen]


def experiment_seconds(events: list[dict[str, Any]]) -> dict[int, float]:
    """Wall time each experiment took (started -> result): each kernel's own clock on resume."""
    started: dict[int, float] = {}
    out: dict[int, float] = {}
    for ev in events:
        if ev.get("type") == "experiment_started" and _n(ev) is not None:
            started[_n(ev)] = _t(ev)
        elif ev.get("type") == "result":
            n = _row_n(ev)
            if n in started:
                out[n] = _t(ev) - started[n]
    return out


def active_seconds(events: list[dict[str, Any]]) -> float:
    """Wall time the run has been worked on over all past sessions (run_started -> its last event),
    so a wall-time budget survives restarts."""
    total, start, last = 0.0, None, None
    for ev in events:
        t = _t(ev)
        if ev.get("type") == "run_started":
            if start is not None and last is not None:
                total += max(0.0, last - start)
            start = t
        last = t
    if start is not None and last is not None:
        total += max(0.0, last - start)
    return total


def used_numbers(events: list[dict[str, Any]]) -> set[int]:
    """Experiment numbers the journal shows in use: started (and not abandoned: an abandoned
    number is reused), or with a proposal, commit, verdict, decision or result."""
    used: set[int] = set()
    for ev in events:
        kind = ev.get("type")
        n = _row_n(ev) if kind == "result" else _n(ev)
        if n is None:
            continue
        if kind == "experiment_abandoned":
            used.discard(n)
        elif kind in ("experiment_started", "proposal", "committed", "verdict", "decision", "result"):
            used.add(n)
    return used


def experiment_events(events: list[dict[str, Any]]) -> dict[int, dict[str, dict[str, Any]]]:
    """For each experiment number, the last event of each type the journal holds for it
    (``result`` events are filed under their row's experiment). An abandonment clears what
    came before it: the number was reused."""
    out: dict[int, dict[str, dict[str, Any]]] = {}
    for ev in events:
        kind = ev.get("type")
        n = _row_n(ev) if kind == "result" else _n(ev)
        if n is None or not isinstance(kind, str):
            continue
        if kind == "experiment_abandoned":
            out.pop(n, None)
        elif kind == "experiment_started":
            out[n] = {kind: ev}
        else:
            out.setdefault(n, {})[kind] = ev
    return out
