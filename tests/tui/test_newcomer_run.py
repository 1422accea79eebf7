"""Issue 25, the TUI items of a newcomer's first run: CPU numbers that read, columns and footer that
fit, keys that acknowledge at once, a quit and a revert that ask, and progress while the engine works.

Pilot tests against the fake engine (its events checked against the engine's schema)."""

from __future__ import annotations

from autokernel_tui.engine.orchestrator import Orchestrator
from autokernel_tui.ledger import schema
from autokernel_tui.tui.app import REVIEW, AutokernelApp
from autokernel_tui.tui.screens.live_screen import LiveScreen
from autokernel_tui.tui.screens.quit_screen import QuitScreen
from autokernel_tui.tui.widgets.results_table import ResultsTable
from tests.tui.fakes import (CPU_DEVICE, NOW, T0, TAG, FakeClient, checked, cpu_experiment, cpu_report,
                             make_workspace, screen_text, snapshot)

CPU_EXPERIMENTS = [(1, "discard", 0.97, "ROWS_INT32 1 -> 0"), (2, "keep", 1.68, "RESIDENT_MAX_KB 32 -> 0"),
                   (3, "discard", 1.05, "NUM_WARPS 4 -> 8")]
CPU_ROWS = [cpu_experiment(n, status, vs_inc, description=d)[0] for n, status, vs_inc, d in CPU_EXPERIMENTS]


async def settle(pilot, seconds=0.05):
    await pilot.pause(seconds)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause(seconds)


def cpu_ranking(current="rmsnorm", kept=(1.68,)):
    """snapshot()["tasks"] of a CPU run, from the engine's own Orchestrator (shares: equal, unprofiled)."""
    orch = Orchestrator({"rmsnorm": None, "softmax": None})
    orch.set_start("rmsnorm", None, 0.0033, False)  # the interpreter vs eager torch: 0.0033x
    orch.set_start("softmax", None, 0.0041, False)
    for n, status, vs_inc, _ in CPU_EXPERIMENTS:
        orch.observe("rmsnorm", status == "keep", vs_inc, None, 60.0, 0.0033 * vs_inc, False)
    orch.current = current
    return checked([p for t in orch.ranked() for p in schema.check_task(t)], orch.ranked())


def cpu_snapshot(**over):
    ranking = cpu_ranking()
    best = {t["name"]: t["speedup"] for t in ranking if t["speedup"] is not None}
    return snapshot(device=CPU_DEVICE, tasks=ranking, best=best, experiment=4, tokens=0, cost_usd=0.0, **over)


class CpuClient(FakeClient):
    """The fake engine on a CPU run: an approved candidate is 1.5x its incumbent, 0.0083x eager torch."""

    def send(self, cmd, **args):
        if cmd == "approve" and self.snap.get("pending"):
            n = self.snap["pending"]["n"]
            self.sent.append((cmd, args))
            self.snap["pending"] = None
            self.emit({"type": "state", "state": "running"})
            self.emit({"type": "decision", "n": n, "action": "keep", "by": "human", "reason": "approved"})
            self.emit({"type": "result", "row": cpu_experiment(n, "keep", 1.5, description="LOOP_BLOCK_N 4096 -> 2048")[0]})
            return {"ok": True, "state": "running"}
        return super().send(cmd, **args)


def cpu_pending(n=4):
    row, rep, comp = cpu_experiment(n, "keep", 1.5, description="LOOP_BLOCK_N 4096 -> 2048")
    return {"type": "awaiting_approval", "n": n, "task": "rmsnorm", "diff": "", "report": rep, "comparison": comp,
            "deadline": NOW + 900}


async def test_a_cpu_run_reads_vs_the_starter_kernel_never_0_00x(tmp_path):
    """On the CPU, vs baseline (the interpreter against eager torch) is ~0.003x and means nothing: the
    header says so and shows the best kernel vs its starter; the kernel list and results do the same."""
    ws = make_workspace(tmp_path / "ws", rows=CPU_ROWS, cpu=True)
    client = CpuClient(cpu_snapshot())
    app = AutokernelApp(ws, client=client, clock=lambda: NOW)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        text = screen_text(app)
        assert "best 1.68x vs start" in text and "timings not meaningful, vs base n/a" in text
        assert "0.00x" not in text and "0.01x" not in text
        assert "vs start" in text.split("results.tsv")[1]  # the results' speedup column
        kernels = text.split("kernels by Amdahl share")[1].split("results.tsv")[0]
        assert "vs start" in kernels and "1.68x" in kernels and "1.25x" in kernels  # e2e: 1/(0.5 + 0.5/1.68)
        results = app.screen.query_one(ResultsTable)
        assert [r.get("speedup_vs_start") for r, _ in results._arrived] == [0.97, 1.68, 1.68 * 1.05]

        client.emit(cpu_pending(4))
        await settle(pilot)
        text = screen_text(app)
        assert "vs baseline n/a (CPU)" in text and "vs starter kernel 2.52x if kept" in text
        await pilot.press("a")
        await settle(pilot)
        text = screen_text(app)
        assert "best 2.52x vs start" in text and "0.00x" not in text


async def test_the_results_columns_fit_at_160_columns(workspace, client):
    app = AutokernelApp(workspace, client=client, clock=lambda: NOW)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ResultsTable)
        labels = [str(c.label) for c in table.ordered_columns]
        assert "agent" in labels and "description" in labels
        assert table.virtual_size.width <= table.scrollable_content_region.width  # nothing cut off
        text = screen_text(app)
        assert "two-pass online s…" in text  # the description, the last to give, cut with an ellipsis


async def test_a_row_with_disturbed_shapes_says_so_in_its_own_column(workspace, client):
    # Issue 21: a shape whose times stayed too spread out is left out of the speedups and marked in
    # the report, the row (results.tsv's disturbed_shapes) and the screen; the column appears only then.
    from tests.tui.fakes import row

    app = AutokernelApp(workspace, client=client, clock=lambda: NOW)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(ResultsTable)
        assert "disturbed" not in [str(c.label) for c in table.ordered_columns]  # none so far: no room taken
        client.emit({"type": "result", "row": {**row(7, "discard", speed=0.98), "disturbed_shapes": 2}})
        await settle(pilot)
        assert "disturbed" in [str(c.label) for c in table.ordered_columns]
        line = next(ln for ln in screen_text(app).splitlines() if "tune warps" in ln and " 7 " in ln)
        assert "2 shapes" in line


async def test_80x24_keeps_help_and_quit_in_the_footer(workspace, client):
    app = AutokernelApp(workspace, client=client, clock=lambda: NOW)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, 0.3)
        footer = screen_text(app).splitlines()[-1]
        assert "? Help" in footer and "q Quit" in footer and "p Pause" in footer
        table = app.screen.query_one(ResultsTable)
        assert table.virtual_size.width <= table.scrollable_content_region.width


class SlowToPause(FakeClient):
    """An engine in the middle of an experiment: it takes a pause (or stop) in, and acts on it later."""

    def send(self, cmd, **args):
        if cmd in ("pause", "stop"):
            self.sent.append((cmd, args))
            return {"ok": True, "state": self.snap["state"]}
        return super().send(cmd, **args)


async def test_pause_is_acknowledged_at_once_and_the_footer_says_resume(workspace):
    client = SlowToPause()
    app = AutokernelApp(workspace, client=client, clock=lambda: NOW)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot, 0.2)
        await pilot.press("p")
        await settle(pilot, 0.2)
        text = screen_text(app)
        assert "pausing after this experiment…" in text.splitlines()[0]  # before the engine pauses
        assert "p Resume" in text.splitlines()[-1]
        client.emit({"type": "state", "state": "paused"})
        await settle(pilot, 0.2)
        text = screen_text(app)
        assert text.startswith(" PAUSED ") and "pausing after" not in text and "p Resume" in text.splitlines()[-1]
        await pilot.press("p")
        await settle(pilot, 0.2)
        assert client.sent[-1] == ("resume", {}) and "p Pause" in screen_text(app).splitlines()[-1]


async def test_pausing_twice_takes_the_pause_back(workspace):
    client = SlowToPause()
    app = AutokernelApp(workspace, client=client, clock=lambda: NOW)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot, 0.2)
        await pilot.press("p")
        await settle(pilot)
        await pilot.press("p")
        await settle(pilot, 0.2)
        assert [c for c, _ in client.sent] == ["pause", "resume"]
        assert "pausing after" not in screen_text(app) and "p Pause" in screen_text(app).splitlines()[-1]


async def test_stop_says_so_at_once_and_stops_the_clock(workspace):
    now = [NOW]
    client = SlowToPause()
    app = AutokernelApp(workspace, client=client, clock=lambda: now[0])
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("x")
        await settle(pilot)
        assert "stopping after this experiment…" in screen_text(app).splitlines()[0]
        now[0] = NOW + 30
        client.emit({"type": "state", "state": "stopped"})  # at NOW: 01:02:03 into the session
        client.emit({"type": "session_ended", "reason": "stopped by request"})
        await settle(pilot)
        now[0] = NOW + 600
        app.screen._tick()
        await settle(pilot)
        header = screen_text(app).splitlines()[0]
        assert header.startswith(" STOPPED ") and "elapsed 01:02:03" in header and "stopping after" not in header


async def test_the_palettes_quit_asks_like_q(workspace, client):
    app = AutokernelApp(workspace, client=client, clock=lambda: NOW)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        quit_command = next(c for c in app.get_system_commands(app.screen) if c.title == "Quit")
        await quit_command.callback()
        await settle(pilot, 0.2)
        assert isinstance(app.screen, QuitScreen) and app.is_running
        await pilot.press("escape")
        await settle(pilot)
        await pilot.press("ctrl+q")
        await settle(pilot, 0.2)
        assert isinstance(app.screen, QuitScreen) and app.is_running


async def test_revert_asks_first_and_says_what_it_does(workspace):
    from autokernel_tui.tui.screens.confirm_screen import ConfirmScreen

    client = FakeClient()
    app = AutokernelApp(workspace, mode=REVIEW, client=client)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot)
        await pilot.press("u")  # exp 1, kept; exp 3 (kept, same kernel) comes after it
        await settle(pilot)
        assert isinstance(app.screen, ConfirmScreen) and client.sent == []
        text = " ".join(screen_text(app).split())
        assert "Revert exp 1 of run night-1" in text
        explain = " ".join(app.screen.explain.split())
        assert "puts kernels/rmsnorm/kernel.py back as it was before exp 1" in explain
        assert "(exp 3) is undone too" in explain and "undone too" in text
        await pilot.press("escape")
        await settle(pilot)
        assert client.sent == [] and not isinstance(app.screen, ConfirmScreen)
        await pilot.press("u")
        await settle(pilot)
        await pilot.press("y")
        await settle(pilot)
        assert client.sent == [("revert", {"run": "night-1", "n": 1})]


async def test_progress_while_the_engine_measures_and_the_harness_works(tmp_path):
    """A new run: the first experiment measures the starting kernel, then the agent proposes, then the
    harness checks and times; the header's second line says which, for how long, and how long last time."""
    ws = make_workspace(tmp_path / "ws", rows=[], events=[], cpu=True)
    now = [T0 + 5]
    client = FakeClient(snapshot(device=CPU_DEVICE, experiment=0, tasks=cpu_ranking(), best={}, started_at=T0,
                                 tokens=0, cost_usd=0.0, experiments=0))
    app = AutokernelApp(ws, client=client, clock=lambda: now[0])

    def line2() -> str:
        """The header's activity line (the first line may wrap)."""
        app.screen._tick()
        return next((line for line in screen_text(app).splitlines()[:4] if line[1:2] in "◐◓◑◒" and line[1:2]), "")

    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        client.emit({"type": "experiment_started", "n": 1, "task": "rmsnorm", "t": T0})
        await settle(pilot)
        assert "00:00:05" in line2() and "measuring the starting rmsnorm kernel" in line2()
        client.emit({"type": "baseline", "task": "rmsnorm", "report": cpu_report(), "t": T0 + 14})
        now[0] = T0 + 15
        await settle(pilot)
        assert "the agent is proposing" in line2()
        client.emit({"type": "proposal", "n": 1, "description": "ROWS_INT32 1 -> 0", "hypothesis": "",
                     "diff": "", "agent": "tuner", "tokens": 0, "cost_usd": 0.0, "t": T0 + 15})
        now[0] = T0 + 45
        await settle(pilot)
        assert "00:00:30" in line2() and "harness checking and timing" in line2()
        assert "3 test shapes x 1 dtype" in line2()  # what the harness runs on, from the baseline's report
        client.emit({"type": "verdict", "n": 1, "report": cpu_report(), "comparison": None, "t": T0 + 55})
        await settle(pilot)
        assert "harness" not in line2()
        client.emit({"type": "experiment_started", "n": 2, "task": "rmsnorm", "t": T0 + 56})
        client.emit({"type": "proposal", "n": 2, "description": "NUM_WARPS 4 -> 8", "hypothesis": "",
                     "diff": "", "agent": "tuner", "tokens": 0, "cost_usd": 0.0, "t": T0 + 56})
        now[0] = T0 + 60
        await settle(pilot)
        assert "00:00:04 (last 00:00:40)" in line2()
        assert isinstance(app.screen, LiveScreen)


async def test_review_of_a_cpu_run_shows_speedups_vs_the_starter(tmp_path):
    ws = make_workspace(tmp_path / "ws", rows=CPU_ROWS, cpu=True)
    app = AutokernelApp(ws, mode=REVIEW, clock=lambda: NOW)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        text = screen_text(app)
        assert "vs start" in text and "CPU: vs base n/a, speedups vs the starter kernel" in text
        assert "0.00x" not in text and "0.01x" not in text
        assert "1.68x" in text and "best speedup vs the starter kernel (CPU)" in text
        await pilot.press("down", "t")  # exp 2's harness report
        await settle(pilot)
        assert "vs baseline n/a (CPU)" in screen_text(app)


async def test_the_demo_runs_the_quick_check_and_the_screen_says_so(workspace, client):
    from autokernel_tui.config import load_settings
    from autokernel_tui.tui.demo import demo_notes, demo_overrides

    assert demo_overrides({})["harness"] == {"quick": True}
    assert "harness" not in demo_overrides({"AUTOKERNEL_HARNESS_QUICK": "0"})  # the user's word wins
    settings = load_settings(workspace, demo_overrides({}), env={})
    assert settings.harness.quick and settings.agent.kind == "tuner" and settings.run.policy == "manual"
    app = AutokernelApp(workspace, client=client, clock=lambda: NOW, notes=demo_notes(settings), harness_quick=True)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        assert "quick check: 1st dtype only" in screen_text(app).splitlines()[0]
        assert any("quick mode: the first dtype of each task only" in n.message for n in app._notifications)
