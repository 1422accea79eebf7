"""Causal flash attention forward (FA-2 style) in Triton: the one file an agent edits.

One program per (BLOCK_M query rows, batch x head). Q stays in registers; K/V
tiles stream through a software pipeline (NUM_STAGES deep). Online softmax in
base 2 with log2(e) * 1/sqrt(D) folded into one scale, fp32 accumulators, one
normalisation at the end. Key blocks entirely below the diagonal run without
a mask; only the blocks that straddle the diagonal pay for one. GQA: query head
h reads key/value head h // (H // KVH). Within each group of HEAD_GROUP heads the heaviest query
blocks (last rows, most keys) are launched first, so the grid ends on light ones.

The USE_TMA knob fetches Q/K/V tiles with Hopper's TMA engine through tensor
descriptors over [B*H*S, D] views (contiguous inputs); strided inputs, such as
q.transpose(1, 2) of a [B, S, H, D] projection, take the pointer-load kernel.
"""

import collections
import math
import os

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

# Tunable knobs: module-level constants the offline tuner rewrites.
BLOCK_M = 128  # query rows per program
BLOCK_N = 64  # keys per inner step
NUM_WARPS = 8
NUM_STAGES = 2  # K/V pipeline depth (lowered automatically if it would not fit in shared memory)
USE_TMA = 1  # 1: Q/K/V tiles through TMA tensor descriptors (Hopper+, contiguous inputs); 0: pointer loads
# Register cap per thread (0: the compiler's choice). 128 with 8 warps lets two programs share
# an SM when their shared memory fits twice (BLOCK_N 64, 2 stages: 98 KB), so one program's
# softmax overlaps the other's tensor-core work; sm_90 compiles show no spills. H200 sweep
# (2026-12-02, bf16 LLaMA-7B shapes): 0.865x of SDPA (geomean) against 0.838x for 3 stages, no cap.
MAX_REGS = 128
# Launch order: programs go out in groups of HEAD_GROUP (batch, head) pairs; inside a group the
# heaviest query blocks of all its heads go first, the lightest last. 1 = one head at a time.
HEAD_GROUP = 16
# Heads of SMALL_HEAD_DIM dims or fewer (GPT-2, BERT, ViT-B: 64) take their own tiles: the knobs above were
# tuned at LLaMA-7B's 128-dim heads, where a Q tile and two K/V stages fill far more shared memory and registers.
# Run 28 (H100, knob_sweep at gpt2-small, bf16, 48 combinations): 64 x 64 tiles, 4 warps, 3 stages, no register
# cap, 61.6 -> 49.0 us (0.80x -> 1.01x SDPA by the harness timer; in a CUDA graph 45.0 us against SDPA's 46.6).
SMALL_HEAD_DIM = 64  # 0: every head dim takes the knobs above
SMALL_HEAD_BLOCK_M = 64
SMALL_HEAD_BLOCK_N = 64
SMALL_HEAD_NUM_WARPS = 4
SMALL_HEAD_NUM_STAGES = 3
SMALL_HEAD_MAX_REGS = 0

_SMEM_BYTES = 227 * 1024 - 16 * 1024  # Hopper's per-block limit, less room for reduction scratch and barriers
# Triton 3.7's CPU interpreter multiplies bf16 tiles as raw bits: widen them there (never on a GPU).
_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _schedule(pid, BH, N_M_BLOCKS, HEAD_GROUP: tl.constexpr):
    # Longest-first within a group of heads: the grid's last programs are the lightest query
    # blocks, so SMs finish together instead of waiting on a full-length block launched late
    # (one head at a time, the last head's heaviest block starts when ~1 block per SM is left).
    # Grouping keeps the K/V that concurrently running programs read small enough for L2.
    per_group = HEAD_GROUP * N_M_BLOCKS
    group = pid // per_group
    first_bh = group * HEAD_GROUP
    heads_here = tl.minimum(BH - first_bh, HEAD_GROUP)
    within = pid - group * per_group
    start_m = N_M_BLOCKS - 1 - within // heads_here
    bh = first_bh + within % heads_here
    return start_m, bh


@triton.jit
def _softmax_step(acc, l_i, m_i, q, k, v, offs_m, n, qk_scale, DIAGONAL: tl.constexpr, WIDEN: tl.constexpr):
    # One key block: k is [HEAD_DIM, BLOCK_N] (already transposed), v is [BLOCK_N, HEAD_DIM].
    if WIDEN:
        k = k.to(tl.float32)
    qk = tl.dot(q, k)
    if DIAGONAL:
        # Each real row sees at least its own key, so m_ij stays finite.
        qk = tl.where(offs_m[:, None] >= n[None, :], qk * qk_scale, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp2(qk - m_ij[:, None])
    else:
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.exp2(qk * qk_scale - m_ij[:, None])
    alpha = tl.exp2(m_i - m_ij)
    l_i = l_i * alpha + tl.sum(p, 1)
    p = p.to(v.dtype)
    if WIDEN:
        p = p.to(tl.float32)
        v = v.to(tl.float32)
    acc = tl.dot(p, v, acc * alpha[:, None])  # accumulate in place (wgmma on Hopper)
    return acc, l_i, m_ij


@triton.jit
def _attend(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_kd, stride_vs, stride_vd,
            offs_m, offs_d, lo, hi, S, qk_scale,
            BLOCK_N: tl.constexpr, DIAGONAL: tl.constexpr, WIDEN: tl.constexpr):
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        n = start_n + offs_n
        k_ptrs = k_base + n[None, :] * stride_ks + offs_d[:, None] * stride_kd
        v_ptrs = v_base + n[:, None] * stride_vs + offs_d[None, :] * stride_vd
        if DIAGONAL:
            k = tl.load(k_ptrs, mask=n[None, :] < S, other=0.0)
            v = tl.load(v_ptrs, mask=n[:, None] < S, other=0.0)
        else:
            k = tl.load(k_ptrs)  # entirely below the diagonal and inside the sequence
            v = tl.load(v_ptrs)
        acc, l_i, m_i = _softmax_step(acc, l_i, m_i, q, k, v, offs_m, n, qk_scale, DIAGONAL, WIDEN)
    return acc, l_i, m_i


@triton.jit
def _attend_tma(acc, l_i, m_i, q, k_desc, v_desc, kv_row0, offs_m, lo, hi, qk_scale,
                BLOCK_N: tl.constexpr, DIAGONAL: tl.constexpr, WIDEN: tl.constexpr):
    # K/V rows past this head's sequence belong to the next head (or are zero-filled at the
    # tensor's end): finite, and masked by causality for every row that is stored.
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        k = k_desc.load([kv_row0 + start_n, 0])
        v = v_desc.load([kv_row0 + start_n, 0])
        acc, l_i, m_i = _softmax_step(acc, l_i, m_i, q, k.T, v, offs_m, start_n + offs_n, qk_scale,
                                      DIAGONAL, WIDEN)
    return acc, l_i, m_i


@triton.jit
def _flash_fwd(Q, K, V, O, LSE, qk_scale, H, GROUP, S, N_M_BLOCKS, BH,
               stride_qb, stride_qh, stride_qs, stride_qd,
               stride_kb, stride_kh, stride_ks, stride_kd,
               stride_vb, stride_vh, stride_vs, stride_vd,
               stride_ob, stride_oh, stride_os, stride_od,
               HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, WIDEN: tl.constexpr,
               HEAD_GROUP: tl.constexpr, STORE_LSE: tl.constexpr):
    start_m, bh = _schedule(tl.program_id(0), BH, N_M_BLOCKS, HEAD_GROUP)
    b = (bh // H).to(tl.int64)
    h = bh % H
    kvh = (h // GROUP).to(tl.int64)
    h = h.to(tl.int64)
    m0 = start_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptrs = Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qs + offs_d[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=offs_m[:, None] < S, other=0.0)
    if WIDEN:
        q = q.to(tl.float32)
    k_base = K + b * stride_kb + kvh * stride_kh
    v_base = V + b * stride_vb + kvh * stride_vh

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    # Keys [0, diag_lo) lie strictly before every query row of this block: no mask.
    diag_lo = (m0 // BLOCK_N) * BLOCK_N
    acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_kd, stride_vs, stride_vd,
                            offs_m, offs_d, 0, diag_lo, S, qk_scale, BLOCK_N=BLOCK_N, DIAGONAL=False, WIDEN=WIDEN)
    # Keys [diag_lo, end of this block) straddle the diagonal (and the sequence end): masked.
    diag_hi = tl.minimum(m0 + BLOCK_M, S)
    acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_kd, stride_vs, stride_vd,
                            offs_m, offs_d, diag_lo, diag_hi, S, qk_scale, BLOCK_N=BLOCK_N, DIAGONAL=True, WIDEN=WIDEN)
    out = acc / l_i[:, None]
    o_ptrs = O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :] * stride_od
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=offs_m[:, None] < S)
    _store_lse(LSE, bh, S, offs_m, m_i, l_i, STORE_LSE)


@triton.jit
def _flash_fwd_tma(q_desc, k_desc, v_desc, O, LSE, qk_scale, H, KVH, GROUP, S, N_M_BLOCKS, BH,
                   stride_ob, stride_oh, stride_os, stride_od,
                   HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, WIDEN: tl.constexpr,
                   HEAD_GROUP: tl.constexpr, STORE_LSE: tl.constexpr):
    # Same schedule as _flash_fwd, with Q/K/V tiles fetched by TMA from [rows, HEAD_DIM] views.
    start_m, bh = _schedule(tl.program_id(0), BH, N_M_BLOCKS, HEAD_GROUP)
    b = bh // H
    h = bh % H
    m0 = start_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    q = q_desc.load([bh * S + m0, 0])  # rows past S are the next head's queries: computed, never stored
    if WIDEN:
        q = q.to(tl.float32)
    kv_row0 = (b * KVH + h // GROUP) * S

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    diag_lo = (m0 // BLOCK_N) * BLOCK_N
    acc, l_i, m_i = _attend_tma(acc, l_i, m_i, q, k_desc, v_desc, kv_row0, offs_m, 0, diag_lo, qk_scale,
                                BLOCK_N=BLOCK_N, DIAGONAL=False, WIDEN=WIDEN)
    diag_hi = tl.minimum(m0 + BLOCK_M, S)
    acc, l_i, m_i = _attend_tma(acc, l_i, m_i, q, k_desc, v_desc, kv_row0, offs_m, diag_lo, diag_hi, qk_scale,
                                BLOCK_N=BLOCK_N, DIAGONAL=True, WIDEN=WIDEN)
    out = acc / l_i[:, None]
    offs_d = tl.arange(0, HEAD_DIM)
    o_ptrs = (O + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh
              + offs_m[:, None] * stride_os + offs_d[None, :] * stride_od)
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=offs_m[:, None] < S)  # masked: never the next head's rows
    _store_lse(LSE, bh, S, offs_m, m_i, l_i, STORE_LSE)


@triton.jit
def _store_lse(LSE, bh, S, offs_m, m_i, l_i, STORE_LSE: tl.constexpr):
    # kernel_fn_saved: each row's logsumexp of its scaled scores, natural log (m_i, l_i are base 2), for the
    # backward (flash_attention_bwd's lse input), float32 [B, H, S]
    if STORE_LSE:
        tl.store(LSE + bh.to(tl.int64) * S + offs_m, (m_i + tl.log2(l_i)) * 0.6931471805599453, mask=offs_m < S)


def _tma_ok(*tensors) -> bool:
    # TMA needs 16-byte aligned bases and rows, and [B, H, S, D] tensors that view as [B*H*S, D].
    return all(t.is_contiguous() and t.data_ptr() % 16 == 0 and (t.shape[-1] * t.element_size()) % 16 == 0
               for t in tensors)


def _tiles(head_dim: int) -> tuple:
    """(BLOCK_M, BLOCK_N, warps, stages, register cap) for heads of this many dims."""
    if head_dim <= SMALL_HEAD_DIM:
        return SMALL_HEAD_BLOCK_M, SMALL_HEAD_BLOCK_N, SMALL_HEAD_NUM_WARPS, SMALL_HEAD_NUM_STAGES, SMALL_HEAD_MAX_REGS
    return BLOCK_M, BLOCK_N, NUM_WARPS, NUM_STAGES, MAX_REGS


def _stages_that_fit(stages: int, block_m: int, block_n: int, head_dim: int, elem: int) -> int:
    # Q tile once, K and V tiles once per stage.
    while stages > 1 and (block_m + 2 * stages * block_n) * head_dim * elem > _SMEM_BYTES:
        stages -= 1
    return stages


# Launch plans, decided once per input signature: (shapes, strides, dtype, 16-byte alignment) -> _Plan.
# A call is a key, one dict lookup, one allocation and one launch; the plan is computed from the knobs above.
_PLANS: dict = {}
# made_under: the _knobs() it was computed under (see _knobs); tma: the descriptor kernel, whose
# descriptors are built per call from desc_q/desc_kv ([shape, strides, block] of the [rows, D] views)
_Plan = collections.namedtuple("_Plan", "made_under launch grid args meta tma desc_q desc_kv")


def _knobs() -> tuple:
    """Everything a plan is computed from besides the inputs: the knobs and the kernels it binds. A plan
    made under other values (a knob set in place, as knob_sweep.py and the tests do) is made again."""
    return (
        BLOCK_M, BLOCK_N, NUM_WARPS, NUM_STAGES, USE_TMA, MAX_REGS, HEAD_GROUP, SMALL_HEAD_DIM, SMALL_HEAD_BLOCK_M,
        SMALL_HEAD_BLOCK_N, SMALL_HEAD_NUM_WARPS, SMALL_HEAD_NUM_STAGES, SMALL_HEAD_MAX_REGS, _SMEM_BYTES, _INTERPRETED,
        _flash_fwd, _flash_fwd_tma,
    )


def _plan(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, made_under: tuple, store_lse: bool = False):
    b, h, s, d = q.shape
    kvh = k.shape[1]
    if k.shape != (b, kvh, s, d) or v.shape != k.shape or h % kvh:
        raise ValueError(f"flash_attention: need q[B,H,S,D], k/v[B,KVH,S,D] with KVH | H; got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if d not in (16, 32, 64, 128, 256):
        raise ValueError(f"flash_attention: head dim {d} is not supported (16, 32, 64, 128, 256)")
    block_m, block_n, warps, stages, max_regs = _tiles(d)
    n_m_blocks = triton.cdiv(s, block_m)
    qk_scale = 1.4426950408889634 / math.sqrt(d)  # log2(e) / sqrt(D): exp2 of scaled logits
    widen = _INTERPRETED and q.dtype == torch.bfloat16
    stages = _stages_that_fit(stages, block_m, block_n, d, q.element_size())
    grid = (n_m_blocks * b * h,)
    launch_extra = {"maxnreg": max_regs} if max_regs and not _INTERPRETED else {}
    meta = dict(HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n, WIDEN=widen, HEAD_GROUP=HEAD_GROUP,
                STORE_LSE=store_lse, num_warps=warps, num_stages=stages, **launch_extra)
    o_strides = (h * s * d, s * d, d, 1)  # o is allocated contiguous
    if USE_TMA and _tma_ok(q, k, v):
        return _Plan(made_under, _flash_fwd_tma[grid], grid, (qk_scale, h, kvh, h // kvh, s, n_m_blocks, b * h,
                                                               *o_strides),
                     meta, True, ([b * h * s, d], [d, 1], [block_m, d]), ([b * kvh * s, d], [d, 1], [block_n, d]))
    return _Plan(made_under, _flash_fwd[grid], grid, (qk_scale, h, h // kvh, s, n_m_blocks, b * h, *q.stride(),
                                                      *k.stride(), *v.stride(), *o_strides),
                 meta, False, None, None)


def kernel_fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return _forward(q, k, v, False)[0]


def kernel_fn_saved(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple:
    """(the output, what the backward takes of this forward): (O, (O, lse)), flash_attention_bwd's saved o and
    lse, in one pass. A patched model that trains calls this in place of kernel_fn."""
    o, lse = _forward(q, k, v, True)
    return o, (o, lse)


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, store_lse: bool) -> tuple:
    key = (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype,
           (q.data_ptr() | k.data_ptr() | v.data_ptr()) % 16 == 0, store_lse)
    knobs = _knobs()
    p = _PLANS.get(key)
    if p is None or p.made_under != knobs:
        p = _PLANS[key] = _plan(q, k, v, knobs, store_lse)
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device) if store_lse else o
    if p.tma:
        # descriptors over the [B*H*S, D] / [B*KVH*S, D] views: the contiguous tensors themselves
        p.launch(TensorDescriptor(q, *p.desc_q), TensorDescriptor(k, *p.desc_kv), TensorDescriptor(v, *p.desc_kv),
                 o, lse, *p.args, **p.meta)
    else:
        p.launch(q, k, v, o, lse, *p.args, **p.meta)
    return (o, lse) if store_lse else (o,)
