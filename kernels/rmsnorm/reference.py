"""Harness-owned PyTorch side of the rmsnorm task (read-only to the agent)."""

import torch
import torch.nn.functional as F

EPS = 1e-6


def make_inputs(shape: dict, dtype: torch.dtype, device: str, seed: int) -> tuple:
    # Drawn on the target device: full GPU shapes generate in milliseconds.
    g = torch.Generator(device=device).manual_seed(seed)
    m, n = shape["M"], shape["N"]
    # Activations with a per-row scale spread, and a random affine weight (not ones).
    scale = torch.exp(torch.randn(m, 1, generator=g, device=device) * 0.5)
    x = (torch.randn(m, n, generator=g, device=device) * scale).to(device=device, dtype=dtype)
    w = (1.0 + 0.1 * torch.randn(n, generator=g, device=device)).to(device=device, dtype=dtype)
    return x, w, EPS


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The baseline: the fused rms_norm a model calls."""
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def naive(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The composite many models still use, reported beside the baseline."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def flops(shape: dict) -> int:
    m, n = shape["M"], shape["N"]
    return 4 * m * n  # square, sum, scale, weight


def bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    m, n = shape["M"], shape["N"]
    size = torch.finfo(dtype).bits // 8
    return (2 * m * n + n) * size  # read x, write y, read weight


def backward_flops(shape: dict) -> int:
    """The rmsnorm_bwd task's work (its reference.py is a link to this file)."""
    m, n = shape["M"], shape["N"]
    # square + sum (rstd recomputed), x * rstd, dy * w, g * xhat + sum, dx = (g - xhat * c) * rstd,
    # dw += dy * xhat
    return 11 * m * n


def backward_bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    """Fewest bytes of the backward: read x and grad_out, write grad_x; read weight, write grad_weight.
    No saved statistics (the task gets the forward's inputs: rstd is recomputed from x); the fp32
    dweight partials a kernel may spill are its own overhead, not counted."""
    m, n = shape["M"], shape["N"]
    return (3 * m * n + 2 * n) * (torch.finfo(dtype).bits // 8)


def _large(inputs, g):
    # x^2 overflows fp16 when squared in fp16: catches accumulation in the input dtype.
    x, w, eps = inputs
    return x * 300.0, w, eps


def _tiny(inputs, g):
    # mean(x^2) far below eps: the eps placement matters.
    x, w, eps = inputs
    return x * 1e-4, w, eps


def _spiky(inputs, g):
    # One huge value per row among small ones.
    x, w, eps = inputs
    x = x.clone() * 1e-2
    cols = torch.randint(0, x.shape[1], (x.shape[0],), generator=g, device=g.device).to(x.device)
    x[torch.arange(x.shape[0], device=x.device), cols] = 50.0
    return x, w, eps


ADVERSARIAL = {"large": _large, "tiny": _tiny, "spiky": _spiky}
