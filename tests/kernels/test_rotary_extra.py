"""rotary checks beyond the generic starter tests: the reference's rotate-half
convention equals LLaMA's full-table form, and the tiling knobs (several
positions per program with a ragged end, head blocks narrower than H) stay
correct."""

import re
import shutil
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
from benchmarks import starters_check as sc  # noqa: E402

from autokernel_tui.tasks.spec import Shape  # noqa: E402

TASK = REPO / "kernels" / "rotary"


def test_reference_is_llamas_rotate_half():
    ref = sc.load_module(TASK / "reference.py", "rot-extra")
    x, cos, sin = ref.make_inputs({"B": 2, "S": 11, "H": 3, "D": 16}, torch.float64, "cpu", 0)
    # Pair (i, i + D/2) rotates by angle_i: check one element by hand too.
    out = ref.reference(x, cos, sin)
    assert torch.allclose(out, ref.naive(x, cos, sin), atol=1e-12)
    b, s, h, i = 1, 7, 2, 3
    c, sn = cos[s, i], sin[s, i]
    x1, x2 = x[b, s, h, i], x[b, s, h, i + 8]
    assert torch.allclose(out[b, s, h, i], x1 * c - x2 * sn)
    assert torch.allclose(out[b, s, h, i + 8], x2 * c + x1 * sn)


@pytest.mark.parametrize("knobs", [
    {"POSITIONS_PER_PROGRAM": 8, "BLOCK_H": 2},  # 2 x 37 rows: a ragged last program; H = 3 split in two
    {"POSITIONS_PER_PROGRAM": 4, "BLOCK_H": 1},
])
def test_tiling_knobs_stay_correct(tmp_path, knobs):
    dst = tmp_path / "rotary"
    shutil.copytree(TASK, dst)
    src = (dst / "kernel.py").read_text()
    for name, value in knobs.items():
        src = re.sub(rf"^{name} = \d+", f"{name} = {value}", src, flags=re.M)
    (dst / "kernel.py").write_text(src)
    shape = Shape("ragged", {"B": 2, "S": 37, "H": 3, "D": 80})
    row = sc.check_case(dst, "float16", shape, "cpu", tag="rot" + "-".join(map(str, knobs.values())))
    assert row["kernel"]["passed"], row["kernel"]["why"]


def test_bad_tables_are_refused():
    ker = sc.load_module(TASK / "kernel.py", "rot-extra")
    x = torch.zeros(1, 4, 2, 8)
    with pytest.raises(ValueError, match="cos/sin"):
        ker.kernel_fn(x, torch.zeros(4, 8), torch.zeros(4, 8))
