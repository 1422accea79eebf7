"""What each piece of a warm evaluation costs, per config, in one process (issues 18, 21).

A warm evaluation's time (`harness_speed.py`'s time split) is mostly per-rep work on both sides:
the fresh inputs each timed call gets (a perturbation of the cached base inputs), the GPU spin and
L2 flush before each call, the fingerprints of every timed output, and the judge's float64
reference for the reps it verifies. This script times each of those pieces alone, in this process
(no sandbox, no pool), for every default shape x dtype of a task, with the task's reference standing
in for the kernel, so the next change to the harness knows which piece to make cheaper.

    PYTHONPATH=$PWD python3 benchmarks/eval_costs.py --tasks rmsnorm --json $OUT/eval_costs.json

Each figure: wall milliseconds per unit, the GPU synchronized at both ends, median of --repeat
measurements of --units units each. Prints one table per task last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from autokernel_tui.harness.worker import inputs as inputs_mod  # noqa: E402
from autokernel_tui.harness.worker import timing  # noqa: E402
from autokernel_tui.harness import stats  # noqa: E402
from autokernel_tui.harness.worker.correctness import as_tuple, precise_reference  # noqa: E402
from autokernel_tui.harness.worker.reference import load_reference  # noqa: E402
from autokernel_tui.tasks.spec import load_spec, starters_dir  # noqa: E402


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _ms_per(fn, units: int, repeat: int) -> float:
    """Median wall ms per unit of ``fn(units)``, synchronized at both ends."""
    fn(1)
    _sync()
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(units)
        _sync()
        runs.append((time.perf_counter() - t0) * 1e3 / units)
    return statistics.median(runs)


def costs(task_dir: Path, units: int, repeat: int, device: str = "cuda") -> list[dict]:
    spec = load_spec(task_dir)
    ref = load_reference(task_dir)
    builder = inputs_mod.InputBuilder(ref, device, 8 << 30)
    flusher = timing.L2Flusher(torch.device(device)) if device == "cuda" else None
    rows = []
    for shape in spec.shapes_for(device):
        for dtype in spec.dtypes:
            recipe = {"dims": dict(shape.dims), "dtype": dtype, "base_seed": 1, "steps": [["perturb", 2]]}
            sample = builder.build(recipe)
            out = as_tuple(ref.reference(*sample))
            seeds = iter(range(10**6))

            def build(n):
                for _ in range(n):
                    builder.build({**recipe, "steps": [["perturb", next(seeds)]]})

            def fingerprint_batch(n):  # n reps of one batch: one w per output, n dots
                inputs_mod.fingerprint_batch([out] * n, next(seeds))

            def verify(n):  # the judge's check of one rep: float64 reference, its fingerprint and bound
                for _ in range(n):
                    refs = precise_reference(ref, sample)
                    for i, r in enumerate(refs):
                        inputs_mod.fingerprint_bound(r, next(seeds) + i, 1e-3, device)

            def call(n):
                for _ in range(n):
                    ref.reference(*sample)

            def timed_reps(n):  # time_reps with the default lead, inputs prebuilt: spin + flush + call
                timing.time_reps(ref.reference, [sample] * n, flusher)

            def as_called(n):
                timing.time_as_called(ref.reference, [sample] * n)

            row = {"task": spec.name, "shape": shape.name, "dtype": dtype,
                   "input_mb": round(inputs_mod.nbytes(sample) / 1e6, 1)}
            for name, fn in (("build", build), ("fingerprint", fingerprint_batch), ("verify", verify),
                             ("call", call), ("timed_rep", timed_reps), ("as_called", as_called)):
                row[f"{name}_ms"] = round(_ms_per(fn, units, repeat), 4)
            host = timing.time_reps(ref.reference, [sample] * units, flusher)[0].host_us
            row["host_us_p80"] = round(stats.percentile(host, 80), 1) if host else None
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", default="rmsnorm")
    p.add_argument("--units", type=int, default=10)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", default="")
    p.add_argument("--smoke", action="store_true", help="the CPU, the tasks' small test shapes (checks the script)")
    args = p.parse_args()
    if not torch.cuda.is_available() and not args.smoke:
        print("eval_costs.py needs a GPU (--smoke: the CPU, small shapes)", file=sys.stderr)
        return 2
    device = "cpu" if args.smoke else "cuda"
    rows = []
    for task in args.tasks.split(","):
        rows += costs(starters_dir() / task, args.units, args.repeat, device)
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    if args.json:
        Path(args.json).write_text(json.dumps({"device": name, "rows": rows}, indent=1))
    cols = ["build_ms", "fingerprint_ms", "verify_ms", "call_ms", "timed_rep_ms", "as_called_ms", "host_us_p80"]
    print(f"\n{name}: wall ms per unit (median of {args.repeat} x {args.units})")
    print(f"{'task':10} {'shape':16} {'dtype':9} {'MB in':>7} " + " ".join(f"{c[:-3] if c.endswith('_ms') else c:>12}"
                                                                           for c in cols))
    for r in rows:
        print(f"{r['task']:10} {r['shape']:16} {r['dtype']:9} {r['input_mb']:7.1f} "
              + " ".join(f"{r[c]:12.4f}" if r[c] is not None else f"{'-':>12}" for c in cols))
    return 0


if __name__ == "__main__":
    sys.exit(main())
