"""The looped (wide-row) paths of the norm and softmax starters load whole chunks as
16-byte vectors after a per-row alignment head. These cases break the assumptions that
path relies on (x and the outputs sharing a row stride, 16-byte-aligned bases) and check
the kernels fall back and still match the reference, under the Triton interpreter."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import starters_check as sc  # noqa: E402

from autokernel_tui.tasks.spec import load_spec  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
WIDE = {"rmsnorm": "looped", "layernorm": "looped", "add_rmsnorm": "looped", "softmax": "online"}


def _misaligned(x: torch.Tensor) -> torch.Tensor:
    """The same values, contiguous, starting one element past a 16-byte boundary."""
    buf = torch.empty(x.numel() + 1, dtype=x.dtype)
    out = buf[1:].view(x.shape)
    out.copy_(x)
    assert out.data_ptr() % 16 != 0
    return out


def _row_strided(x: torch.Tensor) -> torch.Tensor:
    """The same values, each row padded by 3 elements (a view: row stride != width)."""
    buf = torch.empty(x.shape[0], x.shape[1] + 3, dtype=x.dtype)
    out = buf[:, : x.shape[1]]
    out.copy_(x)
    return out


@pytest.mark.parametrize("layout", [_misaligned, _row_strided], ids=["misaligned-base", "row-strided"])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("task", sorted(WIDE))
def test_wide_rows_in_awkward_layouts_match_the_reference(task, dtype, layout):
    spec = load_spec(REPO / "kernels" / task)
    shape = next(s for s in spec.test_shapes if s.name == WIDE[task])
    ref = sc.load_module(spec.path / "reference.py", "align")
    ker = sc.load_module(spec.path / "kernel.py", "align")
    inputs = ref.make_inputs(dict(shape.dims), getattr(torch, dtype), "cpu", 7)
    odd = (layout(inputs[0]),) + tuple(inputs[1:])
    assert shape.dims["N"] % 8 and shape.dims["N"] > ker.MAX_FUSED_N  # the looped path, odd width
    verdict = sc.compare(ker.kernel_fn(*odd), ref.reference(*inputs), sc.precise_reference(ref, inputs),
                         spec.tolerances[dtype])
    assert verdict["passed"], verdict["why"]


def test_the_vector_width_follows_the_layout():
    ker = sc.load_module(REPO / "kernels" / "rmsnorm" / "kernel.py", "align")
    x = torch.empty(4, 20011, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    assert ker._vector_width(x, y) == 8
    assert ker._vector_width(x.float(), y.float()) == 4
    assert ker._vector_width(_misaligned(x), y) == 1
    assert ker._vector_width(_row_strided(x), y) == 1


def test_softmax_sends_only_unaligned_widths_to_the_vector_kernel(monkeypatch):
    # Widths Triton proves 16-byte aligned already get vector loads from the plain online
    # kernel, which measured faster there (H200: 148 vs 188 us at 4096x32000).
    ker = sc.load_module(REPO / "kernels" / "softmax" / "kernel.py", "align")
    calls = []

    class Spy:
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            return lambda *args, **kwargs: calls.append((self.name, kwargs.get("VEC")))

    monkeypatch.setattr(ker, "_softmax_online", Spy("plain"))
    monkeypatch.setattr(ker, "_softmax_online_vec", Spy("vec"))
    for n in (16400, 20011):
        ker.kernel_fn(torch.zeros(2, n, dtype=torch.float16))
    ker.kernel_fn(_misaligned(torch.zeros(2, 20011, dtype=torch.float16)))
    assert calls == [("plain", None), ("vec", 8), ("plain", None)]
