"""events.jsonl: everything a viewer needs besides results.tsv.

One JSON object per line, ``{"t", "type", "run", ...}``, appended durably (see
``durable``). Agent text streams in many small deltas; ``AgentTextBatcher``
groups them (per 0.5 s or 2 KB, or when the kind changes) so the journal stays
readable and the fsync rate bounded.
"""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path
from typing import Any, Callable

from autokernel_tui.ledger import badinput, schema
from autokernel_tui.ledger.durable import append_line, repair_torn_tail


# What readers rely on, per event type: field -> (kind, required). Kinds: "int" (a whole
# number, not a bool), "num" (a finite number), "str", "dict", "dict?" (an object or null),
# "str?" and "int?" (or null). Fields not listed here are passed through untouched.
_COMMON = {"t": ("num", False), "type": ("str", True)}
EVENT_FIELDS: dict[str, dict[str, tuple[str, bool]]] = {
    "experiment_started": {"n": ("int", True), "task": ("str", False), "revert_of": ("int?", False)},
    "experiment_abandoned": {"n": ("int", True), "reason": ("str", False)},
    "agent": {"n": ("int", True), "kind": ("str", True), "text": ("str", True)},
    "proposal": {"n": ("int", True), "description": ("str", False), "hypothesis": ("str", False),
                 "diff": ("str", False), "agent": ("str", False), "tokens": ("int", False), "cost_usd": ("num", False)},
    "committed": {"n": ("int", True), "commit": ("str", True)},
    "verdict": {"n": ("int", True), "report": ("dict?", False), "comparison": ("dict?", False)},
    "awaiting_approval": {"n": ("int", True), "task": ("str", False), "diff": ("str", False),
                          "report": ("dict?", False), "comparison": ("dict?", False), "deadline": ("num", False)},
    "decision": {"n": ("int", True), "action": ("str", True), "by": ("str", False), "reason": ("str", False)},
    "result": {"row": ("dict", True)},
    "state": {"state": ("str", True)},
    "task_selected": {"task": ("str", True), "reason": ("str", False)},
    "policy": {"policy": ("str", True)},
    "budget": {"tokens": ("num", False), "cost_usd": ("num", False)},
    "baseline": {"task": ("str", True), "report": ("dict?", False)},
    "run_started": {"resumed": ("bool", False)},
    "run_finished": {"reason": ("str", False)},
    "session_ended": {"reason": ("str", False)},
    "error": {"message": ("str", False)},
    "repaired": {"message": ("str", True)},
}
DECISIONS = ("keep", "discard", "veto", "revert")


def _is(kind: str, value: Any) -> bool:
    if kind.endswith("?"):
        return value is None or _is(kind[:-1], value)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "num":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return isinstance(value, {"str": str, "dict": dict, "bool": bool}[kind])


def check_event(event: Any, where: str, problems: list[str] | None = None) -> dict[str, Any] | None:
    """``event`` if it is an event readers can use, else None (and one line in ``problems``):
    a JSON object with a string ``type``, a numeric ``t`` and its type's fields, each of its kind
    (see ``EVENT_FIELDS``); a ``result`` event's row is checked like a results.tsv line."""
    if not isinstance(event, dict):
        badinput.report(problems, f"{where}: a JSON {type(event).__name__}, not an event object; skipped")
        return None
    kind = event.get("type")
    for name, (want, required) in {**_COMMON, **EVENT_FIELDS.get(kind if isinstance(kind, str) else "", {})}.items():
        if name not in event:
            if required:
                badinput.report(problems, f"{where}: {kind if isinstance(kind, str) else 'event'} without "
                                          f"\"{name}\"; skipped")
                return None
            continue
        if not _is(want, event[name]):
            badinput.report(problems, f"{where}: {kind if name != 'type' else 'event'} \"{name}\" is "
                                      f"{badinput.short(event[name])}, not {_KIND_WORDS[want]}; skipped")
            return None
    if kind in ("experiment_started", "experiment_abandoned", "agent", "proposal", "committed", "verdict",
                "awaiting_approval", "decision") and event["n"] < 1:
        badinput.report(problems, f"{where}: {kind} for experiment {event['n']}; skipped")
        return None
    if kind == "decision" and event["action"] not in DECISIONS:
        badinput.report(problems, f"{where}: decision action {badinput.short(event['action'])} is not one of "
                                  f"{', '.join(DECISIONS)}; skipped")
        return None
    if kind == "result":
        from autokernel_tui.ledger.results import check_row

        row = check_row(event["row"], f"{where}: result row", problems)
        if row is None:
            return None
        event = {**event, "row": row}
    return event


_KIND_WORDS = {"int": "a whole number", "num": "a finite number", "str": "a string", "dict": "an object",
               "bool": "true or false", "int?": "a whole number or null", "dict?": "an object or null",
               "str?": "a string or null"}


def read_events(path: Path, problems: list[str] | None = None) -> list[dict[str, Any]]:
    """Every usable event, in order. A torn last line (a crash mid-write) is ignored; a line that
    is not UTF-8, not JSON, or not an event readers can use (see ``check_event``) is skipped and
    reported once, naming the file and the line (``badinput``)."""
    path = Path(path)
    if not path.exists():
        return []
    events = []
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.endswith(b"\n"):
                break  # torn tail
            if not raw.strip():
                continue
            where = badinput.at(path, lineno)
            line = badinput.decode_line(raw, path, lineno, problems)
            try:
                obj = json.loads(line)
            except RecursionError:
                badinput.report(problems, f"{where}: nested too deeply to read; skipped")
                continue
            except json.JSONDecodeError as exc:
                badinput.report(problems, f"{where}: not JSON ({exc.msg} at column {exc.colno}); skipped")
                continue
            event = check_event(obj, where, problems)
            if event is not None:
                events.append(event)
    return events


class EventLog:
    def __init__(self, path: Path, run: str, clock: Callable[[], float] = time.time):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.problems: list[str] = []  # what opening repaired, one line each
        last = self.path.read_bytes().count(b"\n") + 1 if self.path.exists() else 0
        cut = repair_torn_tail(self.path)
        if cut:
            self.problems.append(f"{badinput.at(self.path, last)}: an incomplete last line ({cut} bytes, "
                                 "no newline) was cut")
        self.run = run
        self.clock = clock
        self._lock = threading.Lock()

    def make(self, type_: str, **fields: Any) -> dict[str, Any]:
        """An event of a known type with exactly its fields (``schema.EVENTS``): a viewer can rely on
        what it reads, and a misspelt field is an engine bug found by the first test that emits it."""
        event = {"t": self.clock(), "type": type_, "run": self.run, **fields}
        problems = schema.check_fields(event)
        if problems:
            raise ValueError("; ".join(problems))
        return event

    def append(self, event: dict[str, Any]) -> dict[str, Any]:
        line = json.dumps(event, separators=(",", ":"), default=str)
        with self._lock:
            append_line(self.path, line)
        return event


class AgentTextBatcher:
    """Collects agent deltas; ``sink(kind, text)`` receives them in batches, in order."""

    def __init__(self, sink: Callable[[str, str], None], max_age_s: float = 0.5, max_bytes: int = 2048,
                 clock: Callable[[], float] = time.monotonic):
        self.sink = sink
        self.max_age_s = max_age_s
        self.max_bytes = max_bytes
        self.clock = clock
        self._kind: str | None = None
        self._parts: list[str] = []
        self._size = 0
        self._since = 0.0
        self._lock = threading.Lock()
        self.transcript: list[tuple[str, str]] = []  # everything, for agent/exp-N.md

    def add(self, kind: str, text: str) -> None:
        if not text:
            return
        with self._lock:
            if self.transcript and self.transcript[-1][0] == kind:
                self.transcript[-1] = (kind, self.transcript[-1][1] + text)
            else:
                self.transcript.append((kind, text))
            if self._kind is not None and kind != self._kind:
                self._flush_locked()
            if not self._parts:
                self._since = self.clock()
            self._kind = kind
            self._parts.append(text)
            self._size += len(text.encode("utf-8", "replace"))
            if self._size >= self.max_bytes or self.clock() - self._since >= self.max_age_s:
                self._flush_locked()

    def flush_if_due(self) -> None:
        with self._lock:
            if self._parts and self.clock() - self._since >= self.max_age_s:
                self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self._parts and self._kind is not None:
            text = "".join(self._parts)
            self._parts, self._size = [], 0
            self.sink(self._kind, text)
        self._kind = None if not self._parts else self._kind

    def markdown(self, header: str = "") -> str:
        titles = {"thinking": "Thinking", "text": "Response", "progress": "Progress", "error": "Error"}
        out = [header] if header else []
        for kind, text in self.transcript:
            out.append(f"## {titles.get(kind, kind)}\n\n{text.rstrip()}\n")
        return "\n".join(out)
