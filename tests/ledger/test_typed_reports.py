"""What was written as JSON comes back as the harness's dataclasses (ledger.schema.read_*):
today's files exactly, older names upgraded, partial or damaged ones without a traceback."""

import json

from autokernel_tui.harness.report import Comparison, Report, ShapeResult, Summary
from autokernel_tui.ledger.schema import check_report, read_comparison, read_report, read_saved


def full_report() -> Report:
    shape = ShapeResult(shape="s", dims={"M": 4, "N": 8}, dtype="float16", passed=True, median_us=3.5,
                        speedup_vs_baseline=1.2, roofline_pct=41.0)
    summary = Summary(latency_us=3.5, speedup_vs_baseline=1.2, speedup_vs_compile=1.1, roofline_pct=41.0,
                      worst_shape="s", worst_speedup=1.2, gbps=900.0, tflops=0.5)
    return Report(status="PASS", stage="timing", task="rmsnorm", device="NVIDIA H200", timing_meaningful=True,
                  shapes=[shape], summary=summary, compile_s=1.5, wall_s=2.0, peak_vram_mib=12.0,
                  time_split={"timing": 1.0})


def test_todays_report_and_comparison_read_back_equal():
    report = full_report()
    comparison = Comparison(speedup=1.1, ci_low=1.05, ci_high=1.15, faster=True, n_samples=40, method="m",
                            per_shape=[{"shape": "s", "speedup": 1.1}])
    saved = json.loads(json.dumps({"report": report.to_dict(), "comparison": comparison.to_dict()}))
    assert read_saved(saved) == (report, comparison)
    assert read_saved({"report": report.to_dict(), "comparison": None}) == (report, None)
    assert check_report(read_report(report.to_dict()).to_dict()) == []


def test_older_names_and_partial_reports():
    old = full_report().to_dict()
    old["summary"]["pct_roofline"] = old["summary"].pop("roofline_pct")
    old["peak_vram_mb"] = old.pop("peak_vram_mib")
    assert read_report(old) == full_report()
    # what a commit's trailers tell (repair): a status, a reason, two summary numbers
    partial = read_report({"status": "FAIL", "reason": "max err", "summary": {"latency_us": 9.0}})
    assert partial.status == "FAIL" and partial.summary.latency_us == 9.0 and partial.summary.gbps is None
    assert partial.shapes == [] and partial.timing_meaningful is False
    cmp = read_comparison({"speedup": 1.3, "ci_low": 1.2, "ci_high": None})
    assert (cmp.speedup, cmp.ci_low, cmp.ci_high, cmp.faster, cmp.n_samples) == (1.3, 1.2, None, False, 0)


def test_damaged_values_read_as_unknown_never_raise():
    for nothing in (None, [], "PASS", 3, {}, {"status": 5}, {"reason": "no status"}):
        assert read_report(nothing) is None
    for nothing in (None, [], {}, {"speedup": "fast"}, {"speedup": True}, {"speedup": float("nan")}):
        assert read_comparison(nothing) is None
    bad = read_report({"status": "PASS", "timing_meaningful": "yes", "wall_s": "slow", "summary": {
        "latency_us": "abc", "roofline_pct": [1], "worst_shape": 7}, "shapes": [{"median_us": "x"}, "junk"],
        "time_split": 3})
    assert bad.timing_meaningful is False and bad.wall_s == 0.0 and bad.time_split == {}
    assert (bad.summary.latency_us, bad.summary.roofline_pct, bad.summary.worst_shape) == (None, None, "")
    assert len(bad.shapes) == 1 and bad.shapes[0].median_us is None and bad.shapes[0].passed is False
    assert read_saved("not a verdict") == (None, None)
