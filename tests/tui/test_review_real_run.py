"""Review of a run the engine really made (issue 25): a kept experiment's report view shows its
checks passed, its status, its shapes and its comparison, read from the verdict file the engine
wrote (``reports/exp-N.json`` holds ``{"report": ..., "comparison": ...}``, not a bare report).

The run is real: the engine in this process, the real harness (isolated worker, Triton
interpreter on the CPU, quick mode) and the offline tuner, one experiment, kept.
"""

from __future__ import annotations

import json

import pytest

from autokernel_tui.tui.app import REVIEW, AutokernelApp
from autokernel_tui.tui.screens.review_screen import ReviewList, ReviewScreen
from autokernel_tui.tui import formatting as fmt
from tests.tui.fakes import screen_text

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture
def real_run(tmp_path):
    from autokernel_tui.config import Settings
    from autokernel_tui.engine.loop import Engine
    from autokernel_tui.harness.runner import Harness
    from autokernel_tui.ledger.workspace import init_workspace

    ws = init_workspace(tmp_path / "ws", tasks=["rmsnorm"])
    s = Settings()
    s.run.policy = "auto"
    s.run.max_experiments = 1
    s.agent.kind = "tuner"
    s.harness.quick = True
    s.harness.confirm_keeps = False
    # Interpreter timings are noise: the real harness with a keep margin no setting may ask for (below
    # 1 a slower candidate would count as faster), so every passing candidate is kept, once.
    harness = Harness(timeout_s=s.harness.timeout_s, device="auto", keep_margin=0.0001, confirm_keeps=False)
    engine = Engine(ws, s, tag="real", env={"TRITON_INTERPRET": "1"}, harness=harness)
    try:
        reason = engine.run()
    finally:
        engine.close()
    assert reason == "experiment budget reached (1)", reason
    saved = json.loads((ws / ".autokernel/runs/real/reports/exp-1.json").read_text())
    assert set(saved) == {"report", "comparison"}  # what the engine writes; review must take it apart
    return ws, saved


async def test_review_of_a_kept_experiment_shows_its_checks_shapes_and_comparison(real_run):
    ws, saved = real_run
    report, comparison = saved["report"], saved["comparison"]
    assert report["status"] == "PASS" and comparison

    from autokernel_tui.ledger.history import load_runs

    (run,) = load_runs(ws)
    assert run.experiments[0].status == "keep"
    assert run.report(1) == report and run.comparison(1) == comparison  # the read side hands them apart

    app = AutokernelApp(ws, mode=REVIEW)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause(0.1)
        assert isinstance(app.screen, ReviewScreen) and app.screen.query_one(ReviewList).row_count == 1
        await pilot.press("t")  # diff -> report
        await pilot.pause(0.1)
        assert app.screen.view == "report"
        text = screen_text(app)
    detail = text.split("exp 1 · report")[1]
    assert "exp 1 · rmsnorm  PASS" in detail
    for stage in ("static", "smoke", "shapes", "stability", "determinism", "timing"):
        assert f"✓ {stage}" in detail, detail
    assert "✗" not in detail, detail
    shapes = [s["shape"] for s in report["shapes"]]
    assert shapes and all(name in detail for name in shapes), detail
    assert f"vs incumbent {fmt.speedup(comparison['speedup'])}" in detail
    assert f"CI {fmt.interval(comparison['ci_low'], comparison['ci_high'])}" in detail
    assert f"{comparison['n_samples']} samples" in detail
