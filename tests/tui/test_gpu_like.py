"""A GPU-like run on screen, made by the real engine (tests/fakes/gpu_run.py): the approval panel,
results table and review show the harness's roofline_pct as the percent it is (issue 24: an H200
report's 10.47 was shown as "1047.0%").

Snapshots: python -m pytest tests/tui/test_gpu_like.py --snapshot-update after an intended change.
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from autokernel_tui.engine.client import LocalClient
from autokernel_tui.tui.app import REVIEW, AutokernelApp
from autokernel_tui.tui.widgets.approval_panel import approval_renderable
from autokernel_tui.tui.widgets.results_table import BY_KEY, cell
from tests.tui.fakes import screen_text
from tests.fakes.gpu_run import make_gpu_like_run, stop_run
from tests.tui.test_snapshots import _quiet

ELAPSED = 3723.0  # the header's clock: 01:02:03 after the engine's session started


@pytest.fixture
def gpu_run(tmp_path):
    workspace, engine = make_gpu_like_run(tmp_path / "ws")
    yield workspace, engine
    stop_run(engine)


def _roof_cell(row: dict) -> str:
    return cell(BY_KEY["roofline_pct"], row).plain


def test_a_percent_is_never_shown_as_a_fraction():
    """A report with roofline_pct 10.47 shows 10.5%, not 1047%: the panel, the per-shape table and the
    results column all read the harness's percent as percent."""
    report = {"status": "PASS", "stage": "timing", "timing_meaningful": True,
              "summary": {"speedup_vs_baseline": 1.2, "speedup_vs_compile": 1.1, "worst_shape": "a",
                          "worst_speedup": 1.0, "roofline_pct": 10.47},
              "shapes": [{"shape": "a", "dtype": "bfloat16", "passed": True, "median_us": 50.08,
                          "roofline_pct": 10.47},
                         {"shape": "b", "dtype": "bfloat16", "passed": True, "median_us": 16.81,
                          "roofline_pct": 83.2}]}
    console = Console(width=160, record=True, file=io.StringIO())
    console.print(approval_renderable({"n": 1, "task": "rmsnorm", "report": report, "comparison": None}))
    text = console.export_text()
    assert "roofline 10.5%" in text and "83.2%" in text
    assert "1047" not in text and "8320" not in text
    assert _roof_cell({"roofline_pct": 10.47}) == "10.5%" and _roof_cell({"roofline_pct": 83.2}) == "83.2%"
    assert _roof_cell({"roofline_pct": None}) == "-"


def test_the_engines_numbers_reach_the_screen_in_percent(gpu_run):
    """What the engine recorded (results.tsv, the pending report) is what the panes show."""
    workspace, engine = gpu_run
    pending = engine.snapshot()["pending"]
    start = [s.roofline_pct for s in engine.record.start_report("rmsnorm").shapes]
    assert start == [10.47, 83.18]  # the starter, as the H200 harness reports it: percent
    pct = [s["roofline_pct"] for s in pending["report"]["shapes"]]
    assert all(1 < p <= 100 for p in pct)
    rows = engine.results.rows
    assert [r["status"] for r in rows] == ["keep", "discard", "fail", "keep"]
    assert all(r["correctness"] in ("PASS", "FAIL") for r in rows)
    assert rows[0]["roofline_pct"] == pytest.approx(32.84)
    for r in rows:
        if r["roofline_pct"] is not None:
            assert 1 < r["roofline_pct"] <= 100


async def test_live_screen_shows_the_run_as_recorded(gpu_run):
    workspace, engine = gpu_run
    app = AutokernelApp(workspace, client=LocalClient(engine), clock=lambda: engine.session_started + ELAPSED)
    async with app.run_test(size=(160, 48)) as pilot:
        await _quiet(pilot)
        text = screen_text(app)
    summary = engine.snapshot()["pending"]["report"]["summary"]
    assert f"roofline {summary['roofline_pct']:.1f}%" in text  # 39.5%
    assert "32.8%" in text and "38.3%" in text  # results rows 1 and 4
    assert "NVIDIA H200" in text and "AWAITING APPROVAL" in text
    assert "3284" not in text and "3946" not in text  # a percent never multiplied by 100


def test_gpu_like_awaiting_approval(snap_compare, gpu_run):
    """The live screen of the real engine, stopped at its fifth experiment's approval."""
    workspace, engine = gpu_run
    app = AutokernelApp(workspace, client=LocalClient(engine), clock=lambda: engine.session_started + ELAPSED)
    assert snap_compare(app, terminal_size=(160, 48), run_before=_quiet)


def test_gpu_like_review_report(snap_compare, gpu_run):
    """Review of the same run on disk, the harness report of exp 4 (kept): per-shape roofline_pct."""
    workspace, _ = gpu_run

    async def on_the_report_of_exp_4(pilot):
        await _quiet(pilot)
        await pilot.press("down", "down", "down", "t")  # exp 4, report view
        await _quiet(pilot)

    app = AutokernelApp(workspace, mode=REVIEW, clock=lambda: 0.0)
    assert snap_compare(app, terminal_size=(160, 48), run_before=on_the_report_of_exp_4)
