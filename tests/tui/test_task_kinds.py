"""The kernel list says what each task is (issue 19, item 5): a shipped starter, a task generated from
a profiled model, a KernelBench problem, a backward task."""

from __future__ import annotations

import shutil
from pathlib import Path

from textual.app import App, ComposeResult

from autokernel_tui.tui import workspace_files
from autokernel_tui.tui.live_state import KernelEntry
from autokernel_tui.tui.widgets.kernel_table import KernelTable

STARTERS = Path(__file__).resolve().parents[2] / "kernels"


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(STARTERS / "rmsnorm", ws / "kernels" / "rmsnorm")
    shutil.copytree(STARTERS / "rmsnorm_bwd", ws / "kernels" / "rmsnorm_bwd", symlinks=True)
    for name, mark in (("group_norm_0", "generated = true"),
                       ("gen_native_group_norm_bwd_1", 'generated = true\nkind = "backward"'),
                       ("kb_conv", 'generated = true\nkernelbench = "19_ReLU.py"')):
        (ws / "kernels" / name).mkdir(parents=True)
        (ws / "kernels" / name / "task.toml").write_text(f'name = "{name}"\n{mark}\n')
    (ws / "kernels" / "broken").mkdir()
    (ws / "kernels" / "broken" / "task.toml").write_text("name = [unclosed\n")
    return ws


def test_task_kinds_reads_each_task_toml(tmp_path):
    kinds = workspace_files.task_kinds(_workspace(tmp_path))
    assert kinds == {"rmsnorm": "starter", "rmsnorm_bwd": "backward", "group_norm_0": "generated",
                     "gen_native_group_norm_bwd_1": "gen bwd", "kb_conv": "kernelbench"}  # an unreadable task.toml is left out, not a crash
    assert workspace_files.task_kinds(tmp_path / "nowhere") == {}


class _Host(App):
    def compose(self) -> ComposeResult:
        yield KernelTable()


async def test_the_kernel_list_shows_generated_tasks_beside_starters(tmp_path):
    ws = _workspace(tmp_path)
    entries = [KernelEntry("group_norm_0", share=0.4), KernelEntry("rmsnorm", share=0.2),
               KernelEntry("kb_conv", share=0.1)]
    app = _Host()
    async with app.run_test(size=(90, 12)) as pilot:
        table = app.query_one(KernelTable)
        table.kinds = workspace_files.task_kinds(ws)
        table.show(entries, "group_norm_0", True)
        await pilot.pause()
        labels = [str(c.label) for c in table.columns.values()]
        assert labels[:3] == ["op", "kind", "share"], labels
        rows = {str(table.get_row(k)[0]).strip(" ▶"): [str(c) for c in table.get_row(k)] for k in table.rows}
        assert rows["group_norm_0"][1] == "generated" and rows["group_norm_0"][2].strip() == "40.0%"
        assert rows["rmsnorm"][1] == "starter" and rows["kb_conv"][1] == "kernelbench"
        # Nothing known of the kinds (no task.toml read): no empty column.
        table.kinds = {}
        table.show(entries, "group_norm_0", True)
        await pilot.pause()
        assert "kind" not in [str(c.label) for c in table.columns.values()]
