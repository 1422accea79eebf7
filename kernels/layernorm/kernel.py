"""LayerNorm (weight + bias) in Triton: the one file an agent edits.

Rows up to MAX_FUSED_N wide are held in registers: mean, then the variance of
the centred values (never E[x^2] - E[x]^2, which cancels catastrophically when
rows sit far from zero), several short rows per program. Wider rows loop: one pass
sums deviations from the first chunk's mean (small even for rows far from zero),
a second pass writes, so x is read twice at most (the first chunk three times,
from L2). fp32 inputs take their own rows-per-program knob: a program's bytes,
not its elements, set how well loads overlap.
"""

import torch
import triton
import triton.language as tl

# Tunable knobs: module-level constants the offline tuner rewrites.
ROW_BLOCK_ELEMS = 8192  # elements each program holds (rows x padded row width)
NUM_WARPS = 8
FP32_ROW_BLOCK_ELEMS = 4096  # fp32: the same 16 KB of x per program as 8192 16-bit elements
FP32_NUM_WARPS = 8
MAX_FUSED_N = 16384  # widest row handled in one register-resident pass
LOOP_BLOCK_N = 2048  # chunk width of the looped path
LOOP_NUM_WARPS = 8


@triton.jit
def _layernorm_rows(X, W, B, Y, M, N, stride_x, stride_y, eps,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    cmask = cols < N
    mask = (rows < M)[:, None] & cmask[None, :]
    x = tl.load(X + rows[:, None].to(tl.int64) * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=1) / N
    xc = tl.where(mask, x - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=1) / N + eps)
    w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
    b = tl.load(B + cols, mask=cmask, other=0.0).to(tl.float32)
    y = xc * rstd[:, None] * w[None, :] + b[None, :]
    tl.store(Y + rows[:, None].to(tl.int64) * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _layernorm_looped(X, W, B, Y, N, stride_x, stride_y, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = X + row * stride_x
    y_row = Y + row * stride_y
    cols0 = tl.arange(0, BLOCK_N)
    # Shifted sums: deviations from the first chunk's mean stay small even when the
    # row sits far from zero, so sum(d^2)/N - mean(d)^2 does not cancel; no per-element
    # division (a Welford update per element made this loop compute-bound).
    x0 = tl.load(x_row + cols0, mask=cols0 < N, other=0.0).to(tl.float32)
    shift = tl.sum(x0, axis=0) / tl.minimum(N, BLOCK_N)
    s1 = tl.zeros([BLOCK_N], dtype=tl.float32)
    s2 = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + cols0
        cmask = cols < N
        x = tl.load(x_row + cols, mask=cmask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        d = tl.where(cmask, x - shift, 0.0)
        s1 += d
        s2 += d * d
    mean_d = tl.sum(s1, axis=0) / N
    var = tl.maximum(tl.sum(s2, axis=0) / N - mean_d * mean_d, 0.0)
    mean = shift + mean_d
    rstd = 1.0 / tl.sqrt(var + eps)
    for start in range(0, N, BLOCK_N):
        cols = start + cols0
        cmask = cols < N
        x = tl.load(x_row + cols, mask=cmask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
        b = tl.load(B + cols, mask=cmask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, ((x - mean) * rstd * w + b).to(Y.dtype.element_ty), mask=cmask)


def kernel_fn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    n = x.shape[-1]
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    m = x2.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if n <= MAX_FUSED_N:
        block_n = triton.next_power_of_2(n)
        fp32 = x.dtype == torch.float32
        elems = FP32_ROW_BLOCK_ELEMS if fp32 else ROW_BLOCK_ELEMS
        block_m = max(1, min(elems // block_n, triton.next_power_of_2(m)))
        _layernorm_rows[(triton.cdiv(m, block_m),)](
            x2, weight, bias, y, m, n, x2.stride(0), y.stride(0), eps,
            BLOCK_M=block_m, BLOCK_N=block_n, num_warps=FP32_NUM_WARPS if fp32 else NUM_WARPS)
    else:
        _layernorm_looped[(m,)](x2, weight, bias, y, n, x2.stride(0), y.stride(0), eps,
                                BLOCK_N=LOOP_BLOCK_N, num_warps=LOOP_NUM_WARPS)
    return y.view(x.shape)
