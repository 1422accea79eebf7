"""The Textual app: live (in-process or attached), review, or first run, over one workspace."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from textual.app import App

from autokernel_tui.tui import keys
from autokernel_tui.tui.commands import SteeringCommands

LIVE, REVIEW, FIRST_RUN = "live", "review", "first_run"


class AutokernelApp(App[Any]):
    """Exits with a quit choice (see screens.quit_screen) or None."""

    CSS_PATH = "app.tcss"
    TITLE = "autokernel-tui"
    COMMANDS = App.COMMANDS | {SteeringCommands}
    ENABLE_COMMAND_PALETTE = True

    def __init__(self, workspace: Path, mode: str = LIVE, client: Any = None, *, attached: bool = False,
                 user_keys: dict[str, str] | None = None, clock: Callable[[], float] | None = None,
                 history: Any = None, first_run_info: dict | None = None, notes: list[str] | None = None,
                 harness_quick: bool | None = None) -> None:
        super().__init__()
        self.workspace = Path(workspace)
        self.mode = mode
        self.client = client
        self.attached = attached
        self.user_keys = keys.keymap(user_keys or {})
        self.clock = clock or time.time
        self.history = history  # callable(workspace) -> list of runs; defaults to ledger.history.load_runs
        self.first_run_info = first_run_info or {}
        self.notes = list(notes or [])  # said once when the live screen opens
        self.harness_quick = harness_quick  # the in-process engine's harness.quick (None: not known here)
        self.theme = "textual-dark"

    def on_mount(self) -> None:
        self.set_keymap(self.user_keys)
        self._watch_hangup()
        if self.mode == LIVE:
            from autokernel_tui.tui.screens.live_screen import LiveScreen
            self.push_screen(LiveScreen(self.client, self.workspace, self.attached, self.clock))
        elif self.mode == REVIEW:
            self.open_review(standalone=True)
        else:
            from autokernel_tui.tui.screens.first_run import FirstRunScreen
            self.push_screen(FirstRunScreen(self.workspace, self.first_run_info), self.exit)

    def _watch_hangup(self) -> None:
        """SIGHUP (the SSH session died): exit at once; the launcher keeps the run safe. No busy loop."""
        import asyncio
        import signal

        from autokernel_tui.tui.screens.quit_screen import HANGUP
        try:
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, self._hangup, HANGUP)
        except (NotImplementedError, RuntimeError, ValueError, AttributeError):
            pass  # not the main thread (tests) or no SIGHUP on this platform

    def _hangup(self, result: str) -> None:
        """The terminal is gone. Point stdio at /dev/null first: Textual's input thread would spin on the
        dead TTY's end-of-file, and writing the last frame to it would fail."""
        import os

        try:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.close(devnull)
        except OSError:
            pass
        self.exit(result)

    # Screens other screens open.
    def open_help(self) -> None:
        from autokernel_tui.tui.screens.help_screen import HelpScreen
        if isinstance(self.screen, HelpScreen):
            return
        # One installed instance, kept between opens: its rendered table is reused instead of
        # laying out the rich Table again on every "?" (most of what opening help cost).
        if not self.is_screen_installed("help"):
            self.install_screen(HelpScreen(self.user_keys), name="help")
        self.push_screen("help")

    def open_review(self, standalone: bool = False) -> None:
        from autokernel_tui.tui.screens.review_screen import ReviewScreen
        self.push_screen(ReviewScreen(self.workspace, self.history, client=self.client, standalone=standalone))

    def ask_quit(self) -> None:
        from autokernel_tui.tui.screens.quit_screen import QuitScreen
        if self.mode != LIVE or self.client is None:
            self.exit(None)
            return
        if isinstance(self.screen, QuitScreen):
            return
        state = getattr(self.screen, "state", None)
        active = state is not None and state.state not in ("stopped", "idle")
        self.push_screen(QuitScreen(self.attached, active), self._quit_chosen)

    def get_system_commands(self, screen):
        from textual.app import SystemCommand

        for command in super().get_system_commands(screen):
            if command.title == "Quit":
                command = SystemCommand("Quit", "asks whether to stop the run or leave it running headless",
                                        self.action_quit)
            yield command

    async def action_quit(self) -> None:
        """The command palette's Quit and ctrl+q: the same question as q, never a silent exit (which left
        a blank terminal while the in-process engine finished its experiment)."""
        self.ask_quit()

    def _quit_chosen(self, choice: str | None) -> None:
        if choice is not None:
            self.exit(choice)

    def action_help(self) -> None:
        self.open_help()
