"""Messages that background threads post to screens (threads never touch widgets)."""

from __future__ import annotations

from textual.message import Message


class EngineEvent(Message):
    """One engine event, posted from the client's subscription thread."""

    def __init__(self, event: dict) -> None:
        super().__init__()
        self.event = event


class CommandDone(Message):
    """The engine's reply to a steering command sent from a worker thread."""

    def __init__(self, command: str, reply: dict | None, error: str = "") -> None:
        super().__init__()
        self.command = command
        self.reply = reply or {}
        self.error = error
