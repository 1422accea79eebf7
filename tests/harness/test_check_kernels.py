"""The fused output check (``AUTOKERNEL_HARNESS_CHECK=kernel``, the default on CUDA): the same verdict and the
same figures as the torch way for every output type, wrong elements, NaN and inf outputs, 16-bit rounding
floors and blocks cut short; the torch way kept where the reference has inf or NaN, is in host memory, or
either side is not contiguous. Under Triton's interpreter on the CPU, on the GPU when there is one."""

from __future__ import annotations

import math

import pytest
import torch

from autokernel_tui.harness.worker import check_kernels as ck, correctness
from autokernel_tui.harness.worker.correctness import compare

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
N = 3 * ck.BLOCK + 123  # three full blocks and a short one


def _pair(dtype, seed=0, n=N, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    ref = (torch.randn(n, generator=g, dtype=torch.float64) * scale).to(DEVICE)
    return ref.to(dtype), ref


@pytest.fixture(autouse=True)
def _fresh_trust(monkeypatch):
    """Each test starts as a new judge does: nothing trusted, nothing given up."""
    monkeypatch.setattr(ck, "_trusted", set())
    monkeypatch.setattr(ck, "_given_up", [])


def _both(monkeypatch, out, ref, atol=1e-2, rtol=1e-2, max_rel_l2=1e-2):
    """(the torch way's verdict, the fused check's own), the fused one already trusted for every type."""
    monkeypatch.setenv(ck.CHECK_WAY_VARIABLE, "torch")
    plain = compare(out, ref, atol, rtol, max_rel_l2)
    monkeypatch.setenv(ck.CHECK_WAY_VARIABLE, "kernel-anywhere")
    monkeypatch.setattr(ck, "_trusted", set(ck.TAKEN))
    assert ck.takes(out, ref)
    return plain, compare(out, ref, atol, rtol, max_rel_l2)


def _same(plain, fused):
    assert fused.ok == plain.ok and fused.detail == plain.detail
    for a, b in ((plain.max_abs_err, fused.max_abs_err), (plain.rel_l2_err, fused.rel_l2_err)):
        assert (math.isinf(a) and math.isinf(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-300)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_a_right_output_passes_with_the_torch_ways_figures(monkeypatch, dtype):
    out, ref = _pair(dtype)
    plain, fused = _both(monkeypatch, out, ref)
    assert plain.ok and fused.ok
    assert fused.max_abs_err > 0 or dtype == torch.float64  # a 16- or 32-bit output rounds
    _same(plain, fused)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_wrong_elements_are_counted_as_the_torch_way_counts_them(monkeypatch, dtype):
    out, ref = _pair(dtype, seed=1)
    out[[5, ck.BLOCK, N - 1]] += 3.0  # one in the first block, one starting the second, the last element
    plain, fused = _both(monkeypatch, out, ref)
    assert not fused.ok and fused.detail.startswith(f"3 of {N} elements outside")
    _same(plain, fused)


def test_a_close_output_fails_on_its_relative_l2_alone(monkeypatch):
    out, ref = _pair(torch.float32, seed=2)
    out = (ref * 1.004).float()  # inside atol + rtol everywhere, 4e-3 off in L2
    plain, fused = _both(monkeypatch, out, ref, atol=1e-2, rtol=1e-2, max_rel_l2=1e-3)
    assert not fused.ok and fused.detail.startswith("rel_l2 ")
    _same(plain, fused)


def test_the_bound_is_the_float64_one_to_the_last_bit(monkeypatch):
    """atol and rtol reach the kernel in float64: an element just inside ``atol + rtol |ref|`` passes and one just
    outside fails, as in the torch way (a float32 rtol of 0.01 is 0.00999999977648)."""
    ref = torch.full((ck.BLOCK,), 1.0, dtype=torch.float64, device=DEVICE)
    out = ref.clone()
    out[3] = 1.0 + 0.01 * (1 - 1e-9)  # inside the float64 bound, outside a float32 rtol's
    plain, fused = _both(monkeypatch, out, ref, atol=0.0, rtol=0.01, max_rel_l2=1.0)
    assert plain.ok and fused.ok
    out[3] = 1.0 + 0.01 * (1 + 1e-9)  # just outside
    plain, fused = _both(monkeypatch, out, ref, atol=0.0, rtol=0.01, max_rel_l2=1.0)
    assert not plain.ok and not fused.ok
    _same(plain, fused)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_inf_outputs_fail_with_an_infinite_error(monkeypatch, bad):
    out, ref = _pair(torch.bfloat16, seed=3)
    out[ck.BLOCK + 7] = bad
    plain, fused = _both(monkeypatch, out, ref)
    assert not fused.ok and math.isinf(fused.max_abs_err) and math.isinf(fused.rel_l2_err)
    _same(plain, fused)


def test_the_16_bit_rounding_floor_is_the_torch_ways(monkeypatch):
    """Gradients of order 1e-6 underflow fp16: the bound is twice the reference's own rounding error, the
    same figure whichever way sums it (the reference rounded through float32 here, directly in torch)."""
    out, ref = _pair(torch.float16, seed=4, scale=1e-6)
    plain, fused = _both(monkeypatch, out, ref, atol=0.0, rtol=1.0, max_rel_l2=1e-6)
    assert plain.ok and fused.ok
    _same(plain, fused)
    off = (ref * 1.5).half()  # far beyond the floor
    plain, fused = _both(monkeypatch, off, ref, atol=0.0, rtol=1.0, max_rel_l2=1e-6)
    assert not fused.ok
    _same(plain, fused)


def test_an_empty_output_passes(monkeypatch):
    out, ref = _pair(torch.float32, n=0)
    plain, fused = _both(monkeypatch, out, ref)
    assert plain.ok and fused.ok
    _same(plain, fused)


def test_a_reference_with_inf_or_nan_goes_the_torch_way(monkeypatch):
    """Their places must match exactly, which only the torch way tests."""
    out, ref = _pair(torch.float32, seed=5)
    ref[10], ref[ck.BLOCK + 1] = math.inf, math.nan
    out[10], out[ck.BLOCK + 1] = math.inf, math.nan
    monkeypatch.setenv(ck.CHECK_WAY_VARIABLE, "kernel-anywhere")
    assert ck.sums(out, ref, 1e-2, 1e-2) is None
    assert compare(out, ref, 1e-2, 1e-2, 1e-2).ok
    out[10] = 0.0
    assert compare(out, ref, 1e-2, 1e-2, 1e-2).detail == "inf/nan positions differ from the reference"


def test_what_the_kernel_does_not_take(monkeypatch):
    out, ref = _pair(torch.float32)
    monkeypatch.setenv(ck.CHECK_WAY_VARIABLE, "kernel-anywhere")
    assert ck.takes(out, ref)
    assert not ck.takes(out.view(-1, 1).expand(-1, 2).t(), ref.view(-1, 1).expand(-1, 2).t())  # not contiguous
    assert not ck.takes(out, ref.float())  # a reference that is not float64
    assert not ck.takes(torch.arange(N, device=DEVICE), ref)  # an integer output
    if DEVICE.type == "cuda":
        assert not ck.takes(out, ref.cpu())  # a reference computed in host memory
    monkeypatch.setenv(ck.CHECK_WAY_VARIABLE, "torch")
    assert not ck.takes(out, ref)
    monkeypatch.setenv(ck.CHECK_WAY_VARIABLE, "kernel")
    assert ck.takes(out, ref) == (DEVICE.type == "cuda")


COMPILE = ("autokernel_tui.harness.worker.check_kernels", """
tuple((name, m._check_partials, {"OUT": ty, "REF": "*fp64", "PART": "*fp64", "TOL": "*fp64", "n": "i64"},
       {"LOW": low, "BLOCK": m.BLOCK})
      for name, ty, low in (("bf16", "*bf16", tl.bfloat16), ("fp16", "*fp16", tl.float16), ("fp32", "*fp32", None),
                            ("fp64", "*fp64", None)))
""")


def test_the_kernel_compiles_for_sm90_without_spills():
    from .conftest import sm90_usage
    rows = sm90_usage(*COMPILE)
    assert set(rows) == {"bf16", "fp16", "fp32", "fp64"}
    for name, r in rows.items():
        assert 0 < r["regs"] <= 128 and r["local_bytes"] == 0 and r["stack_bytes"] == 0, f"{name}: {r}"


def test_the_real_harness_checks_through_the_kernel_end_to_end(monkeypatch, tmp_path):
    """The variable reaches the judge through the sandbox's clean environment: an honest kernel PASSes with
    its errors reported, one that leaves its last row unwritten FAILs with the fused check's count."""
    from autokernel_tui.harness.runner import Harness
    from autokernel_tui.harness.sandbox.environment import allowed

    from .conftest import GOOD, PREFIX, make_tiny_task
    assert allowed(ck.CHECK_WAY_VARIABLE)
    monkeypatch.setenv(ck.CHECK_WAY_VARIABLE, "kernel-anywhere")
    off = PREFIX + '''

def kernel_fn(x, weight, eps):
    y = torch.zeros_like(x)
    launch(x, weight, eps, y, rows=x.numel() // x.shape[-1] - 1)
    return y
'''
    task = make_tiny_task(tmp_path / "rmsnorm")
    with Harness(timeout_s=300, device="cpu") as h:
        good = h.evaluate(task, kernel_source=GOOD, quick=True)
        wrong = h.evaluate(task, kernel_source=off, quick=True)
    assert good.status == "PASS", good.reason
    assert all(row.rel_l2_err is not None and row.rel_l2_err < 1e-3 for row in good.shapes)
    assert wrong.status == "FAIL" and ("elements outside" in wrong.reason or "rel_l2" in wrong.reason), wrong.reason


def test_the_fused_check_decides_for_a_type_once_it_has_agreed_with_the_torch_way(monkeypatch):
    monkeypatch.setenv(ck.CHECK_WAY_VARIABLE, "kernel-anywhere")
    calls = []
    real = ck.sums
    monkeypatch.setattr(ck, "sums", lambda *a: calls.append(1) or real(*a))
    out, ref = _pair(torch.float16, seed=7)
    first = compare(out, ref, 1e-2, 1e-2, 1e-2)
    assert first.ok and ck.trusted(torch.float16) and not ck.trusted(torch.float32) and calls == [1]
    torch_way = []
    real_torch = correctness._compare_torch
    monkeypatch.setattr(correctness, "_compare_torch", lambda *a: torch_way.append(1) or real_torch(*a))
    assert compare(out, ref, 1e-2, 1e-2, 1e-2).ok and torch_way == []  # trusted: the fused check alone
    compare(out.float(), ref, 1e-2, 1e-2, 1e-2)  # a new type: both ways once more
    assert torch_way == [1] and ck.trusted(torch.float32)


def test_a_fused_check_that_disagrees_gives_way_to_the_torch_way(monkeypatch, capfd):
    """A kernel wrong without failing (a Triton or driver it was never run on): its first verdict is set beside
    the torch way's, which decides, and the fused check is given up for good in that process."""
    monkeypatch.setenv(ck.CHECK_WAY_VARIABLE, "kernel-anywhere")
    monkeypatch.setattr(ck, "sums", lambda *a: [0.0, 1.0, 0.0, 0.0, 0.0, 0.0])  # "no element outside"
    out, ref = _pair(torch.float32, seed=8)
    out[9] += 5.0
    verdict = compare(out, ref, 1e-2, 1e-2, 1e-2)
    assert not verdict.ok and verdict.detail.startswith(f"1 of {N} elements outside")  # the torch way's
    assert not ck.takes(out, ref) and not ck.trusted(torch.float32)
    assert "the fused output check failed (ValueError: torch.float32 output: fused True" in capfd.readouterr().err


def test_a_fused_check_that_fails_gives_way_to_the_torch_way(monkeypatch, capfd):
    """On a Triton or driver the kernel was never tried on, a failure of the fused check costs no verdict: the
    torch way decides, from then on in that process, which says so once."""
    monkeypatch.setenv(ck.CHECK_WAY_VARIABLE, "kernel-anywhere")

    class Broken:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                raise RuntimeError("PassManager::run failed")
            return launch
    monkeypatch.setattr(ck, "_check_partials", Broken())
    out, ref = _pair(torch.float16, seed=6)
    out[7] += 3.0
    first = compare(out, ref, 1e-2, 1e-2, 1e-2)
    assert not first.ok and first.detail.startswith(f"1 of {N} elements outside")
    assert not ck.takes(out, ref) and compare(ref.half(), ref, 1e-2, 1e-2, 1e-2).ok
    said = capfd.readouterr().err
    assert said.count("the fused output check failed (RuntimeError: PassManager::run failed)") == 1
    monkeypatch.setattr(ck, "_given_up", [])  # the judge warming it at its start: given up there, said once
    ck.warm(DEVICE)
    assert not ck.takes(out, ref) and capfd.readouterr().err.count("the fused output check failed") == 1
