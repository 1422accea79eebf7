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


def test_a_training_profile_makes_a_generated_backward_task_that_passes_the_harness(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOKERNEL_INDUCTOR_STARTERS", "1")  # the suite turns starter-making off for speed
    model, x = GroupNormRelu(), torch.randn(2, 16, 5, 3)
    prof = _train_profile("gn", model, [x])
    fams = {f["family"] for f in prof["families"]}
    assert {"group_norm", "group_norm_backward"} <= fams
    created, skipped = extract_all(prof, tmp_path / "kernels", top=20, threshold=0.0)
    names = {p.name: p for p in created}
    assert "gen_native_group_norm_relu_1" in names
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
