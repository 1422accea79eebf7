"""Edge cases of the backward starters (kernels/*_bwd) that the generic per-task check
(test_starters.py: every test shape, dtype and adversarial transform) does not reach:
softmax's looped path on rows whose first chunks are all -inf, GELU's two approximations over
both tails, and wrong gradients failing the harness's checker. Tiny shapes: interpreter speed."""

import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from benchmarks import starters_check as sc

from autokernel_tui.tasks.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "kernels"


def _kernel(task):
    return sc.load_module(KERNELS / task / "kernel.py", "rows_bwd")


def _softmax_grad64(x, dy):
    x64 = x.double().requires_grad_(True)
    (g,) = torch.autograd.grad(torch.softmax(x64, dim=-1), x64, dy.double())
    return g


@pytest.mark.parametrize("n", [9001, 96], ids=["looped", "rows"])
def test_softmax_bwd_masked_rows(n):
    # Causal-style rows: row r keeps only its last few entries, so in the looped path (n wider
    # than MAX_FUSED_N_FP32) whole leading chunks are -inf and the running max starts at -inf.
    ker = _kernel("softmax_bwd")
    assert (n > ker.MAX_FUSED_N_FP32) == (n == 9001)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, n, generator=g) * 3.0
    keep = [1, 7, n // 2 + 3, n]  # entries kept at the end of each row
    for r, k in enumerate(keep):
        x[r, : n - k] = float("-inf")
    dy = torch.randn(4, n, generator=g)
    (dx,) = ker.kernel_fn(x, dy)
    ref = _softmax_grad64(x, dy)
    assert torch.isfinite(dx).all()
    assert (dx[0] == 0).all()  # one kept entry: y is one-hot, dx = y * (dy - dy) = 0 everywhere
    assert torch.allclose(dx.double(), ref, atol=1e-6, rtol=1e-4)


def test_softmax_bwd_looped_bf16_strided_rows():
    # bf16 rows that are views into wider storage (row stride != N): the looped path without the
    # aligned head (VEC = 1), in the input dtype.
    ker = _kernel("softmax_bwd")
    g = torch.Generator().manual_seed(1)
    n = ker.MAX_FUSED_N + 5
    x = (torch.randn(3, n + 3, generator=g) * 4.0).to(torch.bfloat16)[:, 3:]
    dy = torch.randn(3, n, generator=g).to(torch.bfloat16)
    (dx,) = ker.kernel_fn(x, dy)
    assert dx.dtype == torch.bfloat16 and dx.shape == x.shape
    ref = _softmax_grad64(x, dy)
    assert ((dx.double() - ref).norm() / ref.norm()) < 1e-2


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_bwd_both_approximations_over_both_tails(approximate):
    ker = _kernel("gelu_bwd")
    x = torch.cat([torch.linspace(-12.0, 12.0, 2001), torch.tensor([-1e3, -60.0, -1e-6, 0.0, 1e-6, 60.0, 1e3])])
    dy = torch.ones_like(x)
    (dx,) = ker.kernel_fn(x, approximate, dy)
    x64 = x.double().requires_grad_(True)
    (ref,) = torch.autograd.grad(F.gelu(x64, approximate=approximate), x64, dy.double())
    assert torch.isfinite(dx).all()
    assert torch.allclose(dx.double(), ref, atol=2e-6, rtol=1e-5), (dx.double() - ref).abs().max()
    # The flag really switches the formula: the other variant's gradient differs by ~1e-3.
    other = "tanh" if approximate == "none" else "none"
    (wrong,) = torch.autograd.grad(F.gelu(x64, approximate=other), x64, dy.double())
    assert (dx.double() - wrong).abs().max() > 1e-4


def _broken_copy(tmp_path, task, old, new):
    dst = tmp_path / task
    shutil.copytree(KERNELS / task, dst)  # the linked reference.py is copied as a file
    src = (dst / "kernel.py").read_text()
    assert old in src
    (dst / "kernel.py").write_text(src.replace(old, new))
    return dst


@pytest.mark.parametrize("task,old,new,output", [
    # d_gate without silu's second term: only where gate is large does it stay right.
    ("swiglu_bwd", "dys * u * (1.0 + g * (1.0 - s))", "dys * u", 0),
    # d_up wrong by a sign.
    ("swiglu_bwd", "dys * g\n", "-dys * g\n", 1),
    # softmax without the sum(dy * y) term: dx = y * dy.
    ("softmax_bwd", "dx = y * (dy - dot[:, None])", "dx = y * dy", 0),
    # rotary forward's rotation instead of its transpose.
    ("rotary_bwd", "(dy1 * c + dy2 * sn)", "(dy1 * c - dy2 * sn)", 0),
])
def test_a_wrong_gradient_is_caught(tmp_path, task, old, new, output):
    dst = _broken_copy(tmp_path, task, old, new)
    shape = load_spec(dst).test_shapes[0]
    row = sc.check_case(dst, "float32", shape, "cpu", tag=f"broken_{task}_{output}_{len(new)}")
    assert not row["kernel"]["passed"] and row["kernel"]["why"].startswith(f"output {output}"), row["kernel"]
