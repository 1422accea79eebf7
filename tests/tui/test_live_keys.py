"""Pilot tests: every steering and navigation key of the live screen, against the fake engine."""

from __future__ import annotations

import pytest

from autokernel_tui.errors import ConfigError
from autokernel_tui.tui.app import AutokernelApp
from autokernel_tui.tui.screens.help_screen import HelpScreen
from autokernel_tui.tui.screens.live_screen import LiveScreen
from autokernel_tui.tui.screens.quit_screen import DETACH, HEADLESS, STOP, QuitScreen
from autokernel_tui.tui.screens.review_screen import ReviewScreen
from autokernel_tui.tui.widgets.results_table import ResultsTable
from tests.tui.fakes import NOW, FakeClient, pending_event, screen_text

SIZE = (120, 36)


def make_app(workspace, client, **kw):
    return AutokernelApp(workspace, client=client, clock=lambda: NOW, **kw)


async def settle(pilot, seconds=0.05):
    await pilot.pause(seconds)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause(seconds)


async def test_opens_on_snapshot_and_catches_up(workspace, client):
    app = make_app(workspace, client)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, LiveScreen)
        assert screen.query_one(ResultsTable).row_count == 6  # results.tsv
        assert "larger block keeps the row" in "".join(t for _, t in screen.state.reasoning.segments())  # events.jsonl
        assert screen.state.proposal["description"] == "NUM_WARPS 8, block 4096"
        assert client.callbacks, "the screen subscribes to the engine"


async def test_approve_and_veto_keys(workspace, client):
    app = make_app(workspace, client)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("a")  # nothing awaits: no command goes out
        await settle(pilot)
        assert client.sent == []
        client.emit(pending_event(7))
        await settle(pilot)
        screen = app.screen
        assert screen.awaiting
        assert "a approve · v veto" in screen_text(app)
        await pilot.press("a")
        await settle(pilot)
        assert client.sent == [("approve", {"n": 7})]
        assert not screen.awaiting
        assert screen.query_one(ResultsTable).row_count == 7
        client.emit(pending_event(8))
        await settle(pilot)
        await pilot.press("v")
        await settle(pilot)
        assert client.sent[-1] == ("veto", {"n": 8})
        assert screen.state.pending is None


async def test_pause_resume_skip_policy_stop(workspace, client):
    app = make_app(workspace, client)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot)
        assert app.screen.state.state == "paused"
        await pilot.press("p")
        await settle(pilot)
        assert app.screen.state.state == "running"
        await pilot.press("n")
        await settle(pilot)
        assert app.screen.state.task == "softmax"
        await pilot.press("o")
        await settle(pilot)
        assert app.screen.state.policy == "auto"
        await pilot.press("x")
        await settle(pilot)
        assert client.sent[-1] == ("stop", {})
        assert app.screen.state.state == "stopped"
        assert [c[0] for c in client.sent] == ["pause", "resume", "skip", "set_policy", "stop"]


async def test_policy_cycles_through_all(workspace, client):
    app = make_app(workspace, client)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        for expected in ("auto", "threshold", "manual"):
            await pilot.press("o")
            await settle(pilot)
            assert app.screen.state.policy == expected


async def test_failed_command_is_a_notification(workspace):
    class Refusing(FakeClient):
        def send(self, cmd, **args):
            raise ConnectionError("engine went away")

    app = make_app(workspace, Refusing())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("x")
        await settle(pilot)
        assert any("engine went away" in n.message for n in app._notifications)


async def test_sort_key_sorts_results_by_cursor_column(workspace, client):
    app = make_app(workspace, client)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ResultsTable)
        table.focus()
        table.move_cursor(row=0, column=3)  # "vs base"
        await pilot.press("s")
        await settle(pilot)
        first = [table.get_row_at(i)[3].plain for i in range(table.row_count)]
        assert first[:4] == ["1.01x", "1.04x", "1.12x", "1.30x"] and first[-1] == "-"
        await pilot.press("s")
        await settle(pilot)
        again = [table.get_row_at(i)[3].plain for i in range(table.row_count)]
        assert again == list(reversed(first))
        client.emit({"type": "result", "row": {**client_row(), "speedup_vs_baseline": 9.0}})
        client.emit({"type": "result", "row": {**client_row(), "experiment": 21, "speedup_vs_baseline": 1.12}})
        await settle(pilot)
        assert table.row_count == 8
        # New results go in at their sorted place (descending now); equal keys keep arrival order.
        shown = [(table.get_row_at(i)[0].plain, table.get_row_at(i)[3].plain) for i in range(table.row_count)]
        assert shown[:3] == [("4", "-"), ("5", "-"), ("20", "9.00x")]  # no number sorts after numbers: first here
        assert [n for n, s in shown if s == "1.12x"] == ["3", "21"]
        speeds = [float(s[:-1]) for _, s in shown[2:]]
        assert speeds == sorted(speeds, reverse=True)


def client_row():
    from tests.tui.fakes import row
    return row(20, "keep")


async def test_help_review_and_back(workspace, client):
    app = make_app(workspace, client)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await settle(pilot)
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, LiveScreen)
        await pilot.press("r")
        await settle(pilot)
        assert isinstance(app.screen, ReviewScreen)
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, LiveScreen)


@pytest.mark.parametrize("key,attached,expected", [("s", False, STOP), ("l", False, HEADLESS), ("l", True, DETACH),
                                                   ("escape", False, None)])
async def test_quit_asks(workspace, key, attached, expected):
    app = make_app(workspace, FakeClient(), attached=attached)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("q")
        await settle(pilot)
        assert isinstance(app.screen, QuitScreen)
        await pilot.press(key)
        await settle(pilot)
        if expected is None:
            assert isinstance(app.screen, LiveScreen)
            assert app.return_value is None
    if expected is not None:
        assert app.return_value == expected


async def test_detach_key_only_when_attached(workspace):
    app = make_app(workspace, FakeClient(), attached=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("d")
        await settle(pilot)
        assert app.is_running
    app = make_app(workspace, FakeClient(), attached=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("d")
        await settle(pilot)
    assert app.return_value == DETACH


async def test_user_keymap_remaps_and_bad_id_is_an_error(workspace, client):
    app = make_app(workspace, client, user_keys={"approve": "y"})
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        client.emit(pending_event(7))
        await settle(pilot)
        assert "y approve" in screen_text(app)
        await pilot.press("a")
        await settle(pilot)
        assert client.sent == []
        await pilot.press("y")
        await settle(pilot)
        assert client.sent == [("approve", {"n": 7})]
    with pytest.raises(ConfigError, match="unknown action aprove"):
        make_app(workspace, client, user_keys={"aprove": "y"})


async def test_command_palette_runs_steering(workspace, client):
    app = make_app(workspace, client)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+p")
        await settle(pilot, 0.2)
        await pilot.press(*"pause")
        await settle(pilot, 0.3)
        await pilot.press("enter")
        await settle(pilot, 0.2)
        assert ("pause", {}) in client.sent


async def test_bell_rings_once_per_candidate(workspace, client, monkeypatch):
    app = make_app(workspace, client)
    rings = []
    monkeypatch.setattr(app, "bell", lambda: rings.append(1))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        client.emit(pending_event(7))
        await settle(pilot)
        client.emit({"type": "budget", "tokens": 5, "cost_usd": 0.1})
        await settle(pilot)
        assert rings == [1]


async def test_streaming_is_bounded_and_finished_run_notifies(workspace, client):
    app = make_app(workspace, client)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        limit = app.screen.state.reasoning.max_chars
        for _ in range(200):
            client.emit({"type": "agent", "n": 7, "kind": "thinking", "text": "x" * 1000})
        await settle(pilot, 0.3)
        assert len(app.screen.state.reasoning) <= limit
        client.emit({"type": "run_finished", "reason": "budget spent"})
        await settle(pilot)
        assert any("budget spent" in n.message for n in app._notifications)
        assert app.screen.state.state == "stopped"


async def test_resize_keeps_everything_on_screen(workspace, client):
    app = make_app(workspace, client)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        assert app.screen.has_class("-wide")
        await pilot.resize_terminal(80, 24)
        await settle(pilot)
        assert app.screen.has_class("-narrow")
        for widget_id in ("#kernels", "#results", "#reasoning", "#diff"):
            region = app.screen.query_one(widget_id).region
            assert region.width > 0 and region.height > 0 and region.right <= 80 and region.bottom <= 24


async def test_narrow_screen_hides_the_tables_while_awaiting_even_after_a_resize(workspace, client):
    app = make_app(workspace, client)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        client.emit(pending_event())
        await settle(pilot)
        left = app.screen.query_one("#live-left")
        assert left.display and not left.has_class("-awaiting")  # wide: tables stay beside the approval
        await pilot.resize_terminal(80, 24)
        await settle(pilot, 0.2)
        assert left.has_class("-awaiting") and not left.display
        await pilot.press("a")
        await settle(pilot, 0.2)
        assert left.display
