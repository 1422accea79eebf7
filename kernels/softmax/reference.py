"""Harness-owned PyTorch side of the softmax task (read-only to the agent)."""

import torch


def make_inputs(shape: dict, dtype: torch.dtype, device: str, seed: int) -> tuple:
    # Drawn on the target device: full GPU shapes generate in milliseconds.
    g = torch.Generator(device=device).manual_seed(seed)
    m, n = shape["M"], shape["N"]
    # Logit-like rows: a per-row temperature spread and a per-row offset.
    scale = torch.exp(torch.randn(m, 1, generator=g, device=device) * 0.5)
    offset = torch.randn(m, 1, generator=g, device=device) * 2.0
    x = torch.randn(m, n, generator=g, device=device) * scale + offset
    return (x.to(device=device, dtype=dtype),)


def reference(x: torch.Tensor) -> torch.Tensor:
    """The baseline: torch.softmax over the last dimension, in the input dtype."""
    return torch.softmax(x, dim=-1)


def naive(x: torch.Tensor) -> torch.Tensor:
    """The textbook composite (max-subtracted), reported beside the baseline."""
    xf = x.float()
    e = torch.exp(xf - xf.amax(dim=-1, keepdim=True))
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


def flops(shape: dict) -> int:
    m, n = shape["M"], shape["N"]
    return 5 * m * n  # max, subtract, exp, sum, scale


def bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    m, n = shape["M"], shape["N"]
    return 2 * m * n * (torch.finfo(dtype).bits // 8)  # read x once, write y once


def backward_flops(shape: dict) -> int:
    # The softmax_bwd task is given x, not y: the kernel recomputes y from x per row (max, subtract,
    # exp, sum, scale: 5), then dx = y * (dy - sum(dy * y)) (multiply, sum, subtract, multiply: 4).
    m, n = shape["M"], shape["N"]
    return 9 * m * n


def backward_bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    # Read x (y is recomputed from it, never stored), read dy, write dx: each once.
    m, n = shape["M"], shape["N"]
    return 3 * m * n * (torch.finfo(dtype).bits // 8)


def _offset(inputs, g):
    # Rows around +-1000: exp without subtracting the max overflows.
    (x,) = inputs
    shift = (torch.rand(x.shape[0], 1, generator=g, device=g.device) * 2000.0 - 1000.0).to(x.device)
    return ((x.float() + shift).to(x.dtype),)


def _peaked(inputs, g):
    # Very sharp rows (near one-hot): most probabilities underflow to zero.
    (x,) = inputs
    return ((x.float() * 40.0).to(x.dtype),)


def _masked(inputs, g):
    # Attention-style masking: about half of each row is -inf, never a whole row.
    (x,) = inputs
    drop = torch.rand(x.shape, generator=g, device=g.device) < 0.5
    drop[:, 0] = False
    return (x.masked_fill(drop.to(x.device), float("-inf")),)


ADVERSARIAL = {"offset": _offset, "peaked": _peaked, "masked": _masked}
