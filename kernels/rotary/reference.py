"""Harness-owned PyTorch side of the rotary task (read-only to the agent).

Convention (LLaMA / GPT-NeoX "rotate half"): dimension i of the first half is
paired with dimension i + D/2; cos/sin are [S, D/2], one angle per pair.
"""

import math

import torch

ROPE_THETA = 10000.0


def rope_tables(positions: torch.Tensor, head_dim: int, scale: float = 1.0) -> tuple:
    """cos/sin[S, D/2] for the given positions, computed in float64."""
    inv_freq = ROPE_THETA ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    return torch.cos(angles) * scale, torch.sin(angles) * scale


def make_inputs(shape: dict, dtype: torch.dtype, device: str, seed: int) -> tuple:
    g = torch.Generator(device=device).manual_seed(seed)  # on the device: fast at 1 GB inputs
    b, s, h, d = shape["B"], shape["S"], shape["H"], shape["D"]
    if d % 2:
        raise ValueError(f"rotary: head dim D must be even, got {d}")
    # Query/key projections: per-head scale spread and a per-channel offset.
    head_scale = torch.exp(torch.randn(1, 1, h, 1, generator=g, device=device) * 0.5)
    channel_offset = 0.2 * torch.randn(d, generator=g, device=device)
    x = torch.randn(b, s, h, d, generator=g, device=device) * head_scale + channel_offset
    cos, sin = rope_tables(torch.arange(s), d)
    to = dict(device=device, dtype=dtype)
    return x.to(**to), cos.to(**to), sin.to(**to)


def reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The baseline: the eager rotate-half composite models run."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


def naive(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """HF's form: full-width tables and rotate_half (one more cat per table)."""
    half = x.shape[-1] // 2
    c = torch.cat((cos, cos), dim=-1)[None, :, None, :]
    s = torch.cat((sin, sin), dim=-1)[None, :, None, :]
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * c + rotated * s


def flops(shape: dict) -> int:
    return 3 * shape["B"] * shape["S"] * shape["H"] * shape["D"]  # two multiplies and an add per output


def bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    size = torch.finfo(dtype).bits // 8
    b, s, h, d = shape["B"], shape["S"], shape["H"], shape["D"]
    return (2 * b * s * h * d + s * d) * size  # read x, write out, read cos and sin once


def backward_flops(shape: dict) -> int:
    # The transposed rotation: dx1 = dy1*cos + dy2*sin, dx2 = dy2*cos - dy1*sin (cos/sin are constants).
    return 3 * shape["B"] * shape["S"] * shape["H"] * shape["D"]


def backward_bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    size = torch.finfo(dtype).bits // 8
    b, s, h, d = shape["B"], shape["S"], shape["H"], shape["D"]
    return (2 * b * s * h * d + s * d) * size  # read dy, write dx, read cos and sin once (x is not needed)


def _far_positions(inputs, g):
    # Positions around 500k (long-context decode): angles change fast between neighbours.
    x, cos, sin = inputs
    start = int(torch.randint(400_000, 600_000, (1,), generator=g))
    c, s = rope_tables(torch.arange(start, start + cos.shape[0]), 2 * cos.shape[1])
    return x, c.to(cos), s.to(sin)


def _scaled_tables(inputs, g):
    # YaRN-style attention scaling multiplies cos/sin: cos^2 + sin^2 != 1 must not be assumed.
    x, cos, sin = inputs
    mscale = 0.1 * math.log(8.0) + 1.0
    return x, (cos.float() * mscale).to(cos.dtype), (sin.float() * mscale).to(sin.dtype)


def _strided_view(inputs, g):
    # x as a view into a fused projection output (padded last dim), as models pass q/k:
    # the kernel must honour strides instead of assuming a packed [B, S, H, D].
    x, cos, sin = inputs
    b, s, h, d = x.shape
    fused = torch.zeros(b, s, h, d + 16, dtype=x.dtype, device=x.device)
    fused[..., 8:8 + d] = x
    return fused[..., 8:8 + d], cos, sin


ADVERSARIAL = {"far_positions": _far_positions, "scaled_tables": _scaled_tables, "strided_view": _strided_view}
