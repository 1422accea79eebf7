"""The fused fingerprint kernels (``AUTOKERNEL_HARNESS_FINGERPRINT=kernel``): the same numbers as the torch
way's definition with their own w, whole chunks of w lining up, one answer per output, and the judge's bound
accepting a correct output and refusing a stale one. Under Triton's interpreter on the CPU (the kernels take
CPU tensors there), on the GPU when there is one; compiled for sm_90 in a subprocess without a GPU."""

from __future__ import annotations

import pytest
import torch

from autokernel_tui.harness.worker import fingerprint_kernels as fk, inputs

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def test_w_is_one_function_of_seed_and_index():
    whole = fk.fill_normal(3 * fk.BLOCK + 17, 0, 1234, DEVICE)
    part = fk.fill_normal(fk.BLOCK + 5, fk.BLOCK, 1234, DEVICE)  # a chunk starting at the second block
    assert torch.equal(whole[fk.BLOCK: 2 * fk.BLOCK + 5], part)
    with pytest.raises(ValueError, match="multiple of BLOCK"):  # w is drawn four quarters of a block at a time
        fk.fill_normal(10, fk.BLOCK - 3, 1234, DEVICE)
    assert not torch.equal(fk.fill_normal(100, 0, 1235, DEVICE), whole[:100])
    big = fk.fill_normal(1 << 15, 0, 7, DEVICE).double()
    assert abs(big.mean().item()) < 0.03 and abs(big.std().item() - 1.0) < 0.03  # N(0, 1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_dot_matches_its_definition_and_repeats_exactly(dtype):
    n = 2 * fk.BLOCK + 999  # a partial last program
    x = torch.randn(n, generator=torch.Generator().manual_seed(3)).to(dtype).to(DEVICE)
    w = fk.fill_normal(n, 0, 99, DEVICE)
    if dtype == torch.float64:
        expected = (x * w.double()).sum()
    else:
        expected = (x.float() * w).double().sum()  # each product rounded once to float32, float64 sums
    got = fk.dot_normal(x, 99)
    assert got.dtype == torch.float64 and got.device.type == DEVICE.type
    scale = (x.double().abs() * w.double().abs()).sum().item()
    assert abs(got.item() - expected.item()) <= inputs.PRODUCT_ROUNDING * scale
    assert fk.dot_normal(x, 99).item() == got.item()  # the determinism check compares two exactly


def test_bound_sums_are_the_four_figures_of_the_judges_bound():
    ref = torch.randn(3 * fk.BLOCK + 11, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    offset, seed = 5 * fk.BLOCK, 31
    d, w = ref.to(DEVICE), fk.fill_normal(ref.numel(), offset, seed, DEVICE).double()
    want = torch.stack([torch.dot(d, w), d.square().sum(), w.square().sum(), (d.abs() * w.abs()).sum()])
    got = fk.bound_sums(d, offset, seed)
    assert got.shape == (4,) and torch.allclose(got, want, rtol=1e-12, atol=1e-9)


def test_the_judges_bound_accepts_a_correct_output_and_refuses_a_stale_one(monkeypatch):
    monkeypatch.setattr(inputs, "_kernel_way", lambda device: True)  # as AUTOKERNEL_HARNESS_FINGERPRINT=kernel
    gen = torch.Generator().manual_seed(5)
    ref = torch.randn(1500, 64, generator=gen, dtype=torch.float64)
    good = (ref * (1 + 1e-3 * torch.randn(ref.shape, generator=gen, dtype=torch.float64))).to(torch.bfloat16)
    stale = (ref * 0.72).to(torch.bfloat16)  # 28% off
    refused = 0
    for seed in range(424242, 424247):  # the bound is statistical: a stale output passes a check 1 time in 5
        (fp_good,), (fp_stale,) = inputs.fingerprint_batch([[good.to(DEVICE)], [stale.to(DEVICE)]], seed)
        ref_fp, bound = inputs.fingerprint_bound(ref, seed, 1e-2, DEVICE, torch.bfloat16)
        assert inputs.fingerprint_ok(fp_good, ref_fp, bound)
        refused += not inputs.fingerprint_ok(fp_stale, ref_fp, bound)
        assert fp_good == inputs.fingerprint_batch([[good.to(DEVICE)]], seed)[0][0]
    assert refused >= 1  # all five passing: about 3e-4 by chance


def test_an_output_with_inf_is_fingerprinted_as_the_pair_the_judge_expects(monkeypatch):
    monkeypatch.setattr(inputs, "_kernel_way", lambda device: True)
    ref = torch.linspace(-3, 3, 5000, dtype=torch.float64)
    ref[17], ref[4000] = float("inf"), float("nan")
    (got,), = inputs.fingerprint_batch([[ref.float().to(DEVICE)]], 77)
    ref_fp, bound = inputs.fingerprint_bound(ref, 77, 1e-3, DEVICE, torch.float32)
    assert isinstance(got, list) and inputs.fingerprint_ok(got, ref_fp, bound)


def test_the_way_is_the_default_on_cuda_only_and_can_be_turned_off(monkeypatch):
    way = inputs.FINGERPRINT_WAY_VARIABLE
    monkeypatch.delenv(way, raising=False)
    assert inputs._kernel_way(torch.device("cuda")) and not inputs._kernel_way(torch.device("cpu"))
    monkeypatch.setenv(way, "torch")
    assert not inputs._kernel_way(torch.device("cuda"))
    monkeypatch.setenv(way, "kernel")
    assert inputs._kernel_way(torch.device("cuda")) and not inputs._kernel_way(torch.device("cpu"))
    monkeypatch.setenv(way, "kernel-anywhere")  # the tests' way through the real harness on the CPU
    assert inputs._kernel_way(torch.device("cpu"))
    from autokernel_tui.harness.sandbox.environment import allowed
    assert allowed(way)  # reaches the judge and every contestant alike


COMPILE = ("autokernel_tui.harness.worker.fingerprint_kernels", """
(("dot16", m._dot_normal, {"X": "*bf16", "PARTS": "*fp64", "n": "i64", "first_block": "i64", "seed": "i64"},
  {"WIDE": False, "BLOCK": m.BLOCK}),
 ("dot64", m._dot_normal, {"X": "*fp64", "PARTS": "*fp64", "n": "i64", "first_block": "i64", "seed": "i64"},
  {"WIDE": True, "BLOCK": m.BLOCK}),
 ("fill", m._fill_normal, {"W": "*fp32", "n": "i64", "first_block": "i64", "seed": "i64"}, {"BLOCK": m.BLOCK}),
 ("bound", m._bound_sums, {"R": "*fp64", "PARTS": "*fp64", "n": "i64", "first_block": "i64", "seed": "i64"},
  {"BLOCK": m.BLOCK}))
""")


def test_the_kernels_compile_for_sm90():
    from .conftest import sm90_usage
    rows = sm90_usage(*COMPILE)
    assert set(rows) == {"dot16", "dot64", "fill", "bound"}
    for name, r in rows.items():
        # 32-40 bytes of stack: libdevice's cosf and sinf keep their large-argument reduction there, a path
        # the Box-Muller angle (in [0, 2 pi)) never takes; anything more would be spills.
        assert 0 < r["regs"] <= 128 and r["local_bytes"] == 0 and r["stack_bytes"] <= 40, f"{name}: {r}"
        assert r["sass"].get("MUFU", 0) > 0  # log, cos and sqrt on the special-function units


def test_a_seed_or_first_block_of_one_is_a_value_like_any_other():
    x = torch.linspace(-1, 1, 300, dtype=torch.float32).to(DEVICE)
    w1 = fk.fill_normal(300, 0, 1, DEVICE)
    both = fk.fill_normal(fk.BLOCK + 300, 0, 1, DEVICE)
    assert torch.equal(both[:300], w1) and torch.equal(fk.fill_normal(299, fk.BLOCK, 1, DEVICE), both[fk.BLOCK:-1])
    expected = (x * w1).double().sum().item()
    assert abs(fk.dot_normal(x, 1).item() - expected) <= inputs.PRODUCT_ROUNDING * (x.abs() * w1.abs()).sum().item()


def test_a_spare_warms_the_kernels_only_where_they_are_chosen(monkeypatch):
    calls = []
    monkeypatch.setattr(fk, "warm", lambda device: calls.append(device))
    monkeypatch.delenv(inputs.FINGERPRINT_WAY_VARIABLE, raising=False)
    inputs.warm_fingerprints(torch.device("cpu"))
    monkeypatch.setenv(inputs.FINGERPRINT_WAY_VARIABLE, "torch")
    inputs.warm_fingerprints(torch.device("cuda"))
    assert calls == []
    monkeypatch.setattr(inputs, "_kernel_way", lambda device: True)
    inputs.warm_fingerprints(torch.device("cuda"))
    assert calls == [torch.device("cuda")]


def test_warming_compiles_every_output_type():
    fk.warm(DEVICE)  # under the interpreter on the CPU: runs each once, raises nothing
    assert fk.dot_normal(torch.zeros(fk.BLOCK, dtype=torch.bfloat16, device=DEVICE), 0).item() == 0.0


def test_the_real_harness_takes_fused_fingerprints_end_to_end(monkeypatch, tmp_path):
    """The variable reaches the judge and its contestants through the sandbox's clean environment; both
    sides draw the same w, so an honest kernel PASSes and one wrong only when timed is REJECTED."""
    from autokernel_tui.harness.runner import Harness

    from .conftest import GOOD, PREFIX, make_tiny_task
    monkeypatch.setenv(inputs.FINGERPRINT_WAY_VARIABLE, "kernel-anywhere")
    wrong_when_timed = PREFIX + '''
CALLS = [0]


def kernel_fn(x, weight, eps):
    CALLS[0] += 1
    return launch(x, weight, eps if CALLS[0] <= 12 else 1e9, torch.empty_like(x))
'''
    task = make_tiny_task(tmp_path / "rmsnorm")
    with Harness(timeout_s=300, device="cpu") as h:
        good = h.evaluate(task, kernel_source=GOOD, quick=True)
        caught = h.evaluate(task, kernel_source=wrong_when_timed, quick=True)
    assert good.status == "PASS", good.reason
    assert caught.status == "REJECTED" and "timed run is wrong" in caught.reason, (caught.status, caught.reason)
