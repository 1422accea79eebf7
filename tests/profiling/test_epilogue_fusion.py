"""Issue 19: a generated matmul or convolution chain runs its pointwise ops in the GEMM's epilogue
(``gemm_template.epilogue_at``): one kernel where Inductor runs the library call and a Triton kernel.
CPU, Triton interpreter, small shapes; both values of the FUSE_EPILOGUE knob against the model."""

import importlib.util

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from autokernel_tui.profiling import gemm_template as gt
from autokernel_tui.tasks import spec as taskspec
from profiling.test_anyop import Gemm as LinearScaleLeaky  # KernelBench level 2's Gemm_Multiply_LeakyReLU
from profiling.test_anyop import _extract, _generated, _profile, _template


class LinearGeluResidual(nn.Module):
    """GPT-2's MLP entry and a residual: addmm -> view (3-D) -> gelu -> add."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 40)

    def forward(self, x, r):
        return F.gelu(self.fc(x)) + r


class ResidualMinusRelu(nn.Module):
    """The matmul's result as the second operand (r - relu(x W^T)), and a bias broadcast over the
    middle dim ((2, 1, 40) over (2, 3, 40): not a view of the (6, 40) result, so it is copied)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(40, 16) / 4)
        self.b = nn.Parameter(torch.randn(2, 1, 40))

    def forward(self, x, r):
        return r - F.relu(F.linear(x, self.w) + self.b)


class ConvBiasSigmoid(nn.Module):
    """KernelBench level 2's staple: convolution, a per-channel parameter, activations."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Parameter(torch.randn(8, 1, 1))

    def forward(self, x):
        return torch.sigmoid(F.relu(self.conv(x)) + self.b) * 2.0


class DepthwiseConvBiasSigmoid(ConvBiasSigmoid):
    """The same chain after a depthwise convolution (elementwise, not a GEMM): the epilogue is shared."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1, groups=8)


class TransposedConvTanhGelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose1d(4, 6, 3, stride=2)

    def forward(self, x):
        return F.gelu(self.conv(x), approximate="tanh") - 1.5


class ScoresRelu(nn.Module):
    def forward(self, q, k, bias):
        return torch.baddbmm(bias, q, k.transpose(1, 2)).relu() * 0.5


class LinearActivations(nn.Module):
    """KernelBench level 2's activations after one Linear, each read once: one fused epilogue."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 40)

    def forward(self, x, r):
        x = F.hardswish(F.mish(self.fc(x) * 3.0))
        x = F.softplus(torch.clamp(x, min=-0.3), beta=2.0, threshold=5.0)
        x = torch.abs(torch.exp(torch.tanh(F.elu(x - 1.0, alpha=0.7))))
        x = torch.maximum(x ** 2, r)
        return -F.hardtanh(F.hardsigmoid(x) * 4.0 - 2.5, -0.5, 0.5)


CASES = {
    "linear_gelu_residual": (LinearGeluResidual, lambda: [torch.randn(2, 3, 16), torch.randn(2, 3, 40)], 1),
    "linear_scale_leaky": (LinearScaleLeaky, lambda: [torch.randn(6, 24)], 0),
    "linear_activations": (LinearActivations, lambda: [torch.randn(6, 16), torch.randn(6, 40)], 1),
    "residual_minus_relu": (ResidualMinusRelu, lambda: [torch.randn(2, 3, 16), torch.randn(2, 3, 40)], 2),
    "conv_bias_sigmoid": (ConvBiasSigmoid, lambda: [torch.randn(2, 3, 9, 7)], 1),
    "depthwise_conv_bias_sigmoid": (DepthwiseConvBiasSigmoid, lambda: [torch.randn(2, 8, 9, 7)], 1),
    "transposed_conv_gelu": (TransposedConvTanhGelu, lambda: [torch.randn(2, 4, 5)], 0),
    "baddbmm_relu": (ScoresRelu, lambda: [torch.randn(3, 5, 16), torch.randn(3, 7, 16), torch.randn(3, 5, 7)], 1),
}


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("case", list(CASES))
def test_the_chain_runs_in_the_gemms_epilogue_and_matches_the_model(case, tmp_path):
    cls, make, operands = CASES[case]
    torch.manual_seed(0)
    model, inputs = cls(), make()
    created, _ = _extract(_profile(case, model, inputs), tmp_path)
    (task,) = [t for fam in ("matmul", "conv") for t in _generated(created, fam)]
    source = (task / "kernel.py").read_text()
    # one fused call: the whole chain, with the operands it reads beside the tile
    assert source.count("if FUSE_EPILOGUE:") == 1 and "_kernel_e0" in source, source
    ref = _load(task / "reference.py", f"ref_{case}")
    assert sum(1 for _ in ref.UNIT["ops"] if _["op"] in gt.MATMULS) == 1
    spec = taskspec.load_spec(task)
    assert list(spec.knob_space["FUSE_EPILOGUE"]) == [0, 1]
    kernel = _load(task / "kernel.py", f"kernel_{case}")
    epi = gt.epilogue_at(ref.UNIT, next(i for i, o in enumerate(ref.UNIT["ops"]) if o["op"] in gt.MATMULS),
                         gt._tensor_uses(ref.UNIT))
    assert epi is not None and len(epi.operands) == operands and epi.end == len(ref.UNIT["ops"]) - 1
    recorded = ref.make_inputs(dict(spec.test_shapes[0].dims), torch.float32, "cpu", 0)
    want = ref.reference(*recorded)
    conv = "_conv(" in source
    assert ("CONV_CHANNELS_LAST" in spec.knob_space) == conv
    for fuse, channels_last in ((1, 0), (0, 0)) + (((1, 1),) if conv else ()):
        kernel.FUSE_EPILOGUE, kernel.CONV_CHANNELS_LAST = fuse, channels_last
        got = kernel.kernel_fn(*recorded)
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4,
                                   msg=lambda m: f"FUSE_EPILOGUE={fuse} CONV_CHANNELS_LAST={channels_last}: {m}")


def _residual_gemm(tmp_path, tag, k, seed):
    """The generated task of Linear -> GELU -> + residual: its kernel module, and fp16 operands for a
    300 x 200 output over ``k``: A, the Linear's weight [200, k], the bias, the residual."""
    created, _ = _extract(_profile("res", LinearGeluResidual(), [torch.randn(2, 3, 16), torch.randn(2, 3, 40)]),
                          tmp_path)
    (task,) = _generated(created, "matmul")
    g = torch.Generator().manual_seed(seed)
    operands = [torch.randn(*size, generator=g).half() for size in ((300, k), (200, k), (200,), (300, 200))]
    return _load(task / "kernel.py", tag), operands


def _gelu_residual(a, b, bias, residual):
    return F.gelu(torch.addmm(bias.float(), a.float(), b.float())) + residual.float()


def test_the_fused_epilogue_on_the_16_bit_tile_with_ragged_edges(tmp_path):
    """The Hopper-sized tile (128 x 128) over 300 x 200, the residual added in float32 in registers."""
    kernel, (a, weight, bias, residual) = _residual_gemm(tmp_path, "kernel_res16", 70, 0)
    b = weight.t().contiguous()
    got = kernel._gemm(a, b, bias, kernel=kernel._gemm_kernel_e0, epilogue=((residual, (300, 200)),))
    torch.testing.assert_close(got.float(), _gelu_residual(a, b, bias, residual), atol=0.08, rtol=0.02)


def test_the_fused_epilogue_on_tma_loaded_tiles(tmp_path):
    """Rows on 16-byte boundaries: the fused kernel loads A and a Linear's weight through TMA (USE_TMA) and
    runs the same epilogue; its result matches the pointer kernel's."""
    kernel, (a, weight, bias, residual) = _residual_gemm(tmp_path, "kernel_res_tma", 64, 1)
    fused = dict(kernel=kernel._gemm_kernel_e0, epilogue=((residual, (300, 200)),))
    got = kernel._gemm(a, weight.t(), bias, **fused)
    plans = [p for p in kernel._PLANS.values() if not p["gemv"]]
    assert [p["meta"]["TMA"] and p["meta"]["B_T"] for p in plans] == [True]
    kernel.USE_TMA = 0
    pointers = kernel._gemm(a, weight.t(), bias, **fused)
    assert not [p for p in kernel._PLANS.values() if p is not plans[0]][0]["meta"]["TMA"]
    torch.testing.assert_close(got, pointers, atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(got.float(), _gelu_residual(a, weight.t(), bias, residual), atol=0.08, rtol=0.02)


def test_a_bias_of_many_rows_is_added_in_the_epilogue():
    """addmm with an (M, N) or (M, 1) bias raised "a bias with more than one row is not written"; it is
    now read with its own strides (a (1, N) row keeps the one-row load, a vector product its split-K)."""
    ns = _template()
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(37, 20, generator=g), torch.randn(20, 29, generator=g)
    for bias in (torch.randn(37, 29, generator=g), torch.randn(37, 1, generator=g), torch.randn(1, 29, generator=g),
                 torch.randn(29, generator=g), torch.randn(37, 29, generator=g).t().contiguous().t()):
        torch.testing.assert_close(ns["_gemm"](a, b, bias), torch.addmm(bias, a, b), rtol=1e-4, atol=1e-4)
    column = torch.randn(20, 1, generator=g)
    for bias in (torch.randn(37, 1, generator=g), torch.randn(1, generator=g)):
        torch.testing.assert_close(ns["_gemm"](a, column, bias), torch.addmm(bias, a, column), rtol=1e-4, atol=1e-4)


META = {"shape": [4, 4], "stride": [4, 1], "dtype": "float32", "param": False}


def _unit(ops, inputs, outputs, shapes=None):
    tensors = {str(i): dict(META) for i in range(1, 10)}
    for t, shape in (shapes or {}).items():
        tensors[str(t)] = {**META, "shape": shape}
    return {"ops": ops, "inputs": inputs, "outputs": outputs, "tensors": tensors}


def _op(name, args, out):
    return {"op": name, "args": args, "kwargs": {}, "outputs": [out]}


MM = _op("aten.mm.default", [{"tensor": 1}, {"tensor": 2}], 3)
RELU = _op("aten.relu.default", [{"tensor": 3}], 4)


def test_a_value_the_chain_also_returns_or_reads_twice_stays_in_memory():
    uses = gt._tensor_uses
    assert gt.epilogue_at(_unit([MM, RELU], [1, 2], [4]), 0, uses(_unit([MM, RELU], [1, 2], [4]))).lines \
        == ["v = tl.maximum(v, 0.0)"]
    both = _unit([MM, RELU], [1, 2], [3, 4])  # the matmul's result is an output too
    assert gt.epilogue_at(both, 0, uses(both)) is None
    source, knobs = gt.template_source(both, "t")
    assert "if FUSE_EPILOGUE" not in source and "FUSE_EPILOGUE" not in knobs
    twice = _unit([MM, RELU, _op("aten.add.Tensor", [{"tensor": 4}, {"tensor": 3}], 5)], [1, 2], [5])
    assert gt.epilogue_at(twice, 0, uses(twice)) is None  # relu(h) + h: h read twice
    # relu is fused; the add reads relu's result twice (x + x), so it stays outside
    later = _unit([MM, RELU, _op("aten.add.Tensor", [{"tensor": 4}, {"tensor": 4}], 5)], [1, 2], [5])
    assert gt.epilogue_at(later, 0, uses(later)).end == 1


def test_a_broadcast_to_a_bigger_shape_or_a_vector_product_is_not_fused():
    grow = _unit([MM, _op("aten.add.Tensor", [{"tensor": 3}, {"tensor": 5}], 6)], [1, 2, 5], [6],
                 shapes={5: [2, 4, 4], 6: [2, 4, 4]})
    assert gt.epilogue_at(grow, 0, gt._tensor_uses(grow)) is None
    gemv = _unit([MM, RELU], [1, 2], [4], shapes={2: [4, 1], 3: [4, 1], 4: [4, 1]})
    assert gt.epilogue_at(gemv, 0, gt._tensor_uses(gemv)) is None  # the split-K GEMV kernel stays
    transpose = _unit([MM, _op("aten.t.default", [{"tensor": 3}], 4), _op("aten.relu.default", [{"tensor": 4}], 5)],
                      [1, 2], [5])
    assert gt.epilogue_at(transpose, 0, gt._tensor_uses(transpose)) is None  # the tile's order is not the view's


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(CASES))
def test_the_fused_kernels_compile_and_match_on_the_gpu(case, tmp_path):
    """The same chains compiled for the card (the interpreter above runs no Triton compiler): fp32 (a
    convolution's dots in TF32, as cuDNN's) and bf16, fused and not, against the model's ops on the card."""
    cls, make, _ = CASES[case]
    torch.manual_seed(0)
    created, _ = _extract(_profile(case, cls(), make()), tmp_path)
    (task,) = [t for fam in ("matmul", "conv") for t in _generated(created, fam)]
    ref = _load(task / "reference.py", f"ref_gpu_{case}")
    kernel = _load(task / "kernel.py", f"kernel_gpu_{case}")
    spec = taskspec.load_spec(task)
    for dtype, tol in ((torch.float32, spec.tolerances["float32"]), (torch.bfloat16, None)):
        inputs = ref.make_inputs(dict(spec.test_shapes[0].dims), dtype, "cuda", 0)
        want = ref.reference(*[x.double() if x.is_floating_point() else x for x in inputs]).float()
        for fuse in (1, 0):
            kernel.FUSE_EPILOGUE = fuse
            got = kernel.kernel_fn(*inputs).float()
            if tol is None:
                torch.testing.assert_close(got, want, rtol=3e-2, atol=3e-2)
            else:
                torch.testing.assert_close(got, want, rtol=tol.rtol, atol=tol.atol)


def test_in_place_pointwise_ops_fuse_as_their_functional_forms(tmp_path):
    """KernelBench's ``x += bias`` and ``torch.relu_(x)`` record as add_ / relu_: the template writes them
    out of place (as the reference replays them) and fuses them like the rest."""
    meta = {"shape": [37, 29], "stride": [29, 1], "dtype": "float32", "param": False}
    tensors = {str(i): dict(meta) for i in range(1, 8)}
    tensors["1"] = {**meta, "shape": [37, 20], "stride": [20, 1]}
    tensors["2"] = {**meta, "shape": [20, 29], "stride": [29, 1]}
    unit = {"ops": [_op("aten.mm.default", [{"tensor": 1}, {"tensor": 2}], 3),
                    _op("aten.add_.Tensor", [{"tensor": 3}, {"tensor": 4}], 5),
                    _op("aten.relu_.default", [{"tensor": 5}], 6),
                    _op("aten.mul_.Tensor", [{"tensor": 6}, 0.5], 7)],
            "inputs": [1, 2, 4], "outputs": [7], "tensors": tensors}
    epi = gt.epilogue_at(unit, 0, gt._tensor_uses(unit))
    assert epi is not None and epi.end == 3 and len(epi.operands) == 1, epi
    source, _ = gt.template_source(unit, "inplace")
    path = tmp_path / "kernel.py"
    path.write_text(source)
    kernel = _load(path, "kernel_inplace")
    g = torch.Generator().manual_seed(0)
    a, b, c = torch.randn(37, 20, generator=g), torch.randn(20, 29, generator=g), torch.randn(37, 29, generator=g)
    want = torch.relu(a @ b + c) * 0.5
    for fuse in (1, 0):
        kernel.FUSE_EPILOGUE = fuse
        torch.testing.assert_close(kernel.kernel_fn(a, b, c), want, rtol=1e-4, atol=1e-4)
