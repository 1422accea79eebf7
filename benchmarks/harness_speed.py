"""How fast and how discerning the harness is (issue 3's done-when figures).

(a) warm full evaluation wall time (all stages, all default shapes x dtypes, timing),
    N runs per task, median and p20/p80, Triton JIT time reported separately;
(b) A/A: compare(starter, starter) N times -> false-keep rate at the keep margin;
(c) planted slowdowns (--pairs FAST:SLOW), made one of two ways (--planted):
    spin (on a GPU, the default there): the starter plus one extra Triton kernel that
    spins for a fraction of the starter's own time at that shape (clock64 cycles; the
    starter's time per shape and the cycle rate measured beforehand, in a child process,
    with the harness's timer, and written into the variant), so "0.003:0.033" is two
    variants with the same launches whose GPU time
    differs by 3% of the kernel's at every shape, and nothing else: a clean 3% change.
    copy (the CPU interpreter's, where inline PTX cannot run): an extra copy kernel
    moving a fraction more bytes, plus an allocation; its cost moves between runs far
    more than the A/A does (runs 10 and 13: one comparison of ten measured 0.84x the
    wrong way), which made it a weak test of a 3% change.
    Each: how often compare() calls the faster one faster (its CI's low end above the
    keep margin), and the ratio measured.

Needs torch + triton + this package only:
    PYTHONPATH=$PWD python3 benchmarks/harness_speed.py --json $OUT/harness_speed.json
    PYTHONPATH=$PWD python3 benchmarks/harness_speed.py --smoke        # CPU, interpreter, tiny N
Prints a short table last and writes the raw numbers as JSON.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

if __package__ in (None, ""):  # run as a file: the repository's packages before any installed copy
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autokernel_tui.harness import stats  # noqa: E402
from autokernel_tui.harness.runner import Harness  # noqa: E402
from autokernel_tui.tasks.spec import KERNEL_FILE, starters_dir  # noqa: E402

EXTRA_FRACTION = 0.03

EXTRA_KERNEL = '''

# --- harness_speed.py: the starter plus one extra copy kernel moving {pct:.0f}% more bytes ---
EXTRA_FRACTION = {fraction}


@triton.jit
def _extra_copy(SRC, DST, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(DST + offs, tl.load(SRC + offs, mask=m), mask=m)


def kernel_fn(*inputs):
    out = _starter_kernel_fn(*inputs)
    x = inputs[0].reshape(-1)
    n = max(1, int(x.numel() * EXTRA_FRACTION))  # read n + write n elements: ~3% of read x + write y
    scratch = torch.empty(n, dtype=x.dtype, device=x.device)
    _extra_copy[(triton.cdiv(n, 4096),)](x, scratch, n, BLOCK=4096)
    return out
'''


SPIN_KERNEL = '''

# --- harness_speed.py: the starter plus one extra kernel spinning {pct:.1f}% of the starter's time ---
# The starter's GPU us per call at each input signature and the spin's cycles per us, measured by
# harness_speed.py before the comparisons (the harness's own timer): kernel.py times nothing itself.
SPIN_FRACTION = {fraction}
_STARTER_US = {starter_us}
_CYCLES_PER_US = {cycles_per_us}


@triton.jit
def _spin(OUT, cycles):
    start = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    now = start
    while now - start < cycles:
        now = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    tl.store(OUT, now - start)


def kernel_fn(*inputs):
    out = _starter_kernel_fn(*inputs)
    key = tuple((tuple(t.shape), str(t.dtype)) for t in inputs if isinstance(t, torch.Tensor))
    cycles = max(1, int(SPIN_FRACTION * _STARTER_US.get(key, 0.0) * _CYCLES_PER_US))
    device = next(t.device for t in inputs if isinstance(t, torch.Tensor))
    _spin[(1,)](torch.empty(1, dtype=torch.int64, device=device), cycles)
    return out
'''
PLANTED = {"copy": EXTRA_KERNEL, "spin": SPIN_KERNEL}


def slower_variant(source: str, fraction: float = EXTRA_FRACTION, how: str = "copy",
                   spin: "SpinPlan | None" = None) -> str:
    """The starter with an extra Triton kernel: ``copy`` moves ``fraction`` more bytes (memory-bound tasks
    whose bytes are ~ read the first input + write an output of its size); ``spin`` spins for ``fraction``
    of the starter's own GPU time at each shape, as ``spin`` (``spin_plan``) measured it (a GPU only:
    inline PTX)."""
    if "import triton.language as tl" not in source:
        source = "import triton.language as tl\n" + source
    plan = spin or SpinPlan({}, 0.0)
    return source.replace("def kernel_fn(", "def _starter_kernel_fn(") + PLANTED[how].format(
        pct=fraction * 100, fraction=fraction, starter_us=repr(plan.starter_us), cycles_per_us=plan.cycles_per_us)


class SpinPlan(NamedTuple):
    starter_us: dict  # ((shape, dtype) of each tensor input, ...) -> the starter's GPU us per call
    cycles_per_us: float  # the SM clock, as the spin counts it


def spin_plan(task_dir: Path, quick: bool = False) -> SpinPlan:
    """The starter's GPU time at every shape x dtype the harness times, and the spin's clock, measured in a
    child process (``--spin-plan``) before the harness starts: this one never starts CUDA (the sandbox's
    rule about a parent's CUDA never comes up), and the child's fresh inputs do not share the card with the
    harness's processes (run 18: beside a warm judge, contestant and spares it ran out of 80 GB)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--spin-plan", str(task_dir)] + (["--quick"] if quick else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"measuring the spin plan failed: {proc.stderr[-2000:]}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    return SpinPlan({ast.literal_eval(k): v for k, v in got["starter_us"]}, got["cycles_per_us"])


def measure_spin_plan(task_dir: Path, quick: bool = False) -> dict:
    """``spin_plan``'s figures, measured in this process with the harness's own timer (``timing.time_fresh``:
    L2 flushed, fresh inputs per call, the GPU kept ahead); JSON-ready (each key as its repr)."""
    import torch

    from autokernel_tui.harness.worker.inputs import InputBuilder
    from autokernel_tui.harness.worker.loading import load_module
    from autokernel_tui.harness.worker.reference import load_reference
    from autokernel_tui.harness.worker.timing import L2Flusher, time_fresh
    from autokernel_tui.tasks.spec import load_spec

    spec = load_spec(task_dir)
    ref = load_reference(task_dir)
    kernel = load_module(task_dir / KERNEL_FILE, "harness_speed_spin")
    builder = InputBuilder(ref, "cuda", 0)
    flush = L2Flusher(torch.device("cuda"))
    sleep_cycles = 1_000_000
    rate = sleep_cycles / time_fresh(lambda: torch.cuda._sleep(sleep_cycles), lambda: (), flush).median
    starter_us = []
    for shape in spec.shapes_for("cuda"):
        for dtype in spec.dtypes[:1] if quick else spec.dtypes:
            counter = iter(range(1, 1 << 30))
            fresh = lambda: builder.build({"dims": dict(shape.dims), "dtype": dtype, "base_seed": 0,  # noqa: E731
                                           "steps": [["perturb", next(counter)]]})
            key = tuple((tuple(t.shape), str(t.dtype)) for t in fresh() if isinstance(t, torch.Tensor))
            starter_us.append([repr(key), round(time_fresh(kernel.kernel_fn, fresh, flush).median, 3)])
    return {"cycles_per_us": round(rate, 3), "starter_us": starter_us}


def _has_cuda() -> bool:
    """Whether a CUDA device is there, asked of NVML: this process must not start CUDA (spin_plan)."""
    import os

    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch

    return torch.cuda.is_available()


def _spread(values: list[float]) -> dict:
    return {"median": stats.median(values), "p20": stats.percentile(values, 20),
            "p80": stats.percentile(values, 80), "min": min(values), "max": max(values), "n": len(values)}


def measure_task(harness: Harness, task_dir: Path, runs: int, ab_runs: int, detect_runs: int,
                 quick: bool = False, log=print, pairs: tuple[tuple[float, float], ...] = ((0.0, EXTRA_FRACTION),),
                 checkpoint=lambda result: None, planted: str = "copy", new_sources: bool = False,
                 spin: SpinPlan | None = None) -> dict:
    """``checkpoint(result)`` after every comparison: a run cut at its limit keeps what it measured (run 14's
    A/A comparisons were lost whole when the step outran 320 s)."""
    source = (task_dir / KERNEL_FILE).read_text()
    result: dict = {"task": task_dir.name}
    t0 = time.perf_counter()
    first = harness.evaluate(task_dir, quick=quick)  # cold: baselines, compile of the reference, JIT
    result["first_eval"] = {"status": first.status, "reason": first.reason, "wall_s": first.wall_s,
                            "compile_s": first.compile_s, "with_setup_s": time.perf_counter() - t0}
    if first.status != "PASS":
        log(f"{task_dir.name}: starter did not pass: {first.status} {first.reason}")
        return result
    walls, jits, splits = [], [], []
    for i in range(runs):
        # new_sources: each run a source of its own (a comment differs), so a new contestant with an empty
        # Triton cache, as every candidate of a real loop gets: what a new source pays besides its own JIT
        rep = harness.evaluate(task_dir, kernel_source=f"{source}\n# harness_speed run {i}\n" if new_sources
                               else None, quick=quick)
        walls.append(rep.wall_s)
        jits.append(rep.compile_s)
        splits.append(rep.time_split or {})
        log(f"  {task_dir.name} eval {i + 1}/{runs}: {rep.status} wall {rep.wall_s:.2f} s, JIT {rep.compile_s:.2f} s")
    result["eval_wall_s"] = _spread(walls)
    result["eval_jit_s"] = _spread(jits)
    result["eval_wall_ex_jit_s"] = _spread([w - j for w, j in zip(walls, jits)])
    result["summary"] = rep.summary.to_dict() if rep.summary else None
    # Where a warm evaluation's wall time goes (the report's time_split), median seconds by part.
    parts = sorted({k for sp in splits for k in sp})
    result["eval_split_s"] = {k: round(stats.median([sp.get(k, 0.0) for sp in splits]), 4) for k in parts}
    for k, v in sorted(result["eval_split_s"].items(), key=lambda kv: -kv[1]):
        log(f"  {task_dir.name} warm eval split: {k:<40} {v:7.3f} s")

    log(f"  {task_dir.name}: {ab_runs} A/A comparisons, then {detect_runs} against each planted slowdown")

    def compared(label: str, i: int, n: int, fast: str, slow: str):
        c = harness.compare(task_dir, fast, slow, quick=quick)
        log(f"  {task_dir.name} {label} {i + 1}/{n}: {c.status} speedup {c.speedup:.3f} "
            f"[{c.ci_low:.3f}, {c.ci_high:.3f}] kept {c.faster} (first comparison said faster: {_first_faster(c)})"
            + ("" if c.status == "PASS" else f": {c.reason}"))  # run 18's one FAIL said no more than its status
        return c

    aa: list = []
    record_aa(result, aa, harness)
    result["variants"] = []
    for i in range(ab_runs):
        aa.append(compared("A/A", i, ab_runs, source, source))
        record_aa(result, aa, harness)
        checkpoint(result)
    if planted == "spin" and spin is None and any(f for pair in pairs for f in pair):
        raise ValueError("a spin variant needs the task's spin plan (spin_plan), measured before the harness starts")
    if spin is not None:
        result["spin_plan"] = {"cycles_per_us": spin.cycles_per_us, "starter_us": list(spin.starter_us.values())}
        log(f"  {task_dir.name}: spin at {spin.cycles_per_us:.0f} cycles/us; the starter's us per call "
            + ", ".join(f"{v:.1f}" for v in spin.starter_us.values()))
    variant = lambda f: slower_variant(source, f, planted, spin) if f else source  # noqa: E731
    for fast, slow in pairs:
        det = []
        for i in range(detect_runs):
            det.append(compared(f"+{fast:.1%} vs +{slow:.1%}", i, detect_runs, variant(fast), variant(slow)))
            record_variant(result, det, fast, slow, replace=i > 0, planted=planted)
            checkpoint(result)
    result["method"] = aa[0].method if aa else ""
    return result


def _samples(c) -> list | None:
    """A comparison's raw times (the screening comparison's first when it was confirmed), to 0.001 us:
    benchmarks/ci_methods.py judges other interval methods on them."""
    found = getattr(c, "samples", None)
    if not found:
        return None
    return [{**comp, "rows": [{**row, "candidate_us": [round(t, 3) for t in row["candidate_us"]],
                               "incumbent_us": [round(t, 3) for t in row["incumbent_us"]]} for row in comp["rows"]]}
            for comp in found]


def _first_faster(c) -> bool:
    """Whether the first comparison called it faster. c.screen is set whenever a confirming comparison ran:
    after a first one that said faster, or one that was undecided (median above the margin, CI low end not)."""
    return c.screen is not None and c.screen.get("faster", True)


def record_aa(result: dict, aa: list, harness: Harness) -> None:
    result["aa"] = {"n": len(aa), "false_keeps": sum(c.faster for c in aa),
                    "first_pass_keeps": sum(_first_faster(c) for c in aa),
                    "speedups": [c.speedup for c in aa], "ci": [(c.ci_low, c.ci_high) for c in aa],
                    "statuses": [c.status for c in aa], "reasons": [c.reason for c in aa],
                    "keep_margin": harness.keep_margin,
                    "cross_check": [getattr(c, "cross_check", None) for c in aa],
                    "per_shape": [getattr(c, "per_shape", None) for c in aa],
                    "samples": [_samples(c) for c in aa]}


def record_variant(result: dict, det: list, fast: float, slow: float, replace: bool, planted: str = "copy") -> None:
    entry = {"n": len(det), "detected": sum(c.faster for c in det),
             "first_pass_detected": sum(_first_faster(c) for c in det),
             "pair": [fast, slow], "label": f"+{fast:.1%} vs +{slow:.1%}",
             "speedups": [c.speedup for c in det], "ci": [(c.ci_low, c.ci_high) for c in det],
             "statuses": [c.status for c in det], "reasons": [c.reason for c in det],
             "cross_check": [getattr(c, "cross_check", None) for c in det],
             # which shapes a wrong-way or wide comparison came from
             "per_shape": [getattr(c, "per_shape", None) for c in det],
             "samples": [_samples(c) for c in det],
             "change": (f"extra spin kernel: +{fast:.1%} vs +{slow:.1%} of the starter's time" if planted == "spin"
                        else f"extra copy kernel: +{fast:.1%} vs +{slow:.1%} bytes")}
    if replace:
        result["variants"][-1] = entry
    else:
        result["variants"].append(entry)


def table(results: list[dict], device: str) -> str:
    lines = [f"harness_speed on {device}",
             "(false keeps and detections: confirmed by a second, role-swapped comparison; "
             "the first comparison's count in parentheses)",
             f"{'task':<14}{'eval wall s (ex JIT) med [p20-p80]':>36}{'JIT s':>8}{'A/A false keeps':>17}"
             f"{'planted change':>18}{'detected':>14}{'ratio':>8}"]
    for r in results:
        if "eval_wall_ex_jit_s" not in r:
            lines.append(f"{r['task']:<14} starter failed: {r['first_eval']['reason']}")
            continue
        w, aa = r["eval_wall_ex_jit_s"], r["aa"]
        for i, d in enumerate(r["variants"]):
            ratio = stats.median(d["speedups"]) if d["speedups"] else float("nan")
            wall = f"{w['median']:.2f} [{w['p20']:.2f}-{w['p80']:.2f}]"
            keeps = f"{aa['false_keeps']}/{aa['n']} ({aa['first_pass_keeps']})"
            head = (f"{r['task']:<14}{wall:>36}{r['eval_jit_s']['median']:>8.2f}{keeps:>17}" if i == 0
                    else " " * 75)
            found = f"{d['detected']}/{d['n']} ({d['first_pass_detected']})"
            lines.append(f"{head}{d['label']:>18}{found:>14}{ratio:>8.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="rmsnorm,softmax", help="comma-separated starter names or task folders")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--ab-runs", type=int, default=20)
    parser.add_argument("--detect-runs", type=int, default=20)
    parser.add_argument("--pairs", default="0.003:0.033",
                        help="planted changes FAST:SLOW, each an extra kernel of that fraction (0: none)")
    parser.add_argument("--planted", default="auto", choices=("auto", "spin", "copy"),
                        help="the extra kernel: spin for a fraction of the starter's time (GPU), or copy a "
                             "fraction of the bytes; auto: spin on a GPU, copy on the CPU interpreter")
    parser.add_argument("--new-sources", action="store_true",
                        help="each warm evaluation a new source (a comment differs): a new contestant and Triton "
                             "cache, as each candidate of a real loop; JIT is still reported apart")
    parser.add_argument("--json", default=None, help="write the raw results here")
    parser.add_argument("--smoke", action="store_true", help="CPU interpreter, quick evaluations, N = 1")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--sandbox", default="auto", choices=("auto", "bwrap", "landlock", "off"),
                        help="harness.sandbox: 'off' gives the same tree's time without confinement")
    parser.add_argument("--spin-plan", default=None, metavar="TASK_DIR", help=argparse.SUPPRESS)  # spin_plan's child
    parser.add_argument("--quick", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.spin_plan:
        print(json.dumps(measure_spin_plan(Path(args.spin_plan), args.quick)))
        return 0
    device = "cpu" if args.smoke else "auto"
    if args.smoke:
        args.runs, args.ab_runs, args.detect_runs = 1, 1, 1
    dirs = [Path(t) if "/" in t else starters_dir() / t for t in args.tasks.split(",") if t]
    results = []
    pairs = tuple(tuple(map(float, p.split(":"))) for p in args.pairs.split(",") if p)
    planted = args.planted if args.planted != "auto" else ("spin" if not args.smoke and _has_cuda() else "copy")
    # Spin plans first, each in a child process that is gone before the harness starts (spin_plan).
    spins = planted == "spin" and any(f for p in pairs for f in p)
    plans = {d: spin_plan(d, args.smoke) for d in dirs} if spins else {}
    with Harness(timeout_s=args.timeout, device=device, sandbox=args.sandbox, keep_samples=True) as harness:
        info = harness.device_info()
        def save(partial: dict | None = None) -> None:  # after every comparison and task: a cut run keeps its numbers
            if args.json:
                Path(args.json).parent.mkdir(parents=True, exist_ok=True)
                Path(args.json).write_text(json.dumps({"device": info, "results": results + ([partial] if partial else []),
                                                       "smoke": args.smoke, "argv": sys.argv[1:]}, indent=1))

        for task_dir in dirs:
            results.append(measure_task(harness, task_dir, args.runs, args.ab_runs, args.detect_runs,
                                        quick=args.smoke, log=lambda *a: print(*a, flush=True),
                                        pairs=pairs, checkpoint=save, planted=planted, new_sources=args.new_sources,
                                        spin=plans.get(task_dir)))
            save()
    print(table(results, info.get("name", "?") + ("" if info.get("timing_meaningful") else " (timings not meaningful)")))
    return 0 if all("eval_wall_s" in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
