"""Progress on long CLI work: verify, profile and bench say what runs and how long is left, as
plain periodic lines when stderr is not a terminal (a log, CI) and a rich bar when it is."""

from __future__ import annotations

import io
import re
import time
from types import SimpleNamespace

import pytest

from autokernel_tui import progress as pg
from autokernel_tui.cli import main as cli_main


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_estimate_from_measured_unit_costs():
    est = pg.Estimate()
    est.plan("orig", 4)
    est.plan("patched", 4)
    est.did("orig", 1.0)
    assert est.left_s() is None  # a patched forward pass has not been measured yet
    est.did("patched", 3.0)
    assert est.left_s() == pytest.approx(3 * 1.0 + 3 * 3.0)
    est.did("patched", 5.0)
    assert est.left_s() == pytest.approx(3 * 1.0 + 2 * 4.0)


def test_plain_lines_on_stage_changes_and_a_heartbeat_while_a_stage_runs():
    out = io.StringIO()
    with pg.Progress("verify llama", stream=out, every_s=0.2, quiet_s=0.0) as p:
        p("loading the model")
        time.sleep(0.05)
        p("timing", 1, 4)
        p("timing", 2, 4, left_s=90.0)  # the same stage: no new line, the estimate is kept
        time.sleep(1.5)  # nothing arrives for a while: the heartbeat still says where it is
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("verify llama: loading the model, 0:00 elapsed")
    assert lines[1].startswith("verify llama: timing, 1/4, 0:00 elapsed")
    beats = [ln for ln in lines if ln.startswith("verify llama: timing, 2/4")]
    assert beats and all("~1:30 left" in ln for ln in beats)
    assert re.match(r"verify llama: done after 0:0\d$", lines[-1])


def test_a_terminal_gets_a_rich_bar_not_lines():
    out = Tty()
    with pg.Progress("profile gpt2", stream=out) as p:
        p("profiled steps", 1, 5, left_s=8.0)
        time.sleep(0.3)
    text = out.getvalue()
    assert "profile gpt2: done after" in text
    assert "profile gpt2: profiled steps, 1/5" not in text  # the plain line is for logs only


def test_durations_are_remembered_per_task_and_device(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOKERNEL_CACHE_DIR", str(tmp_path))
    assert pg.recall("bench:rmsnorm:H200:full") is None
    pg.remember("bench:rmsnorm:H200:full", 42.0)
    assert pg.recall("bench:rmsnorm:H200:full") == 42.0


class SlowHarness:
    """The harness's public calls, slow (a first evaluation with its baselines)."""

    def device_info(self):
        time.sleep(0.3)
        return {"name": "NVIDIA H200", "timing_meaningful": True}

    def evaluate(self, task_dir, quick=False):
        time.sleep(1.2)
        return SimpleNamespace(status="PASS")


def test_bench_progress_from_outside_the_harness(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOKERNEL_CACHE_DIR", str(tmp_path))
    task = tmp_path / "rmsnorm"
    task.mkdir()
    out = io.StringIO()
    assert pg.evaluate_with_progress(SlowHarness(), task, stream=out, tty=False, every_s=0.4).status == "PASS"
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("bench rmsnorm: starting the harness judge")
    assert any(ln.startswith("bench rmsnorm: checking and timing on NVIDIA H200") for ln in lines)
    assert sum("checking and timing" in ln for ln in lines) >= 2  # heartbeats while the judge works
    assert not any("left" in ln for ln in lines)  # the first time, nothing to estimate from
    # The second time the estimate is the first evaluation's duration.
    out = io.StringIO()
    pg.evaluate_with_progress(SlowHarness(), task, stream=out, tty=False, every_s=0.4)
    assert any("left (as last time)" in ln for ln in out.getvalue().splitlines())


def test_profile_command_reports_its_steps(tmp_path, capsys):
    assert cli_main(["profile", "bert-tiny", "--device", "cpu", "--steps", "2"]) == 0
    err = capsys.readouterr().err
    assert "profile bert-tiny: loading bert-tiny" in err
    assert "profile bert-tiny: warm-up" in err and "profile bert-tiny: profiled steps, 1/2" in err
    assert re.search(r"profile bert-tiny: profiled steps, 1/2, \d+:\d\d elapsed, ~\d+:\d\d left", err)
    assert "profile bert-tiny: done after" in err


def test_verify_reports_stages_and_a_shrinking_estimate():
    from autokernel_tui.profiling.verify import kernel_paths, verify
    from autokernel_tui.tasks.spec import starters_dir

    calls = []
    r = verify("llama-tiny", kernel_paths(starters_dir(), ["rmsnorm"]), dtype="float32", device="cpu", iters=2,
               warmup=1, profile_steps=1, progress=lambda *a: calls.append(a))
    assert r["correct"]
    stages = [c[0] for c in calls]
    for expected in ("loading the model", "checking outputs: the original model",
                     "checking outputs: the model with the kernels",
                     "timing the model without and with the kernels (forward passes)",
                     "profiling the original model: profiled steps", "profiling the model with the kernels: warm-up"):
        assert expected in stages
    timing = [c for c in calls if c[0].startswith("timing")]
    assert [c[1] for c in timing] == list(range(7)) and {c[2] for c in timing} == {6}  # 2 x (1 + 2) passes
    lefts = [c[3] for c in calls if len(c) > 3 and c[3] is not None]
    assert lefts and lefts[-1] == pytest.approx(0.0, abs=1e-9)  # every planned forward pass ran
    assert all(len(c) < 4 or c[3] is None for c in calls[:3])  # no estimate before one pass of each model was timed


def test_a_command_that_fails_at_once_prints_no_progress_around_its_error():
    out = io.StringIO()
    with pytest.raises(RuntimeError):
        with pg.Progress("profile bad.py", stream=out, tty=False, quiet_s=2.0) as p:
            p("loading bad.py")
            raise RuntimeError("the model file is broken")
    assert out.getvalue() == ""
    # The same failure after the quiet start keeps its progress lines and says it stopped.
    out = io.StringIO()
    with pytest.raises(RuntimeError):
        with pg.Progress("profile bad.py", stream=out, tty=False, quiet_s=0.2) as p:
            p("loading bad.py")
            time.sleep(1.3)
            raise RuntimeError("the model file is broken")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("profile bad.py: loading bad.py, 0:00 elapsed")
    assert re.match(r"profile bad.py: stopped after 0:0\d$", lines[-1])
