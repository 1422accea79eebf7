"""Rotary position embedding (rotate-half) backward in Triton: the one file an agent edits.

kernel_fn(x, cos, sin, grad_out) -> (dx,). The forward is a rotation of each (x1, x2) pair,
linear in x, so its backward is the rotation transposed and needs only dy and the tables
(cos/sin are constants, x is not read):
    dx1 = dy1 * cos + dy2 * sin
    dx2 = dy2 * cos - dy1 * sin
Memory-bound: read dy, write dx, read cos/sin once. Each program takes POSITIONS_PER_PROGRAM
consecutive (batch, position) rows and a block of BLOCK_H heads: it loads that position's
cos/sin half-row once and reuses it across the heads, loads both halves of every head as
contiguous 16-byte vectors, rotates in fp32 and stores both halves. Launch parameters are
decided once per (shape, dtype) and kept in a dict.
"""

import torch
import triton
import triton.language as tl

# Tunable knobs: module-level constants the offline tuner rewrites.
BLOCK_H = 32  # heads per program (capped at the padded head count)
POSITIONS_PER_PROGRAM = 1  # consecutive (batch, position) rows per program
NUM_WARPS = 4  # upper bound: fewer when the tile is small, so every thread keeps 16-byte vectors


@triton.jit
def _rotary_bwd(DY, COS, SIN, DX, n_rows, S, H,
                stride_yb, stride_ys, stride_yh, stride_yd,
                stride_cs, stride_ss,
                stride_xb, stride_xs, stride_xh,
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
            dy_base = DY + b.to(tl.int64) * stride_yb + s.to(tl.int64) * stride_ys
            offs = heads[:, None] * stride_yh + cols[None, :] * stride_yd
            dy1 = tl.load(dy_base + offs, mask=mask, other=0.0).to(tl.float32)
            dy2 = tl.load(dy_base + offs + HALF * stride_yd, mask=mask, other=0.0).to(tl.float32)
            dx_base = DX + b.to(tl.int64) * stride_xb + s.to(tl.int64) * stride_xs
            dx_offs = heads[:, None] * stride_xh + cols[None, :]
            # The rotation transposed.
            tl.store(dx_base + dx_offs, (dy1 * c + dy2 * sn).to(DX.dtype.element_ty), mask=mask)
            tl.store(dx_base + dx_offs + HALF, (dy2 * c - dy1 * sn).to(DX.dtype.element_ty), mask=mask)


_LAUNCH = {}  # (shape, element size) -> (grid, meta)


def _plan(b, s, h, half, elem_size):
    block_h = min(BLOCK_H, triton.next_power_of_2(h))
    block_half = triton.next_power_of_2(half)
    vector = 16 // elem_size  # elements per 16-byte access
    warps = max(1, min(NUM_WARPS, block_h * block_half // (32 * vector)))
    grid = (triton.cdiv(b * s, POSITIONS_PER_PROGRAM), triton.cdiv(h, block_h))
    return grid, dict(HALF=half, ROWS=POSITIONS_PER_PROGRAM, BLOCK_H=block_h, BLOCK_HALF=block_half,
                      num_warps=warps)


def kernel_fn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, grad_out: torch.Tensor) -> tuple:
    if x.dim() != 4 or x.shape[-1] % 2 or grad_out.shape != x.shape:
        raise ValueError(f"rotary: x and grad_out must be [B, S, H, D] with D even, got {tuple(x.shape)} "
                         f"and {tuple(grad_out.shape)}")
    b, s, h, d = x.shape
    half = d // 2
    if cos.shape != (s, half) or sin.shape != (s, half):
        raise ValueError(f"rotary: cos/sin must be [{s}, {half}], got {tuple(cos.shape)} and {tuple(sin.shape)}")
    if cos.stride(-1) != 1 or sin.stride(-1) != 1:
        cos, sin = cos.contiguous(), sin.contiguous()
    dy = grad_out
    dx = torch.empty((b, s, h, d), dtype=x.dtype, device=x.device)
    key = (b, s, h, d, x.element_size())
    plan = _LAUNCH.get(key)
    if plan is None:
        plan = _LAUNCH[key] = _plan(b, s, h, half, x.element_size())
    grid, meta = plan
    _rotary_bwd[grid](dy, cos, sin, dx, b * s, s, h,
                      dy.stride(0), dy.stride(1), dy.stride(2), dy.stride(3),
                      cos.stride(0), sin.stride(0),
                      dx.stride(0), dx.stride(1), dx.stride(2),
                      **meta)
    return (dx,)
