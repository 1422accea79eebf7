"""Correctness check of every starter task, independent of the harness.

Standalone (torch + triton + stdlib, no pytest): on a GPU it checks every task
at its FULL default shapes in every dtype it declares; on a CPU (``--smoke``)
it runs the small test shapes under the Triton interpreter. It prints a
task x dtype verdict table and writes the details as JSON.

    PYTHONPATH=$PWD python3 benchmarks/starters_check.py --json $OUT/starters.json
    python3 benchmarks/starters_check.py --smoke --tasks rmsnorm,softmax

The checks (also used by tests/kernels and tests/gpu):
* output dtype and shape match the eager reference's;
* elementwise |out - ref| <= atol + rtol * |ref| and ||out - ref|| / ||ref||
  <= max_rel_l2, both against a float64 reference;
* every output element written: outputs are allocated from NaN-poisoned memory
  (torch.empty* patched for the call), so an unwritten element shows as NaN;
* the adversarial inputs of reference.ADVERSARIAL pass the same checks;
* the eager baseline in the input dtype passes the same tolerance.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

DTYPE_NAMES = {"float16": "float16", "bfloat16": "bfloat16", "float32": "float32"}


def ensure_backend(smoke: bool) -> None:
    """The interpreter must be chosen before any @triton.jit kernel is defined."""
    if smoke:
        os.environ["TRITON_INTERPRET"] = "1"


def load_module(path: Path, tag: str):
    """Import a task file under a unique name, so tasks never shadow each other."""
    name = f"_starter_{path.parent.name}_{path.stem}_{tag}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def task_dirs(root: Path | None = None, only: list[str] | None = None) -> list[Path]:
    from autokernel_tui.tasks.spec import find_tasks

    root = root or REPO / "kernels"
    specs = find_tasks(root)
    if only:
        unknown = sorted(set(only) - {s.name for s in specs})
        if unknown:
            raise SystemExit(f"unknown task(s): {', '.join(unknown)} (have: {', '.join(s.name for s in specs)})")
    return [s.path for s in specs if not only or s.name in only]


def _tensors(out) -> list:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for t in out if isinstance(t, torch.Tensor)]
    raise TypeError(f"output must be a tensor or a tuple of tensors, got {type(out).__name__}")


def to_float64(inputs: tuple) -> tuple:
    import torch

    return tuple(x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs)


def precise_reference(ref_mod, inputs: tuple):
    if hasattr(ref_mod, "reference_precise"):
        return ref_mod.reference_precise(*inputs)
    return ref_mod.reference(*to_float64(inputs))


@contextlib.contextmanager
def poisoned_allocations():
    """Make torch.empty* return NaN-filled (floats) or extreme-valued (ints) memory."""
    import torch

    originals = {n: getattr(torch, n) for n in ("empty", "empty_like", "empty_strided")}

    def poison(t):
        if t.is_floating_point():
            t.fill_(float("nan"))
        elif t.dtype != torch.bool:
            t.fill_(torch.iinfo(t.dtype).min)
        return t

    def wrap(fn):
        return lambda *a, **k: poison(fn(*a, **k))

    for n, fn in originals.items():
        setattr(torch, n, wrap(fn))
    try:
        yield
    finally:
        for n, fn in originals.items():
            setattr(torch, n, fn)


def compare(out, eager, precise, tol) -> dict:
    """One verdict: dtype/shape vs the eager output, tolerances vs float64."""
    import torch

    outs, eagers, refs = _tensors(out), _tensors(eager), _tensors(precise)
    if len(outs) != len(eagers):
        return {"passed": False, "why": f"{len(outs)} outputs, reference has {len(eagers)}",
                "max_abs_err": math.inf, "rel_l2_err": math.inf}
    max_abs, rel_l2, why = 0.0, 0.0, ""
    for i, (o, e, r) in enumerate(zip(outs, eagers, refs)):
        if o.shape != e.shape or o.dtype != e.dtype:
            why = why or f"output {i}: {tuple(o.shape)} {o.dtype}, reference {tuple(e.shape)} {e.dtype}"
            max_abs = rel_l2 = math.inf
            continue
        o64, r64 = o.double(), r.double().to(o.device)
        if not torch.isfinite(o64).all() and not torch.equal(torch.isfinite(o64), torch.isfinite(r64)):
            why = why or f"output {i}: non-finite values (unwritten or overflowed elements)"
            max_abs = rel_l2 = math.inf
            continue
        finite = torch.isfinite(r64)
        diff = (o64 - r64).where(finite, torch.zeros_like(o64))
        err = diff.abs().max().item() if diff.numel() else 0.0
        denom = r64.where(finite, torch.zeros_like(r64)).norm().item()
        l2 = diff.norm().item() / denom if denom > 0 else (0.0 if diff.norm().item() == 0 else math.inf)
        max_abs, rel_l2 = max(max_abs, err), max(rel_l2, l2)
        bad = (diff.abs() > tol.atol + tol.rtol * r64.abs().where(finite, torch.zeros_like(r64)))
        if bad.any():
            why = why or f"output {i}: {int(bad.sum())} of {bad.numel()} elements outside atol/rtol (max abs err {err:.3g})"
        if l2 > tol.max_rel_l2:
            why = why or f"output {i}: rel-L2 error {l2:.3g} > {tol.max_rel_l2:.3g}"
    return {"passed": not why, "why": why, "max_abs_err": max_abs, "rel_l2_err": rel_l2}


def check_case(task_dir: Path, dtype_name: str, shape, device: str, seed: int = 0,
               adversarial: str | None = None, tag: str = "check") -> dict:
    """Kernel and eager baseline vs float64 for one task, dtype, shape and input transform."""
    import torch
    from autokernel_tui.tasks.spec import load_spec

    spec = load_spec(task_dir)
    ref_mod = load_module(task_dir / "reference.py", tag)
    ker_mod = load_module(task_dir / "kernel.py", tag)
    dtype = getattr(torch, dtype_name)
    tol = spec.tolerances[dtype_name]
    inputs = ref_mod.make_inputs(dict(shape.dims), dtype, device, seed)
    if adversarial:
        g = torch.Generator(device="cpu").manual_seed(seed + 1)
        inputs = ref_mod.ADVERSARIAL[adversarial](inputs, g)
    snapshot = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    precise = precise_reference(ref_mod, inputs)
    eager = ref_mod.reference(*inputs)
    with poisoned_allocations():
        out = ker_mod.kernel_fn(*inputs)
    if device == "cuda":
        torch.cuda.synchronize()
    kernel = compare(out, eager, precise, tol)
    for i, (a, b) in enumerate(zip(inputs, snapshot)):
        if isinstance(a, torch.Tensor) and not torch.equal(a, b):
            kernel.update(passed=False, why=kernel["why"] or f"input {i} was modified by kernel_fn")
    for o in _tensors(out):
        for x in inputs:
            if isinstance(x, torch.Tensor) and o.numel() and o.untyped_storage().data_ptr() == x.untyped_storage().data_ptr():
                kernel.update(passed=False, why=kernel["why"] or "an output aliases an input")
    baseline = compare(eager, eager, precise, tol)
    return {"task": spec.name, "dtype": dtype_name, "shape": shape.name, "dims": dict(shape.dims),
            "adversarial": adversarial or "", "kernel": kernel, "baseline": baseline}


def adversarial_shapes(shapes) -> list:
    """The first and the last shape: by convention they take different code paths (short rows, looped rows)."""
    return [shapes[0]] if len(shapes) == 1 else [shapes[0], shapes[-1]]


def check_task(task_dir: Path, device: str, dtypes: list[str] | None = None) -> list[dict]:
    """Every shape x declared dtype, plus each adversarial transform on the first and last shapes."""
    from autokernel_tui.tasks.spec import load_spec

    spec = load_spec(task_dir)
    ref_mod = load_module(task_dir / "reference.py", "check")
    shapes = spec.shapes_for(device)
    rows = []
    for dtype_name in spec.dtypes:
        if dtypes and dtype_name not in dtypes:
            continue
        for shape in shapes:
            rows.append(_guarded(task_dir, dtype_name, shape, device, None))
        for name in getattr(ref_mod, "ADVERSARIAL", {}):
            for shape in adversarial_shapes(shapes):
                rows.append(_guarded(task_dir, dtype_name, shape, device, name))
    return rows


def _guarded(task_dir, dtype_name, shape, device, adversarial) -> dict:
    import torch

    t0 = time.perf_counter()
    try:
        row = check_case(task_dir, dtype_name, shape, device, adversarial=adversarial)
    except Exception as exc:  # a crash is a verdict, not the end of the table
        row = {"task": task_dir.name, "dtype": dtype_name, "shape": shape.name, "dims": dict(shape.dims),
               "adversarial": adversarial or "",
               "kernel": {"passed": False, "why": f"{type(exc).__name__}: {exc}"[:300],
                          "max_abs_err": math.inf, "rel_l2_err": math.inf},
               "baseline": {"passed": False, "why": "not run", "max_abs_err": math.inf, "rel_l2_err": math.inf}}
    row["seconds"] = round(time.perf_counter() - t0, 3)
    if device == "cuda":
        torch.cuda.empty_cache()
    return row


def summarize(rows: list[dict]) -> list[dict]:
    table = {}
    for r in rows:
        key = (r["task"], r["dtype"])
        t = table.setdefault(key, {"task": r["task"], "dtype": r["dtype"], "cases": 0, "kernel_fail": [],
                                   "baseline_fail": [], "max_rel_l2": 0.0})
        t["cases"] += 1
        t["max_rel_l2"] = max(t["max_rel_l2"], r["kernel"]["rel_l2_err"])
        label = r["shape"] + (f"+{r['adversarial']}" if r["adversarial"] else "")
        if not r["kernel"]["passed"]:
            t["kernel_fail"].append(f"{label}: {r['kernel']['why']}")
        if not r["baseline"]["passed"]:
            t["baseline_fail"].append(f"{label}: {r['baseline']['why']}")
    return list(table.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="CPU: test shapes under the Triton interpreter")
    ap.add_argument("--tasks", default="", help="comma-separated task names (default: all)")
    ap.add_argument("--dtypes", default="", help="comma-separated dtypes (default: all declared)")
    ap.add_argument("--kernel-dir", type=Path, default=None, help="folder of task folders (default: kernels/)")
    ap.add_argument("--json", type=Path, default=None, help="where to write the JSON (default: $OUT/starters.json)")
    args = ap.parse_args(argv)
    ensure_backend(args.smoke)
    import torch

    device = "cpu" if args.smoke or not torch.cuda.is_available() else "cuda"
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    dirs = task_dirs(args.kernel_dir, [t for t in args.tasks.split(",") if t])
    dtypes = [d for d in args.dtypes.split(",") if d]
    rows = []
    for d in dirs:
        rows.extend(check_task(d, device, dtypes))
        print(f"checked {d.name}", file=sys.stderr, flush=True)
    summary = summarize(rows)
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU (Triton interpreter)"
    print(f"\nstarter check on {name}, torch {torch.__version__}")
    print(f"{'task':<16}{'dtype':<10}{'cases':>6}  {'verdict':<8}{'max rel-L2':>12}  baseline")
    ok = True
    for t in summary:
        passed = not t["kernel_fail"]
        ok &= passed
        print(f"{t['task']:<16}{t['dtype']:<10}{t['cases']:>6}  {'PASS' if passed else 'FAIL':<8}"
              f"{t['max_rel_l2']:>12.3g}  {'PASS' if not t['baseline_fail'] else 'FAIL'}")
        for why in t["kernel_fail"][:3]:
            print(f"    kernel   {why}")
        for why in t["baseline_fail"][:3]:
            print(f"    baseline {why}")
    path = args.json or (Path(os.environ["OUT"]) / "starters.json" if os.environ.get("OUT") else None)
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"device": name, "torch": torch.__version__,
                                    "triton": __import__("triton").__version__,
                                    "summary": summary, "cases": rows}, indent=1, default=str))
        print(f"wrote {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
