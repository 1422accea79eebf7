"""benchmarks/tuner_budget.py end to end on the CPU: the real harness, the real tuner, one experiment."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autokernel_tui.agents.knobs import parse_knobs

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_smoke_run_tunes_through_the_real_harness(tmp_path):
    out = tmp_path / "tuner_budget.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "tuner_budget.py"), "--smoke", "--budget", "1",
                           "--json", str(out)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(out.read_text())
    (task,) = data["tasks"]
    assert task["task"] == "rmsnorm" and task["before"]["status"] == "PASS"
    (exp,) = task["experiments"]
    assert exp["status"] in ("keep", "discard") and " -> " in exp["description"]
    declared = parse_knobs((REPO / "kernels" / "rmsnorm" / "kernel.py").read_text())
    assert set(task["knobs_start"]) == set(declared) and {"ROW_BLOCK_ELEMS", "LOOP_NUM_STAGES"} <= set(declared)
    assert "| shape | dtype | before us | after us |" in proc.stdout and "Winning knobs:" in proc.stdout


@pytest.mark.slow
def test_the_time_limit_counts_the_first_evaluation_and_leaves_room_to_close(tmp_path):
    """Run 20 (H100): a limit counted from after the first evaluation let the last experiments and the
    closing measurements outrun the device call, which killed the script before it wrote anything."""
    out = tmp_path / "tuner_budget.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "tuner_budget.py"), "--smoke", "--budget", "2",
                           "--max-seconds", "1", "--json", str(out)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (task,) = json.loads(out.read_text())["tasks"]
    assert task["experiments"] == [] and task["stopped"].startswith("time limit") and task["after"]["status"] == "PASS"


def _smoke_with_state(tmp_path, budget):
    """One CPU smoke run with ``tmp_path``'s state file: (its task's result, what it printed)."""
    out = tmp_path / "tuner_budget.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "tuner_budget.py"), "--smoke", "--budget",
                           str(budget), "--state", str(tmp_path / "state.json"), "--json", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (task,) = json.loads(out.read_text())["tasks"]
    return task, proc.stdout


@pytest.mark.slow
def test_a_run_cut_short_resumes_from_its_state_where_it_stopped(tmp_path):
    """A 30-experiment budget on flash attention's backward outlasts one device call: --state carries the run
    (each experiment's kernel.py, the incumbent and its report) into the next call, which goes on from there
    without evaluating the starter again and without proposing a configuration twice."""
    first, _ = _smoke_with_state(tmp_path, 1)
    assert len(first["experiments"]) == 1 and first["resumed_at"] == 0
    saved = json.loads((tmp_path / "state.json").read_text())["rmsnorm"]
    assert len(saved["history"]) == 1 and "source" in saved["history"][0] and saved["incumbent_source"]
    second, _ = _smoke_with_state(tmp_path, 2)
    assert second["resumed_at"] == 1 and [e["experiment"] for e in second["experiments"]] == [1, 2]
    assert second["experiments"][0] == first["experiments"][0]  # carried, not run again
    assert second["experiments"][1]["description"] != second["experiments"][0]["description"]
    assert second["before"] == first["before"]  # the starter's report from the state, not a new evaluation


@pytest.mark.slow
def test_a_state_of_another_starter_starts_over(tmp_path):
    """A state saved before the task's starter changed (flash_attention_bwd's format, after run 23) holds
    experiments of another kernel: the run starts over instead of resuming them."""
    first, _ = _smoke_with_state(tmp_path, 1)
    path = tmp_path / "state.json"
    state = json.loads(path.read_text())
    state["rmsnorm"]["start_source"] += "\n# an older starter\n"
    path.write_text(json.dumps(state))
    again, said = _smoke_with_state(tmp_path, 1)
    assert "the starter changed since the state was saved: starting over" in said
    assert again["resumed_at"] == 0 and len(again["experiments"]) == 1


@pytest.mark.slow
def test_a_task_finished_in_an_earlier_call_is_not_run_again(tmp_path):
    """Issue 19's ten generated tasks outlast a device call: a task whose budget was used in an earlier call
    keeps its result and costs the next call nothing (no evaluation, no closing comparison), so the time
    goes to the tasks still open."""
    first, _ = _smoke_with_state(tmp_path, 1)
    assert first["stopped"] == "budget of 1 experiments used"
    again, said = _smoke_with_state(tmp_path, 1)
    assert "finished in an earlier call" in said
    assert again["experiments"] == first["experiments"] and again["after"] == first["after"]
    assert again.get("final_vs_start") == first.get("final_vs_start")


def test_each_task_gets_a_share_or_in_turn_all_that_is_left():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import tuner_budget as tb
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    reserve = tb.PER_TASK_RESERVE_S
    assert tb.task_seconds(500, 4, 420, in_turn=False) == 500 / 4 - reserve  # an equal share of four
    assert tb.task_seconds(500, 4, 420, in_turn=True) == 420  # in turn: up to its own limit
    assert tb.task_seconds(300, 4, 420, in_turn=True) == 300 - reserve
    assert tb.task_seconds(10, 1, 420, in_turn=True) == 0.0  # nothing left: no experiment starts
    assert tb.task_seconds(500, 0, 420, in_turn=False) == 420  # the rest finished in earlier calls
    assert tb.finished({}, 20) is False
    budget_used = {"history": [{}] * 20, "result": {"stopped": "budget of 20 experiments used"}}
    assert tb.finished(budget_used, 20) and not tb.finished(budget_used, 30)  # a larger budget goes on
    assert tb.finished({"history": [{}] * 3, "result": {"stopped": "nothing left to try"}, "exhausted": True}, 30)
    assert not tb.finished({"history": [{}] * 3, "exhausted": True}, 30)  # no result yet: cut short before it
