"""Does a launch cost the host more while the GPU is busy (issue 21)?

run 14 (H100) timed rmsnorm's kernel_fn at ~200 us of host per call between the harness's GPU spins,
yet 39 us per call back to back (where its ~6 us kernel leaves the GPU idle most of the time). This
probe times the same Python calls in two states of the GPU:

  * idle: ``torch.cuda.synchronize()`` before each call (nothing queued);
  * busy: a ~1 ms ``torch.cuda._sleep`` queued before each call (the GPU executing while the host
    launches, as in a model whose GPU is the bottleneck, and as in the harness's timed reps);

for a bare Triton kernel of one pointer argument (Triton's launcher alone), each chosen starter's
kernel_fn and its eager reference at the smallest default shape, in bf16.

GPU only:  PYTHONPATH=$PWD python3 benchmarks/launch_busy.py [--tasks rmsnorm,gelu] [--reps 100] [--json F]
Prints a table last (host us per call, median and p80).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: the repository's packages before any installed copy
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from autokernel_tui.harness import stats  # noqa: E402
from autokernel_tui.harness.worker.timing import no_gc  # noqa: E402
from autokernel_tui.tasks.spec import load_spec  # noqa: E402
from benchmarks import launch_cost as lc  # noqa: E402
from benchmarks import starters_check as sc  # noqa: E402

BUSY_CYCLES = 2_000_000  # ~1 ms at ~2 GHz: far longer than any launch here


@triton.jit
def _touch(ptr):
    tl.store(ptr, tl.load(ptr) + 1.0)


def host_per_call(fn, reps: int, busy: bool) -> dict:
    fn()
    fn()
    torch.cuda.synchronize()
    host = []
    with no_gc():
        for _ in range(reps):
            if busy:
                torch.cuda._sleep(BUSY_CYCLES)
            else:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            host.append((time.perf_counter() - t0) * 1e6)
            if busy:
                torch.cuda.synchronize()
    return {"median_us": stats.median(host), "p80_us": stats.percentile(host, 80)}


def subjects(tasks: list[str]):
    buf = torch.zeros(1, device="cuda", dtype=torch.float32)
    yield "triton bare launch", lambda: _touch[(1,)](buf)
    yield "torch.add (eager)", lambda: torch.add(buf, 1.0)
    for d in sc.task_dirs(None, tasks):
        spec = load_spec(d)
        dtype_name = "bfloat16" if "bfloat16" in spec.dtypes else spec.dtypes[0]
        ref = sc.load_reference(d, "busy")
        ker = sc.load_module(d / "kernel.py", "busy")
        shape = lc.smallest_shape(spec, ref, getattr(torch, dtype_name))
        inputs = sc.build_inputs(ref, shape.dims, dtype_name, "cuda", 0)
        yield f"{spec.name} kernel_fn", lambda k=ker, i=inputs: k.kernel_fn(*i)
        yield f"{spec.name} eager", lambda r=ref, i=inputs: r.reference(*i)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="rmsnorm,gelu,matmul", help="comma-separated starter names")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("launch_busy.py needs a CUDA GPU", file=sys.stderr)
        return 2
    sc.ensure_backend(smoke=False)
    rows = []
    for name, fn in subjects([t for t in a.tasks.split(",") if t]):
        rows.append({"what": name, "idle": host_per_call(fn, a.reps, False), "busy": host_per_call(fn, a.reps, True)})
    if a.json:
        a.json.write_text(json.dumps({"device": torch.cuda.get_device_name(), "reps": a.reps, "rows": rows}, indent=1))
    print(f"{'host us per call':<28}{'idle med':>10}{'p80':>8}{'busy med':>10}{'p80':>8}{'busy/idle':>11}")
    for r in rows:
        i, b = r["idle"], r["busy"]
        print(f"{r['what']:<28}{i['median_us']:10.1f}{i['p80_us']:8.1f}{b['median_us']:10.1f}{b['p80_us']:8.1f}"
              f"{b['median_us'] / i['median_us']:11.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
