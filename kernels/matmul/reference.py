"""Harness-owned PyTorch side of the matmul task (read-only to the agent)."""

import math

import torch


def make_inputs(shape: dict, dtype: torch.dtype, device: str, seed: int) -> tuple:
    # Drawn on the target device: full GPU shapes generate in milliseconds.
    g = torch.Generator(device=device).manual_seed(seed)
    m, n, k = shape["M"], shape["N"], shape["K"]
    # Activations with a per-row scale spread times a weight of fan-in scale, so outputs are O(1).
    scale = torch.exp(torch.randn(m, 1, generator=g, device=device) * 0.5)
    a = (torch.randn(m, k, generator=g, device=device) * scale).to(device=device, dtype=dtype)
    b = (torch.randn(k, n, generator=g, device=device) / math.sqrt(k)).to(device=device, dtype=dtype)
    return a, b


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The baseline: torch.matmul (cuBLAS); fp32 with torch's default allow_tf32=False."""
    return torch.matmul(a, b)


def flops(shape: dict) -> int:
    return 2 * shape["M"] * shape["N"] * shape["K"]


def bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    m, n, k = shape["M"], shape["N"], shape["K"]
    return (m * k + k * n + m * n) * (torch.finfo(dtype).bits // 8)


def _positive(inputs, g):
    # All-positive operands: sums grow with K, so accumulating in the input dtype loses digits.
    a, b = inputs
    return a.abs(), b.abs()


def _row_scales(inputs, g):
    # Rows of A spanning four decades: small rows must not drown in the large rows' rounding.
    a, b = inputs
    s = torch.pow(10.0, torch.rand(a.shape[0], 1, generator=g, device=g.device) * 4.0 - 2.0).to(a.device)
    return (a.float() * s).to(a.dtype), b


def _weight_layout(inputs, g):
    # B as a model passes it: nn.Linear computes x @ W.t(), so B is the transpose of a row-major [N, K]
    # weight (column-major, strides (1, K)). Same values, the layout every patched Linear calls with.
    a, b = inputs
    return a, b.t().contiguous().t()


ADVERSARIAL = {"positive": _positive, "row_scales": _row_scales, "weight_layout": _weight_layout}
