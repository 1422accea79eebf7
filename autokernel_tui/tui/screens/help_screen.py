"""? : every key, its id for the [keys] config section, and what it does."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from autokernel_tui.tui import keys


def help_table(user_keys: dict[str, str]) -> Table:
    table = Table(box=None, expand=True, show_header=True, header_style="bold #87d7ff", pad_edge=False)
    table.add_column("key", no_wrap=True, style="bold #ffd75f")
    table.add_column("id", no_wrap=True, style="dim")
    table.add_column("what it does")
    for title, group in (("Steering", keys.STEERING), ("Moving around", keys.NAVIGATION), ("Review", keys.REVIEW)):
        table.add_row(Text(title, "bold underline"), "", "")
        for spec in group:
            table.add_row(keys.display_key(spec, user_keys), spec.id, spec.help)
    table.add_row(Text("Everywhere", "bold underline"), "", "")
    table.add_row("ctrl+p", "", "command palette: every action by name")
    table.add_row("tab", "", "next pane; arrows and page keys scroll it")
    table.add_row("", "", Text("Remap: [keys] in autokernel.toml or ~/.config/autokernel-tui/config.toml, "
                               "e.g. approve = \"y\"", "dim"))
    return table


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def __init__(self, user_keys: dict[str, str]) -> None:
        super().__init__()
        self.user_keys = user_keys

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-body") as body:
            body.border_title = "autokernel-tui — keys"
            body.border_subtitle = "esc to close"
            yield Static(help_table(self.user_keys))

    async def action_dismiss(self, result=None) -> None:
        self.dismiss(None)
