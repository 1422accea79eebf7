"""compare() decides keep/discard; `autokernel-tui bench` prints a verdict and exits 0 only when correct."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from autokernel_tui.engine.gate import decide
from autokernel_tui.harness.report import Comparison, Report
from autokernel_tui.harness.runner import Harness

from .conftest import GOOD, PREFIX, RMSNORM

# The same kernel doing its work four times: an obviously slower incumbent.
SLOW = PREFIX + '''
def kernel_fn(x, weight, eps):
    y = torch.empty_like(x)
    for _ in range(4):
        launch(x, weight, eps, y)
    return y
'''


def test_compare_finds_a_clear_speedup_and_not_a_fake_one(harness, tiny_task):
    cmp = harness.compare(tiny_task, GOOD, SLOW, quick=True)
    assert cmp.status == "PASS", cmp.reason
    # SLOW launches four times: 4x. Interpreter wall clocks under load (pytest -n 2) have read it as
    # 2.2x [1.50, 4.69]: the bars say "clearly faster", not how much.
    assert cmp.speedup > 1.5 and cmp.ci_low > 1.1 and cmp.faster
    assert cmp.ci_low <= cmp.speedup <= cmp.ci_high and cmp.n_samples > 0
    assert "interpreter" in cmp.method and len(cmp.per_shape) == 2
    back = harness.compare(tiny_task, SLOW, GOOD, quick=True)
    assert back.speedup < 0.8 and not back.faster


def test_a_faster_verdict_is_confirmed_with_the_roles_swapped(harness, tiny_task):
    cmp = harness.compare(tiny_task, GOOD, SLOW, quick=True)
    assert cmp.screen is not None and cmp.screen["ci_low"] > 1.1  # the first comparison, kept for the record
    assert "roles swapped" in cmp.method and cmp.speedup > 1.5  # the reported numbers are the second's
    single = harness.compare(tiny_task, GOOD, SLOW, quick=True, confirm=False)
    assert single.faster and single.screen is None and "swapped" not in single.method
    assert harness.compare(tiny_task, SLOW, GOOD, quick=True).screen is None  # not faster: no second run


class _Scripted(Harness):
    """The real compare() over scripted single comparisons: what it does with a refutation."""

    def __init__(self, results):
        super().__init__(device="cpu")
        self.results, self.calls = list(results), []

    def _compare_once(self, task_dir, candidate_source, incumbent_source, quick, swapped):
        self.calls.append(swapped)
        return self.results.pop(0)


PASS_REPORT = Report(status="PASS", stage="timing", task="rmsnorm")


def _one(speedup, lo, hi, status="PASS"):
    return Comparison(speedup, lo, hi, lo > 1.01 and status == "PASS", 40, "m", status=status)


def test_a_refuted_faster_is_not_faster_and_says_why(tiny_task):
    with _Scripted([_one(1.017, 1.011, 1.022), _one(0.984, 0.978, 0.992)]) as h:
        cmp = h.compare(tiny_task, GOOD, GOOD)
    assert h.calls == [False, True] and not cmp.faster and cmp.speedup == 0.984
    assert cmp.screen == {"speedup": 1.017, "ci_low": 1.011, "ci_high": 1.022, "faster": True}
    assert "1.017x [1.011, 1.022]" in cmp.reason and "0.984x [0.978, 0.992]" in cmp.reason
    with _Scripted([_one(1.017, 1.011, 1.022), _one(1.0, 0.0, 0.0, status="CRASH")]) as h:
        assert not h.compare(tiny_task, GOOD, GOOD).faster  # a confirmation that crashed confirms nothing
    with _Scripted([_one(1.017, 1.011, 1.022)]) as h:
        h.confirm_keeps = False
        assert h.compare(tiny_task, GOOD, GOOD).faster and h.calls == [False]


def test_an_undecided_first_comparison_is_settled_by_the_confirming_one(tiny_task):
    # Run 22's miss: a planted 3.3% change read 1.032x [0.996, 1.038], its median past the margin, its
    # interval's low end not. The roles-swapped comparison decides, either way, and says so when it refutes.
    with _Scripted([_one(1.032, 0.996, 1.038), _one(1.039, 1.035, 1.044)]) as h:
        cmp = h.compare(tiny_task, GOOD, GOOD)
    assert h.calls == [False, True] and cmp.faster and cmp.speedup == 1.039
    assert cmp.screen == {"speedup": 1.032, "ci_low": 0.996, "ci_high": 1.038, "faster": False}
    with _Scripted([_one(1.032, 0.996, 1.038), _one(1.004, 0.998, 1.009)]) as h:
        cmp = h.compare(tiny_task, GOOD, GOOD)
    assert not cmp.faster and cmp.reason.startswith("undecided in the first comparison (1.032x [0.996, 1.038])")
    assert decide("manual", PASS_REPORT, cmp, 1.05).reason.startswith("not confirmed: undecided")
    # A median at or below the margin is no screen passed: no second comparison, whatever its interval.
    for first in (_one(1.010, 0.990, 1.030), _one(1.003, 0.999, 1.007), _one(1.5, 1.4, 1.6, status="FAIL")):
        with _Scripted([first]) as h:
            assert not h.compare(tiny_task, GOOD, GOOD).faster and h.calls == [False]
    with _Scripted([_one(1.032, 0.996, 1.038)]) as h:
        h.confirm_keeps = False  # no confirmation: an undecided comparison is simply not faster
        assert not h.compare(tiny_task, GOOD, GOOD).faster and h.calls == [False]


def test_compare_refuses_a_broken_candidate(harness, tiny_task):
    cmp = harness.compare(tiny_task, GOOD.replace("eps, torch.empty_like", "1e9, torch.empty_like"), GOOD,
                          quick=True)
    assert cmp.status == "FAIL" and not cmp.faster


def test_report_and_comparison_round_trip_through_json(harness, tiny_task):
    report = harness.evaluate(tiny_task, kernel_source=GOOD, quick=True)
    again = Report.from_dict(json.loads(json.dumps(report.to_dict())))
    assert again == report
    cmp = Comparison(1.1, 1.02, 1.2, True, 20, "m")
    assert Comparison.from_dict(cmp.to_dict()) == cmp


def _bench(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "autokernel_tui", "bench", *args, "--device", "cpu"],
                          capture_output=True, text=True, cwd=cwd, timeout=300)


def test_bench_cli_pass_writes_json_and_fail_is_one_line(tiny_task, tmp_path):
    task = tmp_path / "t"
    import shutil
    shutil.copytree(tiny_task, task)
    out = _bench(str(task), "--json", str(tmp_path / "r.json"), "--quick")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("rmsnorm  PASS") and "timings not meaningful" in out.stdout
    assert "JIT compile" in out.stdout and "summary" in out.stdout
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "PASS"

    for broken, words in [("def kernel_fn(x, weight, eps)\n    return x\n", "syntax error"),
                          (GOOD.replace("def kernel_fn", "def other_fn"), "no function 'kernel_fn'"),
                          (GOOD.replace("return launch(x, weight, eps, torch.empty_like(x))",
                                        "return launch(x, weight, eps, torch.empty_like(x))[:1]"), "has shape")]:
        (task / "kernel.py").write_text(broken)
        out = _bench(str(task), "--quick")
        assert out.returncode == 1
        assert words in out.stdout.splitlines()[0] and "Traceback" not in out.stdout + out.stderr


def test_bench_cli_on_a_missing_task_is_a_one_line_error(tmp_path):
    out = _bench(str(tmp_path / "nope"))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "not a task folder" in out.stderr


def _shipped_starters() -> list[str]:
    # Every forward starter, and one backward one: the backward path through the harness is
    # test_backward's; each *_bwd starter's gradients are checked by tests/kernels/test_starters.py.
    from autokernel_tui.tasks.spec import list_starters
    return [n for n in list_starters() if not n.endswith("_bwd")] + ["rmsnorm_bwd"]


@pytest.mark.parametrize("name", _shipped_starters())  # one case each: the two CI workers share them
def test_every_shipped_starter_passes(harness, name):
    from autokernel_tui.tasks.spec import starters_dir
    report = harness.evaluate(starters_dir() / name, quick=True)
    assert report.status == "PASS", f"{name}: {report.reason}"
    assert (starters_dir() / name / "kernel.py").is_file()


def test_speed_benchmark_runs_end_to_end_in_small_mode(harness, tiny_task):
    import importlib.util
    path = RMSNORM.parents[1] / "benchmarks" / "harness_speed.py"
    spec = importlib.util.spec_from_file_location("harness_speed", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    seen = []  # what a run cut short would have saved: one snapshot after each comparison
    checkpoint = lambda r: seen.append((r["aa"]["n"], [v["n"] for v in r["variants"]]))  # noqa: E731
    harness.keep_samples = True  # as harness_speed.py's own Harness: raw times for ci_methods.py
    try:
        result = bench.measure_task(harness, tiny_task, runs=1, ab_runs=1, detect_runs=1, quick=True,
                                    log=lambda *a: None, checkpoint=checkpoint)
    finally:
        harness.keep_samples = False
    (aa_samples,) = result["aa"]["samples"]
    rows = aa_samples[0]["rows"]
    assert aa_samples[0]["swapped"] is False and rows and all(
        len(r["candidate_us"]) == len(r["incumbent_us"]) > 0 and r["batch"] >= 1 for r in rows)
    from benchmarks import ci_methods
    analysed = ci_methods.analyse({"results": [result]})
    assert [r["what"] for r in analysed] == ["A/A", result["variants"][0]["label"]]
    assert set(analysed[0]["tally"]) == set(ci_methods.METHODS)
    assert all(t["n"] == 1 and t["kept"] + t["not kept"] + t["unconfirmed"] == 1 for t in analysed[0]["tally"].values())
    assert "| rmsnorm | A/A | paired |" in ci_methods.table(analysed)
    assert seen == [(1, []), (1, [1])]
    assert result["first_eval"]["status"] == "PASS"
    assert result["aa"]["statuses"] == ["PASS"] and [v["statuses"] for v in result["variants"]] == [["PASS"]]
    assert result["eval_wall_s"]["n"] == 1
    text = bench.table([result], "CPU")
    assert "rmsnorm" in text and "A/A false keeps" in text


def test_as_called_measure_compares_the_time_an_eager_model_pays(tiny_task):
    """harness.measure = "as_called": the speedup is of back-to-back calls (host launch cost included);
    the device batches and their checks still run first."""
    with Harness(timeout_s=120, device="cpu", measure="as_called") as h:
        cmp = h.compare(tiny_task, GOOD, SLOW, quick=True, confirm=False)
    assert cmp.status == "PASS", cmp.reason
    assert cmp.faster and cmp.speedup > 1.5  # 4x the launches (interpreter clocks under load read less)
    assert "as-called times" in cmp.method
    try:
        Harness(device="cpu", measure="graph")
    except ValueError as e:
        assert "device, as_called" in str(e)
    else:
        raise AssertionError("an unknown measure must be refused")
