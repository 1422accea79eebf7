"""A yes/no question that says what will happen before it happens (revert)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class ConfirmScreen(ModalScreen[bool]):
    """Dismisses with True (confirmed) or False. Cancel has the focus: enter alone does nothing harmful."""

    BINDINGS = [
        Binding("escape,n", "answer(False)", "Cancel"),
        Binding("y", "answer(True)", "Confirm"),
    ]

    def __init__(self, question: str, explain: str, confirm: str) -> None:
        super().__init__()
        self.question = question
        self.explain = explain
        self.confirm = confirm

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-dialog"):
            yield Label(self.question, id="confirm-question")
            yield Label(self.explain, id="confirm-explain")
            with Horizontal(id="confirm-buttons"):
                yield Button(f"{self.confirm} (y)", variant="warning", id="confirm")
                yield Button("Cancel (esc)", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#cancel", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
