"""gelu and swiglu checks beyond the generic starter tests: block sizes at both
ends of the tuner's range with a ragged last block, and clear errors."""

import re
import shutil
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import starters_check as sc  # noqa: E402

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
