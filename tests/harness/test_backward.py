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
