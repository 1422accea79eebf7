"""Rotary position embedding (rotate-half) in Triton: the one file an agent edits.

Each program takes POSITIONS_PER_PROGRAM consecutive (batch, position) rows and
a block of BLOCK_H heads: it loads that position's cos/sin half-row once and
reuses it across the heads, loads both halves of every head as contiguous
16-byte vectors, rotates in fp32 and stores both halves.
"""

import torch
import triton
import triton.language as tl

# Tunable knobs: module-level constants the offline tuner rewrites.
BLOCK_H = 32  # heads per program (capped at the padded head count)
POSITIONS_PER_PROGRAM = 1  # consecutive (batch, position) rows per program
NUM_WARPS = 4  # upper bound: fewer when the tile is small, so every thread keeps 16-byte vectors


@triton.jit
def _rotary(X, COS, SIN, Y, n_rows, S, H,
            stride_xb, stride_xs, stride_xh, stride_xd,
            stride_cs, stride_ss,
            stride_yb, stride_ys, stride_yh,
            HALF: tl.constexpr, ROWS: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr):
    # HALF is a compile-time constant so the second half's offset is known to be 16-byte aligned.
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    cols = tl.arange(0, BLOCK_HALF)
    cmask = cols < HALF
    mask = (heads < H)[:, None] & cmask[None, :]
    for i in tl.static_range(ROWS):
        row = tl.program_id(0) * ROWS + i  # row = b * S + s
        if row < n_rows:
            b = row // S
            s = row - b * S
            c = tl.load(COS + s * stride_cs + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
            sn = tl.load(SIN + s * stride_ss + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
            x_base = X + b.to(tl.int64) * stride_xb + s.to(tl.int64) * stride_xs
            offs = heads[:, None] * stride_xh + cols[None, :] * stride_xd
            x1 = tl.load(x_base + offs, mask=mask, other=0.0).to(tl.float32)
            x2 = tl.load(x_base + offs + HALF * stride_xd, mask=mask, other=0.0).to(tl.float32)
            y_base = Y + b.to(tl.int64) * stride_yb + s.to(tl.int64) * stride_ys
            y_offs = heads[:, None] * stride_yh + cols[None, :]
            tl.store(y_base + y_offs, (x1 * c - x2 * sn).to(Y.dtype.element_ty), mask=mask)
            tl.store(y_base + y_offs + HALF, (x2 * c + x1 * sn).to(Y.dtype.element_ty), mask=mask)


def kernel_fn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    if x.dim() != 4 or x.shape[-1] % 2:
        raise ValueError(f"rotary: x must be [B, S, H, D] with D even, got {tuple(x.shape)}")
    b, s, h, d = x.shape
    half = d // 2
    if cos.shape != (s, half) or sin.shape != (s, half):
        raise ValueError(f"rotary: cos/sin must be [{s}, {half}], got {tuple(cos.shape)} and {tuple(sin.shape)}")
    if cos.stride(-1) != 1 or sin.stride(-1) != 1:
        cos, sin = cos.contiguous(), sin.contiguous()
    y = torch.empty((b, s, h, d), dtype=x.dtype, device=x.device)
    block_h = min(BLOCK_H, triton.next_power_of_2(h))
    block_half = triton.next_power_of_2(half)
    vector = 16 // x.element_size()  # elements per 16-byte access
    warps = max(1, min(NUM_WARPS, block_h * block_half // (32 * vector)))
    n_rows = b * s
    grid = (triton.cdiv(n_rows, POSITIONS_PER_PROGRAM), triton.cdiv(h, block_h))
    _rotary[grid](x, cos, sin, y, n_rows, s, h,
                  x.stride(0), x.stride(1), x.stride(2), x.stride(3),
                  cos.stride(0), sin.stride(0),
                  y.stride(0), y.stride(1), y.stride(2),
                  HALF=half, ROWS=POSITIONS_PER_PROGRAM, BLOCK_H=block_h, BLOCK_HALF=block_half,
                  num_warps=warps)
    return y
