"""The TUI's pure parts, no Textual: state reducer, bounded buffer, formatting, files, diff, sparkline, keys."""

from __future__ import annotations

import json

import pytest

from autokernel_tui.errors import ConfigError
from autokernel_tui.tui import formatting as fmt
from autokernel_tui.tui import keys, workspace_files
from autokernel_tui.tui.diff_render import diff_stats, render_diff
from autokernel_tui.tui.live_state import APPROVAL, HEADER, KERNELS, RESULTS, LiveState
from autokernel_tui.tui.reasoning_buffer import ReasoningBuffer
from autokernel_tui.tui.sparkline import best_so_far, sparkline
from tests.tui.fakes import DIFF, TAG, pending_event, row, snapshot


def test_buffer_is_bounded_and_keeps_the_newest():
    buf = ReasoningBuffer(max_chars=100)
    for i in range(50):
        buf.append("thinking" if i % 2 else "text", f"{i:03d}|")
    assert len(buf) == 100 and buf.dropped == 100
    assert "".join(t for _, t in buf.segments()).endswith("049|")
    assert "".join(t for _, t in buf.tail(8)) == "048|049|"
    buf.clear()
    assert len(buf) == 0 and buf.segments() == []


def test_buffer_merges_runs_of_one_kind():
    buf = ReasoningBuffer()
    for word in ("a", "b", "c"):
        buf.append("thinking", word)
    buf.append("text", "d")
    assert buf.segments() == [("thinking", "abc"), ("text", "d")]


def test_state_folds_events():
    snap = snapshot()
    state = LiveState.from_snapshot(snap)
    assert [k.name for k in state.kernels] == [t["name"] for t in snap["tasks"]]  # the engine's ranking order
    assert sorted(k.name for k in state.kernels) == ["matmul", "rmsnorm", "softmax"] and state.best_overall == 1.12
    assert state.apply({"type": "experiment_started", "n": 8, "task": "rmsnorm"}) >= {HEADER}
    state.apply({"type": "agent", "kind": "progress", "text": "step 1"})
    assert state.reasoning.segments() == [("progress", "step 1\n")]
    assert state.apply(pending_event(8)) >= {APPROVAL} and state.awaiting and state.state == "awaiting_approval"
    state.apply({"type": "decision", "n": 8, "action": "keep", "by": "human"})
    assert not state.awaiting
    assert state.apply({"type": "result", "row": row(8, "keep", speed=1.5)}) == {HEADER, KERNELS, RESULTS}
    assert state.best["rmsnorm"] == 1.5 and state.kernel("rmsnorm").speedup == 1.5
    state.apply({"type": "result", "row": row(9, "discard", speed=9.0)})
    assert state.best["rmsnorm"] == 1.5  # only kept experiments count
    state.apply({"type": "task_selected", "task": "softmax", "reason": "plateau"})
    assert state.kernel("softmax").state == "active" and state.task == "softmax"
    state.apply({"type": "policy", "policy": "auto"})
    state.apply({"type": "budget", "tokens": 10, "cost_usd": 0.5})
    assert (state.policy, state.tokens, state.cost_usd) == ("auto", 10, 0.5)
    state.apply({"type": "error", "message": "agent down"})
    state.apply({"type": "run_finished", "reason": "budget"})
    assert state.state == "stopped" and [n.severity for n in state.notices] == ["error", "information"]
    assert state.apply({"type": "no_such_event"}) == set()


def test_amdahl_and_formatting():
    assert fmt.projected_end_to_end(0.5, 2.0) == pytest.approx(1 / 0.75)
    assert fmt.projected_end_to_end(None, 2.0) is None
    assert fmt.speedup("1.234") == "1.23x" and fmt.speedup("") == "-" and fmt.speedup("nan") == "-"
    assert fmt.interval("1", "1.2") == "[1.00, 1.20]" and fmt.interval(None, 1) == ""
    assert fmt.elapsed(3723) == "01:02:03" and fmt.micros(1500) == "1.50 ms" and fmt.tokens(12345) == "12.3k"
    assert fmt.device_label({"name": "NVIDIA H200", "timing_meaningful": True}) == "NVIDIA H200"
    cpu = "CPU: Triton interpreter, timings not meaningful"
    assert fmt.device_label("CPU (Triton interpreter)") == cpu
    # No device yet: the engine's harness is still starting (a GPU box must not read "CPU" meanwhile).
    assert fmt.device_label(None) == "device: starting the harness…" and fmt.timing_meaningful(None) is None


def test_tail_events_reads_only_the_end(tmp_path):
    path = tmp_path / "events.jsonl"
    with open(path, "w") as handle:
        for n in range(1, 2001):
            handle.write(json.dumps({"type": "experiment_started", "n": n}) + "\n")
            handle.write(json.dumps({"type": "agent", "n": n, "kind": "text", "text": "x" * 50}) + "\n")
        handle.write('{"type": "agent", "n": 2000, "te')  # a line being written
    events = workspace_files.tail_events(path, max_bytes=4096)
    assert 0 < len(events) < 100 and all(isinstance(e, dict) for e in events)
    replay = workspace_files.catch_up_events(events, 2000)
    assert replay[0] == {"type": "experiment_started", "n": 2000} and len(replay) == 2
    assert workspace_files.tail_events(tmp_path / "missing") == []


def test_results_and_runs_on_disk(workspace):
    assert workspace_files.is_workspace(workspace) and workspace_files.run_tags(workspace) == [TAG]
    rows = workspace_files.read_results(workspace_files.results_path(workspace, TAG))
    assert [r["status"] for r in rows] == ["keep", "discard", "keep", "fail", "crash", "vetoed"]
    assert not workspace_files.engine_is_live(workspace)


def test_diff_render():
    text = render_diff(DIFF)
    assert "+NUM_WARPS = 8" in text.plain and "-NUM_WARPS = 4" in text.plain
    assert diff_stats(DIFF) == (2, 2)
    assert render_diff("").plain == "no changes"
    assert "diff --git" not in render_diff("diff --git a/x b/x\nindex 1..2\n+a\n").plain


def test_sparkline():
    assert best_so_far([None, 1.2, 1.1, None, 1.5]) == [1.0, 1.2, 1.2, 1.2, 1.5]
    line = sparkline([1.0, 1.5, 2.0], 10)
    assert line == "▁▅█"
    assert len(sparkline([float(i) for i in range(100)], 20)) == 20
    assert sparkline([1.0, 1.0], 5) == "▁▁" and sparkline([], 5) == ""


def test_keymap_validation():
    assert keys.keymap({"approve": "y"}) == {"approve": "y"}
    with pytest.raises(ConfigError, match="unknown action"):
        keys.keymap({"launch": "l"})
    ids = [spec.id for spec in keys.ALL]
    assert len(ids) == len(set(ids)), "binding ids are unique"
    assert keys.display_key(keys.NAVIGATION[3], {}) == "?"


def test_the_header_says_when_candidates_run_less_confined():
    from autokernel_tui.tui.formatting import sandbox_warning
    assert sandbox_warning({"name": "NVIDIA H200", "sandbox": "bwrap: own mount view ..."}) is None
    assert "Landlock only" in sandbox_warning({"sandbox": "no bwrap (bubblewrap cannot create namespaces here)"})
    assert sandbox_warning({"sandbox": "NO SANDBOX (harness.sandbox = off): ..."}).startswith("NO SANDBOX")
    assert sandbox_warning({"name": "CPU"}) is None and sandbox_warning(None) is None


def test_the_header_shows_agents_queue_pool_rate_and_waiting_approvals_with_k_in_flight():
    """Issue 22, item 5: with K > 1 the header says how many agents write, how many proposals wait to
    be judged or recorded, the pool's use, experiments/hour and the approvals waiting."""
    from autokernel_tui.tui.widgets.run_header import status_line

    state = LiveState.from_snapshot(snapshot())
    plain = status_line(state, 0.0).plain
    assert "agents" not in plain and "waiting" not in plain  # K = 1: nothing to show
    state.apply({"t": 1.0, "type": "pool", "run": TAG, "in_flight": 6, "proposing": 4, "ready": 2, "judging": 1,
                 "judged": 1, "parallel": 4, "waiting_approval": 2, "workers": 2, "workers_busy": 1,
                 "experiments_per_hour": 1705.2})
    plain = status_line(state, 0.0).plain
    for part in ("agents 4/4", "queued 2", "pool 1/2 busy", "exp/h 1705", "waiting 2"):
        assert part in plain, plain


def test_the_approval_panel_says_how_many_questions_wait_behind_this_one():
    from autokernel_tui.tui.widgets.approval_panel import approval_renderable

    state = LiveState.from_snapshot(snapshot())
    assert state.apply(pending_event(8)) >= {APPROVAL}
    pool = {"t": 1.0, "type": "pool", "run": TAG, "in_flight": 3, "proposing": 0, "ready": 2, "parallel": 4,
            "waiting_approval": 3, "workers": 1, "workers_busy": 1, "experiments_per_hour": 60.0}
    assert state.apply(pool) >= {APPROVAL}  # the panel's count is redrawn
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(approval_renderable(state.pending, None, 2))
    assert "2 more waiting" in console.export_text()
    console.print(approval_renderable(state.pending, None, 0))
    assert console.export_text().count("more waiting") == 0
