"""The engine's event bus: journal first, then every subscriber, in order.

Every event goes to ``events.jsonl`` before any viewer sees it (a viewer never
sees what the disk lacks), then to the subscribers from one dispatcher thread,
never under the engine's lock: a slow or re-entrant viewer (one that calls
``snapshot()`` from its callback) cannot stall the loop, and a broken one cannot
stop the night.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable

from autokernel_tui.ledger.events import EventLog

Callback = Callable[[dict], None]


class EventBus:
    def __init__(self, log: EventLog):
        self.log = log
        self._lock = threading.Lock()
        self._subscribers: list[Callback] = []
        self._outbox: queue.Queue[dict | None] = queue.Queue()
        self._dispatcher = threading.Thread(target=self._dispatch, name="autokernel-events", daemon=True)
        self._dispatcher.start()

    def subscribe(self, callback: Callback) -> Callable[[], None]:
        """``callback(event)`` for every event from now on (nothing is replayed); returns the
        function that unsubscribes it."""
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)
        return unsubscribe

    def emit(self, type_: str, **fields: Any) -> dict:
        """Journal one event (its fields checked against ``ledger.schema.EVENTS``), then publish it."""
        event = self.log.make(type_, **fields)
        self.log.append(event)
        self._outbox.put(event)
        return event

    def tell(self, type_: str, **fields: Any) -> dict:
        """``emit``, or, when the journal cannot be written (disk full), publish only: for what a
        viewer must still hear about (state changes, errors, the end of a session)."""
        try:
            return self.emit(type_, **fields)
        except OSError:
            event = self.log.make(type_, **fields)
            self._outbox.put(event)
            return event

    def close(self) -> None:
        """Deliver what is queued, then stop the dispatcher."""
        self._outbox.put(None)
        if self._dispatcher is not threading.current_thread():
            self._dispatcher.join(5)

    def _dispatch(self) -> None:
        while True:
            event = self._outbox.get()
            if event is None:
                return
            with self._lock:
                subscribers = list(self._subscribers)
            for cb in subscribers:
                try:
                    cb(event)
                except Exception:  # a broken viewer must not stop the night
                    pass
