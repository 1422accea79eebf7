"""Harness-owned PyTorch side of the swiglu task (read-only to the agent)."""

import torch
import torch.nn.functional as F


def make_inputs(shape: dict, dtype: torch.dtype, device: str, seed: int) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)  # on the device: fast at 1 GB inputs
    m, n = shape["M"], shape["N"]
    # Pre-activations of a gate and an up projection: per-token scale spread, a
    # per-channel bias, so silu sees its negative tail and its linear part.
    scale = torch.exp(torch.randn(m, 1, generator=g, device=device) * 0.5)
    bias = 0.3 * torch.randn(n, generator=g, device=device)
    gate = torch.randn(m, n, generator=g, device=device) * scale * 1.5 + bias
    up = torch.randn(m, n, generator=g, device=device) * scale
    return gate.to(device=device, dtype=dtype), up.to(device=device, dtype=dtype)


def reference(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """The baseline: what LLaMA's MLP calls (act_fn(gate_proj(x)) * up_proj(x))."""
    return F.silu(gate) * up


def naive(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """The unfused composite, reported beside the baseline."""
    return gate * torch.sigmoid(gate) * up


def flops(shape: dict) -> int:
    return 5 * shape["M"] * shape["N"]  # negate, exp, add, divide, multiply (x2 counted as one)


def bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    size = torch.finfo(dtype).bits // 8
    return 3 * shape["M"] * shape["N"] * size  # read gate and up, write out


def backward_flops(shape: dict) -> int:
    # s = sigmoid(gate) (negate, exp, add, divide: 4); d_up = dy * gate * s (2);
    # d_gate = dy * up * s * (1 + gate * (1 - s)) (6).
    return 12 * shape["M"] * shape["N"]


def backward_bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    size = torch.finfo(dtype).bits // 8
    return 5 * shape["M"] * shape["N"] * size  # read gate, up and dy, write d_gate and d_up


def _large(inputs, g):
    # |gate| up to ~100: exp(-gate) overflows fp16/fp32 if computed naively in the input dtype.
    gate, up = inputs
    return (gate.float() * 20.0).to(gate.dtype), up


def _tiny(inputs, g):
    # Subnormal-ish products: silu(x) ~ x/2 near 0, catches flushing to zero early.
    gate, up = inputs
    return (gate.float() * 1e-3).to(gate.dtype), (up.float() * 1e-2).to(up.dtype)


def _mixed_sign_rows(inputs, g):
    # Whole rows deep in the negative tail next to rows in the linear regime.
    gate, up = inputs
    sign = torch.where(torch.rand(gate.shape[0], 1, generator=g) < 0.5, -8.0, 8.0).to(gate.device)
    return (gate.float() + sign).to(gate.dtype), up


ADVERSARIAL = {"large": _large, "tiny": _tiny, "mixed_sign_rows": _mixed_sign_rows}
