"""Harness-owned PyTorch side of the fused residual-add + rmsnorm task (read-only to the agent)."""

import torch
import torch.nn.functional as F

EPS = 1e-6


def make_inputs(shape: dict, dtype: torch.dtype, device: str, seed: int) -> tuple:
    # Drawn on the target device: full GPU shapes generate in milliseconds.
    g = torch.Generator(device=device).manual_seed(seed)
    m, n = shape["M"], shape["N"]
    # A residual stream that has grown over layers (per-row scale spread), a smaller
    # sublayer output added to it, and a random affine weight (not ones).
    scale = torch.exp(torch.randn(m, 1, generator=g, device=device) * 0.5)
    residual = (torch.randn(m, n, generator=g, device=device) * scale * 4.0).to(device=device, dtype=dtype)
    x = (torch.randn(m, n, generator=g, device=device) * scale).to(device=device, dtype=dtype)
    w = (1.0 + 0.1 * torch.randn(n, generator=g, device=device)).to(device=device, dtype=dtype)
    return x, residual, w, EPS


def reference(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float):
    """The baseline: the residual add then the fused rms_norm, as a LLaMA block calls them."""
    new_residual = x + residual
    return F.rms_norm(new_residual, (x.shape[-1],), weight, eps), new_residual


def naive(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float):
    """The composite many models still use, reported beside the baseline."""
    h = x + residual
    hf = h.float()
    return (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype), h


def flops(shape: dict) -> int:
    m, n = shape["M"], shape["N"]
    return 5 * m * n  # add, square, sum, scale, weight


def bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    m, n = shape["M"], shape["N"]
    return (4 * m * n + n) * (torch.finfo(dtype).bits // 8)  # x, residual in; out, new residual out; weight


def backward_flops(shape: dict) -> int:
    """The add_rmsnorm_bwd task's work (its reference.py is a link to this file)."""
    m, n = shape["M"], shape["N"]
    # add, square + sum (rstd recomputed), h * rstd, dy * w, g * hhat + sum, (g - hhat * c) * rstd,
    # + grad_h, dw += dy * hhat
    return 13 * m * n


def saved_for_backward(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple:
    """What a training forward keeps for the backward: h = x + residual in the inputs' dtype, as the forward
    rounds it (its second output, which the step keeps anyway). The add_rmsnorm_bwd task hands it to
    kernel_fn, which then reads one tensor where x and residual were two (torch.compile's backward does)."""
    return (x + residual,)


def backward_bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    """Fewest bytes of the backward: read h (saved by the forward), grad_y (of the normed output) and
    grad_h (of the new residual); write the gradient of x + residual once (grad_x and grad_residual are
    equal: one tensor serves both); read weight, write grad_weight. rstd is recomputed."""
    m, n = shape["M"], shape["N"]
    return (4 * m * n + 2 * n) * (torch.finfo(dtype).bits // 8)


def _large(inputs, g):
    # Squares overflow fp16 when accumulated in the input dtype.
    x, r, w, eps = inputs
    return (x.float() * 100.0).to(x.dtype), (r.float() * 100.0).to(r.dtype), w, eps


def _tiny(inputs, g):
    # mean(h^2) far below eps: the eps placement matters.
    x, r, w, eps = inputs
    return (x.float() * 1e-4).to(x.dtype), (r.float() * 1e-4).to(r.dtype), w, eps


def _cancel(inputs, g):
    # The sublayer output nearly cancels the residual: the sum must be formed before the norm.
    x, r, w, eps = inputs
    return (-(r.float()) + x.float() * 1e-2).to(x.dtype), r, w, eps


ADVERSARIAL = {"large": _large, "tiny": _tiny, "cancel": _cancel}
