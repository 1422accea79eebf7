"""Sweep a starter's knobs on the GPU: every combination, timed beside the eager baseline.

The offline tuner walks a task's knob space one harness evaluation at a time;
this script is the engineer's quick look at a corner of that space: the
cartesian product of --grid values, each combination checked against eager
with the harness's checker (float64 reference, the task's tolerance, poisoned
allocations: starters_check.check_call) and timed with the harness's timer
(timing.time_fresh through kernel_quality.Timer: CUDA events, spin and L2 flush
before every call, fresh inputs per call, reps_for's count, median), per shape and
dtype. It prints one line per combination as it goes, then the combinations
ranked by geometric-mean speedup over eager, and writes everything as JSON.

    PYTHONPATH=$PWD python3 benchmarks/knob_sweep.py --task matmul --shapes gpt2-qkv,odd \\
        --grid SMALL_BLOCK_N=128,256 --grid SMALL_NUM_STAGES=3,4 --json $OUT/sweep.json
    python3 benchmarks/knob_sweep.py --task rmsnorm --grid NUM_WARPS=4,8 --smoke   # CPU, tiny shape

A combination that fails to compile, crashes or misses the tolerance is a row
with its reason, never a timing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: the repository's packages before any installed copy
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from autokernel_tui.harness import stats  # noqa: E402
from benchmarks import kernel_quality as kq, starters_check as sc  # noqa: E402


def parse_grid(items: list[str]) -> dict[str, list[int]]:
    """["A=1,2", "B=4"] -> {"A": [1, 2], "B": [4]}; values are ints (every knob is)."""
    grid: dict[str, list[int]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        if not sep or not name.isidentifier():
            raise SystemExit(f"--grid {item!r}: expected NAME=v1,v2,...")
        try:
            grid[name] = [int(v) for v in values.split(",") if v]
        except ValueError:
            raise SystemExit(f"--grid {item!r}: values must be integers") from None
    return grid


def combinations(grid: dict[str, list[int]]) -> list[dict[str, int]]:
    names = list(grid)
    return [dict(zip(names, values)) for values in itertools.product(*(grid[n] for n in names))]


def label(combo: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in combo.items()) or "(defaults)"


def sweep(task_dir: Path, grid: dict[str, list[int]], shape_names: list[str], dtypes: list[str],
          timer, deadline: float, smoke: bool, log=print) -> dict:
    import torch

    from autokernel_tui.harness.worker.correctness import as_tuple
    from autokernel_tui.harness.worker.inputs import InputBuilder
    from autokernel_tui.tasks.spec import load_spec

    spec = load_spec(task_dir)
    ref_mod = sc.load_reference(task_dir, "sweep")
    mod = sc.load_module(task_dir / "kernel.py", "sweep")
    unknown = [k for k in grid if not hasattr(mod, k)]
    if unknown:
        raise SystemExit(f"{task_dir.name}/kernel.py has no knob {', '.join(unknown)}")
    defaults = {k: getattr(mod, k) for k in grid}
    pool = spec.test_shapes if smoke else spec.shapes
    shapes = [s for s in pool if not shape_names or s.name in shape_names] or pool[:1]
    combos = [{}] + [c for c in combinations(grid) if c != defaults]
    cases = [(dt, sh) for dt in (dtypes or spec.dtypes) if dt in spec.dtypes for sh in shapes]
    result = {"task": spec.name, "defaults": defaults, "cases": [], "combos": [label(c) for c in combos]}
    builder = InputBuilder(ref_mod, timer.device, cache_bytes=0)
    loads = iter(range(1 << 30))

    def with_knobs(combo: dict[str, int]):
        # A fresh import per combination, as the tuner's candidates are each a new file: a starter plans its
        # launches once per shape in a module-level cache, which a knob set on one module would leave stale
        # (flash_attention_bwd's dK/dV grid, sized for the default BLOCK_N1, left half of dK unwritten).
        module = sc.load_module(task_dir / "kernel.py", f"sweep{next(loads)}")
        for k, v in {**defaults, **combo}.items():
            setattr(module, k, v)
        return module

    variants = {label(c): with_knobs(c) for c in combos}
    for dtype_name, shape in cases:
        dtype = getattr(torch, dtype_name)
        dims = dict(shape.dims)
        sample = builder.build({"dims": dims, "dtype": dtype_name, "base_seed": 0, "steps": []})
        expected = ref_mod.reference(*sample)
        precise = sc.precise_reference(ref_mod, sample)
        rep_bytes = kq.tensor_bytes(sample) + kq.tensor_bytes(as_tuple(expected))
        eager = timer(ref_mod.reference, kq.input_stream(builder, dims, dtype_name), rep_bytes)
        case = {"dtype": dtype_name, "shape": shape.name, "dims": dims, "bytes": ref_mod.bytes_moved(dims, dtype),
                "flops": ref_mod.flops(dims), "eager_us": eager["median_us"], "runs": {}}
        for combo in combos:
            if time.perf_counter() > deadline:
                case["runs"][label(combo)] = {"error": "skipped: --max-seconds spent"}
                continue
            ker = variants[label(combo)]
            try:
                verdict = sc.check_call(ker.kernel_fn, ref_mod, sample, spec.tolerances[dtype_name],
                                        precise=precise, eager=expected)
                fresh = kq.input_stream(builder, dims, dtype_name)
                run = ({"us": timer(ker.kernel_fn, fresh, rep_bytes)["median_us"]} if verdict["passed"]
                       else {"error": f"wrong: {verdict['why']}"})
            except Exception as exc:  # a config Triton cannot build is a result, not the end of the sweep
                run = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]}
            case["runs"][label(combo)] = run
            shown = f"{run['us']:9.1f} us {case['eager_us'] / run['us']:5.2f}x eager" if "us" in run else run["error"]
            log(f"{dtype_name:<9}{shape.name:<18}{label(combo):<60}{shown}")
        result["cases"].append(case)
        del sample, expected, precise
        if timer.device == "cuda":
            torch.cuda.empty_cache()
    return result


def ranking(result: dict) -> list[dict]:
    """Combinations that ran every case, by geometric-mean speedup over eager (best first)."""
    ranked = []
    for combo in result["combos"]:
        runs = [c["runs"].get(combo, {}) for c in result["cases"]]
        if runs and all("us" in r for r in runs):
            ratios = [c["eager_us"] / r["us"] for c, r in zip(result["cases"], runs)]
            ranked.append({"combo": combo, "geomean_vs_eager": stats.geomean(ratios),
                           "worst_vs_eager": min(ratios), "us": [r["us"] for r in runs]})
    return sorted(ranked, key=lambda r: -r["geomean_vs_eager"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", required=True, help="a starter name (kernels/<task>) or a task folder")
    ap.add_argument("--grid", action="append", default=[], help="NAME=v1,v2,... (repeat for more knobs)")
    ap.add_argument("--shapes", default="", help="comma-separated shape names (default: every default shape)")
    ap.add_argument("--dtypes", default="", help="comma-separated dtypes (default: every dtype the task declares)")
    ap.add_argument("--flush", default="read", choices=kq.FLUSH_MODES)
    ap.add_argument("--target-ms", type=float, default=None,
                    help="ignored, kept for old command lines: the rep count is the harness's (timing.reps_for)")
    ap.add_argument("--max-seconds", type=float, default=150.0, help="no combination starts after this long")
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--smoke", action="store_true", help="CPU interpreter, first test shape")
    ap.add_argument("--apply-best", action="store_true",
                    help="rewrite the task's kernel.py with the best combination when it beats the defaults by 1%%")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    sc.ensure_backend(args.smoke)
    import torch

    if not args.smoke and not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU: run with --smoke for the CPU interpreter (timings then mean nothing)")
    device = "cpu" if args.smoke else "cuda"
    task_dir = Path(args.task) if "/" in args.task else sc.REPO / "kernels" / args.task
    if args.target_ms is not None:
        print("knob_sweep: --target-ms is ignored: the harness's rep count (timing.reps_for) applies", file=sys.stderr)
    timer = kq.Timer(device, args.flush)
    result = sweep(task_dir, parse_grid(args.grid), [s for s in args.shapes.split(",") if s],
                   [d for d in args.dtypes.split(",") if d], timer, t0 + args.max_seconds, args.smoke)
    result.update(device=torch.cuda.get_device_name() if device == "cuda" else "CPU (interpreter)",
                  torch=torch.__version__, flush=args.flush, wall_s=round(time.perf_counter() - t0, 1),
                  ranking=ranking(result), argv=sys.argv[1:])
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    cases = ", ".join(f"{c['dtype'][:4]}/{c['shape']} (eager {c['eager_us']:.1f} us)" for c in result["cases"])
    print(f"\n{result['task']} on {result['device']}, flush {args.flush}: {cases}")
    print(f"{'geomean':>8}{'worst':>7}  combination (defaults: {label(result['defaults'])})")
    for r in result["ranking"][:args.top]:
        print(f"{r['geomean_vs_eager']:7.3f}x{r['worst_vs_eager']:6.2f}x  {r['combo']}")
    if args.apply_best:
        print(apply_best(task_dir, result))
    return 0


def apply_best(task_dir: Path, result: dict) -> str:
    """Write the winning combination into kernel.py (the knob lines only), if it won by 1%."""
    from autokernel_tui.agents.knobs import rewrite

    ranked = {r["combo"]: r for r in result["ranking"]}
    best, base = (result["ranking"] or [None])[0], ranked.get(label({}))
    if best is None or base is None or best["combo"] == label({}) \
            or best["geomean_vs_eager"] < 1.01 * base["geomean_vs_eager"]:
        return "apply-best: defaults kept"
    changes = {k: int(v) for k, v in (kv.split("=") for kv in best["combo"].split())}
    path = task_dir / "kernel.py"
    path.write_text(rewrite(path.read_text(), changes))
    return (f"apply-best: {path} now has {best['combo']} "
            f"({best['geomean_vs_eager'] / base['geomean_vs_eager']:.3f}x the defaults)")


if __name__ == "__main__":
    sys.exit(main())
