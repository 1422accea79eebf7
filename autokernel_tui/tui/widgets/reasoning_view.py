"""The agent's reasoning as it streams: thinking dimmed and italic, answer text plain."""

from __future__ import annotations

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from autokernel_tui.tui.reasoning_buffer import ReasoningBuffer

KIND_STYLE = {"thinking": "italic #8a8a8a", "text": "#e4e4e4", "progress": "#5fafd7", "error": "bold #ff5f5f"}
VISIBLE_CHARS = 12_000  # drawn from the buffer's tail; older text stays in memory (bounded) and on disk


def reasoning_text(buffer: ReasoningBuffer) -> Text:
    out = Text()
    if buffer.dropped:
        out.append(f"… {buffer.dropped:,} earlier characters are in agent/exp-N.md\n", "dim")
    segments = buffer.tail(VISIBLE_CHARS)
    if not segments:
        out.append("waiting for the agent…", "dim italic")
    for kind, text in segments:
        out.append(text, KIND_STYLE.get(kind, ""))
    return out


class ReasoningView(VerticalScroll):
    """Redrawn at most a few times a second by the screen: tokens arrive far faster than eyes read."""

    DEFAULT_CSS = "ReasoningView Static { width: 100%; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._drawn_version = -1
        self._body = Static(Text("waiting for the agent…", "dim italic"))

    def compose(self):
        yield self._body

    def show(self, buffer: ReasoningBuffer) -> None:
        if buffer.version == self._drawn_version:
            return
        self._drawn_version = buffer.version
        follow = self.scroll_y >= self.max_scroll_y - 1  # keep following unless the user scrolled up
        self._body.update(reasoning_text(buffer))
        if follow:
            self.call_after_refresh(self.scroll_end, animate=False)
