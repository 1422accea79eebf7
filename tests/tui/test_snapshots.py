"""SVG snapshots: main screen, approval state, review (diff and report views) and help at 80x24 and 160x48.

Deterministic: a fixed clock, the fixture workspace and the fake engine.
Update after an intended change: python -m pytest tests/tui/test_snapshots.py --snapshot-update
"""

from __future__ import annotations

import pytest

from autokernel_tui.tui.app import REVIEW, AutokernelApp
from tests.tui.fakes import NOW, FakeClient, pending_event

SIZES = [(80, 24), (160, 48)]


async def _quiet(pilot):
    await pilot.pause(0.2)
    await pilot.app.workers.wait_for_complete()
    pilot.app.clear_notifications()
    await pilot.pause(0.4)  # let the footer re-compose after binding changes


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_main_screen(snap_compare, workspace, size):
    app = AutokernelApp(workspace, client=FakeClient(), clock=lambda: NOW)
    assert snap_compare(app, terminal_size=size, run_before=_quiet)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_awaiting_approval(snap_compare, workspace, size):
    client = FakeClient()

    async def awaiting(pilot):
        client.emit(pending_event(7))
        await _quiet(pilot)

    app = AutokernelApp(workspace, client=client, clock=lambda: NOW)
    assert snap_compare(app, terminal_size=size, run_before=awaiting)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_review(snap_compare, workspace, size):
    async def on_a_kept_experiment(pilot):
        await _quiet(pilot)
        await pilot.press("down", "down")  # exp 3, kept
        await _quiet(pilot)

    app = AutokernelApp(workspace, mode=REVIEW, clock=lambda: NOW)
    assert snap_compare(app, terminal_size=size, run_before=on_a_kept_experiment)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_review_report(snap_compare, workspace, size):
    async def report_of_a_kept_experiment(pilot):
        await _quiet(pilot)
        await pilot.press("down", "down", "t")  # exp 3, kept: its harness report and comparison
        await _quiet(pilot)

    app = AutokernelApp(workspace, mode=REVIEW, clock=lambda: NOW)
    assert snap_compare(app, terminal_size=size, run_before=report_of_a_kept_experiment)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_help(snap_compare, workspace, size):
    async def open_help(pilot):
        await _quiet(pilot)
        await pilot.press("question_mark")
        await _quiet(pilot)

    app = AutokernelApp(workspace, client=FakeClient(), clock=lambda: NOW)
    assert snap_compare(app, terminal_size=size, run_before=open_help)
