"""Pure-Python pieces: the static rules, roofline ceilings, statistics."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from autokernel_tui.harness import roofline, stats
from autokernel_tui.harness.static_check import check_source
from autokernel_tui.tasks.spec import list_starters, starters_dir

from .conftest import GOOD


def _rules(extra: str) -> list[str]:
    return [v.rule for v in check_source(GOOD + "\n" + extra + "\n")]


def test_every_starter_kernel_obeys_the_static_rules():
    for name in list_starters():
        assert check_source((starters_dir() / name / "kernel.py").read_text()) == [], name


@pytest.mark.parametrize("extra, rule", [
    ("import os\nos.system('true')", "imports"),
    ("import os\nA = os.environ.get('HOME')", "imports"),
    ("import sys", "imports"),
    ("import ctypes", "imports"),
    ("import gc", "imports"),
    ("import importlib", "imports"),
    ("import inspect", "imports"),
    ("import builtins", "imports"),
    ("G = globals()", "builtins"),
    ("E = eval", "builtins"),
    ("D = torch.Tensor.__dict__", "private-attribute"),
    ("global CACHE", "state"),
    ("def f():\n    with torch.no_grad():\n        pass", "context-manager"),
    ("S = torch.cuda.Stream", "forbidden-attribute"),
    ("S = torch.softmax", "torch-compute"),
    ("S = torch.ops.aten.mul", "torch-compute"),
    ("S = torch.compile", "torch-compute"),
    ("from triton.runtime import driver", "harness-tamper"),
    ("A = [].tolist", "forbidden-attribute"),
])
def test_static_rules(extra, rule):
    assert rule in _rules(extra)


def test_interpreter_detection_is_allowed_and_syntax_errors_and_missing_kernel_fn_are_reported():
    assert _rules("import os\nINTERP = os.environ.get('TRITON_INTERPRET') == '1'") == []
    bad = check_source("def kernel_fn(:\n")
    assert bad[0].rule == "syntax" and "line 1" in str(bad[0])
    assert check_source("import torch\n")[0].rule == "kernel_fn"


def test_spec_table_covers_the_named_gpus():
    names = {"NVIDIA A100-SXM4-80GB": "A100", "NVIDIA H100 80GB HBM3": "H100 SXM", "NVIDIA H100 PCIe": "H100 PCIe",
             "NVIDIA H200": "H200", "NVIDIA B200": "B200", "NVIDIA L40S": "L40S",
             "NVIDIA GeForce RTX 4090": "RTX 4090", "NVIDIA GeForce RTX 5090": "RTX 5090",
             "AMD Instinct MI300X": "MI300X"}
    for device, spec in names.items():
        found = roofline.lookup_spec(device)
        assert found is not None and found.name == spec, device
        assert found.bandwidth_gbps > 0 and found.tflops["bfloat16"] > found.tflops["float32"]
    assert roofline.lookup_spec("Some Future GPU") is None


def test_measured_ceilings_set_the_percentage_and_spec_the_reject_floor():
    c = roofline.ceilings_for("NVIDIA H200", {"bandwidth_gbps": 4230.0, "tflops": {"bfloat16": 730.0}})
    assert c.bandwidth_gbps == 4230.0 and c.reject_bandwidth_gbps == 4800.0
    pct_floor, reject_floor = roofline.roofline_floor(c, 4230e6, 0, "bfloat16")  # 4.23 GB
    assert pct_floor == pytest.approx(1000.0) and reject_floor == pytest.approx(4230e6 / 4800e3)
    assert roofline.pct_of_roofline(pct_floor, 500.0) == 100.0  # never above 100
    assert roofline.pct_of_roofline(pct_floor, 2000.0) == pytest.approx(50.0)
    compute = roofline.roofline_floor(c, 1.0, 2 * 4096**3, "float32")
    assert compute[0] > compute[1]  # fp32 percentage at the fp32 rate, reject floor at TF32's


def test_measured_ceilings_round_trip_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOKERNEL_CACHE_DIR", str(tmp_path))
    roofline.save_measured("NVIDIA H200", "2.11", {"bandwidth_gbps": 4230.0})
    assert roofline.load_measured("NVIDIA H200", "2.11") == {"bandwidth_gbps": 4230.0}
    assert roofline.load_measured("NVIDIA H100", "2.11") is None


def test_percentiles_geomean_and_bootstrap():
    assert stats.median([3, 1, 2]) == 2 and stats.percentile([0, 10], 20) == 2
    assert stats.geomean([1, 4]) == pytest.approx(2.0)
    rng = random.Random(1)
    same = [[rng.gauss(100, 2) for _ in range(30)] for _ in range(4)]
    pt, lo, hi = stats.bootstrap_speedup([(same[0], same[1]), (same[2], same[3])])
    assert lo < 1.0 < hi and lo < pt < hi
    slower = [[x * 1.2 for x in s] for s in same]
    pt, lo, hi = stats.bootstrap_speedup([(same[0], slower[1]), (same[2], slower[3])])
    assert lo > 1.1 and pt == pytest.approx(1.2, rel=0.05)


def test_the_paired_bootstrap_cancels_what_both_sides_of_a_rep_shared():
    """benchmarks/ci_methods.py's candidate method: rep j of both sides ran on the same inputs in one
    batch pair. Where each pair shared a slow-down (the card's clock then), resampling pairs keeps the
    interval about the 3% change; resampling each side apart counts the shared part twice as noise."""
    rng = random.Random(2)
    shapes = []
    for _ in range(5):
        shared = [rng.choice([1.0, 1.0, 1.15, 1.3]) for _ in range(24)]  # per-pair conditions, both sides
        cand = [100 * f * rng.gauss(1, 0.003) for f in shared]
        inc = [103 * f * rng.gauss(1, 0.003) for f in shared]
        shapes.append((cand, inc))
    pt, lo, hi = stats.paired_bootstrap_speedup(shapes, [None] * 5)
    pt_i, lo_i, hi_i = stats.bootstrap_speedup(shapes)
    assert pt == pt_i  # the same point estimate: geomean of median ratios
    assert 1.01 < lo < 1.03 < hi < 1.05, (lo, hi)
    assert hi_i - lo_i > 2 * (hi - lo), ((lo_i, hi_i), (lo, hi))
    # within batches of 6 pairs, every resample keeps each batch's weight: an interval all the same
    pt_b, lo_b, hi_b = stats.paired_bootstrap_speedup(shapes, [6] * 5)
    assert pt_b == pt and lo_b <= pt <= hi_b and 1.0 < lo_b
    # independent noise only: the two methods agree to within the resampling's own noise
    noisy = [([rng.gauss(100, 3) for _ in range(30)], [rng.gauss(100, 3) for _ in range(30)]) for _ in range(4)]
    _, lo_p, hi_p = stats.paired_bootstrap_speedup(noisy, [None] * 4)
    _, lo_n, hi_n = stats.bootstrap_speedup(noisy)
    assert lo_p < 1.0 < hi_p and abs((hi_p - lo_p) - (hi_n - lo_n)) < 0.5 * (hi_n - lo_n)
    with pytest.raises(ValueError, match="as many"):
        stats.paired_bootstrap_speedup([([1.0, 2.0], [1.0])], [None])


def test_compare_needs_elementwise_and_relative_l2_agreement():
    import torch
    from autokernel_tui.harness.worker.correctness import compare
    ref = torch.full((100,), 1e-6, dtype=torch.float64)
    zeros = compare(torch.zeros(100), ref, atol=1e-3, rtol=1e-3, max_rel_l2=1e-3)
    assert not zeros.ok and "rel_l2" in zeros.detail  # within atol everywhere, still wrong
    assert compare(ref.float(), ref, 1e-3, 1e-3, 1e-3).ok
    nan = compare(torch.tensor([float("nan"), 1.0]), torch.tensor([1.0, 1.0]), 1e-3, 1e-3, 1e-3)
    assert not nan.ok and nan.max_abs_err == float("inf")
    inf_ref = torch.tensor([float("inf"), 1.0])
    assert compare(inf_ref.clone(), inf_ref, 1e-3, 1e-3, 1e-3).ok
    assert not compare(torch.tensor([1.0, 1.0]), inf_ref, 1e-3, 1e-3, 1e-3).ok


def test_a_check_in_chunks_reads_what_one_whole_check_reads(monkeypatch):
    # KernelBench's 6.4 GB outputs are checked a chunk at a time: the verdict, the errors and the reason
    # must not depend on where the chunks fall (specials, a NaN, the fp16 rounding floor in other chunks).
    import torch
    from autokernel_tui.harness.worker import correctness

    g = torch.Generator().manual_seed(1)
    ref = torch.randn(1000, generator=g, dtype=torch.float64)
    ref[[3, 517]] = torch.tensor([float("inf"), float("nan")], dtype=torch.float64)
    near = ref.float() * (1 + 1e-4 * torch.randn(1000, generator=g))
    off = near.clone()
    off[[10, 700, 999]] += 1.0
    cases = [(near, 1e-3), (off, 1e-3), (ref.half(), 1e-6), (off.half(), 1e-2)]
    nan_out = near.clone()
    nan_out[800] = float("nan")
    cases.append((nan_out, 1e-3))
    whole = [correctness.compare(o, ref, 1e-3, 1e-3, m) for o, m in cases]
    monkeypatch.setattr(correctness, "CHECK_CHUNK", 7)
    chunked = [correctness.compare(o, ref, 1e-3, 1e-3, m) for o, m in cases]
    assert [e.ok for e in whole] == [True, False, True, False, False]
    for w, c in zip(whole, chunked):
        assert (w.ok, w.detail.split(",")[0]) == (c.ok, c.detail.split(",")[0])
        assert c.max_abs_err == pytest.approx(w.max_abs_err) and c.rel_l2_err == pytest.approx(w.rel_l2_err)


def test_a_16_bit_output_is_held_to_what_its_dtype_can_hold():
    # Cross-entropy gradients at 8192 x 50257 are ~1/(rows x vocab): fp16 rounds many to zero, so
    # even the reference rounded to fp16 misses max_rel_l2; the bound becomes twice that rounding's error.
    import torch
    from autokernel_tui.harness.worker.correctness import compare

    g = torch.Generator().manual_seed(0)
    ref = torch.rand(65536, generator=g, dtype=torch.float64) * 3e-8  # below fp16's subnormals...
    ref[::1024] = -1e-4 * (1 + torch.rand(64, generator=g, dtype=torch.float64))  # ...and the target entries
    best = ref.to(torch.float16)
    assert compare(best, ref, 1e-7, 2e-2, 1.0).rel_l2_err > 1.5e-3  # the rounding alone misses the bound
    assert compare(best, ref, atol=1e-7, rtol=2e-2, max_rel_l2=1.5e-3).ok
    worse = (ref * 1.2).to(torch.float16)  # 20% off: the rounding floor does not excuse it
    assert not compare(worse, ref, atol=1e-7, rtol=2e-2, max_rel_l2=1.5e-3).ok
    # In fp32 the same output is held to max_rel_l2 as given.
    assert not compare(best.float(), ref, atol=1e-7, rtol=2e-2, max_rel_l2=1.5e-3).ok


def test_threads_torch_or_the_harness_start_are_not_the_candidates():
    # Inductor starts compile-worker threads while a baseline is prepared between candidate
    # calls; only threads started with candidate code on the stack may reject a kernel.
    import threading

    from autokernel_tui.harness.worker import guards

    before = guards.live_threads()
    stop = threading.Event()
    threading.Thread(target=stop.wait, args=(5,), daemon=True).start()
    try:
        assert guards.live_threads() == before
    finally:
        stop.set()


def test_the_judges_clock_refuses_hidden_work_and_skipped_steps():
    from autokernel_tui.harness.worker.stages import excess_check, excess_verdict
    from autokernel_tui.harness.worker.errors import Verdict
    assert excess_verdict([0.4, -0.3, 0.1, 0.0], [20.0] * 4) is None  # noise: both sides did the same
    assert "hidden" in excess_verdict([150.0, 160.0, 170.0], [20.0] * 3)  # far more time than it reported
    assert "skipped" in excess_verdict([-160.0] * 3, [20.0] * 3)  # less: no spin, no flush
    assert excess_verdict([], []) is None

    def batch(who, outside_s, reported_us, config="c", reps=10):
        return {"config": config, "who": who, "reps": reps, "outside_s": outside_s, "reported_us": reported_us}
    # The candidate is 2x faster and the judge's clock agrees; whichever side runs first in a pair
    # pays 100 us more (a spin at low clocks): A B B A cancels it.
    honest = [batch(1, 0.0038, 200.0), batch(2, 0.0030, 400.0), batch(2, 0.0040, 400.0), batch(1, 0.0028, 200.0)]
    summary = excess_check(honest, candidate_pid=1)
    assert summary["quads"] == 1 and abs(summary["excess_diff_us"]) < 1.0
    # The candidate reports 2 us a call while the judge saw it take twice as long as the 200 us incumbent.
    forged = [batch(1, 0.0060, 20.0), batch(2, 0.0030, 2000.0), batch(2, 0.0032, 2000.0), batch(1, 0.0062, 20.0)]
    with pytest.raises(Verdict) as info:
        excess_check(forged, candidate_pid=1)
    assert info.value.status == "REJECTED" and "hidden" in info.value.reason



def test_an_accusation_by_the_judges_clock_is_retaken_once_before_it_stands():
    """A disturbed stretch of the host (run 25: an honest kernel's clock 113.8 us per call above its
    reported times, once in 8 comparisons) is retaken; a kernel that hides work again is REJECTED; other
    verdicts are not retaken."""
    from autokernel_tui.harness.worker.errors import Verdict
    from autokernel_tui.harness.worker.stages import retake_once

    def run(checks):
        timed = []

        def time_rows():
            timed.append(len(timed))
            return [{"take": len(timed)}]

        def check():
            outcome = checks[len(timed) - 1]
            if isinstance(outcome, Verdict):
                raise outcome
            return outcome
        return timed, time_rows, check

    accuse = Verdict("REJECTED", "timing", "the judge's clock saw 113.8 us per call more", retake=True)
    timed, time_rows, check = run([{"quads": 4}])
    assert retake_once(time_rows, check) == ([{"take": 1}], {"quads": 4}) and timed == [0]  # no retake

    timed, time_rows, check = run([accuse, {"quads": 4}])  # disturbed once: the retake's figures stand
    rows, cross = retake_once(time_rows, check)
    assert rows == [{"take": 2}] and cross["quads"] == 4 and "113.8" in cross["retaken"] and timed == [0, 1]

    again = Verdict("REJECTED", "timing", "the judge's clock saw 150.0 us per call more", retake=True)
    timed, time_rows, check = run([accuse, again])  # hidden work both times: the retake's verdict stands
    with pytest.raises(Verdict) as info:
        retake_once(time_rows, check)
    assert "150.0" in info.value.reason and timed == [0, 1]

    strays = Verdict("REJECTED", "timing", "the candidate left 1 process(es) running")
    timed, time_rows, check = run([strays])  # not a clock accusation: no retake
    with pytest.raises(Verdict):
        retake_once(time_rows, check)
    assert timed == [0]

def test_as_called_figures_keep_the_judges_clock_and_an_under_reported_one_is_refused():
    """In as-called mode the speedup comes from figures the contestant reports: each keeps the judge's clock
    around its request, and a candidate that reports far less than that clock saw is REJECTED."""
    import types

    from autokernel_tui.harness.worker.errors import Verdict
    from autokernel_tui.harness.worker.stages import Evaluation, excess_check

    class Contestant:  # a contestant's reply and the judge's clock around it, as ContestantProxy.request gives
        def __init__(self, pid, reported_us, outside_s):
            self.pid, self.reported_us, self.outside_s = pid, reported_us, outside_s

        def request(self, msg, stage):
            assert msg["op"] == "time_as_called"
            return {"as_called_us": self.reported_us}, self.outside_s

    ev = types.SimpleNamespace(as_called_outside=[])
    shape = types.SimpleNamespace(name="s")
    recipes = [{}] * 20
    honest_cand, inc = Contestant(1, 100.0, 0.0030), Contestant(2, 200.0, 0.0050)  # 1 ms of building either side
    for first, second in ((honest_cand, inc), (inc, honest_cand)) * 2:
        for c in (first, second):
            Evaluation.as_called_us(ev, c, shape, "float16", recipes)
    assert excess_check(ev.as_called_outside, 1, "as-called runs")["quads"] == 2
    ev.as_called_outside.clear()
    forged = Contestant(1, 5.0, 0.0080)  # says 5 us a call; the judge's clock saw 350 us a call beyond the build
    for first, second in ((forged, inc), (inc, forged)) * 2:
        for c in (first, second):
            Evaluation.as_called_us(ev, c, shape, "float16", recipes)
    with pytest.raises(Verdict) as info:
        excess_check(ev.as_called_outside, 1, "as-called runs")
    assert info.value.status == "REJECTED" and "as-called runs" in info.value.reason


def test_a_disturbed_shape_is_counted_but_never_averaged_into_a_speedup():
    from autokernel_tui.harness.report import ShapeResult
    from autokernel_tui.harness.worker.stages import summarize

    def row(name, med, base, disturbed=""):
        return ShapeResult(shape=name, dims={}, dtype="float16", passed=True, median_us=med, baseline_us=base,
                           speedup_vs_baseline=base / med, disturbed=disturbed)
    rows = [row("a", 10.0, 12.0), row("b", 20.0, 24.0), row("c", 40.0, 4.0, "p20-p80 spread 3.3x after a retake")]
    s = summarize(rows)
    assert s.disturbed_shapes == 1 and abs(s.speedup_vs_baseline - 1.2) < 1e-9  # c's 0.1x is not a regression
    assert s.worst_shape == "a float16" or s.worst_shape == "b float16"
    everything_disturbed = summarize([row("c", 40.0, 4.0, "wide")])
    assert everything_disturbed.disturbed_shapes == 1  # still summarized, and says so




def test_one_weight_vector_per_output_serves_a_whole_batch_and_still_tells_reps_apart():
    import torch
    from autokernel_tui.harness.worker import inputs

    g = torch.Generator().manual_seed(3)
    reps = [(torch.randn(257, generator=g), torch.randn(3, 5, generator=g)) for _ in range(4)]
    got = inputs.fingerprint_batch(reps, seed=99)
    for r, outs in enumerate(reps):  # output i of every rep under seed + i: what the judge checks against
        for i, o in enumerate(outs):
            ref_fp, bound = inputs.fingerprint_bound(o.double(), 99 + i, 1e-6)
            assert inputs.fingerprint_ok(got[r][i], ref_fp, bound)
    replayed = inputs.fingerprint_batch([reps[0], reps[0]], seed=99)  # rep 1 hands back rep 0's outputs
    ref_fp, bound = inputs.fingerprint_bound(reps[1][0].double(), 99, 1e-3)
    assert not inputs.fingerprint_ok(replayed[1][0], ref_fp, bound)


def test_a_large_outputs_weights_are_drawn_a_chunk_at_a_time_and_still_agree_with_the_judge(monkeypatch):
    import torch
    from autokernel_tui.harness.worker import inputs

    monkeypatch.setattr(inputs, "FINGERPRINT_CHUNK", 100)
    monkeypatch.setattr(inputs, "WEIGHT_CACHE_ELEMENTS", 250)
    g = torch.Generator().manual_seed(5)
    small, large = torch.randn(240, generator=g), torch.randn(1030, generator=g)
    drawn = []
    real_randn = torch.randn
    monkeypatch.setattr(torch, "randn", lambda *a, **k: drawn.append(a[0]) or real_randn(*a, **k))
    got = inputs.fingerprint_batch([(small, large), (small * 2, large * 2)], seed=7)
    # the small output's w (240 <= 250) is drawn once for both reps; the large one's again for each, in
    # chunks of 100 and a last of 30: never a whole 1030-element w
    assert drawn == [100, 100, 40] + [100] * 10 + [30] + [100] * 10 + [30]
    for r, scale in enumerate((1, 2)):
        for i, o in enumerate((small, large)):
            ref_fp, bound = inputs.fingerprint_bound(o * scale, 7 + i, 1e-6)
            assert inputs.fingerprint_ok(got[r][i], ref_fp, bound)
            assert abs(got[r][i] - ref_fp) <= 1e-6 * max(1.0, abs(ref_fp))
    ref_fp, bound = inputs.fingerprint_bound(large, 8, 1e-3)
    assert not inputs.fingerprint_ok(got[0][0], ref_fp, bound)  # another output's fingerprint is refused


def test_a_precise_reference_too_big_for_the_card_runs_on_the_host_and_falls_back_when_it_cannot():
    import types

    import torch
    from autokernel_tui.harness.worker.correctness import precise_reference

    seen = []

    def reference(x, w):
        seen.append((x.device.type, x.dtype))
        return x * w

    ref = types.SimpleNamespace(reference=reference)
    x, w = torch.randn(64), torch.randn(64)
    # over the budget: the float64 copies are made on the host ("meta" stands in for the CPU, the CPU
    # for the card, so the test needs no GPU), and the reference comes back from there
    (out,) = precise_reference(ref, (x, w), device_bytes=8 * 64, host="meta")
    assert seen[-1] == ("meta", torch.float64) and out.device.type == "meta"
    # within the budget: computed where the inputs are
    (out,) = precise_reference(ref, (x, w), device_bytes=8 * 128 + 1, host="meta")
    assert seen[-1] == ("cpu", torch.float64) and out.device.type == "cpu"

    def device_bound(x, w):
        if x.device.type != "cpu":
            raise RuntimeError("this reference only runs where its inputs were made")
        return x * w

    (out,) = precise_reference(types.SimpleNamespace(reference=device_bound), (x, w), device_bytes=0, host="meta")
    assert out.device.type == "cpu" and torch.allclose(out, (x * w).double())


def test_the_fingerprint_bound_passes_every_correct_output_and_refuses_a_stale_one_at_model_size():
    """At GPT-2's 8192 x 768 in bfloat16 the worst-case bound (||e|| ||w||) let a stale output, 28% off,
    pass 19 checks of 20; the statistical bound refuses most, and still passes outputs at the edge of the
    tolerance and outputs whose only error is the dtype's rounding (where that exceeds max_rel_l2)."""
    import torch
    from autokernel_tui.harness.worker import inputs

    g = torch.Generator().manual_seed(0)
    x = torch.randn(8192, 768, generator=g)
    rms = lambda t: t / t.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()  # noqa: E731
    ref = rms(x.double())
    stale = rms(x * (torch.rand(x.shape, generator=g) + 0.5)).bfloat16()  # the last rep's output, replayed
    noise = torch.randn(x.shape, generator=g, dtype=torch.float64)
    edge = (ref + noise * (0.99 * 1e-5 * ref.norm() / noise.norm())).float()  # within float32's tolerance
    refused = 0
    for seed in range(30):
        checks = [(rms(x).bfloat16(), 1e-2, True), (edge, 1e-5, True), (ref.bfloat16(), 1e-4, True),
                  (stale, 1e-2, False)]
        for out, tol, correct in checks:
            ref_fp, bound = inputs.fingerprint_bound(ref, seed, tol, out_dtype=out.dtype)
            ok = inputs.fingerprint_ok(inputs.fingerprint_batch([[out]], seed)[0][0], ref_fp, bound)
            assert ok or not correct, (seed, out.dtype, tol)
            refused += not ok and not correct
    assert refused >= 21  # 4 in 5 expected (a normal projection of the error beyond 7 tolerances)


def test_an_output_with_inf_or_nan_is_fingerprinted_by_where_they_are_not_only_by_having_one():
    """A reference with inf or nan (an adversarial input's output) made any fingerprint that was not finite
    pass: garbage with one nan did. Now the pair (finite part, where the specials are) must match."""
    import math

    import torch
    from autokernel_tui.harness.worker import inputs

    g = torch.Generator().manual_seed(0)
    ref = torch.randn(1000, 77, generator=g, dtype=torch.float64)
    ref[3, 4], ref[5, 6], ref[7, 1] = math.inf, math.nan, -math.inf
    good = ref.float() + 1e-7 * torch.randn(ref.shape, generator=g)
    garbage = torch.randn(ref.shape, generator=g)
    garbage[0, 0] = math.nan
    moved = good.clone()
    moved[3, 4], moved[3, 5] = moved[3, 5], math.inf  # the right specials, one of them in the wrong place
    ref_fp, bound = inputs.fingerprint_bound(ref, 11, 1e-5, out_dtype=torch.float32)
    verdicts = {name: inputs.fingerprint_ok(inputs.fingerprint_batch([[o]], 11)[0][0], ref_fp, bound)
                for name, o in (("good", good), ("garbage", garbage), ("moved", moved))}
    assert verdicts == {"good": True, "garbage": False, "moved": False}
    finite_ref_fp, _ = inputs.fingerprint_bound(ref.nan_to_num(0.0, 0.0, 0.0), 11, 1e-5)
    assert not inputs.fingerprint_ok(finite_ref_fp, ref_fp, bound)  # a plain number never stands for a pair


def test_the_judge_passes_a_correct_output_whose_reference_has_inf_or_nan():
    """The judge's check of a timed rep (``Evaluation._verify_fingerprints``) takes the claimed pair as it
    came: it once turned every claim that was not a number into nan, refusing every correct output of a
    reference with inf or nan (an adversarial input's, say) as a timed run gone wrong."""
    import math
    import types

    import torch
    from autokernel_tui.harness.worker import inputs
    from autokernel_tui.harness.worker.errors import Verdict
    from autokernel_tui.harness.worker.stages import Evaluation

    g = torch.Generator().manual_seed(2)
    ref = torch.randn(40, 30, generator=g, dtype=torch.float64)
    ref[1, 2], ref[4, 5] = math.inf, math.nan
    judge = types.SimpleNamespace(precise=lambda _inputs: (ref,),
                                  expected=lambda _inputs, _key: [{"dtype": "float32"}])
    tol = types.SimpleNamespace(max_rel_l2=1e-5)
    x = (torch.zeros(1),)
    for out, correct in ((ref.float(), True), (ref.float().nan_to_num(0.0, 0.0, 0.0), False)):
        claimed = inputs.fingerprint_batch([[out]], 7)
        try:
            Evaluation._verify_fingerprints(judge, [None], [0], claimed, 7, tol, ("s", "float32"), inputs=[x])
            passed = True
        except Verdict:
            passed = False
        assert passed == correct


def test_the_launch_plan_opens_dev_shm_only_where_it_is_the_sandboxs_own(tmp_path, monkeypatch):
    # CUDA outputs travel by IPC handle only where a contestant may write /dev/shm: bwrap's private one.
    from autokernel_tui.harness.runner import Harness
    from autokernel_tui.harness.sandbox import bwrap
    from autokernel_tui.harness.worker.pool import output_transfer
    monkeypatch.chdir(tmp_path)
    for sandbox, private in (("off", False), ("landlock", False)) + ((("bwrap", True),) if bwrap.probe() is None else ()):
        h = Harness(device="cpu", sandbox=sandbox)
        try:
            assert h._launch_plan()[-1] is private, sandbox
        finally:
            h.close()
    for landlocked, private, way, shm in ((True, True, "torch", ["/dev/shm"]), (True, False, "driver", []),
                                          (False, False, "torch", [])):
        assert output_transfer(landlocked, private) == (way, shm)


def test_cuda_shaped_outputs_can_travel_through_a_file(tmp_path):
    # Landlock alone: outputs are files in the contestant's scratch; the judge puts them where its
    # reference lives (here the CPU).
    import torch
    from autokernel_tui.harness.worker import transfer
    t = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)
    descs = transfer.export((t,), tmp_path, "x", "driver")  # a CPU output goes as a file whatever the way
    assert "file" in descs[0] and "ipc" not in descs[0] and "driver_ipc" not in descs[0]
    (got,) = transfer.receive(descs, [{"shape": [2, 3], "dtype": "bfloat16", "device": "cpu"}], tmp_path)
    assert torch.equal(got, t) and not list(tmp_path.iterdir())


def test_a_driver_ipc_description_reaching_outside_its_storage_is_refused_before_any_mapping():
    # The judge checks a contestant's description before it asks the driver for anything (no GPU here:
    # reaching the driver would fail differently).
    import pytest
    import torch
    from autokernel_tui.harness.worker import cuda_ipc, transfer
    good = {"handle": "00" * 64, "storage_at": 0, "storage_bytes": 24, "size": [2, 3], "stride": [3, 1],
            "offset": 0, "device": 0}
    for bad, why in (({"storage_bytes": 20}, "outside its storage"), ({"offset": 1}, "outside its storage"),
                     ({"stride": [3, -1]}, "malformed"), ({"storage_at": -8}, "malformed"),
                     ({"handle": "00"}, "malformed"), ({"size": "x"}, "malformed"), ({"storage_bytes": 25}, "malformed")):
        with pytest.raises(cuda_ipc.CudaIpcError, match=why):
            cuda_ipc.receive({**good, **bad}, torch.float32)
    want = [{"shape": [2, 3], "dtype": "float32", "device": "cuda"}]
    with pytest.raises(transfer.TransferError, match="expected"):
        transfer.receive([{"shape": [2, 3], "dtype": "float32", "device": "cuda", "driver_ipc": {**good, "size": [3, 2]}}],
                         want, Path("."), "driver")
    # A handle of the other kind is refused before anything is opened: torch's names a shared-memory object
    # the judge would write a count in (under Landlock alone, possibly another program's).
    torch_ipc = {"size": [2, 3], "stride": [3, 1], "offset": 0, "device": 0, "handle": "00", "storage_bytes": 24,
                 "storage_offset": 0, "rc_handle": "2f746f7263685f31", "rc_offset": 0, "event_handle": "",
                 "event_sync": False}
    for way, desc in (("driver", {"ipc": torch_ipc}), ("torch", {"driver_ipc": good})):
        with pytest.raises(transfer.TransferError, match=f"hands outputs over by {way}"):
            transfer.receive([{"shape": [2, 3], "dtype": "float32", "device": "cuda", **desc}], want, Path("."), way)
    with pytest.raises(ValueError, match="way must be"):
        transfer.export((), Path("."), "x", "pickle")


def test_a_retaken_comparison_says_so_in_its_method(tmp_path):
    """The judge's reply after a retake (its cross-check carries the first take's reason): the comparison
    stands on the retake's times, and its method says the timing was retaken and why."""
    from autokernel_tui.harness.runner import Harness

    task = Path(__file__).resolve().parents[2] / "kernels" / "rmsnorm"
    reason = "the judge's clock saw 113.8 us per call more around the candidate's timed runs"
    rows = [{"shape": "s", "dtype": "float16", "candidate_us": [10.0] * 8, "incumbent_us": [11.0] * 8}]
    with Harness(device="cpu", confirm_keeps=False) as h:
        h._prepare = lambda copy, quick: None
        h._request = lambda msg, timeout: ({"ok": True, "status": "PASS", "rows": rows, "method": "CUDA events",
                                            "cross_check": {"quads": 4, "retaken": reason}}, "")
        got = h.compare(task, "candidate", "incumbent")
    assert got.status == "PASS" and got.speedup > 1.05
    assert "timing retaken once" in got.method and "113.8 us" in got.method
    assert got.cross_check["retaken"] == reason
