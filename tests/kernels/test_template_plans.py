"""Launch plans of the GEMM template's wrappers (issue 21: host cost per call of generated kernels).

``_gemm``, ``_bmm`` and ``_conv`` decide their launch (grid, integer arguments, constexprs, split of K,
channels-last copies) once per input signature and keep it in the module's ``_PLANS``: a second call
on the same signature plans nothing, a new shape or layout plans once more, and a knob set in place
(knob_sweep.py, the tests) plans again. Tiny shapes: the interpreter runs them.
"""

import pytest
import torch

from autokernel_tui.profiling import gemm_template as gt
from profiling.test_anyop import _template


def _g(seed=0):
    return torch.Generator().manual_seed(seed)


def _calls(ns):
    """Each wrapper with tiny inputs: (name, a call, the reference result)."""
    g = _g()
    a, b, bias = torch.randn(37, 20, generator=g), torch.randn(20, 29, generator=g), torch.randn(29, generator=g)
    column = torch.randn(20, 1, generator=g)
    x, y = torch.randn(3, 9, 17, generator=g), torch.randn(3, 17, 5, generator=g)
    img, w = torch.randn(2, 20, 6, 5, generator=g), torch.randn(8, 20, 3, 3, generator=g)
    small, ws = torch.randn(1, 32, 4, 4, generator=g), torch.randn(8, 32, 3, 3, generator=g)
    conv = torch.ops.aten.convolution
    return [
        ("gemm", lambda: ns["_gemm"](a, b, bias), torch.addmm(bias, a, b)),
        ("gemv", lambda: ns["_gemm"](a, column, None), a @ column),
        ("bmm", lambda: ns["_bmm"](x, y), torch.bmm(x, y)),
        ("conv", lambda: ns["_conv"](img, w, None, (1, 2), (1, 1), (1, 1)),
         conv(img, w, None, [1, 2], [1, 1], [1, 1], False, [0], 1)),
        # one output tile, K over 9 positions: split-K, the parts summed with the bias after
        ("conv_split", lambda: ns["_conv"](small, ws, torch.ones(8), (1, 1), (1, 1), (1, 1)),
         conv(small, ws, torch.ones(8), [1, 1], [1, 1], [1, 1], False, [0], 1)),
    ]


@pytest.mark.parametrize("case", ["gemm", "gemv", "bmm", "conv", "conv_split"])
def test_one_plan_per_signature(case):
    ns = _template()
    ns["CONV_SPLIT_PROGRAMS_PER_SM"] = 8  # the interpreter's 2 "SMs": enough programs wanted to split
    name, call, want = next(c for c in _calls(ns) if c[0] == case)
    first = call()
    assert len(ns["_PLANS"]) == 1
    again = call()
    assert len(ns["_PLANS"]) == 1, "the second call on the same inputs planned again"
    torch.testing.assert_close(first, want, rtol=1e-4, atol=1e-4)
    assert torch.equal(first, again)
    if case == "conv_split":
        (plan,) = ns["_PLANS"].values()
        assert plan["partial"] is not None and plan["reduce"] is not None, "this shape was meant to split K"


def test_new_shapes_and_layouts_plan_once_each_and_stay_right():
    ns = _template()
    g = _g(1)
    a, b = torch.randn(37, 20, generator=g), torch.randn(20, 29, generator=g)
    ns["_gemm"](a, b, None)
    ns["_gemm"](torch.randn(37, 20, generator=g), torch.randn(20, 29, generator=g), None)  # new tensors, same key
    assert len(ns["_PLANS"]) == 1
    bt = b.t().contiguous().t()  # same shape, column-major: its own strides, its own plan
    torch.testing.assert_close(ns["_gemm"](a, bt, None), a @ b, rtol=1e-4, atol=1e-4)
    assert len(ns["_PLANS"]) == 2
    out = torch.empty(29, 37).t()  # into a strided output
    ns["_gemm"](a, b, None, out=out)
    torch.testing.assert_close(out, a @ b, rtol=1e-4, atol=1e-4)
    assert len(ns["_PLANS"]) == 3
    ns["_gemm"](a[:30], b, None)
    assert len(ns["_PLANS"]) == 4


@pytest.mark.parametrize("knob, value, case", [("GROUP_M", 4, "gemm"), ("FP32_BLOCK_M", 32, "gemm"),
                                               ("GEMV_BLOCK_K", 128, "gemv"), ("FP32_BLOCK_N", 32, "bmm"),
                                               ("CONV_CHANNELS_LAST", 0, "conv"),
                                               ("CONV_SPLIT_PROGRAMS_PER_SM", 0, "conv_split")])
def test_a_knob_set_in_place_plans_again(knob, value, case):
    ns = _template()
    ns["CONV_SPLIT_PROGRAMS_PER_SM"] = 8 if knob != "CONV_SPLIT_PROGRAMS_PER_SM" else ns[knob]
    _, call, want = next(c for c in _calls(ns) if c[0] == case)
    call()
    (before,) = ns["_PLANS"].values()
    assert ns[knob] != value
    ns[knob] = value
    got = call()
    assert len(ns["_PLANS"]) == 2, f"{knob} set in place did not plan again"
    after = next(p for p in ns["_PLANS"].values() if p is not before)
    assert {k: v for k, v in after.items() if k not in ("launch", "reduce")} != \
        {k: v for k, v in before.items() if k not in ("launch", "reduce")}
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_every_tuner_knob_is_part_of_the_plan_state():
    """A knob missing from _gemm_knobs()/_conv_knobs() would leave plans stale when set in place."""
    ns = _template()
    every = gt.knobs_for(["float16", "float32"], gemm=True, gemv=True, conv=True)
    for knob, space in every.items():
        if knob.startswith("CONV_"):
            states = (ns["_conv_knobs"],)
        elif knob.startswith("GEMV_") or knob in ("GROUP_M", "USE_TMA"):
            states = (ns["_gemm_knobs"],)
        else:
            states = (ns["_gemm_knobs"], ns["_conv_knobs"])
        old = ns[knob]
        for state in states:
            before = state()
            ns[knob] = next(v for v in space if v != old)
            assert state() != before, f"{knob} is not in {state.__name__}()"
            ns[knob] = old


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16_bit_matmuls_with_aligned_rows_read_through_tma(dtype):
    """USE_TMA: a 16-bit GEMM whose rows start on 16-byte boundaries loads A and B through TMA descriptors
    (B as it is, or through its transpose: a Linear's weight), edges zero-filled; rows TMA cannot read
    (an odd row stride), float32 and USE_TMA = 0 keep the pointer kernel. Same products either way."""
    ns = _template()
    g = _g(2)
    a = torch.randn(70, 64, generator=g).to(dtype)
    b = torch.randn(64, 40, generator=g).to(dtype)
    weight = torch.randn(40, 64, generator=g).to(dtype)
    bias = torch.randn(40, generator=g).to(dtype)
    odd = torch.randn(70, 71, generator=g).to(dtype)[:, :64]  # rows 142 bytes apart

    def run(x, y, **kw):
        ns["_PLANS"].clear()
        got = ns["_gemm"](x, y, bias, **kw)
        (plan,) = ns["_PLANS"].values()
        # products of 16-bit values summed in float32, rounded once to the dtype
        torch.testing.assert_close(got.float(), torch.addmm(bias.float(), x.float(), y.float()).to(dtype).float(),
                                   rtol=0, atol=float(torch.finfo(dtype).eps) * 32)
        return plan

    assert run(a, b)["meta"]["TMA"] and not run(a, b)["meta"]["B_T"]
    plan = run(a, weight.t())
    assert plan["meta"]["TMA"] and plan["meta"]["B_T"]
    assert not run(odd, b)["meta"]["TMA"]
    ns["USE_TMA"] = 0
    assert not run(a, b)["meta"]["TMA"]
    ns["USE_TMA"] = 1
    float_plan = run(a.float(), b.float())
    assert not float_plan["meta"]["TMA"]
