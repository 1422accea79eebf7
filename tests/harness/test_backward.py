"""Backward tasks: kernel_fn(*inputs, grad_out) returns the gradients of the inputs the task names,
checked against autograd of the reference (float64), timed beside eager autograd's backward alone."""

from __future__ import annotations

import pytest

from autokernel_tui.tasks.spec import load_spec

from .conftest import BACKWARD_GOOD, make_backward_task


@pytest.fixture(scope="module")
def bwd_task(tmp_path_factory):
    return make_backward_task(tmp_path_factory.mktemp("bwd") / "rmsnorm_bwd")


def test_the_task_format_names_its_gradients(bwd_task):
    spec = load_spec(bwd_task)
    assert spec.kind == "backward" and spec.grad_inputs == (0, 1)


def test_a_right_backward_kernel_passes_every_stage(harness, bwd_task):
    report = harness.evaluate(bwd_task, kernel_source=BACKWARD_GOOD, quick=True)
    assert report.status == "PASS", report.reason
    assert report.stage == "timing" and all(r.passed and r.baseline_us > 0 for r in report.shapes)


def test_a_wrong_weight_gradient_fails(harness, bwd_task):
    wrong = BACKWARD_GOOD.replace("tl.store(DWP + row * N + cols, x * rstd * dy, mask=m)",
                                  "tl.store(DWP + row * N + cols, x * dy, mask=m)")
    report = harness.evaluate(bwd_task, kernel_source=wrong, quick=True)
    assert report.status == "FAIL" and "output 1 wrong" in report.reason


def test_autograd_instead_of_triton_is_rejected(harness, bwd_task):
    src = BACKWARD_GOOD + '''

def kernel_fn(x, weight, eps, grad_out):
    dx, dw = _kernel_fn(x, weight, eps, grad_out)
    return dx.mul(1.0), dw
'''
    src = src.replace("def kernel_fn(x, weight, eps, grad_out):\n    m, n", "def _kernel_fn(x, weight, eps, grad_out):\n    m, n", 1)
    report = harness.evaluate(bwd_task, kernel_source=src, quick=True)
    assert report.status == "REJECTED" and "aten::mul" in report.reason


# A backward task that takes what its forward saved (as flash_attention_bwd takes O and the logsumexp):
# rmsnorm's backward given each row's rstd, computed by the reference's saved_for_backward.
SAVED_REFERENCE = '''

def saved_for_backward(x, weight, eps):
    return ((x.float().pow(2).mean(-1, keepdim=True) + eps).rsqrt(),)
'''
BACKWARD_SAVED = BACKWARD_GOOD.replace(
    "def _rms_bwd(X, W, DY, DX, DWP, N, eps, BLOCK: tl.constexpr):",
    "def _rms_bwd(X, W, RSTD, DY, DX, DWP, N, eps, BLOCK: tl.constexpr):").replace(
    "    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)\n",
    "    rstd = tl.load(RSTD + row)\n").replace(
    "def kernel_fn(x, weight, eps, grad_out):", "def kernel_fn(x, weight, eps, rstd, grad_out):").replace(
    "_rms_bwd[(m,)](x, weight, grad_out,", "_rms_bwd[(m,)](x, weight, rstd, grad_out,")


@pytest.fixture(scope="module")
def saved_task(tmp_path_factory):
    dest = make_backward_task(tmp_path_factory.mktemp("bwd_saved") / "rmsnorm_bwd")
    (dest / "task.toml").write_text('saved = ["rstd"]\n' + (dest / "task.toml").read_text())
    (dest / "reference.py").write_text((dest / "reference.py").read_text() + SAVED_REFERENCE)
    (dest / "kernel.py").write_text(BACKWARD_SAVED)
    return dest


def test_a_kernel_given_what_the_forward_saved_passes_every_stage(harness, saved_task):
    # Every rep's fresh inputs scale x: the rstd beside them must be computed again from the new x, or this
    # kernel, which trusts it, would be wrong on every rep after the first
    assert load_spec(saved_task).saved == ("rstd",)
    report = harness.evaluate(saved_task, kernel_source=BACKWARD_SAVED, quick=True)
    assert report.status == "PASS", report.reason


def test_saved_tensors_follow_their_inputs(saved_task):
    import torch

    from autokernel_tui.harness.worker.inputs import InputBuilder
    from autokernel_tui.harness.worker.reference import load_reference

    ref = load_reference(saved_task)
    builder = InputBuilder(ref, "cpu", cache_bytes=1 << 20)
    dims = {"M": 6, "N": 40}
    for steps in ([], [["perturb", 7]], [["perturb", 7], ["transform", next(iter(ref.ADVERSARIAL)), 3]]):
        x, w, eps, rstd, grad_out = builder.build({"dims": dims, "dtype": "float32", "base_seed": 1, "steps": steps})
        want = (x.float().pow(2).mean(-1, keepdim=True) + eps).rsqrt()
        assert torch.allclose(rstd, want), steps
        fwd, grads = ref.split((x, w, eps, rstd, grad_out))
        assert len(fwd) == 3 and len(grads) == 1  # the saved tensor is neither


def test_saved_names_a_reference_function(tmp_path):
    from autokernel_tui.harness.worker.reference import load_reference
    from autokernel_tui.tasks.spec import TaskFormatError

    dest = make_backward_task(tmp_path / "rmsnorm_bwd")
    (dest / "task.toml").write_text('saved = ["rstd"]\n' + (dest / "task.toml").read_text())
    with pytest.raises(ValueError, match="no saved_for_backward"):
        load_reference(dest)
    fwd = tmp_path / "fwd"
    make_backward_task(fwd)
    (fwd / "task.toml").write_text('saved = ["rstd"]\n' + (fwd / "task.toml").read_text().replace(
        'kind = "backward"\ngrad_inputs = [0, 1]\n', ""))
    with pytest.raises(TaskFormatError, match="belongs to a backward task"):
        load_spec(fwd)
