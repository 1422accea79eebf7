"""The judge's compiled float64 reference (``harness/worker/precise.py``): used only where it agrees with
eager at each new input signature, eager for good after a disagreement or a failure, eager on the CPU, for
a reference too big for the card, and with ``AUTOKERNEL_HARNESS_PRECISE=eager``. The compile goes through
torch.compile with small backends here (aot_eager, one that corrupts, one that fails): Inductor's own
code is a GPU matter (``tests/harness/test_gpu.py``)."""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn.functional as F

from autokernel_tui.harness.worker import precise as pr
from autokernel_tui.harness.worker.correctness import precise_reference


def _task():
    def reference(x, weight, eps):
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    return types.SimpleNamespace(__name__="rmsnorm", reference=reference)


def _inputs(rows=8, cols=64, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, cols, generator=g).to(dtype), torch.randn(cols, generator=g).to(dtype), 1e-6


def _corrupting(gm, example_inputs):
    return lambda *args: [o * (1 + 1e-6) if isinstance(o, torch.Tensor) else o for o in gm(*args)]


def _failing(gm, example_inputs):
    raise RuntimeError("no compiler here")


@pytest.fixture(autouse=True)
def _fresh_dynamo(monkeypatch):
    monkeypatch.setenv(pr.PRECISE_WAY_VARIABLE, "compiled")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_the_compiled_reference_is_used_once_it_agrees_with_eager_at_each_signature():
    task = _task()
    precise = pr.PreciseReference(task, "cuda", backend="aot_eager")  # CPU tensors stand in for the card's
    assert precise.compiled
    for seed, shape, dtype in ((0, (8, 64), torch.bfloat16), (1, (8, 64), torch.bfloat16), (2, (16, 32), torch.float16)):
        inputs = _inputs(*shape, dtype=dtype, seed=seed)
        (out,) = precise(inputs)
        (want,) = precise_reference(task, inputs)
        assert out.dtype == torch.float64 and torch.allclose(out, want, rtol=1e-12, atol=0)
    assert precise.compiled and len(precise._checked) == 2  # two signatures, each checked against eager once


def test_a_disagreeing_compile_puts_the_task_on_eager_for_good(capsys):
    task = _task()
    precise = pr.PreciseReference(task, "cuda", backend=_corrupting)
    inputs = _inputs()
    (out,) = precise(inputs)
    (want,) = precise_reference(task, inputs)
    assert torch.equal(out, want)  # the eager result, not the corrupted one
    assert not precise.compiled and "disagreed" in precise.note
    assert "disagreed" in capsys.readouterr().err
    (again,) = precise(_inputs(seed=5))
    assert torch.equal(again, precise_reference(task, _inputs(seed=5))[0])


def test_a_failing_compile_puts_the_task_on_eager_with_the_reason():
    task = _task()
    precise = pr.PreciseReference(task, "cuda", backend=_failing)
    inputs = _inputs()
    assert torch.equal(precise(inputs)[0], precise_reference(task, inputs)[0])
    assert not precise.compiled and "failed" in precise.note and "no compiler here" in precise.note


def test_infinities_and_nans_must_match_where_they_are():
    a = torch.tensor([1.0, float("inf"), float("nan"), -2.0], dtype=torch.float64)
    assert pr._agree((a,), (a.clone(),))
    assert not pr._agree((a,), (torch.tensor([1.0, float("-inf"), float("nan"), -2.0], dtype=torch.float64),))
    assert not pr._agree((a,), (torch.tensor([1.0, float("inf"), 0.0, -2.0], dtype=torch.float64),))
    assert not pr._agree((a,), (a * (1 + 1e-6),))
    assert pr._agree((a,), (a * (1 + 1e-12),))


def test_eager_by_default_on_the_cpu_and_past_the_cards_share(monkeypatch):
    task = _task()
    assert not pr.PreciseReference(task, "cpu").compiled
    monkeypatch.setenv(pr.PRECISE_WAY_VARIABLE, "eager")
    assert not pr.PreciseReference(task, "cuda").compiled
    monkeypatch.delenv(pr.PRECISE_WAY_VARIABLE)
    assert not pr.PreciseReference(task, "cuda").compiled  # until a GPU run has timed the compiled way
    monkeypatch.setenv(pr.PRECISE_WAY_VARIABLE, "compiled")
    precise = pr.PreciseReference(task, "cuda", backend=_failing)
    x = torch.randn(4, 4, device="meta", dtype=torch.bfloat16)  # not on the host: counts against the share
    with pytest.raises(Exception):  # the meta reference cannot be computed, but the compile was never tried
        precise((x, torch.ones(4, device="meta", dtype=torch.bfloat16), 1e-6), device_bytes=8)
    assert precise.compiled


def test_the_variable_passes_the_sandboxs_allowlist():
    from autokernel_tui.harness.sandbox.environment import allowed
    assert allowed(pr.PRECISE_WAY_VARIABLE)
