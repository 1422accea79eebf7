"""Starter for generated task gen_addmm_3: addmm -> view -> split -> view -> transpose, from autokernel_tui/profiling/gemm_template.py.

Inductor calls a library (cuBLAS, cuDNN) for the matmul or convolution, so this starter is a template rather than Inductor's
Triton: the matmul is a tiled tl.dot kernel (fp32 accumulation, the bias added in its epilogue), each
pointwise op an elementwise Triton kernel, views the recorded views. Nothing is fused yet: folding the
pointwise ops into the GEMM's epilogue saves a round trip to memory each. Knobs: the 16-bit tile
(BLOCK_*, warps, stages) and GROUP_M, the rows of tiles visited together so their B columns stay in L2.
"""

import torch
import triton
import triton.language as tl

# 16-bit inputs: a Hopper-sized tile (tl.dot lowers to wgmma on sm_90).
BLOCK_M = 128
BLOCK_N = 128
BLOCK_K = 64
NUM_WARPS = 8
NUM_STAGES = 3
GROUP_M = 8
# fp32 inputs (IEEE dots, as precise as the reference): a smaller tile.
FP32_TILE = (64, 64, 32, 4, 3)


def _tile(dtype):
    """(BM, BN, BK, warps, stages) for inputs of ``dtype``."""
    if dtype == torch.float32:
        return FP32_TILE
    return BLOCK_M, BLOCK_N, BLOCK_K, NUM_WARPS, NUM_STAGES


@triton.jit
def _gemm_kernel(A, B, C, BIAS, M, N, K, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn, sbias,
                 HAS_BIAS: tl.constexpr, IEEE: tl.constexpr,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr):
    # Tiles in groups of GM rows, column by column: a group's B columns are read from L2, not HBM.
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    group = pid // (GM * tiles_n)
    first_m = group * GM
    rows = tl.minimum(tiles_m - first_m, GM)
    pid_m = first_m + (pid % (GM * tiles_n)) % rows
    pid_n = (pid % (GM * tiles_n)) // rows
    batch = tl.program_id(2)  # bmm: one matrix of the batch per grid plane (mm: a single plane)
    A += batch * sab
    B += batch * sbb
    C += batch * scb
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(A + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(B + kk[:, None] * sbk + rn[None, :] * sbn, mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        if IEEE:  # float32 inputs: full precision, as the reference (TF32 would miss its tolerance)
            acc += tl.dot(a, b, input_precision="ieee")
        else:
            acc += tl.dot(a, b)
    if HAS_BIAS:
        acc += tl.load(BIAS + rn * sbias, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    tl.store(C + rm[:, None] * scm + rn[None, :] * scn, acc.to(C.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def _gemm(a, b, bias):
    """a @ b (+ bias over the last dim), any strides, the output packed."""
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    if bias is not None and bias.dim() == 2:  # a (1, N) or (M, N) bias: only one row is supported
        bias = bias.reshape(-1) if bias.shape[0] == 1 else None
        if bias is None:
            raise ValueError("a bias with more than one row is not written by this template")
    bm, bn, bk, warps, stages = _tile(a.dtype)
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn), 1, 1)
    _gemm_kernel[grid](a, b, c, bias if bias is not None else c, m, n, k, 0, a.stride(0), a.stride(1),
                       0, b.stride(0), b.stride(1), 0, c.stride(0), c.stride(1),
                       bias.stride(0) if bias is not None else 0, HAS_BIAS=bias is not None,
                       IEEE=a.dtype == torch.float32, BM=bm, BN=bn, BK=bk, GM=GROUP_M,
                       num_warps=warps, num_stages=stages)
    return c


def _bmm(a, b):
    """a @ b for a batch of matrices, any strides, the output packed."""
    nb, m, k = a.shape
    n = b.shape[2]
    c = torch.empty((nb, m, n), dtype=a.dtype, device=a.device)
    bm, bn, bk, warps, stages = _tile(a.dtype)
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn), 1, nb)
    _gemm_kernel[grid](a, b, c, c, m, n, k, *a.stride(), *b.stride(), *c.stride(), 0, HAS_BIAS=False,
                       IEEE=a.dtype == torch.float32, BM=bm, BN=bn, BK=bk, GM=GROUP_M,
                       num_warps=warps, num_stages=stages)
    return c




def kernel_fn(t15, t12, t14):
    t16 = _gemm(t12, t14, t15)
    t17 = t16.reshape([8, 1024, 2304])
    t18, t19, t20 = t17.split(768, -1)
    t21 = t18.reshape([8, 1024, 12, 64])
    t22 = t21.transpose(1, 2)
    return (t19, t20, t22,)
