"""A unified diff of kernel.py as rich Text: Python highlighting plus added/removed backgrounds.

Our own renderer (rich + pygments), no third-party diff widget.
"""

from __future__ import annotations

from rich.style import Style
from rich.syntax import Syntax
from rich.text import Text

ADDED_BG = Style(bgcolor="#12361d")  # dark green: readable in 256 colours
REMOVED_BG = Style(bgcolor="#3d1418")  # dark red
HUNK = Style(color="#5fafd7", bold=True)
FILE = Style(color="#808080", bold=True)
MARK = {"+": Style(color="#5fd75f", bold=True), "-": Style(color="#ff5f5f", bold=True), " ": Style()}

_highlighter = Syntax("", "python", theme="monokai", background_color="default")


def render_diff(diff: str, max_lines: int = 4000) -> Text:
    """Highlight the code of each line as Python and mark +/- lines; hunks and headers dimmed."""
    if not diff.strip():
        return Text("no changes", style="dim italic")
    # git's "diff --git" and "index" lines say nothing a reader needs here.
    lines = [l for l in diff.splitlines() if not l.startswith(("diff --git", "index "))][:max_lines]
    kinds, bodies = [], []
    for line in lines:
        if line.startswith(("+++", "---")):
            kinds.append("file")
            bodies.append("")
        elif line.startswith("@@"):
            kinds.append("hunk")
            bodies.append("")
        elif line[:1] in ("+", "-", " "):
            kinds.append(line[0])
            bodies.append(line[1:])
        else:
            kinds.append("other")
            bodies.append("")
    code = _highlighter.highlight("\n".join(bodies)).split("\n", allow_blank=True)
    out = Text(no_wrap=True, overflow="ellipsis")
    for i, (kind, line) in enumerate(zip(kinds, lines)):
        if i:
            out.append("\n")
        if kind == "file":
            out.append(line, FILE)
        elif kind == "hunk":
            out.append(line, HUNK)
        elif kind == "other":
            out.append(line, "dim")
        else:
            body = code[i] if i < len(code) else Text(bodies[i])
            body.rstrip()
            start = len(out)
            out.append(kind, MARK[kind])
            out.append_text(body)
            if kind in "+-":
                out.stylize(ADDED_BG if kind == "+" else REMOVED_BG, start, len(out))
    if len(diff.splitlines()) > max_lines:
        out.append(f"\n... {len(diff.splitlines()) - max_lines} more lines", "dim")
    return out


def diff_stats(diff: str) -> tuple[int, int]:
    added = sum(1 for l in diff.splitlines() if l.startswith("+") and not l.startswith("+++"))
    removed = sum(1 for l in diff.splitlines() if l.startswith("-") and not l.startswith("---"))
    return added, removed
