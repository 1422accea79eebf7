"""Shared fixtures: one warm CPU Harness for the module, a tiny copy of the rmsnorm task."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from autokernel_tui.harness.runner import Harness

REPO = Path(__file__).resolve().parents[2]
RMSNORM = REPO / "kernels" / "rmsnorm"

TINY_SHAPES = """
[[test_shapes]]
name = "odd"
M = 7
N = 100
[[test_shapes]]
name = "row"
M = 2
N = 64
"""

# A plain one-row-per-program RMSNorm; exploits below are built on top of it.
PREFIX = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _rms(X, W, Y, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < N
    x = tl.load(X + row * N + cols, mask=m, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
    r = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    tl.store(Y + row * N + cols, (x * r * w).to(Y.dtype.element_ty), mask=m)


def launch(x, w, eps, y, rows=None):
    n = x.shape[-1]
    rows = x.numel() // n if rows is None else rows
    _rms[(rows,)](x, w, y, n, eps, BLOCK=triton.next_power_of_2(n))
    return y
'''

GOOD = PREFIX + '''

def kernel_fn(x, weight, eps):
    return launch(x, weight, eps, torch.empty_like(x))
'''


def make_tiny_task(dest: Path, dtypes: str = '["float16", "float32"]', tiny_on_gpu: bool = False) -> Path:
    """rmsnorm with two small test shapes and two dtypes: fast under the interpreter (and, with
    ``tiny_on_gpu``, on a GPU too: PREFIX's one-program-per-row kernel is not built for 50k-wide rows)."""
    dest.mkdir(parents=True, exist_ok=True)
    text = (RMSNORM / "task.toml").read_text()
    head = text.split("[[shapes]]", 1)[0]
    head = head.replace('dtypes = ["float16", "bfloat16", "float32"]', f"dtypes = {dtypes}")
    gpu_shapes = "[[shapes]]" + text.split("[[shapes]]", 1)[1].split("[[test_shapes]]", 1)[0]
    if tiny_on_gpu:
        gpu_shapes = TINY_SHAPES.replace("[[test_shapes]]", "[[shapes]]")
    (dest / "task.toml").write_text(head + gpu_shapes + TINY_SHAPES)
    shutil.copy(RMSNORM / "reference.py", dest / "reference.py")
    (dest / "kernel.py").write_text(GOOD)
    return dest


@pytest.fixture(scope="session")
def tiny_task(tmp_path_factory) -> Path:
    return make_tiny_task(tmp_path_factory.mktemp("tasks") / "rmsnorm")


@pytest.fixture(scope="session")
def harness(tmp_path_factory):
    h = Harness(timeout_s=120, device="cpu")
    yield h
    h.close()


BACKWARD_GOOD = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _rms_bwd(X, W, DY, DX, DWP, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < N
    x = tl.load(X + row * N + cols, mask=m, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
    dy = tl.load(DY + row * N + cols, mask=m, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    c = tl.sum(x * w * dy, axis=0) / N
    dx = rstd * (w * dy) - x * (rstd * rstd * rstd) * c
    tl.store(DX + row * N + cols, dx.to(DX.dtype.element_ty), mask=m)
    tl.store(DWP + row * N + cols, x * rstd * dy, mask=m)


@triton.jit
def _colsum(P, DW, M, N, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = cols < N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for r in range(0, M):
        acc += tl.load(P + r * N + cols, mask=m, other=0.0)
    tl.store(DW + cols, acc.to(DW.dtype.element_ty), mask=m)


def kernel_fn(x, weight, eps, grad_out):
    m, n = x.shape
    dx = torch.empty_like(x)
    partial = torch.empty((m, n), device=x.device, dtype=torch.float32)
    _rms_bwd[(m,)](x, weight, grad_out, dx, partial, n, eps, BLOCK=triton.next_power_of_2(n))
    dw = torch.empty_like(weight)
    _colsum[(triton.cdiv(n, 64),)](partial, dw, m, n, BLOCK=64)
    return dx, dw
'''


def make_backward_task(dest: Path) -> Path:
    """rmsnorm's backward (gradients of x and weight) at the tiny shapes: a backward task."""
    make_tiny_task(dest)
    text = (dest / "task.toml").read_text()
    text = text.replace('name = "rmsnorm"', 'name = "rmsnorm_bwd"', 1)
    (dest / "task.toml").write_text('kind = "backward"\ngrad_inputs = [0, 1]\n' + text)
    (dest / "kernel.py").write_text(BACKWARD_GOOD)
    return dest


SM90_SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile as triton_compile
import hopper_compile
import {module} as m
rows = {{}}
for name, fn, sig, const in ({variants}):
    sig = {{**sig, **{{k: "constexpr" for k in const}}}}
    k = triton_compile(ASTSource(fn=fn, signature=sig, constexprs=const), target=GPUTarget("cuda", 90, 32),
                       options={{"num_warps": m.NUM_WARPS}})
    rows[name] = hopper_compile._usage(k.asm["cubin"])
print(json.dumps(rows))
"""


def sm90_usage(module: str, variants: str) -> dict:
    """The harness's own kernels of ``module`` compiled for sm_90 on a machine without a GPU (a fresh Python,
    Triton's interpreter off, at the module's NUM_WARPS): ``hopper_compile._usage`` of each variant.
    ``variants``: Python source of (name, kernel, signature, constexprs) tuples, where the module is ``m``
    and ``triton.language`` is ``tl``."""
    import json
    import os
    import subprocess
    import sys
    script = SM90_SCRIPT.format(module=module, variants=variants)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", script, str(REPO / "tests" / "kernels")], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
