"""Harness-owned PyTorch side of the layernorm task (read-only to the agent)."""

import torch
import torch.nn.functional as F

EPS = 1e-5


def make_inputs(shape: dict, dtype: torch.dtype, device: str, seed: int) -> tuple:
    # Drawn on the target device: full GPU shapes generate in milliseconds.
    g = torch.Generator(device=device).manual_seed(seed)
    m, n = shape["M"], shape["N"]
    # Activations with a per-row scale spread and per-row offset; random affine weight and bias.
    scale = torch.exp(torch.randn(m, 1, generator=g, device=device) * 0.5)
    offset = torch.randn(m, 1, generator=g, device=device)
    x = (torch.randn(m, n, generator=g, device=device) * scale + offset).to(device=device, dtype=dtype)
    w = (1.0 + 0.1 * torch.randn(n, generator=g, device=device)).to(device=device, dtype=dtype)
    b = (0.1 * torch.randn(n, generator=g, device=device)).to(device=device, dtype=dtype)
    return x, w, b, EPS


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """The baseline: the fused layer_norm a model calls."""
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def naive(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """The composite, reported beside the baseline."""
    xf = x.float()
    mean = xf.mean(-1, keepdim=True)
    var = (xf - mean).pow(2).mean(-1, keepdim=True)
    return ((xf - mean) * torch.rsqrt(var + eps) * weight.float() + bias.float()).to(x.dtype)


def flops(shape: dict) -> int:
    m, n = shape["M"], shape["N"]
    return 7 * m * n  # sum, centre, square, sum, scale, weight, bias


def bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    m, n = shape["M"], shape["N"]
    return (2 * m * n + 2 * n) * (torch.finfo(dtype).bits // 8)  # x in, y out, weight and bias


def backward_flops(shape: dict) -> int:
    """The layernorm_bwd task's work (its reference.py is a link to this file)."""
    m, n = shape["M"], shape["N"]
    # sum, centre, square + sum (mean and rstd recomputed), xhat, dy * w, g * xhat + sum, sum g,
    # dx = (g - xhat * c1 - c2) * rstd, dw += dy * xhat, db += dy
    return 16 * m * n


def backward_bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    """Fewest bytes of the backward: read x and grad_out, write grad_x; read weight, write grad_weight
    and grad_bias (bias itself is not needed). No saved statistics (the task gets the forward's
    inputs: mean and rstd are recomputed from x); a kernel's fp32 partial sums are its own overhead."""
    m, n = shape["M"], shape["N"]
    return (3 * m * n + 3 * n) * (torch.finfo(dtype).bits // 8)


def _offset(inputs, g):
    # Rows far from zero: E[x^2] - E[x]^2 cancels catastrophically, a centred variance does not.
    x, w, b, eps = inputs
    shift = (torch.rand(x.shape[0], 1, generator=g, device=g.device) * 600.0 - 300.0).to(x.device)
    return (x.float() + shift).to(x.dtype), w, b, eps


def _large(inputs, g):
    # Squares overflow fp16 when accumulated in the input dtype.
    x, w, b, eps = inputs
    return (x.float() * 300.0).to(x.dtype), w, b, eps


def _tiny(inputs, g):
    # Variance far below eps: the eps placement matters.
    x, w, b, eps = inputs
    return (x.float() * 1e-3).to(x.dtype), w, b, eps


def _spiky(inputs, g):
    # One huge value per row among small ones.
    x, w, b, eps = inputs
    x = (x.float() * 1e-2).to(x.dtype)
    cols = torch.randint(0, x.shape[1], (x.shape[0],), generator=g, device=g.device).to(x.device)
    x[torch.arange(x.shape[0], device=x.device), cols] = 50.0
    return x, w, b, eps


ADVERSARIAL = {"offset": _offset, "large": _large, "tiny": _tiny, "spiky": _spiky}
