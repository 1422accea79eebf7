"""Which kernel next (Amdahl, plateau, own clock, roofline, revisit) and who decides (the gate)."""

import pytest

from autokernel_tui.engine.gate import decide
from autokernel_tui.engine.loop import Engine
from autokernel_tui.engine.orchestrator import EXHAUSTED, PLATEAU, Orchestrator
from autokernel_tui.errors import ConfigError
from autokernel_tui.harness.report import Comparison, Report
from autokernel_tui.ledger.events import read_events
from autokernel_tui.ledger.results import read_rows
from enginefakes import FakeHarness, ScriptedAgent

PASS = Report(status="PASS")
FAIL = Report(status="FAIL", reason="max err 3e-1")


def cmp(speedup, low, faster=True, **kw):
    return Comparison(speedup=speedup, ci_low=low, ci_high=speedup * 1.05, faster=faster, n_samples=20,
                      method="test", **kw)


def test_gate_policies():
    assert decide("auto", FAIL, None, 1.05).action == "discard"
    assert "max err" in decide("manual", FAIL, None, 1.05).reason
    assert decide("manual", PASS, cmp(0.99, 0.95, faster=False), 1.05).action == "discard"  # never asked
    assert decide("manual", PASS, cmp(1.5, 1.4), 1.05).action == "ask"
    assert decide("auto", PASS, cmp(1.5, 1.4), 1.05).action == "keep"
    assert decide("threshold", PASS, cmp(1.5, 1.4), 1.2).action == "keep"
    assert decide("threshold", PASS, cmp(1.1, 1.02), 1.2).action == "ask"
    assert decide("auto", PASS, None, 1.05).action == "discard"
    refuted = cmp(0.99, 0.97, faster=False, screen={"speedup": 1.02, "ci_low": 1.011, "ci_high": 1.03},
                  reason="faster in the first comparison (1.020x [1.011, 1.030]) but not in the confirming one")
    verdict = decide("manual", PASS, refuted, 1.05)  # a refuted "faster" is never put to a human
    assert verdict.action == "discard" and verdict.reason.startswith("not confirmed: faster in the first")
    retaken = {"quads": 4, "retaken": "the judge's clock saw 113.8 us per call more"}
    kept = decide("auto", PASS, cmp(1.5, 1.4, cross_check=retaken), 1.05)  # the row says the timing was retaken
    assert kept.action == "keep" and kept.reason.endswith("(timing retaken once: the judge's clock objected to "
                                                          "the first take)")
    assert "retaken" in decide("auto", PASS, cmp(0.99, 0.95, faster=False, cross_check=retaken), 1.05).reason
    assert "retaken" not in decide("auto", PASS, cmp(1.5, 1.4, cross_check={"quads": 4}), 1.05).reason


def test_amdahl_picks_the_biggest_remaining_share_and_moves_on_after_a_plateau():
    o = Orchestrator({"matmul": 0.6, "softmax": 0.3, "rmsnorm": 0.1}, plateau=2)
    assert o.pick()[0] == "matmul"
    o.observe("matmul", True, 4.0, None, 1.0)  # matmul now takes 0.15 of the model: softmax is worth more
    assert o.pick()[0] == "matmul"  # stays while it improves ...
    o.observe("matmul", False, None, None, 1.0)
    o.observe("matmul", False, None, None, 1.0)
    assert o.tasks["matmul"].status == PLATEAU
    task, why = o.pick()  # ... and moves on after 2 without a keep, to the best remaining gain
    assert task == "softmax" and "30.0% of model time" in why
    for _ in range(2):
        o.observe("softmax", False, None, None, 1.0)
    assert o.pick()[0] == "rmsnorm"  # the only one not plateaued
    for _ in range(2):
        o.observe("rmsnorm", False, None, None, 1.0)
    task, why = o.pick()  # everything plateaued: revisit rather than stop
    assert task == "softmax" and "revisit 1" in why
    assert all(t.status == "active" for t in o.tasks.values())


def test_kernel_clock_roofline_and_exhaustion():
    o = Orchestrator({"a": None, "b": None}, plateau=0, kernel_budget_s=10, roofline_target_pct=90.0)
    assert o.tasks["a"].share == o.tasks["b"].share == 0.5  # no profile: equal shares
    assert o.pick()[0] == "a"
    o.observe("a", False, None, None, 6.0)
    assert o.pick()[0] == "a"
    o.observe("a", False, None, None, 6.0)  # its own clock: 12 s > 10 s
    assert o.pick()[0] == "b"
    o.observe("b", True, 1.2, 95.0, 1.0)  # reached 95% of roofline (percent, as the harness says): done for good
    assert o.pick()[0] == "a"  # a is revisited (budget), b is not
    o.mark("a", EXHAUSTED)
    assert o.pick() == (None, "every task reached its roofline target or has nothing left to try")
    with pytest.raises(ValueError):
        Orchestrator({})


def test_engine_switches_kernels_on_plateau_and_skip(tmp_path, settings):
    from autokernel_tui.ledger.workspace import init_workspace

    ws = init_workspace(tmp_path / "ws", tasks=["rmsnorm", "softmax"])
    settings.run.plateau_experiments = 2
    settings.run.max_experiments = 5
    engine = Engine(ws, settings, tag="t", agent=ScriptedAgent([120]), harness=FakeHarness())
    assert engine.run() == "experiment budget reached (5)"
    engine.close()
    rows = read_rows(ws / ".autokernel/runs/t/results.tsv")
    assert [r["task"] for r in rows] == ["rmsnorm", "rmsnorm", "softmax", "softmax", "rmsnorm"]
    selected = [e for e in read_events(ws / ".autokernel/runs/t/events.jsonl") if e["type"] == "task_selected"]
    assert [e["task"] for e in selected] == ["rmsnorm", "softmax", "rmsnorm"]
    assert "revisit" in selected[-1]["reason"]


def test_settings_policy_is_checked(workspace, settings):
    settings.run.policy = "yolo"
    with pytest.raises(ConfigError):
        Engine(workspace, settings, tag="t", agent=ScriptedAgent([1]), harness=FakeHarness())
