"""Harness-owned PyTorch side of the linear_cross_entropy task (read-only to the agent)."""

import math

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100  # F.cross_entropy's default: these rows add nothing and are not counted


def make_inputs(shape: dict, dtype: torch.dtype, device: str, seed: int) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)
    m, v, k = shape["M"], shape["V"], shape["K"]
    # Hidden states as a final layer norm leaves them (O(1) per feature) and a head of fan-in scale
    # with a Zipf-like row norm (frequent ids score higher), so the logits spread over a few units.
    x = torch.randn(m, k, generator=g, device=device)
    ranks = torch.randperm(v, generator=g, device=device)
    norm = (1.0 + 0.5 * torch.log1p(torch.arange(v, dtype=torch.float32, device=device)).neg().exp())[ranks]
    w = torch.randn(v, k, generator=g, device=device) * (2.0 / math.sqrt(k)) * norm[:, None]
    targets = torch.randint(0, v, (m,), generator=g, device=device)
    pad = torch.rand(m, generator=g, device=device) < 0.1  # about 10% padding positions, at least one
    pad[min(1, m - 1)] = True
    if pad.all():
        pad[0] = False
    targets[pad] = IGNORE_INDEX
    return x.to(dtype), w.to(dtype), targets


def reference(x: torch.Tensor, w: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The baseline: the LM head (cuBLAS, logits written in x's dtype), then F.cross_entropy over them."""
    return F.cross_entropy(x @ w.t(), targets, ignore_index=IGNORE_INDEX)


def flops(shape: dict) -> int:
    m, v, k = shape["M"], shape["V"], shape["K"]
    return 2 * m * v * k + 4 * m * v  # the head's products, then max, subtract, exp, sum per logit


def bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    size = torch.finfo(dtype).bits // 8
    m, v, k = shape["M"], shape["V"], shape["K"]
    return (m * k + v * k) * size + m * 8 + size  # x and w once, int64 targets, the scalar: no logits


def _large_logits(inputs, g):
    # Hidden states 8x larger: logits of +-50 and more, where exp() overflows without the running max.
    x, w, targets = inputs
    return (x.float() * 8.0).to(x.dtype), w, targets


def _peaked(inputs, g):
    # Each row's hidden state pushed along one vocabulary row: that logit ~30 above the rest, on the
    # target for half the rows (loss ~ 0), elsewhere for the others. Catches underflow and
    # cancellation in lse - x_t.
    x, w, targets = inputs
    m, v = x.shape[0], w.shape[0]
    on_target = (torch.rand(m, generator=g) < 0.5).to(x.device)
    other = torch.randint(0, v, (m,), generator=g).to(x.device)
    col = torch.where(on_target & (targets >= 0), targets, other)
    direction = w.float()[col]
    push = 30.0 / direction.square().sum(1, keepdim=True).clamp_min(1e-6)
    return (x.float() + direction * push).to(x.dtype), w, targets


def _mostly_ignored(inputs, g):
    # Almost every row is padding: the mean divides by the number of counted rows, not M.
    x, w, targets = inputs
    keep = torch.zeros(targets.shape[0], dtype=torch.bool)
    keep[torch.randint(0, targets.shape[0], (max(1, targets.shape[0] // 20),), generator=g)] = True
    fresh = torch.randint(0, w.shape[0], targets.shape, generator=g)
    return x, w, torch.where(keep, fresh, torch.full_like(fresh, IGNORE_INDEX)).to(targets.device)


def _tied_head(inputs, g):
    # The head as a tied embedding hands it over: a view of a larger table's rows (row stride > K).
    x, w, targets = inputs
    table = torch.zeros(w.shape[0], w.shape[1] + 8, dtype=w.dtype, device=w.device)
    table[:, :w.shape[1]] = w
    return x, table[:, :w.shape[1]], targets


ADVERSARIAL = {"large_logits": _large_logits, "peaked": _peaked, "mostly_ignored": _mostly_ignored,
               "tied_head": _tied_head}
