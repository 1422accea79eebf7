"""Reading the journal back: the open experiment, missing result events, clocks across sessions."""

from autokernel_tui.engine.journal import active_seconds, experiment_seconds, open_experiment, \
    rows_missing_result_event


def ev(t, type_, **kw):
    return {"t": t, "type": type_, "run": "r", **kw}


def test_open_experiment_and_clocks():
    events = [ev(0, "run_started"), ev(1, "experiment_started", n=1, task="a"), ev(3, "result", row={"experiment": 1}),
              ev(4, "experiment_started", n=2, task="a"), ev(5, "experiment_abandoned", n=2),
              ev(6, "experiment_started", n=2, task="b"), ev(7, "proposal", n=2, description="d"),
              ev(8, "verdict", n=2, report={"status": "PASS"}),
              ev(100, "run_started"), ev(130, "state", state="running")]
    op = open_experiment(events, {1})
    assert (op.n, op.task) == (2, "b") and set(op.events) == {"proposal", "verdict"}
    assert open_experiment(events, {1, 2}) is None  # its row exists: closed
    assert open_experiment(events[:5], {1}) is None  # abandoned (agent down): not open
    assert experiment_seconds(events) == {1: 2.0}
    assert active_seconds(events) == 8.0 + 30.0
    rows = [{"experiment": 1}, {"experiment": 2}]
    assert rows_missing_result_event(events, rows) == [{"experiment": 2}]
