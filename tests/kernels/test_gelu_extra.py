"""gelu and swiglu checks beyond the generic starter tests: block sizes at both
ends of the tuner's range with a ragged last block, and clear errors."""

import re
import shutil
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
from benchmarks import starters_check as sc  # noqa: E402

from autokernel_tui.tasks.spec import Shape  # noqa: E402


@pytest.mark.parametrize("task,dims", [
    ("gelu", {"M": 3, "N": 4099, "approximate": "tanh"}),
    ("gelu", {"M": 3, "N": 4099, "approximate": "none"}),
    ("swiglu", {"M": 3, "N": 4099}),
])
@pytest.mark.parametrize("block", [512, 16384])
def test_block_sizes_stay_correct(tmp_path, task, dims, block):
    dst = tmp_path / task
    shutil.copytree(REPO / "kernels" / task, dst)
    src = (dst / "kernel.py").read_text()
    (dst / "kernel.py").write_text(re.sub(r"^BLOCK_SIZE = \d+", f"BLOCK_SIZE = {block}", src, flags=re.M))
    row = sc.check_case(dst, "bfloat16", Shape("ragged", dims), "cpu", tag=f"{task}{block}{dims.get('approximate')}")
    assert row["kernel"]["passed"], row["kernel"]["why"]


def test_unknown_gelu_variant_is_refused():
    ker = sc.load_module(REPO / "kernels" / "gelu" / "kernel.py", "gelu-extra")
    ref = sc.load_module(REPO / "kernels" / "gelu" / "reference.py", "gelu-extra")
    with pytest.raises(ValueError, match="approximate"):
        ker.kernel_fn(torch.zeros(4), "sigmoid")
    with pytest.raises(ValueError, match="approximate"):
        ref.make_inputs({"M": 2, "N": 2, "approximate": "fast"}, torch.float32, "cpu", 0)


def test_swiglu_shape_mismatch_is_refused():
    ker = sc.load_module(REPO / "kernels" / "swiglu" / "kernel.py", "swiglu-extra")
    with pytest.raises(ValueError, match="differ"):
        ker.kernel_fn(torch.zeros(2, 3), torch.zeros(3, 2))


def test_erf_gelu_is_fp32_accurate_on_a_dense_grid():
    # The erf variant uses its own erfc fit instead of libdevice's erf: it must stay within the
    # fp32 tolerance everywhere, including the far negative tail (no 1 + erf cancellation),
    # tiny |x| (gelu ~ x/2) and |x| large enough for exp to underflow.
    ker = sc.load_module(REPO / "kernels" / "gelu" / "kernel.py", "gelu-grid")
    x = torch.cat([torch.linspace(-40.0, 40.0, 16001), torch.logspace(-30, 1, 2000), -torch.logspace(-30, 1, 2000)])
    xd = x.double()
    ref = 0.5 * xd * torch.special.erfc(-xd * 0.7071067811865476)  # no cancellation in the tail
    out = ker.kernel_fn(x, "none").double()
    err = (out - ref).abs()
    assert bool((err <= 1e-6 + 1e-6 * ref.abs()).all()), f"max abs err {err.max().item():.3g}"
    assert ((out - ref).norm() / ref.norm()).item() < 1e-7
    tail = (x < -3.0) & (x > -12.0)  # relative accuracy where 1 + erf(x) would have cancelled
    rel = (err[tail] / ref[tail].abs()).max().item()
    assert rel < 1e-4, f"negative tail: max relative error {rel:.3g}"  # 1 + erf would lose all digits


@pytest.mark.parametrize("m,n", [(37, 1000), (3, 4099)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_swiglu_reads_fused_projection_slices_in_place(m, n, dtype, monkeypatch):
    # LLaMA-style fused gate_up projection: gate and up are column slices of one [M, 2N]
    # tensor. They must be read where they are (no packing copies) and give the right answer.
    ker = sc.load_module(REPO / "kernels" / "swiglu" / "kernel.py", "swiglu-fused")
    fused = (torch.randn(m, 2 * n, generator=torch.Generator().manual_seed(m)) * 3.0).to(dtype)
    gate, up = fused[:, :n], fused[:, n:]
    packed = []
    real_contiguous = torch.Tensor.contiguous
    monkeypatch.setattr(torch.Tensor, "contiguous",
                        lambda t, *a, **k: packed.append(t.shape) or real_contiguous(t, *a, **k))
    out = ker.kernel_fn(gate, up)
    monkeypatch.undo()
    assert not packed, f"packing copies of {packed}"
    g, u = gate.double(), up.double()
    ref = g * torch.sigmoid(g) * u
    tol = 1e-5 if dtype == torch.float32 else 3e-2
    assert out.shape == (m, n) and out.is_contiguous()
    assert torch.allclose(out.double(), ref, atol=tol, rtol=tol)


def test_swiglu_other_layouts_are_packed_then_correct():
    ker = sc.load_module(REPO / "kernels" / "swiglu" / "kernel.py", "swiglu-layouts")
    base = torch.randn(5, 40, 3, generator=torch.Generator().manual_seed(1))
    gate, up = base[..., 0].t(), base[..., 1].t()  # [40, 5], last dim strided
    out = ker.kernel_fn(gate, up)
    assert torch.allclose(out.double(), torch.nn.functional.silu(gate.double()) * up.double(), atol=1e-5, rtol=1e-5)
