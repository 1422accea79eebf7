"""Workspaces and settings written before issue 24 (pct_roofline, peak_vram_mb, run.roofline_target)
and before results.tsv's added columns (disturbed_shapes) still load, with every number in today's unit
under today's name and an added column read as empty."""

from __future__ import annotations

import json

import pytest

from autokernel_tui.config import Settings, load_settings
from autokernel_tui.errors import ConfigError
from autokernel_tui.ledger.results import ADDED, COLUMNS, HEADER, RENAMED, ResultsLog, read_rows
from tests.fakes.gpu_run import TAG, make_gpu_like_run, settings, stop_run

OLD_NAMES = {new: old for old, new in RENAMED.items()}
OLD_HEADER = "\t".join(OLD_NAMES.get(c, c) for c in COLUMNS if c not in ADDED)


def _as_old(rows):
    """Rows as an old results.tsv gives them: the added columns empty."""
    return [{**r, **{c: None for c in ADDED}} for r in rows]


def _old(data):
    """A dict as the old version named its keys (values unchanged: both were these units already)."""
    return {OLD_NAMES.get(k, k): v for k, v in data.items()}


def _old_report(report):
    if not report:
        return report
    out = _old(report)
    out["summary"] = _old(out["summary"]) if out.get("summary") else out.get("summary")
    out["shapes"] = [_old(s) for s in out.get("shapes") or []]
    return out


def _age(run_dir) -> None:
    """Rewrite a run's files as the version before issue 24 wrote them."""
    results = run_dir / "results.tsv"
    header, rest = results.read_text().split("\n", 1)
    assert header == HEADER
    rows = ["\t".join(line.split("\t")[:-len(ADDED)]) for line in rest.splitlines()]
    results.write_text(OLD_HEADER + "\n" + "".join(line + "\n" for line in rows))
    for path in (run_dir / "reports").glob("*.json"):
        saved = json.loads(path.read_text())
        if "report" in saved:
            saved["report"] = _old_report(saved["report"])
        else:
            saved = _old_report(saved)
        path.write_text(json.dumps(saved))
    events = []
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        e = json.loads(line)
        if e["type"] == "result":
            e["row"] = _old(e["row"])
        if e["type"] in ("verdict", "awaiting_approval", "baseline"):
            e["report"] = _old_report(e["report"])
        if e["type"] == "task_selected":  # the old orchestrator's pct_roofline was a fraction
            e["ranking"] = [{**{k: v for k, v in t.items() if k != "roofline_pct"},
                             "pct_roofline": None if t["roofline_pct"] is None else t["roofline_pct"] / 100}
                            for t in e["ranking"]]
        events.append(json.dumps(e))
    (run_dir / "events.jsonl").write_text("\n".join(events) + "\n")
    meta = json.loads((run_dir / "run.json").read_text())
    run = meta["settings"]["run"]
    run["roofline_target"] = run.pop("roofline_target_pct") / 100
    (run_dir / "run.json").write_text(json.dumps(meta))


@pytest.fixture
def old_run(tmp_path):
    workspace, engine = make_gpu_like_run(tmp_path / "ws")
    stop_run(engine)
    run_dir = workspace / ".autokernel" / "runs" / TAG
    before = read_rows(run_dir / "results.tsv", typed=True)
    start = json.loads((run_dir / "reports" / "start-rmsnorm.json").read_text())
    _age(run_dir)
    assert "pct_roofline" in (run_dir / "results.tsv").read_text().split("\n", 1)[0]
    return workspace, run_dir, before, start


def test_an_old_results_tsv_reads_under_todays_names(old_run):
    from autokernel_tui.tui import workspace_files

    workspace, run_dir, before, _ = old_run
    rows = read_rows(run_dir / "results.tsv", typed=True)
    assert rows == _as_old(before)  # same values, today's keys
    assert before[0]["disturbed_shapes"] == 0  # written today: measured, none disturbed
    assert rows[0]["roofline_pct"] == pytest.approx(32.84) and rows[0]["peak_vram_mib"] == 386.0
    assert read_rows(run_dir / "results.tsv")[0]["roofline_pct"] == "32.84"
    assert workspace_files.read_results(run_dir / "results.tsv") == _as_old(before)  # the TUI's reader
    assert (run_dir / "results.tsv").read_text().startswith(OLD_HEADER)  # readers never write


def test_an_old_run_reviews_with_todays_names(old_run):
    from autokernel_tui.ledger.history import load_runs
    from autokernel_tui.tui import workspace_files

    workspace, run_dir, before, _ = old_run
    (run,) = load_runs(workspace)
    assert [r.roofline_pct for r in run.experiments] == [r["roofline_pct"] for r in before]
    report = run.report(4)
    assert report["summary"]["roofline_pct"] == pytest.approx(38.27) and report["peak_vram_mib"] == 386.0
    assert [s["roofline_pct"] for s in report["shapes"]] == [16.97, 86.31]
    assert run.comparison(4)["speedup"] == pytest.approx(1.1653)
    events = run.events()
    ranking = next(e for e in events if e["type"] == "task_selected")["ranking"]
    assert "pct_roofline" not in ranking[0]
    tailed = workspace_files.tail_events(run_dir / "events.jsonl")
    assert all("pct_roofline" not in e["row"] for e in tailed if e["type"] == "result")
    verdict = next(e for e in tailed if e["type"] == "verdict" and e["report"]["status"] == "PASS")
    assert verdict["report"]["summary"]["roofline_pct"] == pytest.approx(32.84)


def test_an_old_run_resumes_in_percent(old_run):
    """The engine reads the old reports' percent as percent (no x100, no /100) and rewrites the header."""
    from autokernel_tui.engine.loop import Engine
    from autokernel_tui.engine.orchestrator import roofline_if_meaningful
    from tests.fakes.gpu_run import H200Harness, ScriptedTuner

    workspace, run_dir, before, start = old_run
    engine = Engine(workspace, settings(), tag=TAG, agent=ScriptedTuner(), harness=H200Harness())
    try:
        task = engine.orch.tasks["rmsnorm"]
        assert task.roofline_pct == pytest.approx(38.27)  # the last kept experiment's, in percent
        assert engine.orch.roofline_target_pct == 90.0 and task.status == "active"
        assert engine.snapshot()["tasks"][0]["roofline_pct"] == pytest.approx(38.27)
        assert (run_dir / "results.tsv").read_text().split("\n", 1)[0] == HEADER  # the writer upgraded it
        assert engine.results.rows == _as_old(before)
        assert roofline_if_meaningful(engine.record.start_report("rmsnorm")) == start["summary"]["roofline_pct"]
    finally:
        engine.close()


def test_the_old_roofline_target_setting_is_read_as_percent(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "autokernel.toml").write_text("[run]\nroofline_target = 0.8\n")
    s = load_settings(ws, env={})
    assert s.run.roofline_target_pct == pytest.approx(80.0)
    err = capsys.readouterr().err
    assert "run.roofline_target = 0.8 is deprecated" in err and "roofline_target_pct = 80" in err
    assert load_settings(None, env={"AUTOKERNEL_RUN_ROOFLINE_TARGET": "0.75"}).run.roofline_target_pct == 75.0
    both = {"AUTOKERNEL_RUN_ROOFLINE_TARGET": "0.75", "AUTOKERNEL_RUN_ROOFLINE_TARGET_PCT": "60"}
    assert load_settings(None, env=both).run.roofline_target_pct == 60.0  # the new name wins
    assert load_settings(None, env={}).run.roofline_target_pct == Settings().run.roofline_target_pct == 90.0
    (ws / "autokernel.toml").write_text("[run]\nroofline_target = 90\n")  # never valid: it was a fraction
    with pytest.raises(ConfigError, match="was a fraction of roofline"):
        load_settings(ws, env={})
    (ws / "autokernel.toml").write_text("[run]\nroofline_target_pct = 0.9\n")
    with pytest.raises(ConfigError, match="looks like a fraction; it is a percent: write 90"):
        load_settings(ws, env={})
    (ws / "autokernel.toml").write_text("[run]\nroofline_target_pct = 150\n")
    with pytest.raises(ConfigError, match="from 0 to 100"):
        load_settings(ws, env={})
    (ws / "autokernel.toml").write_text("[run]\nroofline_target_pct = 0\n")
    assert load_settings(ws, env={}).run.roofline_target_pct == 0.0  # 0: never stop on the roofline


def test_a_harness_that_still_says_pct_roofline_is_read_in_todays_names(tmp_path):
    """A plugin harness (AUTOKERNEL_HARNESS_FACTORY) written against the old names returns dicts."""
    from autokernel_tui.engine.loop import Engine
    from autokernel_tui.ledger import schema
    from autokernel_tui.ledger.events import read_events
    from autokernel_tui.ledger.workspace import init_workspace
    from tests.fakes.gpu_run import H200Harness, ScriptedTuner

    class OldHarness(H200Harness):
        def evaluate(self, *args, **kwargs):
            return _old_report(super().evaluate(*args, **kwargs).to_dict())

    ws = init_workspace(tmp_path / "ws", tasks=["rmsnorm"])
    s = settings()
    s.run.max_experiments = 1
    engine = Engine(ws, s, tag="old", agent=ScriptedTuner(), harness=OldHarness())
    assert engine.run() == "experiment budget reached (1)"
    engine.close()
    events = read_events(ws / ".autokernel" / "runs" / "old" / "events.jsonl")
    assert [p for e in events for p in schema.check_event(e)] == []
    verdict = next(e for e in events if e["type"] == "verdict")
    assert verdict["report"]["summary"]["roofline_pct"] == pytest.approx(32.84)
    assert read_rows(ws / ".autokernel" / "runs" / "old" / "results.tsv", typed=True)[0]["roofline_pct"] == \
        pytest.approx(32.84)
