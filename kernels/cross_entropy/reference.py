"""Harness-owned PyTorch side of the cross_entropy task (read-only to the agent)."""

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100  # F.cross_entropy's default: these rows add nothing and are not counted


def make_inputs(shape: dict, dtype: torch.dtype, device: str, seed: int) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)  # on the device: fast at 1 GB inputs
    m, v = shape["M"], shape["V"]
    # LM-head logits: a per-token temperature spread and a Zipf-like per-token-id bias
    # (frequent ids score higher), so rows are neither uniform nor one-hot.
    temperature = torch.exp(torch.randn(m, 1, generator=g, device=device) * 0.4)
    ranks = torch.randperm(v, generator=g, device=device)
    id_bias = -torch.log1p(torch.arange(v, dtype=torch.float32, device=device))[ranks] * 0.5
    logits = torch.randn(m, v, generator=g, device=device) * 2.0 * temperature + id_bias
    targets = torch.randint(0, v, (m,), generator=g, device=device)
    # About 10% padding positions, at least one, as a padded batch has.
    pad = torch.rand(m, generator=g, device=device) < 0.1
    pad[min(1, m - 1)] = True
    if pad.all():
        pad[0] = False
    targets[pad] = IGNORE_INDEX
    return logits.to(device=device, dtype=dtype), targets.to(device=device)


def reference(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The baseline: F.cross_entropy, mean over the non-ignored rows."""
    return F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX)


def naive(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The composite written out: log_softmax, gather, masked mean."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    valid = targets != IGNORE_INDEX
    picked = logp.gather(1, targets.clamp_min(0)[:, None])[:, 0]
    return (-(picked * valid).sum() / valid.sum()).to(logits.dtype)


def flops(shape: dict) -> int:
    return 4 * shape["M"] * shape["V"]  # max, subtract, exp, sum per logit


def bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    size = torch.finfo(dtype).bits // 8
    m, v = shape["M"], shape["V"]
    return m * v * size + m * 8 + size  # read logits once, read int64 targets, write the scalar loss


def backward_flops(shape: dict) -> int:
    # The backward as the cross_entropy_bwd task runs it (logits and targets in, dlogits out): the
    # forward's logsumexp recomputed (4 per logit), then per logit subtract, exp, scale (3).
    return 7 * shape["M"] * shape["V"]


def backward_bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    size = torch.finfo(dtype).bits // 8
    m, v = shape["M"], shape["V"]
    # Read the logits once, the int64 targets and the scalar grad_out; write dlogits.
    return 2 * m * v * size + m * 8 + size


def _large_offset(inputs, g):
    # Logits around +100: exp() overflows without the running max (fp16 can hold them).
    logits, targets = inputs
    return (logits.float() + 100.0).to(logits.dtype), targets


def _peaked(inputs, g):
    # One logit per row 40 above the rest: on the target for half the rows (loss ~ 0),
    # elsewhere for the others (loss ~ 40). Catches underflow and cancellation in lse - x_t.
    logits, targets = inputs
    m, v = logits.shape
    out = logits.float().clone()
    on_target = (torch.rand(m, generator=g) < 0.5).to(logits.device)
    other = torch.randint(0, v, (m,), generator=g).to(logits.device)
    col = torch.where(on_target & (targets >= 0), targets, other)
    rows = torch.arange(m, device=logits.device)
    out[rows, col] = out[rows, col] + 40.0
    return out.to(logits.dtype), targets


def _mostly_ignored(inputs, g):
    # Almost every row is padding: the mean divides by the number of counted rows, not M.
    logits, targets = inputs
    keep = torch.zeros(targets.shape[0], dtype=torch.bool)
    keep[torch.randint(0, targets.shape[0], (max(1, targets.shape[0] // 20),), generator=g)] = True
    fresh = torch.randint(0, logits.shape[1], targets.shape, generator=g)
    return logits, torch.where(keep, fresh, torch.full_like(fresh, IGNORE_INDEX)).to(targets.device)


ADVERSARIAL = {"large_offset": _large_offset, "peaked": _peaked, "mostly_ignored": _mostly_ignored}
