"""The Amdahl-ranked kernel list: what speeding each op up buys the whole model."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from autokernel_tui.tui import formatting as fmt
from autokernel_tui.tui.live_state import KernelEntry

STATE_STYLE = {"active": "bold #5fd75f", "plateaued": "#d7af5f", "done": "#87afd7", "skipped": "dim", "queued": "dim"}
# (key, label, content width, rank: the order in which columns claim room on a narrow screen)
COLUMNS = (("op", "op", None, 0), ("kind", "kind", 11, 5), ("share", "share", 6, 2), ("speedup", "now", 7, 3),
           ("e2e", "e2e", 6, 1), ("state", "state", 9, 4))
# kind: how the task came to be (workspace_files.task_kinds); a shipped starter is the plain case.
KIND_STYLE = {"starter": "dim", "generated": "#5fafd7", "kernelbench": "#af87d7", "backward": "#d7af5f",
              "gen bwd": "#d7af5f"}
VS_START_LABEL = "vs start"


class KernelTable(DataTable):
    """kind: a hand-written starter, a generated task (from a profiled model's recorded calls; "gen
    bwd": their backward), a KernelBench problem or a hand-written backward task; share: fraction of
    the model's GPU time; now: the op's best speedup (vs baseline on a GPU, vs the starter kernel on
    the CPU, where vs baseline means nothing); e2e: the model's, by Amdahl."""
    DEFAULT_CSS = "KernelTable { height: auto; max-height: 12; }"

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        self._last: tuple[list[KernelEntry], str, bool | None] = ([], "", None)
        self._plan: tuple = ()
        self.kinds: dict[str, str] = {}  # task -> kind (workspace_files.task_kinds), set by the screen

    def on_resize(self) -> None:
        self.show(*self._last)

    def _columns(self, kernels: list[KernelEntry], meaningful: bool | None) -> list[tuple[str, str]]:
        room = self.size.width
        op_width = max([len("op")] + [len(k.name) + 2 for k in kernels])
        chosen, used = set(), 0
        for key, label, width, _ in sorted(COLUMNS, key=lambda c: c[3]):
            if key == "kind" and not any(self.kinds.get(k.name) for k in kernels):
                continue  # nothing known of the tasks' kinds (no task.toml to read): no empty column
            if key == "speedup" and meaningful is False:
                label = VS_START_LABEL
            need = max(len(label), width or op_width) + 2 * self.cell_padding
            if used + need <= room or key == "op":
                chosen.add(key)
                used += need
        return [(key, VS_START_LABEL if key == "speedup" and meaningful is False else label)
                for key, label, _, _ in COLUMNS if key in chosen]

    def show(self, kernels: list[KernelEntry], current: str, meaningful: bool | None = True) -> None:
        self._last = (kernels, current, meaningful)
        columns = self._columns(kernels, meaningful)
        if tuple(columns) != self._plan:
            self.clear(columns=True)
            for key, label in columns:
                self.add_column(label, key=key)
            self._plan = tuple(columns)
        else:
            self.clear()
        # Ranked by what the model gains if this op doubled in speed (Amdahl); unknown shares last.
        ranked = sorted(kernels, key=lambda k: -(k.share if k.share is not None else -1.0))
        for k in ranked:
            projected = k.projected(meaningful)
            marker = "▶ " if k.name == current else "  "
            cells = {
                "op": Text(marker + k.name, "bold" if k.name == current else ""),
                "kind": Text(self.kinds.get(k.name, ""), KIND_STYLE.get(self.kinds.get(k.name, ""), "")),
            "share": Text(fmt.share(k.share), justify="right"),
                "speedup": Text(fmt.speedup(k.shown_speedup(meaningful)), justify="right"),
                "e2e": Text(fmt.speedup(projected) if k.share is not None else "-", justify="right"),
                "state": Text(k.state, STATE_STYLE.get(k.state, "")),
            }
            self.add_row(*(cells[key] for key, _ in columns), key=k.name)
