"""Host cost per call of each starter's kernel_fn beside its eager counterpart (issues 21 and 20).

For every task at its smallest default shape (fewest bytes moved), in one dtype; eager is a forward
task's reference, and for a backward task autograd's backward alone, its forward run off the clock (what
a training step pays for that backward; ``BackwardReference.backward_only``):

  * host us: the Python call's wall time with the GPU kept busy ahead of it (the harness's own
    timer, ``timing.time_reps``: a GPU spin and an L2 flush queued before each call, so the call
    never waits on the GPU), median and p20-p80 over --reps calls, kernel_fn and eager alike;
  * as called: ``timing.time_as_called``, the calls back to back as an eager model makes them
    (host and GPU overlapping): the per-call time such a model pays;
  * plans: how many ``_PLANS`` entries kernel_fn holds after all those calls (1: the launch was
    decided once and every later call was a dict lookup away from its launch);
  * graph us: the same calls captured in one CUDA graph (--graph-calls of them) and replayed, the
    replay's GPU time over the calls: what the kernel costs where `verify` recommends CUDA graphs,
    launch cost gone. Kernel and eager alike; "not capturable" where capture fails (a host sync).

GPU only (the interpreter's host time is the whole computation):
    PYTHONPATH=$PWD python3 benchmarks/launch_cost.py [--tasks a,b] [--dtype bfloat16] [--reps 200]
        [--json $OUT/launch_cost.json]
Prints a table last; host-bound rows (host us above the kernel's as-called time) are marked.

--at TASK:SHAPE adds a row at another shape (a default shape's name, or dims as K=V,K=V over the smallest
shape's): by default GPT-2's attention (gpt2-small), one of the two small-shape losses issue 21 names, so the
graph column says whether it is gone where launch cost is. The other, GPT-2's 1024 x 768 x 768 matmul, is
matmul's smallest default shape (gpt2-proj-b1), so its own row.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: the repository's packages before any installed copy
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from autokernel_tui.harness import stats  # noqa: E402
from autokernel_tui.harness.worker.reference import BackwardReference  # noqa: E402
from autokernel_tui.harness.worker.timing import (  # noqa: E402
    L2Flusher, time_as_called, time_graph, time_reps, warm_up)
from autokernel_tui.tasks.spec import load_spec  # noqa: E402
from benchmarks import starters_check as sc  # noqa: E402


def smallest_shape(spec, ref, dtype):
    return min(spec.shapes, key=lambda s: ref.bytes_moved(dict(s.dims), dtype))


# Issue 21's named losses beside the smallest shapes: attention at GPT-2 size (81 us against 17 as called)
ISSUE_SHAPES = "flash_attention:gpt2-small"


def shape_at(spec, ref, dtype, at: str | None):
    """The shape a row is timed at: the smallest default one, or ``at`` (a default shape's name, or
    K=V,K=V dims laid over the smallest shape's)."""
    small = smallest_shape(spec, ref, dtype)
    if not at:
        return small
    named = [s for s in spec.shapes if s.name == at]
    if named:
        return named[0]
    dims = dict(small.dims)
    for part in at.split(","):
        key, _, value = part.partition("=")
        if key not in dims or not value.isdigit():
            raise ValueError(f"shape {at!r}: {part!r} is neither a shape of {spec.name} nor K=V over its dims "
                             f"({', '.join(dims)})")
        dims[key] = int(value)
    return type(small)(at.replace(",", " "), dims)


def host_us(fn, inputs: tuple, reps: int, flush: L2Flusher) -> dict:
    warm_up(fn, inputs, calls=3)
    samples, outputs = time_reps(fn, [inputs] * reps, flush)
    del outputs
    h = samples.host_us
    return {"median_us": stats.median(h), "p20_us": stats.percentile(h, 20), "p80_us": stats.percentile(h, 80),
            "device_median_us": samples.median}


def eager_call(ref, inputs: tuple) -> tuple:
    """(fn, its inputs): the eager counterpart of a task's kernel_fn on ``inputs``."""
    if isinstance(ref, BackwardReference):
        prepare, run = ref.backward_only()
        return run, prepare(inputs)
    return ref.reference, inputs


def measure(task_dir: Path, dtype_name: str | None, reps: int, flush: L2Flusher, graph_calls: int,
            at: str | None = None) -> dict:
    spec = load_spec(task_dir)
    dtype_name = dtype_name if dtype_name in spec.dtypes else spec.dtypes[0]
    dtype = getattr(torch, dtype_name)
    ref = sc.load_reference(task_dir, "launch")
    ker = sc.load_module(task_dir / "kernel.py", "launch")
    shape = shape_at(spec, ref, dtype, at)
    inputs = sc.build_inputs(ref, shape.dims, dtype_name, "cuda", 0)
    eager, eager_inputs = eager_call(ref, inputs)
    row = {"task": spec.name, "kind": spec.kind, "shape": shape.name, "dims": dict(shape.dims), "dtype": dtype_name}
    row["kernel"] = host_us(ker.kernel_fn, inputs, reps, flush)
    row["eager"] = host_us(eager, eager_inputs, reps, flush)
    row["kernel"]["as_called_us"] = time_as_called(ker.kernel_fn, [inputs] * reps)
    row["eager"]["as_called_us"] = time_as_called(eager, [eager_inputs] * reps)
    row["plans"] = len(getattr(ker, "_PLANS", {})) if hasattr(ker, "_PLANS") else None
    if graph_calls:
        row["kernel"]["graph_us"] = time_graph(ker.kernel_fn, inputs, graph_calls)
        row["eager"]["graph_us"] = time_graph(eager, eager_inputs, graph_calls)
    torch.cuda.synchronize()
    return row


def _graph_cell(v) -> str:
    return f"{v:9.1f}" if isinstance(v, (int, float)) else f"{'-' if v is None else 'no cap':>9}"


def table(rows: list[dict]) -> str:
    head = (f"{'task':<20}{'shape':<18}{'dtype':<10}{'host us':>9}{'p20-p80':>14}{'eager host':>12}"
            f"{'ratio':>7}{'as called':>11}{'eager':>8}{'plans':>7}{'graph':>9}{'eager gr':>9}{'gr x':>7}")
    lines = [head, "-" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['task']:<20}error: {r['error']}")
            continue
        k, e = r["kernel"], r["eager"]
        kg, eg = k.get("graph_us"), e.get("graph_us")
        both = isinstance(kg, (int, float)) and isinstance(eg, (int, float)) and kg > 0
        bound = " host-bound" if k["median_us"] > k["as_called_us"] * 0.9 else ""
        lines.append(f"{r['task']:<20}{r['shape']:<18}{r['dtype']:<10}{k['median_us']:9.1f}"
                     f"{k['p20_us']:7.1f}-{k['p80_us']:<6.1f}{e['median_us']:12.1f}"
                     f"{k['median_us'] / e['median_us']:7.2f}{k['as_called_us']:11.1f}{e['as_called_us']:8.1f}"
                     f"{r['plans'] if r['plans'] is not None else '-':>7}{_graph_cell(kg)}{_graph_cell(eg)}"
                     f"{(eg / kg if both else float('nan')):7.2f}{bound}")
    lines.append("graph, eager gr: GPU us per call replayed in one CUDA graph; gr x: eager's over the kernel's "
                 "(above 1: the kernel wins where launch cost is gone)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="", help="comma-separated task names (default: every task)")
    ap.add_argument("--kinds", default="forward,backward", help="which tasks: forward, backward or both")
    ap.add_argument("--dtype", default="bfloat16", help="dtype to time (a task without it takes its first)")
    ap.add_argument("--reps", type=int, default=200, help="timed calls per function")
    ap.add_argument("--graph-calls", type=int, default=20,
                    help="calls captured in one CUDA graph for the graph columns (0: no graph columns)")
    ap.add_argument("--at", default=ISSUE_SHAPES,
                    help="extra rows, TASK:SHAPE separated by ';' (SHAPE: a default shape's name or K=V,K=V dims); "
                         "'' for none")
    ap.add_argument("--json", type=Path, help="write the rows here")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("launch_cost.py needs a CUDA GPU: host time under the interpreter means nothing", file=sys.stderr)
        return 2
    sc.ensure_backend(smoke=False)
    only = [t for t in a.tasks.split(",") if t] or None
    kinds = set(a.kinds.split(","))
    dirs = [d for d in sc.task_dirs(None, only) if load_spec(d).kind in kinds]
    flush = L2Flusher(torch.device("cuda"))
    extra = [tuple(item.split(":", 1)) for item in a.at.split(";") if ":" in item]
    by_name = {d.name: d for d in dirs}
    runs = [(d, None) for d in dirs] + [(by_name[t], at) for t, at in extra if t in by_name]
    rows = []
    for d, at in runs:
        try:
            rows.append(measure(d, a.dtype, a.reps, flush, a.graph_calls, at))
        except Exception as exc:  # one task's failure is a row, not the end of the run
            rows.append({"task": d.name, "error": f"{type(exc).__name__}: {exc}"[:200]})
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "reps": a.reps, "graph_calls": a.graph_calls,
                                     "rows": rows},
                                     indent=1))
    print()
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
