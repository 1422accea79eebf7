"""Harness-owned PyTorch side of the gelu task (read-only to the agent)."""

import torch
import torch.nn.functional as F

APPROXIMATIONS = ("none", "tanh")


def make_inputs(shape: dict, dtype: torch.dtype, device: str, seed: int) -> tuple:
    approximate = shape.get("approximate", "none")
    if approximate not in APPROXIMATIONS:
        raise ValueError(f"gelu: approximate must be one of {APPROXIMATIONS}, not {approximate!r}")
    g = torch.Generator(device=device).manual_seed(seed)  # on the device: fast at 1 GB inputs
    m, n = shape["M"], shape["N"]
    # MLP pre-activations: per-token scale spread plus a per-channel bias.
    scale = torch.exp(torch.randn(m, 1, generator=g, device=device) * 0.5)
    x = torch.randn(m, n, generator=g, device=device) * scale * 1.5 + 0.5 * torch.randn(n, generator=g, device=device)
    return x.to(device=device, dtype=dtype), approximate


def reference(x: torch.Tensor, approximate: str) -> torch.Tensor:
    """The baseline: the fused gelu a model calls."""
    return F.gelu(x, approximate=approximate)


def naive(x: torch.Tensor, approximate: str) -> torch.Tensor:
    """The composite formula written out, reported beside the baseline."""
    if approximate == "tanh":
        return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    return 0.5 * x * (1.0 + torch.erf(x * 0.7071067811865476))


def flops(shape: dict) -> int:
    per_element = 9 if shape.get("approximate") == "tanh" else 4  # erf counted as one
    return per_element * shape["M"] * shape["N"]


def bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    size = torch.finfo(dtype).bits // 8
    return 2 * shape["M"] * shape["N"] * size  # read x, write y


def backward_flops(shape: dict) -> int:
    # dx = dy * gelu'(x). erf: Phi(x) (scale, erf, add, halve: 4) + x * exp(-x^2/2) / sqrt(2 pi)
    # (square, exp, two multiplies: 4) + add, times dy: 10. tanh: z = k(x + a x^3) (4), s = sigmoid(2z)
    # (3), s + x * 2s(1-s) * k(1 + 3a x^2) (8), times dy: 16.
    per_element = 16 if shape.get("approximate") == "tanh" else 10
    return per_element * shape["M"] * shape["N"]


def backward_bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    size = torch.finfo(dtype).bits // 8
    return 3 * shape["M"] * shape["N"] * size  # read x and dy, write dx


def _large(inputs, g):
    # |x| up to ~100: x^3 overflows fp16 and exp(+-2z) overflows fp32 if not handled.
    x, approximate = inputs
    return (x.float() * 20.0).to(x.dtype), approximate


def _tiny(inputs, g):
    # gelu(x) ~ x/2 near 0: catches flush-to-zero and cancellation in 1 + tanh(...).
    x, approximate = inputs
    return (x.float() * 1e-3).to(x.dtype), approximate


def _negative_tail(inputs, g):
    # Half the rows deep in the negative tail (x <= -3), where 1 + erf / 1 + tanh cancels;
    # the other rows keep the norm honest so relative error stays measurable.
    x, approximate = inputs
    tail = (torch.rand(x.shape[0], 1, generator=g) < 0.5).to(x.device)
    return torch.where(tail, x.float().abs() * -1.0 - 3.0, x.float()).to(x.dtype), approximate


ADVERSARIAL = {"large": _large, "tiny": _tiny, "negative_tail": _negative_tail}
