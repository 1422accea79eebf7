"""The agent's reasoning as it streams: thinking dimmed and italic, answer text plain.

Drawn by hand rather than as a growing scrollable document: each redraw wraps
only the tail that fits the widget (plus what the user scrolled back), so a
200-token/s stream repaints this one widget and never re-lays-out the screen.
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text
from textual.binding import Binding
from textual.widget import Widget

from autokernel_tui.tui.reasoning_buffer import ReasoningBuffer

KIND_STYLE = {"thinking": "italic #8a8a8a", "text": "#e4e4e4", "progress": "#5fafd7", "error": "bold #ff5f5f"}


def reasoning_text(segments: list[tuple[str, str]], dropped: int = 0) -> Text:
    out = Text()
    if dropped:
        out.append(f"… {dropped:,} earlier characters are in agent/exp-N.md\n", "dim")
    if not segments:
        out.append("waiting for the agent…", "dim italic")
    for kind, text in segments:
        if out and kind in ("progress", "error") and not out.plain.endswith("\n"):
            out.append("\n")
        out.append(text, KIND_STYLE.get(kind, ""))
    return out


class ReasoningView(Widget, can_focus=True):
    BINDINGS = [
        Binding("up", "scroll_back(1)", "Scroll up", show=False),
        Binding("down", "scroll_back(-1)", "Scroll down", show=False),
        Binding("pageup", "scroll_back(10)", show=False),
        Binding("pagedown", "scroll_back(-10)", show=False),
        Binding("end", "follow", show=False),
    ]

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._buffer = ReasoningBuffer()
        self._drawn_version = -1
        self.back = 0  # lines scrolled back from the newest; 0 follows the stream

    def show(self, buffer: ReasoningBuffer) -> None:
        self._buffer = buffer
        if buffer.version != self._drawn_version:
            self._drawn_version = buffer.version
            self.refresh()  # repaint only: the widget's size never depends on the text

    def action_scroll_back(self, lines: int) -> None:
        self.back = max(0, self.back + lines)
        self.border_subtitle = f"{self.back} lines back · end: follow" if self.back else ""
        self.refresh()

    def action_follow(self) -> None:
        self.back = 0
        self.border_subtitle = ""
        self.refresh()

    def render(self) -> RenderableType:
        width, height = max(1, self.content_size.width), max(1, self.content_size.height)
        budget = (height + self.back + 2) * width * 2  # enough characters to fill the view even with short lines
        segments = self._buffer.tail(budget)
        whole = len(self._buffer) <= budget
        text = reasoning_text(segments, self._buffer.dropped if whole else 0)
        lines = text.wrap(self.app.console, width)
        self.back = min(self.back, max(0, len(lines) - height))
        end = len(lines) - self.back
        shown = Text("\n").join(lines[max(0, end - height):end])
        return shown
