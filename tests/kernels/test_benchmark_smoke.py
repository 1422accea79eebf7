"""The GPU scripts in benchmarks/ run end to end on the CPU in their smoke modes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from autokernel_tui.harness.worker import timing
from autokernel_tui.harness.report import caution as report_caution
from benchmarks import kernel_quality as kq, quality_tables as qt

REPO = Path(__file__).resolve().parents[2]


def _run(script, *args, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "TRITON_INTERPRET": "1", "HOME": str(tmp_path)}
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args],
                          capture_output=True, text=True, env=env, timeout=240, cwd=tmp_path)


def test_kernel_quality_smoke(tmp_path):
    out = tmp_path / "q.json"
    proc = _run("kernel_quality.py", "--smoke", "--tasks", "rmsnorm,matmul", "--dtypes", "float32",
                "--kernel-dir", str(REPO / "kernels"), "--json", str(out), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["smoke"] and data["roofline"]["copy_gbps"] > 0
    rows = {(r["task"], r["dtype"]) for r in data["rows"]}
    assert rows == {("rmsnorm", "float32"), ("matmul", "float32")}
    for r in data["rows"]:
        assert {"starter", "tuned", "eager"} <= set(r["times"]), r
        assert r["starter_matches_eager"] and r["tuned_matches_eager"]
        assert r["times"]["starter"]["median_us"] > 0 and r["bytes"] > 0 and r["flops"] > 0
        # Memory-bound rows carry a copy of the same bytes (their ceiling at that size); matmul none.
        assert ("copy" in r["times"]) == (r["task"] == "rmsnorm"), r
        assert (r.get("vs_same_size_copy", 0) > 0) == (r["task"] == "rmsnorm"), r
    names = {s["task"]: s for s in data["summary"]}
    assert [t["target"] for t in names["matmul"]["targets"]][0].startswith("% of cuBLAS")
    assert "% of copy BW" in names["rmsnorm"]["targets"][0]["target"]
    assert "rmsnorm" in proc.stdout and "wrote" in proc.stdout
    roof = data["roofline"]
    assert roof["bandwidth_gbps"] == max(roof["copy_gbps"], roof["read_gbps"])
    assert set(roof["matmul_probes"]) == {"bfloat16", "float16", "float32"}
    by_dtype = {(s["task"], s["dtype"]) for s in data["summary_by_dtype"]}
    assert by_dtype == rows
    # The per-task x dtype summary is the last table printed.
    tail = proc.stdout[proc.stdout.index("Summary:"):]
    assert "worst shape" in tail and "matmul          float32" in tail
    # The harness's timer and checker, one meaning of "compile".
    assert data["method"]["timer"].startswith("harness worker.timing.time_fresh")
    assert "correctness.compare" in data["method"]["check"] and "default mode" in data["method"]["compile"]
    assert all(r["compile_mode"] == "default" for r in data["rows"])
    assert all(t["n"] == timing.CPU_REPS for r in data["rows"] for t in r["times"].values())


def test_kernel_quality_refuses_another_compile_mode(tmp_path):
    proc = _run("kernel_quality.py", "--smoke", "--compute-compile-mode", "max-autotune", tmp_path=tmp_path)
    assert proc.returncode == 2 and "as the harness compiles it" in proc.stderr


def test_kernel_quality_times_every_call_on_fresh_inputs_the_same_for_every_path():
    """Timer is timing.time_fresh; input_stream gives each call the judge's perturbed inputs, in the
    same sequence for each path of a row."""
    from autokernel_tui.harness.worker.inputs import InputBuilder

    ref = kq.sc.load_module(REPO / "kernels" / "rmsnorm" / "reference.py", "fresh")
    builder = InputBuilder(ref, "cpu", cache_bytes=0)
    dims = {"M": 4, "N": 32}
    seen = {"a": [], "b": []}
    timer = kq.Timer("cpu")
    for path in seen:
        result = timer(lambda x, w, eps, _p=path: seen[_p].append(x.clone()) or x,
                       kq.input_stream(builder, dims, "float32"), rep_bytes=1024)
        assert result["n"] == timing.CPU_REPS and result["p20_us"] <= result["median_us"] <= result["p80_us"]
    a, b = seen["a"], seen["b"]
    assert len(a) == 2 + timing.CPU_REPS  # two warm-up calls on one set, then one set per timed call
    timed = a[2:]
    assert all(not torch.equal(x, y) for i, x in enumerate(timed) for y in timed[i + 1:])
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert kq.time_fresh is timing.time_fresh and kq.compile_reference is timing.compile_reference


def test_a_backward_baseline_is_timed_as_the_judge_times_it():
    """A backward task's eager (and compiled) baseline is its backward alone, the forward run off the clock
    (``BackwardReference.backward_only``, as ``Evaluation.baseline_fn``): the starter's time is a backward
    kernel's, and timing eager's forward with it made every backward starter look faster than it is."""
    from autokernel_tui.harness.worker.inputs import InputBuilder
    from autokernel_tui.tasks.spec import load_spec

    task = REPO / "kernels" / "rmsnorm_bwd"
    ref = kq.sc.load_reference(task, "bwd_baseline")
    builder = InputBuilder(ref, "cpu", cache_bytes=0)
    dims = dict(load_spec(task).test_shapes[0].dims)
    fn, fresh = kq.baseline(ref, None, kq.input_stream(builder, dims, "float32"))
    forward_calls = []
    original = ref.module.reference
    ref.module.reference = lambda *a: forward_calls.append(1) or original(*a)
    try:
        prepared = fresh()
        assert len(forward_calls) == 1  # the forward ran while the inputs were made, off the clock
        grads = fn(*prepared)
        assert len(forward_calls) == 1  # and the timed call runs the backward alone
    finally:
        ref.module.reference = original
    inputs = kq.input_stream(builder, dims, "float32")()
    expected = ref.reference(*inputs)
    assert len(grads) == len(expected) and all(g.shape == e.shape for g, e in zip(grads, expected))
    fwd_fn, _ = kq.baseline(kq.sc.load_reference(REPO / "kernels" / "rmsnorm", "fwd_baseline"), None, None)
    assert fwd_fn.__name__ == "reference"


def test_kernel_quality_says_which_times_to_doubt_as_the_harness_does():
    # H200 run 9: four rmsnorm rows read 1.6-7.3x run 6k's with a p80/p20 of ~2 and nothing said so.
    assert kq.caution is report_caution and kq.DISTURBED_SPREAD == timing.DISTURBED_SPREAD
    roof = {"bandwidth_gbps": 4000.0}
    row = {"bound": "memory", "dtype": "bfloat16", "bytes": 1e8, "flops": 1, "notes": [], "times": {
        "starter": {"median_us": 247.6, "p20_us": 163.4, "p80_us": 318.2, "host_us": 40.0, "caution": "disturbed"},
        "eager": {"median_us": 40.3, "p20_us": 40.0, "p80_us": 41.0, "host_us": 9.0, "caution": ""}}}
    kq._derive(row, roof)
    assert row["notes"] == ["starter disturbed (host 40 us per call, p20-p80 163.4-318.2 us)"]
    old = {"rows": [{"task": "rmsnorm", "dtype": "bfloat16", "shape": "odd",
                     "times": {"starter": {"median_us": 34.1}, "eager": {"median_us": 40.0}}}]}
    new = {"rows": [{"task": "rmsnorm", "dtype": "bfloat16", "shape": "odd", "times": row["times"]}]}
    assert "| starter | 0 of 1 | rmsnorm bfloat16 odd 7.26x (disturbed) |" in qt.against(new, old, set(), set())


def test_benchmarks_have_no_timer_of_their_own():
    """DESIGN rule 6: one timer. No script in benchmarks/ creates CUDA events, reads their elapsed time
    or calls triton's do_bench: they time through autokernel_tui.harness.worker.timing."""
    for path in sorted((REPO / "benchmarks").glob("*.py")):
        text = path.read_text()
        for needle in ("cuda.Event(", "elapsed_time(", "do_bench"):
            assert needle not in text, f"{path.name} has its own timer ({needle})"


def test_percent_of_roofline_never_above_100():
    roof = {"bandwidth_gbps": 1000.0, "matmul_tflops_bfloat16": 100.0}
    row = {"bound": "memory", "dtype": "bfloat16", "bytes": 2e9, "flops": 1, "notes": [],
           "times": {"starter": {"median_us": 1000.0}, "eager": {"median_us": 4000.0}}}
    kq._derive(row, roof)  # the starter moves 2000 GB/s against a 1000 GB/s ceiling
    assert row["times"]["starter"]["roofline_pct"] == 100.0
    assert row["times"]["starter"]["roofline_pct_raw"] == 200.0
    assert "clamped" in row["notes"][0] and row["times"]["eager"]["roofline_pct"] == 50.0


def test_kernel_quality_rejects_unknown_task(tmp_path):
    proc = _run("kernel_quality.py", "--smoke", "--tasks", "nope", tmp_path=tmp_path)
    assert proc.returncode != 0 and "unknown task" in proc.stderr


def test_starters_check_smoke(tmp_path):
    out = tmp_path / "s.json"
    proc = _run("starters_check.py", "--smoke", "--tasks", "softmax", "--dtypes", "float16",
                "--json", str(out), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["summary"] == [d for d in data["summary"] if d["task"] == "softmax" and d["dtype"] == "float16"]
    assert data["summary"][0]["kernel_fail"] == [] and data["summary"][0]["cases"] >= 4
    assert "PASS" in proc.stdout


def test_starters_check_reports_a_broken_kernel(tmp_path):
    import shutil

    kdir = tmp_path / "kernels"
    shutil.copytree(REPO / "kernels" / "rmsnorm", kdir / "rmsnorm")
    src = (kdir / "rmsnorm" / "kernel.py").read_text().replace("* rstd[:, None] * w[None, :]", "* w[None, :]")
    (kdir / "rmsnorm" / "kernel.py").write_text(src)
    proc = _run("starters_check.py", "--smoke", "--kernel-dir", str(kdir), "--dtypes", "float32",
                "--json", str(tmp_path / "s.json"), tmp_path=tmp_path)
    assert proc.returncode == 1 and "FAIL" in proc.stdout


def test_knob_sweep_smoke_ranks_every_combination_and_applies_the_best(tmp_path):
    import shutil

    task = tmp_path / "rmsnorm"
    shutil.copytree(REPO / "kernels" / "rmsnorm", task, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "sweep.json"
    proc = _run("knob_sweep.py", "--smoke", "--task", str(task), "--shapes", "looped", "--dtypes", "float32",
                "--grid", "LOOP_NUM_WARPS=4,8", "--grid", "LOOP_BLOCK_N=1024", "--apply-best",
                "--json", str(out), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(out.read_text())
    combos = {r["combo"] for r in data["ranking"]}
    assert "(defaults)" in combos and "LOOP_NUM_WARPS=4 LOOP_BLOCK_N=1024" in combos
    assert all("us" in run for case in data["cases"] for run in case["runs"].values())
    applied = proc.stdout.strip().splitlines()[-1]
    assert applied.startswith("apply-best:")
    if "now has" in applied:  # the winner's knob values are in the file, nothing else changed
        best = dict(kv.split("=") for kv in data["ranking"][0]["combo"].split())
        text = (task / "kernel.py").read_text()
        assert all(f"{k} = {v}" in text for k, v in best.items())


def test_knob_sweep_times_each_combination_with_its_own_launch_plan(tmp_path):
    # flash_attention_bwd plans its grids once per shape in a module-level cache: a knob set on one
    # loaded module ran BLOCK_N1=32 on the default's grid (half the key blocks) and left dK unwritten.
    out = tmp_path / "sweep.json"
    proc = _run("knob_sweep.py", "--smoke", "--task", "flash_attention_bwd", "--shapes", "gqa-d128-odd",
                "--dtypes", "float16", "--grid", "BLOCK_N1=32,64", "--json", str(out), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = json.loads(out.read_text())["cases"][0]["runs"]
    assert set(runs) == {"(defaults)", "BLOCK_N1=32"} and all("us" in r for r in runs.values()), runs


def test_knob_sweep_refuses_an_unknown_knob(tmp_path):
    proc = _run("knob_sweep.py", "--smoke", "--task", "rmsnorm", "--grid", "NO_SUCH_KNOB=1", tmp_path=tmp_path)
    assert proc.returncode != 0 and "no knob NO_SUCH_KNOB" in proc.stderr


def test_quality_tables_merge_takes_each_task_from_its_latest_run():
    def run(task_shapes):
        rows = [{"task": t, "dtype": "bfloat16", "shape": s} for t, s in task_shapes]
        return {"rows": rows, "summary_by_dtype": [{"task": t, "dtype": "bfloat16"} for t in dict(task_shapes)]}

    old = run([("softmax", "old"), ("rmsnorm", "old")])
    new = run([("softmax", "new-a"), ("softmax", "new-b")])
    out = qt.merged([old, new])
    assert [(r["task"], r["shape"]) for r in out["rows"]] == [("rmsnorm", "old"), ("softmax", "new-a"), ("softmax", "new-b")]
    assert [s["task"] for s in out["summary_by_dtype"]] == ["rmsnorm", "softmax"]


def test_quality_tables_targets_show_met_values_too():
    def row(shape, mb, pct, vs_compile):
        return {"task": "rmsnorm", "dtype": "bfloat16", "shape": shape, "bound": "memory", "bytes": mb * 2**20,
                "scored": "starter", "times": {"starter": {"roofline_pct": pct}}, "speedup_vs_compile": vs_compile}

    data = {"rows": [row("big", 256, 90.0, 1.2), row("mid", 64, 60.0, 0.98)], "summary_by_dtype": []}
    lines = qt.target_values(data, set(), set())
    assert "| rmsnorm | bfloat16 | % of copy BW, >= 128 MB (geomean) | 90.0 | 85 | met |" in lines
    assert "| rmsnorm | bfloat16 | % of copy BW, 16-128 MB (geomean) | 60.0 | 65 | missed |" in lines
    assert "| rmsnorm | bfloat16 | vs torch.compile, slowest shape (x) | 0.98x | 1 | missed |" in lines


def test_quality_tables_against_counts_each_path_within_three_percent():
    def run(starter_us, eager_us):
        return {"rows": [{"task": "rmsnorm", "dtype": "bfloat16", "shape": s,
                          "times": {"starter": {"median_us": a}, "eager": {"median_us": b}, "compile": None}}
                         for s, a, b in zip(("a", "b", "c"), starter_us, eager_us)]}

    lines = qt.against(run([10.2, 20.0, 70.0], [5.0, 5.0, 5.0]), run([10.0, 20.0, 10.0], [5.0, 5.1, 5.0]), set(), set())
    assert "| starter | 2 of 3 | rmsnorm bfloat16 c 7.00x |" in lines
    assert "| eager | 3 of 3 | - |" in lines
    assert not any(line.startswith("| compile") for line in lines)  # nothing measured: no row


def test_quality_tables_reads_the_runs_recorded_before_the_rename(capsys):
    """benchmarks/results/ keep kernel_quality JSON written with pct_roofline (percent then too): the
    tables docs/benchmarks.md cites still print, with the same numbers."""
    path = REPO / "benchmarks" / "results" / "h200-run6" / "run6k" / "kernel_quality.json"
    raw = json.loads(path.read_text())
    assert "geomean_pct_roofline" in raw["summary_by_dtype"][0]  # recorded under the old name
    assert qt.main([str(path)]) == 0
    first = raw["summary_by_dtype"][0]
    assert f"| {first['task']} | {first['dtype']} | {first['geomean_pct_roofline']:.1f} |" in capsys.readouterr().out
    assert qt.main([str(path), "--shapes"]) == 0 and "(" in capsys.readouterr().out


def test_bench_agreement_smoke_runs_two_cold_benches_through_the_cli(tmp_path):
    out = tmp_path / "a.json"
    proc = _run("bench_agreement.py", "--smoke", "--json", str(out), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (res,) = json.loads(out.read_text())["results"]
    assert res["task"] == "rmsnorm" and res["statuses"] == ["PASS", "PASS"] and res["rows"]
    assert all(len(r["medians_us"]) == 2 and r["run_spread"] is not None for r in res["rows"])
    assert all(r["baseline_vs_window"] is None for r in res["rows"])  # the CPU re-times no baseline
    assert "runs apart: worst" in proc.stdout


def test_bench_agreement_reads_the_spread_between_runs_and_each_cached_baseline():
    from benchmarks.bench_agreement import agreement

    def report(median, cached, window):
        return {"shapes": [{"shape": "s", "dtype": "float16", "median_us": median, "baseline_cached_us": cached,
                            "baseline_us": window}]}
    (row,) = agreement([report(10.0, 20.0, 21.0), report(10.4, 20.0, 20.0), report(10.2, None, 20.0)])
    assert row["run_spread"] == pytest.approx(0.04) and row["baseline_vs_window"] == pytest.approx(0.05)
    assert row["baseline_cached_and_window_us"] == [[20.0, 21.0], [20.0, 20.0], [None, 20.0]]  # which way a miss went
    (missing,) = agreement([report(10.0, None, None), {"shapes": []}])
    assert missing["run_spread"] is None and missing["baseline_vs_window"] is None


def test_backward_tasks_are_held_to_issue_20s_bars():
    def row(task, shape, nbytes, pct, vs_eager=None, vs_compile=None):
        r = {"task": task, "shape": shape, "bytes": nbytes, "scored": "starter",
             "times": {"starter": {"roofline_pct": pct}}}
        r.update({k: v for k, v in (("speedup_vs_eager", vs_eager), ("speedup_vs_compile", vs_compile)) if v})
        return r

    mem = kq.targets("rmsnorm_bwd", "memory", [row("rmsnorm_bwd", "large", 300 * kq.MB, 82.0, vs_compile=1.1),
                                                row("rmsnorm_bwd", "small", 10 * kq.MB, 40.0, vs_compile=0.9)])
    assert [(t["target"], t["goal"], t["status"]) for t in mem] == [
        ("% of copy BW, >= 128 MB (geomean)", 80.0, "met"), ("vs torch.compile, slowest shape (x)", 1.0, "missed")]
    attn = kq.targets("flash_attention_bwd", "compute", [row("flash_attention_bwd", "llama7b-s4096", 1, 50.0, 0.72),
                                                         row("flash_attention_bwd", "odd", 1, 30.0, 0.5)])
    assert [(t["target"], t["goal"], t["status"], t["shown"]) for t in attn] == [
        ("% of SDPA's backward at LLaMA-7B shapes (worst)", 70.0, "met", "72.0")]


def test_host_probe_says_what_host_a_run_had(tmp_path):
    out = tmp_path / "host.json"
    proc = _run("host_probe.py", "--json", str(out), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    p = json.loads(out.read_text())
    assert p["cpus"] >= 1 and len(p["loadavg"]) == 3
    assert 0 <= p["steal_share"] <= p["busy_share"] + p["steal_share"] <= 1
    assert p["python_loop_ms"] > 0 and 0 < p["round_trip_us"] <= p["round_trip_p90_us"]
    assert proc.stdout.startswith(f"host: {p['cpus']} CPUs, load ") and "socket round trip" in proc.stdout


def test_gpu_session_parts_are_the_ones_its_usage_names_once_each():
    """A part's case label written wrong (or twice: bash takes the first) runs another part's steps under its
    name, unseen until a device call comes back with the wrong logs."""
    import re
    text = (REPO / "benchmarks" / "gpu_session.sh").read_text()
    usage = next(line for line in text.splitlines() if "gpu_session.sh sandbox |" in line)
    named = [part.split()[0] for part in usage.split("gpu_session.sh", 1)[1].split(" | ")]
    labels = re.findall(r"^([a-z0-9]+)\)$", text, flags=re.M)
    assert len(labels) == len(set(labels)), labels
    assert sorted(labels) == sorted(named)


def test_trees_table_divides_each_round_by_the_baselines_same_round(tmp_path):
    from benchmarks import trees_table

    def result(wall, split=None):
        res = {"task": "rmsnorm", "eval_wall_ex_jit_s": {"median": wall}, "summary": {"latency_us": 55.0}}
        return {"results": [{**res, "eval_split_s": split} if split else res]}

    # Round 2's machine is twice as slow for every tree: ratios taken round by round stay 1.2 and 1.5.
    for tree, walls in {".old": (1.0, 2.0), ".mid": (1.2, 2.4), "this": (1.5, 3.0)}.items():
        for r, w in enumerate(walls, 1):
            split = None if tree == ".old" else {"contestant: time": w / 3, "total": w}
            (tmp_path / f"warm_{tree}_{r}.json").write_text(json.dumps(result(w, split)))
    (tmp_path / "warm_this_x.json").write_text("{}")  # not a round: left out
    rows = {row["tree"]: row for row in trees_table.summary(trees_table.load(tmp_path), ".old")}
    assert rows["this"]["ratio"] == pytest.approx(1.5) and rows[".mid"]["ratio"] == pytest.approx(1.2)
    assert rows["this"]["per_round"] == [1.5, 3.0] and rows[".old"]["rounds"] == 2
    text = trees_table.render(trees_table.load(tmp_path), ".old")
    assert "| this | 2 | 2.25 | 1.50, 3.00 | 1.500 | 55.0 |" in text
    assert text.splitlines()[-1].startswith("| total | 1.800 | 2.250 |")  # the split's columns: .mid, this
    assert trees_table.main([str(tmp_path / "nothing")]) == 1


def test_launch_cost_rows_at_named_shapes():
    """launch_cost.py's --at: a default shape by name, dims laid over the smallest shape's, and a clear
    refusal of a dim the task does not have (issue 21's two named losses are rows by default)."""
    from benchmarks import launch_cost as lc, starters_check as sc
    from autokernel_tui.tasks.spec import load_spec

    def at(task, where):
        spec = load_spec(REPO / "kernels" / task)
        return lc.shape_at(spec, sc.load_reference(spec.path, "at"), torch.bfloat16, where)

    assert at("matmul", "M=1024,N=768,K=768").dims == {"M": 1024, "N": 768, "K": 768, "epilogue": "bias"}
    assert at("flash_attention", "gpt2-small").name == "gpt2-small"
    assert at("matmul", None).name == "gpt2-proj-b1"  # the smallest default shape
    with pytest.raises(ValueError, match="neither a shape of matmul"):
        at("matmul", "Q=3")
    assert lc.ISSUE_SHAPES == "flash_attention:gpt2-small"


def test_launch_cost_times_a_backward_against_autograds_backward_alone():
    """A backward task's eager counterpart in launch_cost.py is autograd's backward on a forward run off the
    clock (what a training step pays for it), and it gives the same gradients as the task's reference."""
    from benchmarks import launch_cost as lc, starters_check as sc
    from autokernel_tui.tasks.spec import load_spec

    spec = load_spec(REPO / "kernels" / "layernorm_bwd")
    ref = sc.load_reference(spec.path, "lc-bwd")
    inputs = sc.build_inputs(ref, {"M": 5, "N": 24}, "float32", "cpu", 0)
    fn, prepared = lc.eager_call(ref, inputs)
    assert fn is not ref.reference and len(prepared) == 2 + len(spec.grad_inputs)
    for got, want in zip(fn(*prepared), ref.reference(*inputs)):
        torch.testing.assert_close(got, want)
    fwd = sc.load_reference(REPO / "kernels" / "layernorm", "lc-fwd")
    x = sc.build_inputs(fwd, {"M": 5, "N": 24}, "float32", "cpu", 0)
    assert lc.eager_call(fwd, x) == (fwd.reference, x)
