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
    if not _has_bias(shape):
        return a, b
    # O(1) like the products: a kernel that drops or misplaces the bias fails by far
    return a, b, torch.randn(n, generator=g, device=device).to(dtype)


def _has_bias(shape: dict) -> bool:
    """A shape's ``epilogue``: "bias" (a Linear's: C = A @ B + bias, one value per column) or "none"."""
    epilogue = shape.get("epilogue", "none")
    if epilogue not in ("none", "bias"):
        raise ValueError(f"matmul's epilogue is 'none' or 'bias', not {epilogue!r}")
    return epilogue == "bias"


def reference(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The baseline: torch.matmul, or with a bias addmm (cuBLAS, the bias in its epilogue, as nn.Linear
    calls it); fp32 with torch's default allow_tf32=False."""
    return torch.matmul(a, b) if bias is None else torch.addmm(bias, a, b)


def flops(shape: dict) -> int:
    return 2 * shape["M"] * shape["N"] * shape["K"] + (shape["M"] * shape["N"] if _has_bias(shape) else 0)


def bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    m, n, k = shape["M"], shape["N"], shape["K"]
    return (m * k + k * n + m * n + (n if _has_bias(shape) else 0)) * (torch.finfo(dtype).bits // 8)


def _positive(inputs, g):
    # All-positive operands: sums grow with K, so accumulating in the input dtype loses digits.
    a, b, *bias = inputs
    return a.abs(), b.abs(), *bias


def _row_scales(inputs, g):
    # Rows of A spanning four decades: small rows must not drown in the large rows' rounding.
    a, b, *bias = inputs
    s = torch.pow(10.0, torch.rand(a.shape[0], 1, generator=g, device=g.device) * 4.0 - 2.0).to(a.device)
    return (a.float() * s).to(a.dtype), b, *bias


def _weight_layout(inputs, g):
    # B as a model passes it: nn.Linear computes x @ W.t(), so B is the transpose of a row-major [N, K]
    # weight (column-major, strides (1, K)). Same values, the layout every patched Linear calls with.
    a, b, *bias = inputs
    return a, b.t().contiguous().t(), *bias


def _bias(inputs, g):
    # A Linear's bias at every shape (large, so dropping it fails by far): the patched nn.Linear hands the
    # kernel its bias, so a kept kernel must have added one right even where the task's shapes have none.
    a, b, *_ = inputs
    return a, b, (torch.randn(b.shape[1], generator=g, device=g.device) * 4.0).to(device=a.device, dtype=a.dtype)


ADVERSARIAL = {"positive": _positive, "row_scales": _row_scales, "weight_layout": _weight_layout, "bias": _bias}
