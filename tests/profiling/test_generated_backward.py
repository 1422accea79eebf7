"""Issue 20: a training profile's backward families without a hand-written starter become generated
backward tasks: the recorded forward chain, differentiated by the harness, its starter Inductor's
Triton for the traced backward. CPU, Triton interpreter, small shapes."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from autokernel_tui.harness.runner import Harness
from autokernel_tui.profiling.amdahl import rank
from autokernel_tui.profiling.capture import profile_bundle
from autokernel_tui.profiling.classify import classify, op_family
from autokernel_tui.profiling.extract import extract_all
from autokernel_tui.profiling.zoo import ModelBundle
from autokernel_tui.tasks import spec as taskspec


def _train_profile(name, model, inputs):
    torch.manual_seed(0)
    bundle = ModelBundle(name, model, tuple(inputs), True, "float32", "cpu", 0, 0)
    return rank(profile_bundle(bundle, steps=1, warmup=0))


class GroupNormRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.gn = nn.GroupNorm(4, 16)
        with torch.no_grad():
            self.gn.weight.uniform_(0.5, 1.5)
            self.gn.bias.normal_()

    def forward(self, x):
        return F.relu(self.gn(x))


def test_backward_ops_of_the_generated_families_are_their_own_families():
    assert op_family("aten::native_group_norm_backward") == "group_norm_backward"
    assert op_family("aten::convolution_backward") == "conv_backward"
    assert op_family("aten::native_batch_norm_backward") == "batch_norm_backward"
    node = "autograd::engine::evaluate_function: NativeGroupNormBackward0"
    assert classify("triton_per_fused_native_group_norm_backward_0", [node]) == "group_norm_backward"
    conv = "autograd::engine::evaluate_function: ConvolutionBackward0"
    assert classify("sm90_xmma_dgrad_implicit_gemm_f32f32", [conv]) == "conv_backward"
    assert classify("sm90_xmma_fprop_implicit_gemm_f32f32", ["aten::conv2d"]) == "conv"  # the forward stays


class ConvGroupNormRelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1, stride=(1, 2))
        self.block = GroupNormRelu()

    def forward(self, x):
        return self.block(self.conv(x))


def test_a_training_profile_makes_generated_backward_tasks_that_pass_the_harness(tmp_path, monkeypatch):
    """A conv net's training step: the convolution's backward (as convolutions, conv_backward.py: the GEMM
    template's implicit GEMM) and the group norm's (Inductor's reductions) each a task that PASSes."""
    monkeypatch.setenv("AUTOKERNEL_INDUCTOR_STARTERS", "1")  # the suite turns starter-making off for speed
    model, x = ConvGroupNormRelu(), torch.randn(2, 3, 5, 6)
    prof = _train_profile("convnet", model, [x])
    fams = {f["family"] for f in prof["families"]}
    assert {"conv", "conv_backward", "group_norm", "group_norm_backward"} <= fams
    created, skipped = extract_all(prof, tmp_path / "kernels", top=20, threshold=0.0)
    names = {p.name: p for p in created}
    assert {"gen_convolution_1", "gen_native_group_norm_relu_1"} <= set(names)
    conv = names["gen_convolution_bwd_1"]
    assert taskspec.load_spec(conv).family == "conv_backward"
    assert list(taskspec.load_spec(conv).grad_inputs) == [1, 2]  # the image needs no gradient: w and b only
    assert "_conv(" in (conv / "kernel.py").read_text()  # the gradients' convolutions, in Triton
    with Harness(timeout_s=300, device="cpu") as h:
        report = h.evaluate(conv, quick=True)
    assert report.status == "PASS", report.reason
    task = names["gen_native_group_norm_relu_bwd_1"]
    spec = taskspec.load_spec(task)
    assert spec.kind == "backward" and spec.family == "group_norm_backward"
    assert list(spec.grad_inputs) == [0, 1, 2]  # x, weight, bias: every floating-point input
    assert {"aten::native_group_norm", "aten::native_group_norm_backward", "aten::relu"} <= set(spec.forbidden_ops)
    source = (task / "kernel.py").read_text()
    assert "NO STARTER" not in source and "@triton.jit" in source and "backward" in source
    assert "group_norm_backward" not in {s["family"] for s in skipped}
    with Harness(timeout_s=300, device="cpu") as h:
        report = h.evaluate(task, quick=True)
    assert report.status == "PASS", report.reason
    # the gradients themselves, against autograd of the model's own module on the task's inputs
    from autokernel_tui.harness.worker.reference import load_reference
    from autokernel_tui.profiling.patch import load_kernel

    ref = load_reference(task)
    inputs = ref.make_inputs({"CALL": 1}, torch.float32, "cpu", 0)
    x_, w, b, grad_out = inputs
    assert x_.shape == (2, 16, 5, 3)
    leaves = [t.detach().requires_grad_() for t in (x_, w, b)]
    torch.autograd.backward(F.relu(F.group_norm(leaves[0], 4, leaves[1], leaves[2])), grad_out)
    got = load_kernel(task / "kernel.py")(*inputs)
    for g, leaf in zip(got, leaves):
        torch.testing.assert_close(g, leaf.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("top_share", [0.0, 0.99])
def test_a_backward_family_under_the_threshold_or_without_a_recorded_forward_is_listed(tmp_path, top_share):
    prof = _train_profile("gn", GroupNormRelu(), [torch.randn(2, 16, 5, 3)])
    if top_share:  # under the share threshold: listed with the reason, never silently dropped
        _, skipped = extract_all(prof, tmp_path / "kernels", top=20, threshold=top_share)
        reasons = {s["family"]: s["reason"] for s in skipped}
        assert "threshold" in reasons["group_norm_backward"]
    else:  # a profile whose replay record lost the forward call (and kept another): the reason says so
        units = prof["replay"]["units"]
        kept = [u for u in units if not any("group_norm" in prof["replay"]["ops"][i]["op"] for i in u["ops"])]
        assert len(kept) < len(units)
        prof["replay"]["units"] = kept + [{"kind": "view", "ops": [], "inputs": [], "outputs": []}]
        _, skipped = extract_all(prof, tmp_path / "kernels", top=20, threshold=0.0)
        reasons = {s["family"]: s["reason"] for s in skipped}
        assert "no forward call of group_norm was recorded to differentiate" in reasons["group_norm_backward"]


def test_a_convolutions_backward_as_convolutions_matches_autograd():
    """Every kind of convolution KernelBench has (1-3-D, grouped, depthwise, transposed, strided,
    dilated, padded): the three gradients in float64, against autograd's."""
    from autokernel_tui.profiling.conv_backward import convolution_backward
    from profiling.test_anyop import CONV_CASES

    for case, (xs, ws, has_bias, stride, padding, dilation, transposed, output_padding, groups) in CONV_CASES.items():
        g = torch.Generator().manual_seed(0)
        x = torch.randn(xs, generator=g, dtype=torch.float64, requires_grad=True)
        w = torch.randn(ws, generator=g, dtype=torch.float64, requires_grad=True)
        b = (torch.randn(ws[1] * groups if transposed else ws[0], generator=g, dtype=torch.float64,
                         requires_grad=True) if has_bias else None)
        y = torch.ops.aten.convolution(x, w, b, list(stride), list(padding), list(dilation), transposed,
                                       list(output_padding), groups)
        grad_out = torch.randn(y.shape, generator=g, dtype=torch.float64)
        want = torch.autograd.grad(y, [x, w] + ([b] if has_bias else []), grad_out)
        got = convolution_backward(grad_out, x.detach(), w.detach(), None, list(stride), list(padding),
                                   list(dilation), transposed, list(output_padding), groups, [True, True, has_bias])
        for name, mine, theirs in zip(("input", "weight", "bias"), got, want):
            torch.testing.assert_close(mine, theirs, msg=lambda m: f"{case}, the {name}'s gradient: {m}")
        assert has_bias or got[2] is None


@pytest.mark.gpu
def test_generated_backward_tasks_pass_the_harness_on_the_gpu(tmp_path, monkeypatch):
    """The same conv net's training step profiled on the card: Inductor's CUDA code for the traced
    backwards (the gradients' convolutions through the GEMM template) made into tasks that PASS."""
    monkeypatch.setenv("AUTOKERNEL_INDUCTOR_STARTERS", "1")
    torch.manual_seed(0)
    bundle = ModelBundle("convnet", ConvGroupNormRelu().cuda(), (torch.randn(8, 3, 32, 32, device="cuda"),), True,
                         "float32", "cuda", 0, 0)
    prof = rank(profile_bundle(bundle, steps=2, warmup=1))
    created, skipped = extract_all(prof, tmp_path / "kernels", top=20, threshold=0.0)
    backward = [p for p in created if "_bwd_" in p.name]
    assert {taskspec.load_spec(p).family for p in backward} >= {"conv_backward", "group_norm_backward"}, skipped
    with Harness(timeout_s=600, device="cuda") as h:
        for task in backward:
            report = h.evaluate(task, quick=True)
            assert report.status == "PASS", (task.name, report.reason)


def test_running_statistics_and_masks_are_not_differentiated():
    """A batch norm's running mean and variance are floating-point inputs autograd refuses to
    differentiate (ResNet's training profile: every batch-norm backward task raised); an additive
    -inf mask is data. Neither is a grad input."""
    from autokernel_tui.profiling.generate import differentiable_inputs

    meta = {"shape": [4], "stride": [1], "dtype": "float32", "param": False}
    tensors = {i: dict(meta) for i in range(0, 12)}
    tensors[2], tensors[3] = {**meta, "param": True}, {**meta, "param": True}  # the norm's weight and bias
    tensors[7] = {**meta, "neg_inf_frac": 0.5}
    tensors[8] = {**meta, "dtype": "int64"}
    record = {"tensors": tensors, "ops": [
        # x comes from an earlier layer that read a parameter: the step differentiates it
        {"op": "aten.mul.Tensor", "args": [{"tensor": 0}, {"tensor": 2}], "kwargs": {}, "outputs": [1]},
        {"op": "aten.native_batch_norm.default", "args": [{"tensor": 1}, {"tensor": 2}, {"tensor": 3}, {"tensor": 4},
                                                          {"tensor": 5}, True, 0.1, 1e-5], "kwargs": {}, "outputs": [6]},
        {"op": "aten.add.Tensor", "args": [{"tensor": 6}, {"tensor": 7}], "kwargs": {}, "outputs": [9]},
        {"op": "aten.index_select.default", "args": [{"tensor": 9}, 0, {"tensor": 8}], "kwargs": {}, "outputs": [10]}]}
    unit = {"ops": [1, 2, 3], "inputs": [1, 2, 3, 4, 5, 7, 8], "outputs": [10]}
    assert differentiable_inputs(record, unit) == [0, 1, 2]
    # the model's own input (tensor 0: produced by no op, no parameter) is not differentiated
    assert differentiable_inputs(record, {"ops": [0], "inputs": [0, 2], "outputs": [1]}) == [1]
    # a running statistic read at a differentiable place is still no parameter: not differentiated
    record["ops"].append({"op": "aten.mul.Tensor", "args": [{"tensor": 10}, {"tensor": 4}], "kwargs": {}, "outputs": [11]})
    assert differentiable_inputs(record, {**unit, "ops": [1, 2, 3, 4]}) == [0, 1, 2]


def test_a_batch_norm_in_training_replays_without_writing_its_running_statistics(tmp_path, monkeypatch):
    """native_batch_norm in training updates its running mean and variance in place: the replay wrote
    into the task's inputs, and every starter for it was REJECTED for modifying an input (ResNet's
    training profile). The reference calls the functional form; forward and backward tasks PASS."""
    monkeypatch.setenv("AUTOKERNEL_INDUCTOR_STARTERS", "1")
    model = nn.Sequential(nn.BatchNorm2d(8), nn.ReLU())
    prof = _train_profile("bn", model, [torch.randn(4, 8, 5, 5)])
    created, _ = extract_all(prof, tmp_path / "kernels", top=20, threshold=0.0)
    names = {p.name: p for p in created}
    forward, backward = names["gen_native_batch_norm_relu_1"], names["gen_native_batch_norm_relu_bwd_1"]
    # weight and bias: not the statistics, nor x (the model's own input: the step does not differentiate it)
    assert list(taskspec.load_spec(backward).grad_inputs) == [1, 2]
    with Harness(timeout_s=300, device="cpu") as h:
        for task in (forward, backward):
            report = h.evaluate(task, quick=True)
            assert report.status == "PASS", (task.name, report.reason)


class ResidualMlp(nn.Module):
    """A transformer's MLP: two linears round a GELU, added to the residual stream (which a linear made,
    so its gradient is wanted)."""

    def __init__(self):
        super().__init__()
        self.proj, self.fc1, self.fc2 = nn.Linear(8, 8), nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x):
        h = self.proj(x)
        return h + self.fc2(F.gelu(self.fc1(h)))


def test_a_training_steps_matmul_chains_get_generated_backward_tasks(tmp_path, monkeypatch):
    """The gradient matmuls are matmul_backward, ranked with the forward; each recorded matmul chain gets a
    backward task whose starter is Inductor's backward with its matmuls as the GEMM template. The
    residual add's gradient is grad_out itself, which torch.compile returns outside Inductor's code: the
    starter copies it (before, the starter's kernel_fn returned one tensor too few and there was none)."""
    monkeypatch.setenv("AUTOKERNEL_INDUCTOR_STARTERS", "1")
    prof = _train_profile("mlp", ResidualMlp(), [torch.randn(4, 8)])
    fams = {f["family"]: f for f in prof["families"]}
    assert {"matmul", "matmul_backward"} <= set(fams)
    assert "with_backward" in fams["matmul"]  # ranked by forward and backward together
    assert classify("nvjet_tst_128x128_64x4_1x2_h_bz_coopA_NTN",
                    ["autograd::engine::evaluate_function: AddmmBackward0", "AddmmBackward0", "aten::mm"]) \
        == "matmul_backward"
    prof["families"] = [fams["matmul_backward"]]  # its tasks only (each starter is a compile)
    created, _ = extract_all(prof, tmp_path / "kernels", top=1, threshold=0.0)
    names = {p.name: p for p in created}
    assert len(names) == 3, names  # proj's plain addmm, fc1's with the GELU, fc2's with the residual add
    residual = next(p for n, p in names.items() if n.startswith("gen_addmm_add_bwd"))
    gelu = next(p for n, p in names.items() if n.startswith("gen_addmm_gelu_bwd"))
    for task in (residual, gelu):
        spec = taskspec.load_spec(task)
        assert spec.kind == "backward" and spec.family == "matmul_backward"
        source = (task / "kernel.py").read_text()
        assert "NO STARTER" not in source and "_gemm(" in source, source[:400]
    assert list(taskspec.load_spec(residual).grad_inputs) == [0, 1, 2, 3]  # bias, activation, weight, residual
    with Harness(timeout_s=300, device="cpu") as h:
        report = h.evaluate(residual, quick=True)
    assert report.status == "PASS", report.reason
