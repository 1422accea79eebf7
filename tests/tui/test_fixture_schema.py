"""The TUI's fixtures and the engine speak one schema (``ledger.schema``).

Both sides are checked against it: every shape tests/tui/fakes.py hands the app
(events, results rows, reports, comparisons, snapshot, the workspace files), and
everything the real engine writes in a GPU-like run (tests/fakes/gpu_run.py). A
fake that drifts from the engine, or an engine that drifts from the schema, fails
here; the drifts the old fakes had (fractions for percents, "pass" for "PASS", a
device string, missing fields) are shown to be caught.
"""

from __future__ import annotations

import json

import pytest

from autokernel_tui.ledger import schema
from autokernel_tui.ledger.events import read_events
from autokernel_tui.ledger.results import COLUMNS, read_rows
from tests.fakes.gpu_run import TAG as GPU_TAG
from tests.fakes.gpu_run import make_gpu_like_run, stop_run
from tests.tui import fakes


def _run_files(run_dir):
    events = read_events(run_dir / "events.jsonl")
    rows_typed = read_rows(run_dir / "results.tsv", typed=True)
    rows_text = read_rows(run_dir / "results.tsv")
    saved = [json.loads(p.read_text()) for p in sorted((run_dir / "reports").glob("exp-*.json"))]
    meta = json.loads((run_dir / "run.json").read_text())
    return events, rows_typed, rows_text, saved, meta


def _problems(events, rows_typed, rows_text, saved, meta) -> list[str]:
    out = [p for e in events for p in schema.check_event(e)]
    out += [p for r in rows_typed for p in schema.check_row(r)]
    out += [p for r in rows_text for p in schema.check_row(r, typed=False)]
    for s in saved:
        out += schema._keys("reports/exp-N.json", s, {"report", "comparison"})
        out += schema.check_report(s["report"]) + schema.check_comparison(s["comparison"])
    return out + schema.check_run_meta(meta)


def test_every_fake_passes_the_engines_schema(workspace):
    run_dir = workspace / ".autokernel" / "runs" / fakes.TAG
    files = _run_files(run_dir)
    assert _problems(*files) == []
    assert open(run_dir / "results.tsv").readline().rstrip("\n").split("\t") == list(COLUMNS)
    assert schema.check_snapshot(fakes.snapshot()) == []
    assert schema.check_event(fakes.pending_event()) == []
    assert all(schema.check_row(r) == [] for r in fakes.ROWS)
    # Every command's events, as FakeClient emits them.
    client = fakes.FakeClient()
    seen = []
    client.subscribe(seen.append)
    client.emit(fakes.pending_event(7))
    for cmd, args in (("approve", {}), ("pause", {}), ("resume", {}), ("set_policy", {"policy": "auto"}),
                      ("skip", {}), ("revert", {"n": 1}), ("stop", {})):
        assert client.send(cmd, **args)["ok"], cmd
    assert {e["type"] for e in seen} >= {"awaiting_approval", "decision", "result", "budget", "state", "policy",
                                         "task_selected", "experiment_started", "committed", "session_ended"}
    assert [p for e in seen for p in schema.check_event(e)] == []
    assert schema.check_snapshot(client.snapshot()) == []
    # Statuses are the engine's strings.
    assert {r["correctness"] for r in fakes.ROWS} <= {"PASS", "FAIL", "CRASH", ""}
    assert {r["status"] for r in fakes.ROWS} <= {"keep", "discard", "fail", "crash", "vetoed"}


def test_the_real_engine_writes_what_the_schema_says(tmp_path):
    workspace, engine = make_gpu_like_run(tmp_path / "ws")
    try:
        snap = engine.snapshot()
        assert schema.check_snapshot(snap) == []
        assert snap["device"]["name"] == "NVIDIA H200" and snap["pending"]["n"] == 5
    finally:
        stop_run(engine)
    files = _run_files(workspace / ".autokernel" / "runs" / GPU_TAG)
    assert _problems(*files) == []
    events = files[0]
    assert {e["type"] for e in events} >= set(schema.EVENTS) - {"experiment_abandoned", "run_finished", "error", "repaired",
                                                                 # K in flight only (tests/engine/test_parallel.py)
                                                                 "proposal_started", "proposal_ready",
                                                                 "proposal_dropped", "pool"}


def test_the_schema_catches_the_old_fakes_drift():
    """What tests/tui/fakes.py used to hand the app, each caught."""
    old_row = {**fakes.ROWS[0], "correctness": "pass"}
    assert any("correctness" in p for p in schema.check_row(old_row))
    strings = {c: str(v) for c, v in fakes.ROWS[0].items()}  # results.tsv strings in a typed event row
    assert schema.check_row(strings) != [] and schema.check_row(strings, typed=False) == []
    renamed = {("pct_roofline" if k == "roofline_pct" else k): v for k, v in fakes.ROWS[0].items()}
    assert schema.check_row(renamed) == ["row: missing roofline_pct", "row: unknown pct_roofline"]
    report = fakes.report()
    old_shape = {**report, "shapes": [{"shape": "tiny-odd", "dtype": "bfloat16", "passed": True, "pct_roofline": 0.62}]}
    assert any("missing" in p for p in schema.check_report(old_shape))
    as_permille = {**report, "summary": {**report["summary"], "roofline_pct": 1047.0}}
    assert schema.check_report(as_permille) == ["report.summary.roofline_pct: a percent is 0-100, got 1047.0"]
    assert schema.check_snapshot({**fakes.snapshot(), "device": "NVIDIA H200"}) != []
    with pytest.raises(AssertionError, match="drifted"):
        fakes.snapshot(device="NVIDIA H200")  # the fake refuses it itself
    assert schema.check_snapshot({**fakes.snapshot(), "tasks": [{"name": "rmsnorm", "share": 0.18}]}) != []
    assert schema.check_event({"t": 0, "type": "proposal", "run": "r", "n": 1, "description": "d",
                               "hypothesis": "h", "diff": ""}) == ["proposal event: missing agent, cost_usd, tokens"]
    assert schema.check_event({"t": 0, "type": "no_such", "run": "r"}) == ["event: unknown type 'no_such'"]
    with pytest.raises(AssertionError, match="drifted"):
        fakes.FakeClient().emit({"type": "result", "row": old_row})


def test_the_engine_refuses_to_journal_an_event_off_the_schema(tmp_path):
    from autokernel_tui.ledger.events import EventLog

    log = EventLog(tmp_path / "events.jsonl", "r")
    assert log.make("state", state="running")["state"] == "running"
    with pytest.raises(ValueError, match="missing state"):
        log.make("state", stat="running")
    with pytest.raises(ValueError, match="unknown type"):
        log.make("stat", state="running")
