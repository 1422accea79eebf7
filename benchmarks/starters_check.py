"""Correctness of every starter task at full shapes, with the harness's own checker.

Standalone (torch + triton + stdlib, no pytest): on a GPU it checks every task
at its FULL default shapes in every dtype it declares; on a CPU (``--smoke``)
it runs the small test shapes under the Triton interpreter. It prints a
task x dtype verdict table and writes the details as JSON.

    PYTHONPATH=$PWD python3 benchmarks/starters_check.py --json $OUT/starters.json
    python3 benchmarks/starters_check.py --smoke --tasks rmsnorm,softmax

A thin caller of the harness's worker side (also used by tests/kernels and tests/gpu):
* inputs: ``inputs.InputBuilder`` from the task's ``make_inputs`` (seed 0) and, for
  the adversarial cases, the task's ``ADVERSARIAL`` transforms, as the judge builds them;
* outputs: ``correctness.check_structure`` against the eager reference's outputs
  (count, plain tensor, shape, dtype, device, no alias of an input), then
  ``correctness.compare`` of each against ``correctness.precise_reference`` (float64):
  elementwise |out - ref| <= atol + rtol * |ref| and ||out - ref|| / ||ref|| <= max_rel_l2;
* every output element written: kernel_fn runs under ``guards.OpRecorder(poison=True)``,
  which fills every fresh allocation with NaN (``guards.poison_``), so an unwritten
  element fails the comparison; the same recorder names any PyTorch compute op
  kernel_fn calls (the harness rejects those);
* inputs unchanged (``correctness.check_inputs_unchanged``, bitwise);
* with ``--smoke`` off, that a Triton kernel launched (``guards.LaunchCounter``);
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
if __package__ in (None, ""):  # run as a file: the repository's packages before any installed copy
    sys.path.insert(0, str(REPO))

DTYPE_NAMES = {"float16": "float16", "bfloat16": "bfloat16", "float32": "float32"}
METHOD = ("the harness's checker (autokernel_tui.harness.worker): inputs by inputs.InputBuilder (seed 0, "
          "ADVERSARIAL transforms seeded 1); correctness.check_structure against the eager outputs, "
          "correctness.compare against correctness.precise_reference (float64) with the task's atol/rtol and "
          "max_rel_l2; fresh allocations NaN-poisoned and compute ops recorded by guards.OpRecorder; inputs "
          "bitwise unchanged; a Triton launch counted by guards.LaunchCounter")


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


def load_reference(task_dir: Path, tag: str):
    """A task's reference as the harness sees it: the module, or for a backward task (``kind =
    "backward"``) the harness's ``BackwardReference`` around it (inputs end with ``grad_out``, the
    outputs are the gradients)."""
    from autokernel_tui.harness.worker.reference import BackwardReference
    from autokernel_tui.tasks.spec import load_spec

    module = load_module(Path(task_dir) / "reference.py", tag)
    spec = load_spec(task_dir)
    return BackwardReference(module, spec.grad_inputs, spec.saved) if spec.kind == "backward" else module


def task_dirs(root: Path | None = None, only: list[str] | None = None) -> list[Path]:
    from autokernel_tui.tasks.spec import find_tasks

    root = root or REPO / "kernels"
    specs = find_tasks(root)
    if only:
        unknown = sorted(set(only) - {s.name for s in specs})
        if unknown:
            raise SystemExit(f"unknown task(s): {', '.join(unknown)} (have: {', '.join(s.name for s in specs)})")
    return [s.path for s in specs if not only or s.name in only]


def precise_reference(ref_mod, inputs: tuple) -> tuple:
    """The harness's float64 reference (``correctness.precise_reference``): a tuple of outputs."""
    from autokernel_tui.harness.worker.correctness import precise_reference as precise

    return precise(ref_mod, inputs)


@contextlib.contextmanager
def poisoned_allocations():
    """kernel_fn's fresh allocations filled with NaN (floats) or the largest value (ints), as the
    harness poisons them (``guards.OpRecorder(poison=True)``, which calls ``guards.poison_``).
    Yields the recorder: ``forbidden()`` names any PyTorch compute op called inside."""
    from autokernel_tui.harness.worker.guards import OpRecorder

    recorder = OpRecorder(poison=True)
    with recorder:
        yield recorder


def _failed(why: str) -> dict:
    return {"passed": False, "why": why, "max_abs_err": math.inf, "rel_l2_err": math.inf}


def compare(out, eager, precise, tol, inputs: tuple = ()) -> dict:
    """One verdict by the harness's checker: ``check_structure`` of ``out`` against the eager
    outputs (and no alias of ``inputs``), then ``correctness.compare`` of each output against the
    float64 reference ``precise`` with the task's tolerance ``tol``."""
    import torch

    from autokernel_tui.harness.worker import correctness, transfer
    from autokernel_tui.harness.worker.errors import Verdict

    outs = correctness.as_tuple(out)
    refs = correctness.as_tuple(precise)
    try:
        expected = [transfer.describe(e) for e in correctness.as_tuple(eager)]
        correctness.check_structure(outs, expected, tuple(inputs), "kernel_fn", "check")
    except Verdict as v:
        return _failed(v.reason)
    except AttributeError:  # the eager reference itself returned something that is not a tensor
        return _failed("the reference returned a non-tensor output")
    if len(refs) != len(outs):
        return _failed(f"{len(outs)} outputs, the float64 reference has {len(refs)}")
    errors = [correctness.compare(o, r.to(o.device), tol.atol, tol.rtol, tol.max_rel_l2) for o, r in zip(outs, refs)]
    why = ""
    for i, (o, r, e) in enumerate(zip(outs, refs, errors)):
        if not e.ok:
            why = f"output {i}: {e.detail}"
            if bool((~torch.isfinite(o.detach()) & torch.isfinite(r.to(o.device))).any()):
                why += " (non-finite where the reference is finite: unwritten or overflowed elements)"
            break
    return {"passed": not why, "why": why, "max_abs_err": max(e.max_abs_err for e in errors),
            "rel_l2_err": max(e.rel_l2_err for e in errors)}


def build_inputs(ref_mod, dims: dict, dtype_name: str, device: str, seed: int = 0,
                 adversarial: str | None = None) -> tuple:
    """The inputs the judge builds from this recipe: ``make_inputs`` at ``seed``, then the task's
    ``ADVERSARIAL[adversarial]`` transform (seeded ``seed + 1``) when one is named."""
    from autokernel_tui.harness.worker.inputs import InputBuilder

    steps = [["transform", adversarial, seed + 1]] if adversarial else []
    builder = InputBuilder(ref_mod, device, cache_bytes=0)
    return builder.build({"dims": dict(dims), "dtype": dtype_name, "base_seed": seed, "steps": steps})


def check_call(kernel_fn, ref_mod, inputs: tuple, tol, launches=None, precise: tuple | None = None,
               eager=None) -> dict:
    """kernel_fn on ``inputs`` checked as the harness checks a call; the verdict dict of ``compare``.

    ``launches``: a ``guards.LaunchCounter`` already installed, to require a Triton launch.
    ``precise`` and ``eager``: the float64 and eager references on ``inputs``, when already made."""
    import torch

    from autokernel_tui.harness.worker import correctness
    from autokernel_tui.harness.worker.errors import Verdict

    before = correctness.snapshot_inputs(inputs)
    precise = precise_reference(ref_mod, inputs) if precise is None else precise
    eager = ref_mod.reference(*inputs) if eager is None else eager
    count = launches.count if launches is not None else 0
    with poisoned_allocations() as recorder:
        out = kernel_fn(*inputs)
    if any(isinstance(t, torch.Tensor) and t.is_cuda for t in inputs):
        torch.cuda.synchronize()
    verdict = compare(out, eager, precise, tol, inputs)
    problems = []
    bad_ops = recorder.forbidden()
    if bad_ops:
        problems.append(f"kernel_fn calls {bad_ops[0]} (a PyTorch compute op): the work must be done in Triton")
    if launches is not None and launches.count == count:
        problems.append("kernel_fn launched no Triton kernel")
    try:
        correctness.check_inputs_unchanged(before, inputs, "kernel_fn", "check")
    except Verdict as v:
        problems.append(v.reason)
    if problems:
        verdict.update(passed=False, why=verdict["why"] or problems[0])
    return verdict


def check_case(task_dir: Path, dtype_name: str, shape, device: str, seed: int = 0,
               adversarial: str | None = None, tag: str = "check", launches=None) -> dict:
    """Kernel and eager baseline vs float64 for one task, dtype, shape and input transform."""
    from autokernel_tui.tasks.spec import load_spec

    spec = load_spec(task_dir)
    ref_mod = load_reference(task_dir, tag)
    ker_mod = load_module(task_dir / "kernel.py", tag)
    tol = spec.tolerances[dtype_name]
    inputs = build_inputs(ref_mod, shape.dims, dtype_name, device, seed, adversarial)
    precise = precise_reference(ref_mod, inputs)
    eager = ref_mod.reference(*inputs)
    kernel = check_call(ker_mod.kernel_fn, ref_mod, inputs, tol, launches, precise, eager)
    baseline = compare(eager, eager, precise, tol)
    return {"task": spec.name, "dtype": dtype_name, "shape": shape.name, "dims": dict(shape.dims),
            "adversarial": adversarial or "", "kernel": kernel, "baseline": baseline}


def adversarial_shapes(shapes) -> list:
    """The first and the last shape: by convention they take different code paths (short rows, looped rows)."""
    return [shapes[0]] if len(shapes) == 1 else [shapes[0], shapes[-1]]


def check_task(task_dir: Path, device: str, dtypes: list[str] | None = None, launches=None) -> list[dict]:
    """Every shape x declared dtype, plus each adversarial transform on the first and last shapes."""
    from autokernel_tui.tasks.spec import load_spec

    spec = load_spec(task_dir)
    ref_mod = load_reference(task_dir, "check")
    shapes = spec.shapes_for(device)
    rows = []
    for dtype_name in spec.dtypes:
        if dtypes and dtype_name not in dtypes:
            continue
        for shape in shapes:
            rows.append(_guarded(task_dir, dtype_name, shape, device, None, launches))
        for name in getattr(ref_mod, "ADVERSARIAL", {}):
            for shape in adversarial_shapes(shapes):
                rows.append(_guarded(task_dir, dtype_name, shape, device, name, launches))
    return rows


def _guarded(task_dir, dtype_name, shape, device, adversarial, launches=None) -> dict:
    import torch

    t0 = time.perf_counter()
    try:
        row = check_case(task_dir, dtype_name, shape, device, adversarial=adversarial, launches=launches)
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
    from autokernel_tui.harness.worker.guards import LaunchCounter

    launches = LaunchCounter()  # this process's own: every checked call must launch a Triton kernel
    launches.install()
    rows = []
    for d in dirs:
        rows.extend(check_task(d, device, dtypes, launches))
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
                                    "method": METHOD, "summary": summary, "cases": rows}, indent=1, default=str))
        print(f"wrote {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
