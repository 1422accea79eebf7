"""Matrix multiply C = A @ B in Triton: the one file an agent edits.

One program per BLOCK_M x BLOCK_N tile of C, tiles visited in groups of GROUP_M
rows of tiles so that neighbouring programs share A and B tiles in L2. fp32
accumulation; fp32 inputs use full-precision ("ieee") dots, never TF32, to
honour torch's allow_tf32=False default. 16-bit and fp32 inputs have separate
tile knobs because fp32 tiles take twice the shared memory.
"""

import os

import torch
import triton
import triton.language as tl

# Tunable knobs (16-bit inputs): module-level constants the offline tuner rewrites.
BLOCK_M = 128
BLOCK_N = 256
BLOCK_K = 64
GROUP_M = 8
NUM_WARPS = 8
NUM_STAGES = 3
# Tunable knobs (fp32 inputs).
FP32_BLOCK_M = 128
FP32_BLOCK_N = 128
FP32_BLOCK_K = 32
FP32_NUM_WARPS = 8
FP32_NUM_STAGES = 3

# Triton 3.7's CPU interpreter multiplies bf16 tiles as their raw uint16 bits;
# under it, tiles are widened to fp32 first (exact: same products, same sums).
_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _matmul(A, B, C, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr,
            IEEE: tl.constexpr, WIDEN: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    # Grouped order: GM rows of tiles are swept column by column, for L2 reuse.
    per_group = GM * tiles_n
    group = pid // per_group
    first_m = group * GM
    group_m = min(tiles_m - first_m, GM)
    pid_m = first_m + (pid % per_group) % group_m
    pid_n = (pid % per_group) // group_m

    # Rows/columns past the edge wrap around (their results are never stored),
    # so only the K tail needs a load mask.
    rm = (pid_m * BM + tl.arange(0, BM)) % M
    rn = (pid_n * BN + tl.arange(0, BN)) % N
    rm = tl.max_contiguous(tl.multiple_of(rm, BM), BM)
    rn = tl.max_contiguous(tl.multiple_of(rn, BN), BN)
    rk = tl.arange(0, BK)
    a_ptrs = A + rm[:, None].to(tl.int64) * stride_am + rk[None, :] * stride_ak
    b_ptrs = B + rk[:, None] * stride_bk + rn[None, :].to(tl.int64) * stride_bn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        k_left = K - k * BK
        a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0.0)
        if WIDEN:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        if IEEE or WIDEN:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
        a_ptrs += BK * stride_ak
        b_ptrs += BK * stride_bk

    cm = pid_m * BM + tl.arange(0, BM)
    cn = pid_n * BN + tl.arange(0, BN)
    c_ptrs = C + cm[:, None].to(tl.int64) * stride_cm + cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=(cm < M)[:, None] & (cn < N)[None, :])


def kernel_fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul needs a[M,K] @ b[K,N], got {tuple(a.shape)} @ {tuple(b.shape)}")
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    if a.dtype == torch.float32:
        bm, bn, bk, warps, stages = FP32_BLOCK_M, FP32_BLOCK_N, FP32_BLOCK_K, FP32_NUM_WARPS, FP32_NUM_STAGES
    else:
        bm, bn, bk, warps, stages = BLOCK_M, BLOCK_N, BLOCK_K, NUM_WARPS, NUM_STAGES
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    _matmul[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                  c.stride(0), c.stride(1), BM=bm, BN=bn, BK=bk, GM=GROUP_M,
                  IEEE=a.dtype == torch.float32,
                  WIDEN=_INTERPRETED and a.dtype == torch.bfloat16, num_warps=warps, num_stages=stages)
    return c
