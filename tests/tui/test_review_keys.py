"""Pilot tests of review: filters, detail views, revert through the engine, leaving."""

from __future__ import annotations

from autokernel_tui.tui.app import REVIEW, AutokernelApp
from autokernel_tui.tui.screens.review_screen import ReviewList, ReviewScreen
from tests.tui.fakes import NOW, FakeClient, screen_text

SIZE = (120, 36)


async def settle(pilot, seconds=0.05):
    await pilot.pause(seconds)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause(seconds)


def detail_text(app) -> str:
    return screen_text(app)


async def test_lists_every_experiment_with_diff_report_reasoning(workspace):
    app = AutokernelApp(workspace, mode=REVIEW, clock=lambda: NOW)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, ReviewScreen)
        table = app.screen.query_one(ReviewList)
        assert table.row_count == 6
        assert "+NUM_WARPS = 2" in detail_text(app)  # exp 1's diff against its parent commit
        await pilot.press("down", "down", "down")  # exp 4: a failure
        await settle(pilot)
        await pilot.press("t")
        await settle(pilot)
        assert "max_abs_err 3.2" in detail_text(app)  # its harness report's reason
        await pilot.press("t")
        await settle(pilot)
        assert "drop the mask" in detail_text(app)  # the agent's text for exp 4
        await pilot.press("t")
        await settle(pilot)
        assert app.screen.view == "diff"


async def test_report_view_of_a_kept_experiment(workspace):
    # Issue 25: the report file holds {"report", "comparison"}; review passed the whole object as
    # the report, so every check showed a cross, the status "?" and no shapes.
    app = AutokernelApp(workspace, mode=REVIEW, clock=lambda: NOW)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("t")  # exp 1, kept: its harness report
        await settle(pilot)
        text = detail_text(app)
    assert "exp 1 · rmsnorm  PASS" in text
    assert "✓ static" in text and "✓ timing" in text and "✗" not in text
    assert "tiny-odd" in text and "looped" in text
    assert "vs incumbent 1.03x CI [1.01, 1.06] (40" in text  # the comparison the harness made


async def test_filters_cycle(workspace):
    app = AutokernelApp(workspace, mode=REVIEW)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ReviewList)
        await pilot.press("f")  # keep
        await settle(pilot)
        assert table.row_count == 2
        await pilot.press("f", "f")  # fail
        await settle(pilot)
        assert table.row_count == 1
        for _ in range(6):
            await pilot.press("f")  # back to all
        await settle(pilot)
        assert app.screen.status_filter == "all" and table.row_count == 6
        await pilot.press("k", "k")  # all -> rmsnorm -> softmax
        await settle(pilot)
        assert app.screen.kernel_filter == "softmax" and table.row_count == 2
        plot = screen_text(app).split("best speedup")[1]
        assert "softmax" in plot and "rmsnorm" not in plot


async def test_revert_goes_through_the_live_engine(workspace):
    client = FakeClient()
    app = AutokernelApp(workspace, mode=REVIEW, client=client)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("down")  # exp 2: discarded, cannot be reverted
        await pilot.press("u")
        await settle(pilot)
        assert client.sent == []
        assert any("only a kept experiment" in n.message for n in app._notifications)
        await pilot.press("up", "u")  # exp 1: kept; the revert asks first (tests/tui/test_newcomer_run.py)
        await settle(pilot)
        await pilot.press("y")
        await settle(pilot)
        assert client.sent == [("revert", {"run": "night-1", "n": 1})]


async def test_revert_without_engine_goes_through_the_engine_offline(workspace):
    # No live engine: the real engine opens the run idle and refuses here, because the fixture
    # workspace has no run branch; the refusal reaches the user as one line, the app keeps going.
    app = AutokernelApp(workspace, mode=REVIEW)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("u")
        await settle(pilot)
        await pilot.press("y")
        await settle(pilot, 0.3)
        notes = [(n.title, n.message) for n in app._notifications if n.title in ("Reverted", "Revert failed")]
        assert notes == [("Revert failed", "revert night-1 exp 1: WorkspaceError: branch autokernel/night-1 does not exist")]
        assert app.is_running


async def test_escape_and_q_leave_standalone_review(workspace):
    for key in ("escape", "q"):
        app = AutokernelApp(workspace, mode=REVIEW)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            await pilot.press(key)
            await settle(pilot)
        assert not app.is_running


async def test_empty_workspace_review(tmp_path):
    from tests.tui.fakes import make_workspace
    ws = make_workspace(tmp_path / "empty", rows=[])
    app = AutokernelApp(ws, mode=REVIEW)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert "no experiments match" in detail_text(app)
