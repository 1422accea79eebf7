"""Compile every task's Triton kernels for Hopper (sm_90) on a machine without a GPU.

Runs each task's real kernel_fn on small CPU tensors with Triton's launcher
replaced: every launch is specialised exactly as the CUDA launcher would do it,
compiled for sm_90 through ptxas (shipped with triton) and not run. Prints one
line per distinct kernel variant: registers, spills, shared memory and the
interesting SASS instructions (HGMMA tensor-core ops, TMA, cp.async, barriers and
warp shuffles: the cost of a block reduction). Catches
GPU-only compile errors and register spills before a GPU run.

    python tests/kernels/hopper_compile.py [--tasks a,b] [--dtypes bfloat16] [--json out.json]
Must run WITHOUT TRITON_INTERPRET (it is unset here).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # a script: the repository's packages (autokernel_tui, benchmarks) first

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource, compile as triton_compile, make_backend  # noqa: E402
from triton.runtime.jit import JITFunction, create_function_from_signature  # noqa: E402

from benchmarks import starters_check as sc  # noqa: E402
from autokernel_tui.tasks.spec import load_spec  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
LAYOUTS = ("weight_layout",)  # adversarial transforms that change layout, not values (matmul: B = W.t())
BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
SASS_OPS = r"\b(HGMMA\.\S+|HMMA\.\S+|UTMALDG\S*|UTMASTG\S*|LDGSTS\S*|MUFU\.\S+|BAR\.\S+|SHFL\.\S+|LDG\.\S+|STG\.\S+|LDL\S*|STL\S*|USETMAXREG\S*)"


def _op_name(instr: str) -> str:
    """HGMMA.64x128x16.F32.BF16 -> HGMMA; global loads/stores and async copies keep their width:
    LDG.E.128 -> LDG.128, LDG.E.U16 -> LDG.U16, LDG.E -> LDG.32, LDGSTS.E.BYPASS.128 -> LDGSTS.128
    (a row loaded 2 bytes per instruction shows here)."""
    head, *rest = instr.split(".")
    if head in ("LDG", "STG", "LDGSTS"):
        width = next((p for p in rest if p in ("U8", "S8", "U16", "S16", "64", "128")), "32")
        return f"{head}.{width}"
    return head


def _usage(cubin: bytes) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        res = subprocess.run([str(BIN / "cuobjdump"), "--dump-resource-usage", f.name],
                             capture_output=True, text=True).stdout
        sass = subprocess.run([str(BIN / "cuobjdump"), "-sass", f.name], capture_output=True, text=True).stdout
    fields = dict(re.findall(r"(REG|STACK|LOCAL|SHARED):(\d+)", res))
    ops = collections.Counter(_op_name(m) for m in re.findall(SASS_OPS, sass))
    return {"regs": int(fields.get("REG", -1)), "local_bytes": int(fields.get("LOCAL", 0)),
            "stack_bytes": int(fields.get("STACK", 0)), "sass": dict(ops)}


class OfflineLauncher:
    """Stands in for JITFunction.run: specialise, compile for sm_90, record, do not launch."""

    def __init__(self):
        self.backend = make_backend(TARGET)
        self.seen: dict[str, dict] = {}
        self.context = ""

    def run(self, fn: JITFunction, *args, grid, warmup, **kwargs):
        binder = create_function_from_signature(fn.signature, fn.params, self.backend)
        bound_args, specialization, options = binder(*args, **kwargs)
        options, signature, constexprs, attrs = fn._pack_args(self.backend, kwargs, bound_args, specialization, options)
        key = f"{fn.__name__}|{signature}|{constexprs}|{attrs}|{options.num_warps}|{options.num_stages}"
        if key in self.seen:
            return None
        consts = {fn.arg_names[k[0]]: v for k, v in constexprs.items()
                  if isinstance(k, tuple) and len(k) == 1 and isinstance(v, (int, bool, str))}
        row = {"kernel": fn.__name__, "where": self.context, "num_warps": options.num_warps,
               "num_stages": options.num_stages, "constexprs": consts, "error": ""}
        try:
            compiled = triton_compile(ASTSource(fn, signature, constexprs, attrs), target=TARGET,
                                      options=options.__dict__)
            row.update(shared=compiled.metadata.shared, **_usage(compiled.asm["cubin"]))
        except Exception as exc:  # a compile error is this variant's verdict
            last = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
            row.update(shared=0, regs=-1, local_bytes=0, stack_bytes=0, sass={},
                       error=f"{type(exc).__name__}: {last[-1] if last else ''}"[:400])
        self.seen[key] = row
        return None


def compile_tasks(tasks: list[str] | None, dtypes: list[str] | None, knobs: dict[str, int] | None = None,
                  dims: dict[str, int] | None = None) -> list[dict]:
    """Compile every launch of each task's kernel_fn; ``knobs`` overrides module constants,
    ``dims`` replaces the test shapes with one shape (e.g. a full-width row)."""
    launcher = OfflineLauncher()
    original = JITFunction.run
    JITFunction.run = lambda self, *a, grid, warmup, **k: launcher.run(self, *a, grid=grid, warmup=warmup, **k)
    try:
        for task_dir in sc.task_dirs(None, tasks):
            spec = load_spec(task_dir)
            ref = sc.load_reference(task_dir, "sm90")
            ker = sc.load_module(task_dir / "kernel.py", "sm90")
            for name, value in (knobs or {}).items():
                setattr(ker, name, value)
            for dtype_name in spec.dtypes:
                if dtypes and dtype_name not in dtypes:
                    continue
                for name, shape_dims in ([("dims", dims)] if dims else [(s.name, s.dims) for s in spec.test_shapes]):
                    launcher.context = f"{spec.name}/{dtype_name}/{name}"
                    inputs = ref.make_inputs(dict(shape_dims), getattr(torch, dtype_name), "cpu", 0)
                    ker.kernel_fn(*inputs)
                    for layout in LAYOUTS:  # the layouts a model calls with take their own kernel variants
                        transform = (getattr(ref, "ADVERSARIAL", None) or {}).get(layout)
                        if transform is not None:
                            launcher.context = f"{spec.name}/{dtype_name}/{name}+{layout}"
                            ker.kernel_fn(*transform(inputs, torch.Generator().manual_seed(0)))
    finally:
        JITFunction.run = original
    return list(launcher.seen.values())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", default="")
    ap.add_argument("--dtypes", default="")
    ap.add_argument("--set", action="append", default=[], metavar="KNOB=V", help="override a kernel.py knob")
    ap.add_argument("--dims", default="", help="one shape instead of the test shapes, e.g. M=4,N=50257 (a word for a variant: epilogue=bias)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    pairs = lambda text: {k: int(v) if v.isdigit() else v for k, v in (kv.split("=") for kv in text)}  # noqa: E731
    rows = compile_tasks([t for t in args.tasks.split(",") if t] or None, [d for d in args.dtypes.split(",") if d] or None,
                         pairs(args.set), pairs([d for d in args.dims.split(",") if d]))
    for r in rows:
        tail = f"COMPILE ERROR {r['error']}" if r["error"] else str(r["sass"])
        print(f"{r['where']:<40}{r['kernel']:<22}w{r['num_warps']:<3}s{r['num_stages']:<2}regs {r['regs']:>3} "
              f"spill {r['local_bytes'] + r['stack_bytes']:>4}B smem {r['shared']:>6}  {tail}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 1 if any(r["error"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
