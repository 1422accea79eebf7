"""events.jsonl: everything a viewer needs besides results.tsv.

One JSON object per line, ``{"t", "type", "run", ...}``, appended durably (see
``durable``). Agent text streams in many small deltas; ``AgentTextBatcher``
groups them (per 0.5 s or 2 KB, or when the kind changes) so the journal stays
readable and the fsync rate bounded.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Callable

from autokernel_tui.ledger import schema
from autokernel_tui.ledger.durable import append_line, repair_torn_tail


def read_events(path: Path) -> list[dict[str, Any]]:
    if not Path(path).exists():
        return []
    events = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.endswith("\n"):
                break  # torn tail
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events


class EventLog:
    def __init__(self, path: Path, run: str, clock: Callable[[], float] = time.time):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        repair_torn_tail(self.path)
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
