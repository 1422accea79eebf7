"""What the journal (events.jsonl + results.tsv) says about a run: the resume side.

An experiment is *open* when its ``experiment_started`` has neither a results
row nor an ``experiment_abandoned`` after it: the engine died inside it. The
engine finishes it exactly once on the next start, from what was journaled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
        if kind == "experiment_started":
            current = OpenExperiment(int(ev["n"]), ev.get("task", ""), ev.get("revert_of"))
        elif current is not None and ev.get("n") == current.n:
            if kind == "experiment_abandoned":
                current = None
            else:
                current.events[kind] = ev
        if kind == "result" and current is not None and ev.get("row", {}).get("experiment") == current.n:
            current = None
    if current is not None and current.n in recorded:
        return None
    return current


def rows_missing_result_event(events: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen = {ev.get("row", {}).get("experiment") for ev in events if ev.get("type") == "result"}
    return [r for r in rows if r["experiment"] not in seen]


def experiment_seconds(events: list[dict[str, Any]]) -> dict[int, float]:
    """Wall time each experiment took (started -> result): each kernel's own clock on resume."""
    started: dict[int, float] = {}
    out: dict[int, float] = {}
    for ev in events:
        if ev.get("type") == "experiment_started":
            started[int(ev["n"])] = float(ev["t"])
        elif ev.get("type") == "result":
            n = ev.get("row", {}).get("experiment")
            if n in started:
                out[n] = float(ev["t"]) - started[n]
    return out


def active_seconds(events: list[dict[str, Any]]) -> float:
    """Wall time the run has been worked on over all past sessions (run_started -> its last event),
    so a wall-time budget survives restarts."""
    total, start, last = 0.0, None, None
    for ev in events:
        t = float(ev.get("t", 0.0))
        if ev.get("type") == "run_started":
            if start is not None and last is not None:
                total += max(0.0, last - start)
            start = t
        last = t
    if start is not None and last is not None:
        total += max(0.0, last - start)
    return total
