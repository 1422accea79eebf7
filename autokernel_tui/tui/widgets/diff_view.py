"""kernel.py of the candidate against the incumbent, syntax highlighted."""

from __future__ import annotations

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from autokernel_tui.tui.diff_render import diff_stats, render_diff


class DiffView(VerticalScroll):
    DEFAULT_CSS = "DiffView Static { width: auto; min-width: 100%; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._body = Static(Text("no candidate yet", "dim italic"))
        self._diff: str | None = None

    def compose(self):
        yield self._body

    def show(self, diff: str | None, title: str = "diff") -> None:
        if diff == self._diff:
            return
        self._diff = diff
        if diff is None:
            self._body.update(Text("no candidate yet", "dim italic"))
            self.border_subtitle = ""
        else:
            self._body.update(render_diff(diff))
            added, removed = diff_stats(diff)
            self.border_subtitle = f"+{added} -{removed}"
        self.border_title = title
        self.scroll_home(animate=False)
