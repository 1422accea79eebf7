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
