"""Kernel quality on the GPU: every task's Triton kernel beside the PyTorch paths.

For each task in kernels/ (or --tasks), each default shape, each declared dtype
(or --dtypes): median latency of
  * starter   the shipped kernel.py
  * tuned     kernel.py from --kernel-dir DIR/<task>/ (when given and present)
  * eager     reference(): the task's baseline (cuBLAS torch.matmul for matmul,
              F.scaled_dot_product_attention for attention, F.rms_norm, ...)
  * compile   torch.compile(reference) exactly as the harness compiles it for its
              "vs torch.compile" (timing.compile_reference: dynamic=False, the default
              mode, dynamo's limits raised and its graph count checked, so a silent
              fallback to eager is reported, never timed)
  * copy      memory-bound tasks: a device copy of the same byte count (half read,
              half written), timed the same way: what the memory system gives at
              this size, launch and ramp included (vs_same_size_copy = copy / scored)
Timing is the harness's (autokernel_tui.harness.worker.timing.time_fresh, the judge's
baseline timer): CUDA events around each call, a ~100 us GPU spin and an L2 flush
(a read of 256 MiB, --flush) before every call, every call on its own fresh inputs
(the judge's InputBuilder: make_inputs perturbed per call), the cyclic GC off while
calls are queued, the rep count from reps_for (10-40 reps, ~20 ms of GPU time), median
with p20/p80. Correctness is the harness's checker (starters_check.check_call: float64
reference, the task's tolerance, NaN-poisoned allocations). The JSON is rewritten after
every task, so a cut-short run keeps its rows.
Ceilings in the same run, each the best of several probes: bandwidth =
max(1 GiB copy, 1 GiB read-only sum); matmul rate per dtype = max of cuBLAS at
8192^3, 4096^3 and every matmul task shape. Memory-bound tasks are scored in %
of that bandwidth, compute-bound ones in % of their dtype's matmul rate; a
value above 100% is clamped with a note (last guard). torch.compile runs for
--compile-dtypes (default bfloat16) and within each task's share of the time
left; --max-seconds (390) bounds the whole run to about 7 minutes on the H200.

    PYTHONPATH=$PWD python3 benchmarks/kernel_quality.py --json $OUT/quality.json
    PYTHONPATH=$PWD python3 benchmarks/kernel_quality.py --tasks matmul --kernel-dir tuned/kernels
    python3 benchmarks/kernel_quality.py --smoke        # CPU, interpreter, tiny shapes, no compile

Targets (issue 8) marked met/missed per task: memory-bound tasks >= 85% of copy
bandwidth (geomean) at shapes moving >= 128 MB, >= 65% at 16-128 MB, and no
slower than torch.compile at any shape; matmul >= 90% of cuBLAS at 4096^3
fp16/bf16 and >= 75% at every shape; attention >= 80% of SDPA at LLaMA-7B shapes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: the repository's packages before any installed copy
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import starters_check as sc  # noqa: E402
from autokernel_tui.harness import stats  # noqa: E402
from autokernel_tui.harness.report import caution  # noqa: E402
from autokernel_tui.harness.worker.timing import (  # noqa: E402  the harness's one timer
    DISTURBED_SPREAD, HOST_LEAD_CYCLES, LEAD_FACTOR, L2Flusher, compile_reference, steadiest, time_fresh)

REPO = sc.REPO
FLUSH_MODES = ("write", "read", "none")
MB = 1e6
COMPILE_SHARE_SLACK = 1.5
COMPILE_RESERVE_S = 30.0  # no compile starts this close to --max-seconds (a GEMM autotune can take that long)
COMPILE_MODE = "default"  # the harness's (timing.compile_reference); "vs compile" means this and nothing else


def tensor_bytes(values) -> int:
    import torch

    return sum(t.numel() * t.element_size() for t in values if isinstance(t, torch.Tensor))


# ----------------------------------------------------------------------------- timing

class _OtherFlush(L2Flusher):
    """--flush write|none, for experiments: the harness's spin, then the same buffer zeroed (L2 left
    full of dirty lines, whose write-back the timed call then pays) or nothing (last call's data kept)."""

    def __init__(self, device, mode: str) -> None:
        super().__init__(device)
        self.mode = mode

    def __call__(self) -> None:
        import torch

        torch.cuda._sleep(HOST_LEAD_CYCLES)
        if self.mode == "write":
            self.words.zero_()


class Timer:
    """The harness's timer (``timing.time_fresh``): one call to it per measurement."""

    def __init__(self, device: str, flush_mode: str = "read"):
        import torch

        self.device = device
        if flush_mode not in FLUSH_MODES:
            raise ValueError(f"flush mode {flush_mode!r}: one of {', '.join(FLUSH_MODES)}")
        self.flush_mode = flush_mode
        self.flush = None  # on the CPU: the wall clock, no L2 to speak of
        if device == "cuda":
            dev = torch.device("cuda")
            self.flush = L2Flusher(dev) if flush_mode == "read" else _OtherFlush(dev, flush_mode)

    @property
    def flush_bytes(self) -> int:
        return self.flush.words.numel() * 4 if self.flush is not None else 0

    def __call__(self, fn, fresh, rep_bytes: int = 0) -> dict:
        """Median, p20, p80 (us) and count of ``fn`` timed by ``time_fresh``, ``fresh()`` giving each
        call its inputs; ``rep_bytes`` (inputs plus outputs of one call) bounds a batch as the judge's."""
        from autokernel_tui.harness.worker import memory

        limit = memory.budget("cuda" if self.device == "cuda" else "cpu", "batch")
        batch = (lambda n: max(1, min(n, limit // rep_bytes))) if rep_bytes > 0 else None
        samples = steadiest(lambda: time_fresh(fn, fresh, self.flush, batch_size=batch), self.device == "cuda")
        p20, med, p80 = samples.pcts()
        out = {"median_us": med, "p20_us": p20, "p80_us": p80, "n": len(samples.times_us),
               "host_us": stats.median(samples.host_us) if samples.host_us else None}
        # As the harness reports a shape: "disturbed" (still wide after the retake: not to be trusted) or
        # "host-bound" (the call's Python side outlasts its device time: an eager model pays the host).
        out["caution"] = caution("disturbed" if samples.disturbed else "", out["host_us"], med)
        return out


def same_inputs(*inputs):
    """``fresh`` for a probe whose speed cannot depend on what its buffers hold (a copy, cuBLAS): the
    same buffers every call; the L2 flush before each call still leaves nothing of them cached."""
    return lambda: inputs


def input_stream(builder, dims: dict, dtype_name: str, seed: int = 0):
    """``fresh`` for a task: the judge's inputs, ``make_inputs`` at ``seed`` perturbed per call with
    seeds 1, 2, ... (``inputs.perturb``), so every path of a row sees the same sequence of inputs."""
    counter = itertools.count(1)
    return lambda: builder.build({"dims": dict(dims), "dtype": dtype_name, "base_seed": seed,
                                  "steps": [["perturb", next(counter)]]})


def _matmul_probe_shapes(smoke: bool) -> list[tuple[str, int, int, int]]:
    """(name, M, N, K) of the cuBLAS probes: two big squares and every matmul task shape."""
    if smoke:
        return [("256^3", 256, 256, 256), ("128^3", 128, 128, 128)]
    probes = [("8192^3", 8192, 8192, 8192), ("4096^3", 4096, 4096, 4096)]
    task = REPO / "kernels" / "matmul"
    if (task / "task.toml").is_file():
        from autokernel_tui.tasks.spec import load_spec

        for sh in load_spec(task).shapes:
            dims = (sh.dims["M"], sh.dims["N"], sh.dims["K"])
            if dims not in [p[1:] for p in probes]:
                probes.append((f"matmul/{sh.name}", *dims))
    return probes


def measure_roofline(timer: Timer, device: str, smoke: bool) -> dict:
    """Ceilings measured now, on this device, each the best of several probes.

    Bandwidth: max of a device-to-device copy (read + write) and a read-only
    reduction stream (a read-mostly kernel can beat a copy). Matmul rate per
    dtype: max of cuBLAS at 8192^3, 4096^3 and every matmul task shape.
    """
    import torch

    nbytes = (1 << 30) if not smoke else (16 << 20)
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_(0, 255)
    dst = torch.empty_like(src)
    copy = timer(lambda s, d: d.copy_(s), same_inputs(src, dst))
    words = src.view(torch.float32)
    read = timer(lambda w: w.sum(), same_inputs(words))
    out = {"copy_bytes": 2 * nbytes, "copy_gbps": 2 * nbytes / copy["median_us"] / 1e3,
           "read_bytes": nbytes, "read_gbps": nbytes / read["median_us"] / 1e3}
    out["bandwidth_gbps"] = max(out["copy_gbps"], out["read_gbps"])
    out["bandwidth_source"] = "copy" if out["copy_gbps"] >= out["read_gbps"] else "read-only sum"
    del src, dst, words
    out["matmul_probes"] = {}
    for name, dtype in (("bfloat16", torch.bfloat16), ("float16", torch.float16), ("float32", torch.float32)):
        rates = {}
        for label, m, n, k in _matmul_probe_shapes(smoke):
            a = torch.randn(m, k, device=device).to(dtype)
            b = torch.randn(k, n, device=device).to(dtype)
            t = timer(torch.matmul, same_inputs(a, b), rep_bytes=m * n * a.element_size())
            rates[label] = 2 * m * n * k / t["median_us"] / 1e6
            del a, b
        best = max(rates, key=rates.get)
        out[f"matmul_tflops_{name}"] = rates[best]
        out["matmul_probes"][name] = {"best": best, "tflops": {k: round(v, 1) for k, v in rates.items()}}
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def ceilings_line(roof: dict) -> str:
    mm = lambda d: f"{roof[f'matmul_tflops_{d}']:.0f} ({roof['matmul_probes'][d]['best']})"  # noqa: E731
    return (f"ceilings (best probe): bandwidth {roof['bandwidth_gbps']:.0f} GB/s = max(copy {roof['copy_gbps']:.0f}, "
            f"read-only sum {roof['read_gbps']:.0f}); cuBLAS TFLOP/s bf16 {mm('bfloat16')}, fp16 {mm('float16')}, "
            f"fp32 {roof['matmul_tflops_float32']:.1f} ({roof['matmul_probes']['float32']['best']})")


# ----------------------------------------------------------------------------- one task

def run_task(task_dir: Path, tuned_dir: Path | None, dtypes: list[str], timer: Timer, roof: dict,
             args, deadline: float, compile_until: float, launches=None) -> list[dict]:
    """Rows for one task; no shape starts after deadline, no compile after compile_until (its share)."""
    import torch

    from autokernel_tui.harness.worker.correctness import as_tuple
    from autokernel_tui.harness.worker.inputs import InputBuilder
    from autokernel_tui.tasks.spec import load_spec

    spec = load_spec(task_dir)
    ref_mod = sc.load_reference(task_dir, "quality")
    kernels = {"starter": sc.load_module(task_dir / "kernel.py", "quality")}
    if tuned_dir is not None and (tuned_dir / "kernel.py").is_file():
        kernels["tuned"] = sc.load_module(tuned_dir / "kernel.py", "quality_tuned")
    compute = spec.bound == "compute"
    shapes = spec.test_shapes[:1] if args.smoke else spec.shapes
    builder = InputBuilder(ref_mod, timer.device, cache_bytes=0)  # one shape's base inputs at a time
    rows = []
    for dtype_name in spec.dtypes:
        if dtypes and dtype_name not in dtypes:
            continue
        dtype = getattr(torch, dtype_name)
        tol = spec.tolerances[dtype_name]
        for shape in shapes:
            dims = dict(shape.dims)
            row = {"task": spec.name, "bound": spec.bound, "dtype": dtype_name, "shape": shape.name, "dims": dims,
                   "bytes": ref_mod.bytes_moved(dims, dtype), "flops": ref_mod.flops(dims),
                   "baseline": spec.baseline, "compile_mode": COMPILE_MODE, "times": {}, "notes": []}
            if time.perf_counter() > deadline:
                row["notes"].append("skipped: --max-seconds budget spent")
                rows.append(row)
                continue
            sample = eager_out = precise = None
            try:
                sample = builder.build({"dims": dims, "dtype": dtype_name, "base_seed": 0, "steps": []})
                eager_out = ref_mod.reference(*sample)
                precise = sc.precise_reference(ref_mod, sample)
                rep_bytes = tensor_bytes(sample) + tensor_bytes(as_tuple(eager_out))
                for label, mod in kernels.items():
                    # The harness's check (float64 reference, the task's tolerance, poisoned allocations);
                    # the field keeps its old name.
                    verdict = sc.check_call(mod.kernel_fn, ref_mod, sample, tol, launches, precise, eager_out)
                    row[f"{label}_matches_eager"] = verdict["passed"]
                    if not verdict["passed"]:
                        row["notes"].append(f"{label} fails the harness's check: {verdict['why']}")
                    row["times"][label] = timer(mod.kernel_fn, input_stream(builder, dims, dtype_name), rep_bytes)
                precise = None
                fn, fresh = baseline(ref_mod, None, input_stream(builder, dims, dtype_name))
                row["times"]["eager"] = timer(fn, fresh, rep_bytes)
                if not compute:
                    row["times"]["copy"] = same_size_copy(timer, row["bytes"])
                if args.compile and dtype_name in args.compile_dtypes:
                    if time.perf_counter() < min(deadline, compile_until):
                        compiled = compile_baseline(ref_mod, input_stream(builder, dims, dtype_name)())
                        row["compile_s"] = round(compiled.seconds, 2)
                        if compiled.fn is None:
                            row["notes"].append(f"compile: {compiled.note}")
                        else:
                            fn, fresh = baseline(ref_mod, compiled.fn, input_stream(builder, dims, dtype_name))
                            row["times"]["compile"] = timer(fn, fresh, rep_bytes)
                    else:
                        row["notes"].append("compile skipped: this task's share of --max-seconds spent")
            except Exception as exc:  # one broken shape is a row, not the end of the run
                row["notes"].append(f"error: {type(exc).__name__}: {exc}"[:300])
            finally:
                sample = eager_out = precise = None
                if timer.device == "cuda":
                    torch.cuda.empty_cache()
            _derive(row, roof)
            rows.append(row)
            print(_row_line(row), flush=True)
    return rows


def baseline(ref_mod, compiled, fresh):
    """(fn, fresh) of a baseline as the judge times it (``reference.baseline_call``): for a backward task
    its backward alone, the forward run in ``fresh``, off the clock, as the starter's time is the backward
    kernel's."""
    from autokernel_tui.harness.worker.reference import baseline_call

    prepare, fn = baseline_call(ref_mod, compiled)
    return fn, lambda: prepare(fresh())


def compile_baseline(ref_mod, sample):
    """torch.compile of what a baseline runs, as the judge compiles it (``reference.compile_target``)."""
    from autokernel_tui.harness.worker.reference import compile_target

    return compile_reference(*compile_target(ref_mod, sample))


def same_size_copy(timer: Timer, nbytes: int) -> dict:
    """A device copy moving nbytes (nbytes // 2 read, as many written), timed like the kernels."""
    import torch

    half = max(1, nbytes // 2)
    src = torch.empty(half, dtype=torch.uint8, device=timer.device)
    dst = torch.empty(half, dtype=torch.uint8, device=timer.device)
    return timer(lambda s, d: d.copy_(s), same_inputs(src, dst))


def _derive(row: dict, roof: dict) -> None:
    """Throughput, % of roofline and speedups from the medians."""
    best = "tuned" if "tuned" in row["times"] else "starter"
    row["scored"] = best
    for label, t in row["times"].items():
        if t.get("caution"):
            host = f"host {t['host_us']:.0f} us per call, " if t.get("host_us") else ""
            row["notes"].append(f"{label} {t['caution']} ({host}p20-p80 {t['p20_us']:.1f}-{t['p80_us']:.1f} us)")
        us = t["median_us"]
        t["gbps"] = row["bytes"] / us / 1e3
        t["tflops"] = row["flops"] / us / 1e6
        if row["bound"] == "compute":
            pct = 100 * t["tflops"] / roof[f"matmul_tflops_{row['dtype']}"]
        else:
            pct = 100 * t["gbps"] / roof["bandwidth_gbps"]
        t["roofline_pct"] = pct
        if pct > 100.0 and label != "copy":  # last guard: the probes should already hold the best rate seen
            t["roofline_pct_raw"] = pct
            t["roofline_pct"] = 100.0
            row["notes"].append(f"{label} beats the measured ceiling ({pct:.1f}%): clamped to 100%")
    k = row["times"].get(best)
    for other in ("eager", "compile"):
        if k and other in row["times"]:
            row[f"speedup_vs_{other}"] = row["times"][other]["median_us"] / k["median_us"]
    if k and "copy" in row["times"]:  # 1.0: as fast as a plain copy of the same bytes
        row["vs_same_size_copy"] = row["times"]["copy"]["median_us"] / k["median_us"]


def _row_line(row: dict) -> str:
    t = row["times"]
    cell = lambda k: f"{t[k]['median_us']:>10.1f}" if k in t else f"{'-':>10}"  # noqa: E731
    k = t.get(row.get("scored", "starter"), {})
    rate = (f"{k.get('tflops', 0):7.1f} TF/s" if row["bound"] == "compute" else f"{k.get('gbps', 0):7.0f} GB/s") if k else " " * 12
    pct = f"{k['roofline_pct']:5.1f}%" if k else "     -"
    vs = lambda n: f"{row[n]:6.2f}x" if n in row else f"{'-':>7}"  # noqa: E731
    note = ("  ! " + row["notes"][0]) if row["notes"] else ""
    return (f"{row['task']:<15}{row['dtype']:<9}{row['shape']:<19}{row['bytes'] / MB:>8.1f}"
            f"{cell('starter')}{cell('tuned')}{cell('eager')}{cell('compile')}  {rate} {pct} "
            f"{vs('speedup_vs_eager')} {vs('speedup_vs_compile')}{note}")


HEADER = (f"{'task':<15}{'dtype':<9}{'shape':<19}{'MB':>8}{'starter':>10}{'tuned':>10}{'eager':>10}{'compile':>10}"
          f"  {'rate':>12} {'%roof':>6} {'vsEager':>7} {'vsComp':>7}   (latencies: median us)")


# ----------------------------------------------------------------------------- targets

def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def targets(task: str, bound: str, rows: list[dict]) -> list[dict]:
    """Issue 8's targets for one forward task, issue 20's for a backward one: each met, missed or not measured."""
    timed = [r for r in rows if r.get("scored") in r["times"]]
    out = []

    def verdict(name, value, goal, fmt="{:.1f}"):
        out.append({"target": name, "value": value, "goal": goal,
                    "status": "not measured" if value is None else ("met" if value >= goal else "missed"),
                    "shown": "-" if value is None else fmt.format(value)})

    pct = lambda r: r["times"][r["scored"]]["roofline_pct"]  # noqa: E731
    if task == "matmul":
        sq = [r.get("speedup_vs_eager") for r in timed if r["dims"] == {"M": 4096, "N": 4096, "K": 4096}
              and r["dtype"] in ("float16", "bfloat16")]
        verdict("% of cuBLAS at 4096^3 fp16/bf16 (worst)", 100 * min(sq) if sq and None not in sq else None, 90.0)
        every = [r.get("speedup_vs_eager") for r in timed]
        verdict("% of cuBLAS at every shape (worst)", 100 * min(every) if every and None not in every else None, 75.0)
    elif task == "flash_attention":
        llama = [r.get("speedup_vs_eager") for r in timed if "llama" in r["shape"]]
        verdict("% of SDPA at LLaMA-7B shapes (worst)", 100 * min(llama) if llama and None not in llama else None, 80.0)
    elif task == "flash_attention_bwd":  # issue 20: eager is SDPA's backward alone (``baseline``)
        llama = [r.get("speedup_vs_eager") for r in timed if "llama" in r["shape"]]
        verdict("% of SDPA's backward at LLaMA-7B shapes (worst)",
                100 * min(llama) if llama and None not in llama else None, 70.0)
    elif bound == "memory" and task.endswith("_bwd"):  # issue 20's bars for a memory-bound backward
        big = [pct(r) for r in timed if r["bytes"] >= 128 * MB]
        verdict("% of copy BW, >= 128 MB (geomean)", _geomean(big), 80.0)
        vs = [r["speedup_vs_compile"] for r in timed if "speedup_vs_compile" in r]
        verdict("vs torch.compile, slowest shape (x)", min(vs) if vs else None, 1.0, "{:.2f}x")
    elif bound == "memory":
        big = [pct(r) for r in timed if r["bytes"] >= 128 * MB]
        mid = [pct(r) for r in timed if 16 * MB <= r["bytes"] < 128 * MB]
        verdict("% of copy BW, >= 128 MB (geomean)", _geomean(big), 85.0)
        verdict("% of copy BW, 16-128 MB (geomean)", _geomean(mid), 65.0)
        vs = [r["speedup_vs_compile"] for r in timed if "speedup_vs_compile" in r]
        verdict("vs torch.compile, slowest shape (x)", min(vs) if vs else None, 1.0, "{:.2f}x")
    return out


def summarize(rows: list[dict]) -> list[dict]:
    tasks = {}
    for r in rows:
        tasks.setdefault(r["task"], []).append(r)
    summary = []
    for task, rs in tasks.items():
        timed = [r for r in rs if r.get("scored") in r["times"]]
        summary.append({
            "task": task, "bound": rs[0]["bound"], "baseline": rs[0]["baseline"],
            "compile_mode": rs[0]["compile_mode"], "shapes": len(rs), "timed": len(timed),
            "geomean_us": _geomean([r["times"][r["scored"]]["median_us"] for r in timed]),
            "geomean_roofline_pct": _geomean([r["times"][r["scored"]]["roofline_pct"] for r in timed]),
            "geomean_speedup_vs_eager": _geomean([r.get("speedup_vs_eager") for r in timed]),
            "geomean_speedup_vs_compile": _geomean([r.get("speedup_vs_compile") for r in timed]),
            "targets": targets(task, rs[0]["bound"], rs),
        })
    return summary


def summarize_by_dtype(rows: list[dict]) -> list[dict]:
    """One line per task and dtype: geomeans over its shapes, the worst shape, issue 8's targets."""
    groups = {}
    for r in rows:
        groups.setdefault((r["task"], r["dtype"]), []).append(r)
    out = []
    for (task, dtype), rs in groups.items():
        timed = [r for r in rs if r.get("scored") in r["times"]]
        pct = {r["shape"]: r["times"][r["scored"]]["roofline_pct"] for r in timed}
        worst = min(pct, key=pct.get) if pct else None
        tg = targets(task, rs[0]["bound"], rs)
        out.append({
            "task": task, "dtype": dtype, "bound": rs[0]["bound"], "shapes": len(rs), "timed": len(timed),
            "geomean_roofline_pct": _geomean(list(pct.values())),
            "geomean_speedup_vs_eager": _geomean([r.get("speedup_vs_eager") for r in timed]),
            "geomean_speedup_vs_compile": _geomean([r.get("speedup_vs_compile") for r in timed]),
            "worst_shape": worst, "worst_roofline_pct": pct.get(worst),
            "targets_met": sum(t["status"] == "met" for t in tg),
            "targets_missed": [f"{t['target']} {t['shown']} (goal {t['goal']:g})" for t in tg if t["status"] == "missed"],
            "targets_not_measured": sum(t["status"] == "not measured" for t in tg),
            "geomean_vs_same_size_copy": _geomean([r.get("vs_same_size_copy") for r in timed]),
            **_copy_by_size(timed),
        })
    return out


def _copy_by_size(rows: list[dict]) -> dict:
    """% of roofline that a plain copy of each shape's bytes reaches, geomean per target size class:
    the ceiling a memory-bound kernel has at that size, launch and ramp included."""
    copies = [(r["bytes"], r["times"]["copy"]["roofline_pct"]) for r in rows if "copy" in r["times"]]
    if not copies:
        return {}
    return {"same_size_copy_pct_ge_128mb": _geomean([p for b, p in copies if b >= 128 * MB]),
            "same_size_copy_pct_16_128mb": _geomean([p for b, p in copies if 16 * MB <= b < 128 * MB])}


def print_summary(by_dtype: list[dict], roof: dict) -> None:
    """The table the docs quote: printed last."""
    f = lambda v, s="{:.2f}x": "-" if v is None else s.format(v)  # noqa: E731
    print(f"\nSummary: geomean over shapes of the scored kernel (tuned if given, else starter); % of roofline "
          f"against the {ceilings_line(roof)}")
    print(f"{'task':<16}{'dtype':<10}{'timed':>6}{'%roof':>8}{'vs eager':>10}{'vs compile':>11}  "
          f"{'vs copy':>8}  {'worst shape (%roof)':<28}targets")
    for s in by_dtype:
        worst = f"{s['worst_shape']} ({s['worst_roofline_pct']:.1f}%)" if s["worst_shape"] else "-"
        tg = f"{s['targets_met']} met, {len(s['targets_missed'])} missed"
        if s["targets_not_measured"]:
            tg += f", {s['targets_not_measured']} n/a"
        print(f"{s['task']:<16}{s['dtype']:<10}{s['timed']:>3}/{s['shapes']:<2}{f(s['geomean_roofline_pct'], '{:.1f}'):>8}"
              f"{f(s['geomean_speedup_vs_eager']):>10}{f(s['geomean_speedup_vs_compile']):>11}"
              f"{f(s['geomean_vs_same_size_copy']):>8}  {worst:<28}{tg}")
    missed = [(s["task"], s["dtype"], m) for s in by_dtype for m in s["targets_missed"]]
    if missed:
        print("missed targets:")
        for task, dtype, m in missed:
            print(f"  {task:<16}{dtype:<10}{m}")


# ----------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="CPU: interpreter, first test shape, no compile")
    ap.add_argument("--tasks", default="", help="comma-separated task names (default: all in kernels/)")
    ap.add_argument("--dtypes", default="", help="comma-separated dtypes (default: every dtype a task declares)")
    ap.add_argument("--kernel-dir", type=Path, default=None,
                    help="folder of tuned task folders (<dir>/<task>/kernel.py), timed beside the starters")
    ap.add_argument("--max-seconds", type=float, default=390.0,
                    help="no shape starts after this long; each task may compile only within its share of what is left")
    ap.add_argument("--target-ms", type=float, default=None,
                    help="ignored, kept for old command lines: the rep count is the harness's (timing.reps_for)")
    ap.add_argument("--flush", default="read", choices=FLUSH_MODES,
                    help="how L2 is evicted before each timed call: read (sum 256 MiB, the harness's way), "
                         "write (zero 256 MiB: the timed call also pays to write back L2's dirty lines), none")
    ap.add_argument("--no-compile", dest="compile", action="store_false", help="skip torch.compile")
    ap.add_argument("--compile-dtypes", default="bfloat16",
                    help="dtypes timed under torch.compile ('all' for every one; default bfloat16: fp16 compiles "
                         "the same way, and compile time is most of a run)")
    ap.add_argument("--compute-compile-mode", default=COMPILE_MODE,
                    help="kept for old command lines; only 'default' is accepted: 'vs compile' is the harness's "
                         "torch.compile of the reference (timing.compile_reference), one meaning in every run")
    ap.add_argument("--json", type=Path, default=None,
                    help="raw results (default: $OUT/kernel_quality.json, else ./kernel_quality-<time>.json)")
    args = ap.parse_args(argv)
    if args.compute_compile_mode != COMPILE_MODE:
        ap.error(f"--compute-compile-mode {args.compute_compile_mode}: torch.compile is timed as the harness "
                 "compiles it (default mode), so that 'vs compile' has one meaning; Nsight of another mode: "
                 "ncu_probe.py")
    if args.target_ms is not None:
        print("kernel_quality: --target-ms is ignored: each measurement takes the harness's rep count "
              "(timing.reps_for: 10-40 calls, about 20 ms of GPU time)", file=sys.stderr)
    t_start = time.perf_counter()
    sc.ensure_backend(args.smoke)
    import torch
    import triton

    if not args.smoke and not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU: run with --smoke for the CPU interpreter (timings then mean nothing)")
    device = "cpu" if args.smoke else "cuda"
    if args.smoke:
        args.compile = False
    dirs = sc.task_dirs(None, [t for t in args.tasks.split(",") if t])
    dtypes = [d for d in args.dtypes.split(",") if d]
    args.compile_dtypes = (["float16", "bfloat16", "float32"] if args.compile_dtypes == "all"
                           else [d for d in args.compile_dtypes.split(",") if d])
    timer = Timer(device, args.flush)
    from autokernel_tui.harness.worker.guards import LaunchCounter

    launches = LaunchCounter()  # this process's own: every checked kernel call must launch a Triton kernel
    launches.install()
    roof = measure_roofline(timer, device, args.smoke)
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU (Triton interpreter; timings not meaningful)"
    print(f"{name} | torch {torch.__version__} | triton {triton.__version__} | compile: "
          f"{','.join(args.compile_dtypes) if args.compile else 'off'} | roofline {time.perf_counter() - t_start:.0f} s")
    print(ceilings_line(roof))
    print(HEADER, flush=True)
    deadline = t_start + args.max_seconds
    path = args.json
    if path is None:
        path = (Path(os.environ["OUT"]) / "kernel_quality.json" if os.environ.get("OUT")
                else Path(f"kernel_quality-{time.strftime('%Y%m%d-%H%M%S')}.json"))
    path.parent.mkdir(parents=True, exist_ok=True)
    result = {"device": name, "torch": torch.__version__, "triton": triton.__version__,
              "python": sys.version.split()[0], "smoke": args.smoke, "roofline": roof,
              "method": {"timer": ("harness worker.timing.time_fresh: " + ("CUDA events per call" if device == "cuda"
                                                                            else "perf_counter per call")),
                         "l2_flush_bytes": timer.flush_bytes,
                         "l2_flush": args.flush if device == "cuda" else "none (CPU)",
                         "host_lead_cycles": HOST_LEAD_CYCLES if device == "cuda" else 0,
                         # at least that; longer for a call whose host side outlasts it (timing.lead_for)
                         "host_lead_factor": LEAD_FACTOR if device == "cuda" else 0,
                         "retake_above_spread": DISTURBED_SPREAD if device == "cuda" else None,  # timing.steadiest
                         "input_sets": "fresh per call: inputs.InputBuilder, make_inputs at seed 0 perturbed per "
                                       "call (seeds 1, 2, ...; the same sequence for every path); copies and "
                                       "cuBLAS probes reuse their buffers",
                         "statistic": "median, p20, p80",
                         "reps": "timing.reps_for: 10-40 calls, ~20 ms of GPU time (CPU: timing.CPU_REPS)",
                         "check": sc.METHOD,
                         "compile": "timing.compile_reference: torch.compile(reference, dynamic=False), default "
                                    "mode, as the harness's 'vs torch.compile'",
                         "compile_dtypes": args.compile_dtypes if args.compile else [],
                         "ceilings": "best probe: bandwidth max(copy, read-only sum); matmul max(cuBLAS at 8192^3, "
                                     "4096^3, every matmul task shape) per dtype; % above 100 clamped (noted)",
                         "compile_modes": {"compute": COMPILE_MODE, "memory": COMPILE_MODE}},
              "argv": sys.argv[1:], "kernel_dir": str(args.kernel_dir) if args.kernel_dir else None}
    rows = []
    for i, d in enumerate(dirs):
        tuned = args.kernel_dir / d.name if args.kernel_dir else None
        # Compile time is most of a run: each task compiles within a fair share of the
        # time left (what it leaves unused passes on), so no task loses its numbers.
        now = time.perf_counter()
        compile_until = min(deadline - COMPILE_RESERVE_S,
                            now + COMPILE_SHARE_SLACK * max(0.0, deadline - now) / (len(dirs) - i))
        rows.extend(run_task(d, tuned, dtypes, timer, roof, args, deadline, compile_until, launches))
        # Written after every task: a run cut short still leaves its numbers behind.
        result.update(partial=d != dirs[-1], wall_s=round(time.perf_counter() - t_start, 1),
                      summary=summarize(rows), summary_by_dtype=summarize_by_dtype(rows), rows=rows)
        path.write_text(json.dumps(result, indent=1, default=str))
    print_summary(result["summary_by_dtype"], roof)
    print(f"\nwrote {path} ({result['wall_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
