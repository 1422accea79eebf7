"""Fused residual add + RMSNorm in Triton: the one file an agent edits.

new_residual = x + residual (rounded to the input dtype, as a model stores it),
out = rmsnorm(new_residual) * weight, both written in one kernel: x and
residual are read once, both outputs written once. Several short rows per
program; rows wider than MAX_FUSED_N loop, the second pass re-reading the
freshly written new_residual.
"""

import torch
import triton
import triton.language as tl

# Tunable knobs: module-level constants the offline tuner rewrites.
ROW_BLOCK_ELEMS = 8192  # elements each program holds (rows x padded row width)
NUM_WARPS = 8
MAX_FUSED_N = 16384  # widest row handled in one register-resident pass
LOOP_BLOCK_N = 2048  # chunk width of the looped path
LOOP_NUM_WARPS = 4


@triton.jit
def _add_rmsnorm_rows(X, R, W, Y, RO, M, N, stride_x, stride_r, stride_y, stride_ro, eps,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    cmask = cols < N
    mask = (rows < M)[:, None] & cmask[None, :]
    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    r = tl.load(R + rows[:, None] * stride_r + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    h = (x + r).to(RO.dtype.element_ty)
    tl.store(RO + rows[:, None] * stride_ro + cols[None, :], h, mask=mask)
    hf = h.to(tl.float32)  # normalise what the model keeps: the rounded residual
    rstd = 1.0 / tl.sqrt(tl.sum(hf * hf, axis=1) / N + eps)
    w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
    y = hf * rstd[:, None] * w[None, :]
    tl.store(Y + rows[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _add_rmsnorm_looped(X, R, W, Y, RO, N, stride_x, stride_r, stride_y, stride_ro, eps,
                        BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        cmask = cols < N
        x = tl.load(X + row * stride_x + cols, mask=cmask, other=0.0).to(tl.float32)
        r = tl.load(R + row * stride_r + cols, mask=cmask, other=0.0).to(tl.float32)
        h = (x + r).to(RO.dtype.element_ty)
        tl.store(RO + row * stride_ro + cols, h, mask=cmask, eviction_policy="evict_last")  # re-read below
        hf = h.to(tl.float32)
        acc += hf * hf
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    tl.debug_barrier()  # make this program's new_residual stores visible to all its threads
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        cmask = cols < N
        h = tl.load(RO + row * stride_ro + cols, mask=cmask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
        tl.store(Y + row * stride_y + cols, (h * rstd * w).to(Y.dtype.element_ty), mask=cmask)


def kernel_fn(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float):
    n = x.shape[-1]
    x2 = x.reshape(-1, n)
    r2 = residual.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    if r2.stride(-1) != 1:
        r2 = r2.contiguous()
    m = x2.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    new_residual = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if n <= MAX_FUSED_N:
        block_n = triton.next_power_of_2(n)
        block_m = max(1, min(ROW_BLOCK_ELEMS // block_n, triton.next_power_of_2(m)))
        _add_rmsnorm_rows[(triton.cdiv(m, block_m),)](
            x2, r2, weight, y, new_residual, m, n,
            x2.stride(0), r2.stride(0), y.stride(0), new_residual.stride(0), eps,
            BLOCK_M=block_m, BLOCK_N=block_n, num_warps=NUM_WARPS)
    else:
        _add_rmsnorm_looped[(m,)](
            x2, r2, weight, y, new_residual, n,
            x2.stride(0), r2.stride(0), y.stride(0), new_residual.stride(0), eps,
            BLOCK_N=LOOP_BLOCK_N, num_warps=LOOP_NUM_WARPS)
    return y.view(x.shape), new_residual.view(x.shape)
