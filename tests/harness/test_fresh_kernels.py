"""The fused fresh-input kernel (``AUTOKERNEL_HARNESS_FRESH=kernel``, the default on CUDA): every element
scaled by its own factor in [0.5, 1.5), the same tensor for the same seed in any process, another for
another seed, rounded once into the input's type; ``perturb`` giving each tensor of a set its own draw and
keeping the torch way for what the kernel does not take. Under Triton's interpreter on the CPU, on the GPU
when there is one."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from autokernel_tui.harness.worker import fresh_kernels as fr, inputs

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_each_element_is_scaled_by_its_own_factor_in_range(dtype):
    x = (torch.randn(2 * fr.BLOCK + 77, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
         .to(dtype).to(DEVICE))
    y = fr.scaled(x, 12345)
    assert y.dtype == dtype and y.shape == x.shape and y.device == x.device
    nonzero = x != 0
    factors = (y.double()[nonzero] / x.double()[nonzero])
    slack = 0.0 if dtype == torch.float64 else 1e-2  # one rounding into a 16-bit type moves a factor a little
    assert factors.min().item() >= 0.5 - slack and factors.max().item() < 1.5 + slack
    assert factors.std().item() > 0.25  # uniform on [0.5, 1.5): std 0.289, not one factor for all


def test_the_same_seed_gives_the_same_tensor_and_another_seed_another():
    x = torch.rand(3 * fr.BLOCK + 5, generator=torch.Generator().manual_seed(2)).add(1).to(torch.bfloat16).to(DEVICE)
    a, b, c = fr.scaled(x, 7), fr.scaled(x, 7), fr.scaled(x, 8)
    assert torch.equal(a, b)
    assert (a != c).float().mean().item() > 0.9
    # a small seed and the largest a recipe draws (2^62 - 1) land in the one compiled type, and still differ
    assert not torch.equal(fr.scaled(x, 3), fr.scaled(x, (1 << 62) - 1))


def test_the_same_seed_gives_the_same_tensor_in_another_process():
    """The judge and a contestant each build a rep's inputs: the factors depend on (seed, index) only."""
    x = torch.linspace(1, 2, 5000, dtype=torch.float32)
    here = fr.scaled(x.to(DEVICE), 99).cpu()
    code = ("import torch, sys; from autokernel_tui.harness.worker import fresh_kernels as fr; "
            f"d = torch.device('{DEVICE.type}'); "
            "y = fr.scaled(torch.linspace(1, 2, 5000, dtype=torch.float32).to(d), 99).cpu(); "
            "sys.stdout.write(repr(y.double().sum().item()) + ' ' + repr(y[:7].tolist()))")
    env = {**__import__("os").environ}
    if DEVICE.type == "cpu":
        env["TRITON_INTERPRET"] = "1"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    total, head = out.stdout.split(" ", 1)
    assert float(total) == here.double().sum().item() and eval(head) == here[:7].tolist()


def test_perturb_takes_the_kernel_where_chosen_and_the_torch_way_elsewhere(monkeypatch):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(64, 96, generator=gen).to(torch.float16).to(DEVICE)
    w = torch.randn(96, generator=gen).to(torch.float16).to(DEVICE)
    strided = torch.randn(96, 64, generator=gen).to(DEVICE).t()  # not contiguous: the torch way, layout kept
    index = torch.arange(50, device=DEVICE)
    monkeypatch.setenv(inputs.FRESH_WAY_VARIABLE, "kernel-anywhere")
    a = inputs.perturb((x, w, strided, index, 0.5), 11, DEVICE)
    b = inputs.perturb((x, w, strided, index, 0.5), 11, DEVICE)
    assert all(torch.equal(p, q) for p, q in zip(a[:4], b[:4])) and a[4] == 0.5
    assert torch.equal(a[0], fr.scaled(x, inputs._chunk_seed(11, 1)))  # each tensor from a seed of its own
    assert torch.equal(a[1], fr.scaled(w, inputs._chunk_seed(11, 2)))
    assert a[2].stride() == strided.stride() and not torch.equal(a[2], strided)
    assert sorted(a[3].tolist()) == list(range(50)) and a[3].tolist() != list(range(50))
    monkeypatch.setenv(inputs.FRESH_WAY_VARIABLE, "torch")
    c = inputs.perturb((x, w, strided, index, 0.5), 11, DEVICE)
    assert not torch.equal(c[0], a[0])  # another way, other factors: both sides must take the same one
    ratio = c[0].double() / x.double()
    assert ratio[x != 0].min().item() >= 0.49 and ratio[x != 0].max().item() <= 1.51


def test_the_kernel_is_the_default_on_cuda_only(monkeypatch):
    monkeypatch.delenv(inputs.FRESH_WAY_VARIABLE, raising=False)
    assert inputs._fresh_way(torch.device("cuda")) and not inputs._fresh_way(torch.device("cpu"))
    monkeypatch.setenv(inputs.FRESH_WAY_VARIABLE, "torch")
    assert not inputs._fresh_way(torch.device("cuda"))
    monkeypatch.setenv(inputs.FRESH_WAY_VARIABLE, "kernel-anywhere")
    assert inputs._fresh_way(torch.device("cpu"))


def test_a_spare_warms_the_fresh_kernel_only_where_it_is_chosen(monkeypatch):
    calls = []
    monkeypatch.setattr(fr, "warm", lambda device: calls.append(device))
    monkeypatch.setenv(inputs.FINGERPRINT_WAY_VARIABLE, "torch")
    monkeypatch.delenv(inputs.FRESH_WAY_VARIABLE, raising=False)
    inputs.warm_fingerprints(torch.device("cpu"))
    assert calls == []
    monkeypatch.setenv(inputs.FRESH_WAY_VARIABLE, "kernel-anywhere")
    inputs.warm_fingerprints(torch.device("cpu"))
    assert calls == [torch.device("cpu")]


COMPILE = ("autokernel_tui.harness.worker.fresh_kernels", """
(("bf16", m._scale_uniform, {"SRC": "*bf16", "DST": "*bf16", "n": "i64", "seed": "i64"},
  {"WIDE": False, "BLOCK": m.BLOCK}),
 ("fp32", m._scale_uniform, {"SRC": "*fp32", "DST": "*fp32", "n": "i64", "seed": "i64"},
  {"WIDE": False, "BLOCK": m.BLOCK}),
 ("fp64", m._scale_uniform, {"SRC": "*fp64", "DST": "*fp64", "n": "i64", "seed": "i64"},
  {"WIDE": True, "BLOCK": m.BLOCK}))
""")


def test_the_kernel_compiles_for_sm90_without_spills():
    from .conftest import sm90_usage
    rows = sm90_usage(*COMPILE)
    assert set(rows) == {"bf16", "fp32", "fp64"}
    for name, r in rows.items():
        assert 0 < r["regs"] <= 128 and r["local_bytes"] == 0 and r["stack_bytes"] == 0, f"{name}: {r}"


def test_the_real_harness_builds_fused_inputs_end_to_end(monkeypatch, tmp_path):
    """The variable reaches the judge and its contestants through the sandbox's clean environment; both sides
    build the same inputs, so an honest kernel PASSes, and one that ignores its inputs FAILs."""
    from autokernel_tui.harness.runner import Harness
    from autokernel_tui.harness.sandbox.environment import allowed

    from .conftest import GOOD, PREFIX, make_tiny_task
    assert allowed(inputs.FRESH_WAY_VARIABLE)
    monkeypatch.setenv(inputs.FRESH_WAY_VARIABLE, "kernel-anywhere")
    stale = PREFIX + '''
FIRST = []


def kernel_fn(x, weight, eps):
    if not FIRST:
        FIRST.append(x.clone())
    return launch(FIRST[0] if FIRST[0].shape == x.shape else x, weight, eps, torch.empty_like(x))
'''
    task = make_tiny_task(tmp_path / "rmsnorm")
    with Harness(timeout_s=300, device="cpu") as h:
        good = h.evaluate(task, kernel_source=GOOD, quick=True)
        caught = h.evaluate(task, kernel_source=stale, quick=True)
    assert good.status == "PASS", good.reason
    assert caught.status in ("FAIL", "REJECTED"), (caught.status, caught.reason)
