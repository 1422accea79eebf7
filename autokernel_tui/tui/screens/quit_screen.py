"""Quitting asks: stop the run, or leave it going without the app."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label

STOP, HEADLESS, DETACH, HANGUP = "stop", "headless", "detach", "hangup"


class QuitScreen(ModalScreen[str | None]):
    """Dismisses with STOP, HEADLESS (in-process engine hands over to a headless run), DETACH, or None."""

    BINDINGS = [
        Binding("escape", "dismiss_none", "Cancel"),
        Binding("s", "choose('stop')", "Stop the run"),
        Binding("l", "choose('leave')", "Leave it running"),
    ]

    def __init__(self, attached: bool, run_active: bool) -> None:
        super().__init__()
        self.attached = attached
        self.run_active = run_active

    def compose(self) -> ComposeResult:
        leave = "Detach (l)" if self.attached else "Leave running (l)"
        question = ("Quit autokernel-tui. The run is still going." if self.run_active
                    else "Quit autokernel-tui.")
        with Vertical(id="quit-dialog"):
            yield Label(question, id="quit-question")
            yield Label("Stop: the current experiment finishes, then the run stops (resumable later).\n"
                        + ("Detach: the headless engine goes on; attach again any time."
                           if self.attached else
                           "Headless: the engine finishes its step here and resumes in the background."),
                        id="quit-explain")
            with Horizontal(id="quit-buttons"):
                yield Button("Stop run (s)", variant="error", id="stop")
                yield Button(leave, variant="primary", id="leave")
                yield Button("Cancel (esc)", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#leave", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "cancel":
            self.dismiss(None)
        else:
            self.action_choose(event.button.id or "cancel")

    def action_choose(self, choice: str) -> None:
        if choice == "stop":
            self.dismiss(STOP)
        elif choice == "leave":
            self.dismiss(DETACH if self.attached else HEADLESS)

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
