"""The Amdahl-ranked kernel list: what speeding each op up buys the whole model."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from autokernel_tui.tui import formatting as fmt
from autokernel_tui.tui.live_state import KernelEntry

STATE_STYLE = {"active": "bold #5fd75f", "plateaued": "#d7af5f", "done": "#87afd7", "skipped": "dim", "queued": "dim"}


class KernelTable(DataTable):
    """share: fraction of the model's GPU time; now: the op's best speedup; e2e: the model's, by Amdahl."""
    DEFAULT_CSS = "KernelTable { height: auto; max-height: 12; }"

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        for label, key in (("op", "op"), ("share", "share"), ("now", "speedup"),
                           ("e2e", "e2e"), ("state", "state")):
            self.add_column(label, key=key)

    def show(self, kernels: list[KernelEntry], current: str) -> None:
        # Ranked by what the model gains if this op doubled in speed (Amdahl); unknown shares last.
        ranked = sorted(kernels, key=lambda k: -(k.share if k.share is not None else -1.0))
        self.clear()
        for k in ranked:
            projected = k.projected
            marker = "▶ " if k.name == current else "  "
            self.add_row(
                Text(marker + k.name, "bold" if k.name == current else ""),
                Text(fmt.share(k.share), justify="right"),
                Text(fmt.speedup(k.speedup), justify="right"),
                Text(fmt.speedup(projected) if k.share is not None else "-", justify="right"),
                Text(k.state, STATE_STYLE.get(k.state, "")),
                key=k.name,
            )
