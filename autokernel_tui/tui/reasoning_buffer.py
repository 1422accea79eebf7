"""The agent's streamed reasoning, bounded in memory for a whole night.

Chunks arrive as (kind, text) with kind thinking | text | progress | error.
Only the newest ``max_chars`` characters are kept; the full text is on disk in
``runs/<tag>/agent/exp-<N>.md``. Adjacent chunks of one kind are merged so a
token stream does not become a million tiny segments.
"""

from __future__ import annotations

from collections import deque

DEFAULT_MAX_CHARS = 64 * 1024


class ReasoningBuffer:
    def __init__(self, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        self.max_chars = max_chars
        self._segments: deque[list[str]] = deque()  # [kind, text]
        self._size = 0
        self.version = 0  # bumps on every change: a cheap "is a redraw due?" check
        self.dropped = 0  # characters let go since the last clear

    def clear(self) -> None:
        self._segments.clear()
        self._size = 0
        self.dropped = 0
        self.version += 1

    def append(self, kind: str, text: str) -> None:
        if not text:
            return
        if self._segments and self._segments[-1][0] == kind:
            self._segments[-1][1] += text
        else:
            self._segments.append([kind, text])
        self._size += len(text)
        self._trim()
        self.version += 1

    def _trim(self) -> None:
        while self._size > self.max_chars and self._segments:
            excess = self._size - self.max_chars
            kind, text = self._segments[0]
            if len(text) <= excess:
                self._segments.popleft()
                self._size -= len(text)
                self.dropped += len(text)
            else:
                self._segments[0][1] = text[excess:]
                self._size -= excess
                self.dropped += excess

    def __len__(self) -> int:
        return self._size

    def segments(self) -> list[tuple[str, str]]:
        return [(kind, text) for kind, text in self._segments]

    def tail(self, max_chars: int) -> list[tuple[str, str]]:
        """The newest ``max_chars`` characters as (kind, text) segments, oldest first."""
        out: list[tuple[str, str]] = []
        budget = max_chars
        for kind, text in reversed(self._segments):
            if budget <= 0:
                break
            piece = text[-budget:]
            out.append((kind, piece))
            budget -= len(piece)
        out.reverse()
        return out
