"""Causal flash attention backward (FA-2) in Triton: the one file an agent edits.

kernel_fn(q[B,H,S,D], k[B,KVH,S,D], v[B,KVH,S,D], o[B,H,S,D], lse[B,H,S], grad_out[B,H,S,D]) -> (dq, dk, dv),
softmax scale 1/sqrt(D), query head h reads key/value head h // (H // KVH). ``o`` and ``lse`` are what the
forward saved: its output (contiguous) and each query row's logsumexp of its scaled, masked scores (float32,
natural log), as FlashAttention's forward keeps them for its backward. Two launches:

1. _dq: one program per BLOCK_M2 query rows x (batch, head). Delta = rowsum(dO * O) for its rows (fp32,
   stored for _dkdv), then over the key blocks before the diagonal (unmasked) and the diagonal ones
   (masked), P = exp2(QK^T - LSE) recomputed, dS = P * (dO V^T - Delta), dQ += dS K in fp32 registers.
2. _dkdv: one program per BLOCK_N1 keys x (batch, key/value head). K and V stay in registers; for
   every query head of the GQA group it loops over the query blocks at and after the causal diagonal
   (masked ones first, then an unmasked fast loop), recomputing P^T, and accumulates dV += P^T dO and
   dK += dS^T Q in fp32 registers. One program owns each dK/dV row: no atomics, deterministic.

Only the blocks that straddle the diagonal (or the sequence end) pay for a causal mask. Both grids start
the longest programs first (every head's), so the last wave is short ones. Launch
parameters (grids, widening, strides order) are decided once per (shape, dtype, device) and cached.

Left for the agent: TMA loads, a fused dQ without atomics (fp32 atomic adds land in any order:
the harness's bitwise determinism stage fails them), launch order across heads, pipelining depth
per head dim.
"""

import math
import os

import torch
import triton
import triton.language as tl

# Tunable knobs: module-level constants the offline tuner rewrites.
BLOCK_M1 = 64  # dK/dV kernel: query rows per inner step
BLOCK_N1 = 64  # dK/dV kernel: keys per program (its dK, dV rows)
DKDV_WARPS = 4  # head dim up to 64
# Head dim 128: 4 warps with 64 query rows a step. H100, run 19 (knob_sweep at llama7b-s4096, bf16): 0.67x
# SDPA's backward, where 8 warps with 32 rows (the defaults before) ran at 0.37x.
DKDV_WARPS_D128 = 4
DKDV_STAGES = 2
BLOCK_M2 = 64  # dQ kernel: query rows per program
BLOCK_N2 = 64  # dQ kernel: keys per inner step (H100, runs 21 and 23: 64 over 32, 1.04x, kept by the tuner)
DQ_WARPS = 4
DQ_STAGES = 2

_LOG2E = 1.4426950408889634
# Triton 3.7's CPU interpreter multiplies bf16 tiles as raw bits and truncates fp32 -> bf16:
# there (never on a GPU) bf16 dot operands are widened to fp32 and the rounding done on the bits.
_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

# Launch parameters per (shapes, strides, dtype, device): decided once, reused every call.
_LAUNCH: dict = {}


@triton.jit
def _to16(x, dtype: tl.constexpr, FIX_BF16: tl.constexpr):
    # fp32 -> the 16-bit dtype, round to nearest even; in the interpreter (FIX_BF16) the rounding
    # is done on the bits (its own cast truncates) and the value kept in fp32, for tl.dot or for a
    # store, whose cast to bf16 is then exact.
    if FIX_BF16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + (0x7FFF + ((bits >> 16) & 1))) & 0xFFFF0000
        return bits.to(tl.float32, bitcast=True)
    return x.to(dtype)


@triton.jit
def _widen(x, FIX_BF16: tl.constexpr):
    if FIX_BF16:
        return x.to(tl.float32)
    return x


# ----------------------------------------------------------------------------------------------
# dK, dV: one program per key block, over the query heads of its group
# ----------------------------------------------------------------------------------------------

@triton.jit
def _dkdv_step(dk, dv, k, v, q_base, do_base, lse_base, delta_base, stride_qs, stride_ds, offs_n, offs_d,
               lo, hi, S, qk_scale, BLOCK_M1: tl.constexpr, DIAGONAL: tl.constexpr,
               FIX_BF16: tl.constexpr, STAGES: tl.constexpr):
    # Query blocks [lo, hi). Rows past S load q = dO = 0, LSE = +inf: P = 0 there, nothing added.
    offs_m0 = tl.arange(0, BLOCK_M1)
    for start_m in tl.range(lo, hi, BLOCK_M1, num_stages=STAGES):
        offs_m = start_m + offs_m0
        in_seq = offs_m < S
        q_t = tl.load(q_base + offs_m[None, :] * stride_qs + offs_d[:, None], mask=in_seq[None, :], other=0.0)
        do = tl.load(do_base + offs_m[:, None] * stride_ds + offs_d[None, :], mask=in_seq[:, None], other=0.0)
        lse = tl.load(lse_base + offs_m, mask=in_seq, other=float("inf")) * 1.4426950408889634  # to base 2
        delta = tl.load(delta_base + offs_m, mask=in_seq, other=0.0)
        q_t = _widen(q_t, FIX_BF16)
        do = _widen(do, FIX_BF16)
        p_t = tl.exp2(tl.dot(k, q_t) * qk_scale - lse[None, :])  # P^T: [BLOCK_N1 keys, BLOCK_M1 rows]
        if DIAGONAL:
            p_t = tl.where(offs_m[None, :] >= offs_n[:, None], p_t, 0.0)
        dv = tl.dot(_to16(p_t, k.dtype, FIX_BF16), do, dv)
        dp_t = tl.dot(v, tl.trans(do))  # (dO V^T)^T
        ds_t = p_t * (dp_t - delta[None, :])
        dk = tl.dot(_to16(ds_t, k.dtype, FIX_BF16), tl.trans(q_t), dk)
    return dk, dv


@triton.jit
def _dkdv(Q, K, V, DO, LSE, DELTA, DK, DV, qk_scale, sm_scale, H, KVH, GROUP, S,
          stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
          stride_vb, stride_vh, stride_vs, stride_db, stride_dh, stride_ds,
          HEAD_DIM: tl.constexpr, BLOCK_M1: tl.constexpr, BLOCK_N1: tl.constexpr,
          FIX_BF16: tl.constexpr, STAGES: tl.constexpr):
    # Heads along the grid's first axis, key blocks along the second: the GPU starts programs in that order,
    # so every head's first key blocks (the longest: every later query block) go out before any short one
    bkv = tl.program_id(0)
    start_n = tl.program_id(1)
    b = (bkv // KVH).to(tl.int64)
    kvh = (bkv % KVH).to(tl.int64)
    n0 = start_n * BLOCK_N1
    offs_n = n0 + tl.arange(0, BLOCK_N1)
    offs_d = tl.arange(0, HEAD_DIM)
    in_seq = offs_n[:, None] < S
    k = tl.load(K + b * stride_kb + kvh * stride_kh + offs_n[:, None] * stride_ks + offs_d[None, :],
                mask=in_seq, other=0.0)
    v = tl.load(V + b * stride_vb + kvh * stride_vh + offs_n[:, None] * stride_vs + offs_d[None, :],
                mask=in_seq, other=0.0)
    k = _widen(k, FIX_BF16)
    v = _widen(v, FIX_BF16)
    dk = tl.zeros([BLOCK_N1, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N1, HEAD_DIM], dtype=tl.float32)
    # Query blocks [lo, mid) straddle this key block's diagonal: masked. From mid on every row is
    # past every key here: unmasked (keys past S only ever meet masked blocks: mid > S then).
    lo = (n0 // BLOCK_M1) * BLOCK_M1
    mid = (n0 + BLOCK_N1 + BLOCK_M1 - 1) // BLOCK_M1 * BLOCK_M1
    for g in range(0, GROUP):
        h = kvh * GROUP + g
        q_base = Q + b * stride_qb + h * stride_qh
        do_base = DO + b * stride_db + h * stride_dh
        row0 = (b * H + h) * S
        dk, dv = _dkdv_step(dk, dv, k, v, q_base, do_base, LSE + row0, DELTA + row0, stride_qs, stride_ds,
                            offs_n, offs_d, lo, mid, S, qk_scale, BLOCK_M1, True, FIX_BF16, STAGES)
        dk, dv = _dkdv_step(dk, dv, k, v, q_base, do_base, LSE + row0, DELTA + row0, stride_qs, stride_ds,
                            offs_n, offs_d, mid, S, S, qk_scale, BLOCK_M1, False, FIX_BF16, STAGES)
    row = bkv.to(tl.int64) * S + offs_n  # dK, dV are contiguous [B, KVH, S, D]
    ptrs = row[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(DK + ptrs, _to16(dk * sm_scale, DK.dtype.element_ty, FIX_BF16), mask=in_seq)
    tl.store(DV + ptrs, _to16(dv, DV.dtype.element_ty, FIX_BF16), mask=in_seq)


# ----------------------------------------------------------------------------------------------
# dQ (and Delta): one program per query block, over the key blocks up to the diagonal
# ----------------------------------------------------------------------------------------------

@triton.jit
def _dq_step(dq, q, do, lse, delta, k_base, v_base, stride_ks, stride_vs, offs_m, offs_d, lo, hi, S, qk_scale,
             BLOCK_N2: tl.constexpr, DIAGONAL: tl.constexpr, FIX_BF16: tl.constexpr, STAGES: tl.constexpr):
    offs_n0 = tl.arange(0, BLOCK_N2)
    for start_n in tl.range(lo, hi, BLOCK_N2, num_stages=STAGES):
        n = start_n + offs_n0
        k_t_ptrs = k_base + n[None, :] * stride_ks + offs_d[:, None]
        v_t_ptrs = v_base + n[None, :] * stride_vs + offs_d[:, None]
        if DIAGONAL:
            k_t = tl.load(k_t_ptrs, mask=n[None, :] < S, other=0.0)
            v_t = tl.load(v_t_ptrs, mask=n[None, :] < S, other=0.0)
        else:
            k_t = tl.load(k_t_ptrs)
            v_t = tl.load(v_t_ptrs)
        k_t = _widen(k_t, FIX_BF16)
        p = tl.exp2(tl.dot(q, k_t) * qk_scale - lse[:, None])
        if DIAGONAL:
            p = tl.where(offs_m[:, None] >= n[None, :], p, 0.0)
        dp = tl.dot(do, _widen(v_t, FIX_BF16))
        ds = p * (dp - delta[:, None])
        dq = tl.dot(_to16(ds, q.dtype, FIX_BF16), tl.trans(k_t), dq)
    return dq


@triton.jit
def _dq(Q, K, V, O, DO, LSE, DELTA, DQ, qk_scale, sm_scale, H, GROUP, S,
        stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
        stride_vb, stride_vh, stride_vs, stride_ob, stride_oh, stride_os, stride_db, stride_dh, stride_ds,
        HEAD_DIM: tl.constexpr, BLOCK_M2: tl.constexpr, BLOCK_N2: tl.constexpr,
        FIX_BF16: tl.constexpr, STAGES: tl.constexpr):
    # Query blocks last to first (the last meet the most keys), every head's at once: the grid ends on the
    # shortest programs instead of one head's longest
    bh = tl.program_id(0)
    start_m = tl.num_programs(1) - 1 - tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = bh % H
    kvh = (h // GROUP).to(tl.int64)
    h = h.to(tl.int64)
    m0 = start_m * BLOCK_M2
    offs_m = m0 + tl.arange(0, BLOCK_M2)
    offs_d = tl.arange(0, HEAD_DIM)
    in_seq = offs_m < S
    q = tl.load(Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qs + offs_d[None, :],
                mask=in_seq[:, None], other=0.0)
    do = tl.load(DO + b * stride_db + h * stride_dh + offs_m[:, None] * stride_ds + offs_d[None, :],
                 mask=in_seq[:, None], other=0.0)
    o = tl.load(O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :],
                mask=in_seq[:, None], other=0.0)
    row = bh.to(tl.int64) * S + offs_m
    # LSE (natural log) in base 2, as exp2 of the scaled logits wants it; rows past S: P = 0, never stored
    lse = tl.load(LSE + row, mask=in_seq, other=float("inf")) * 1.4426950408889634
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)  # rowsum(dO * O), for _dkdv too
    tl.store(DELTA + row, delta, mask=in_seq)
    q = _widen(q, FIX_BF16)
    do = _widen(do, FIX_BF16)
    k_base = K + b * stride_kb + kvh * stride_kh
    v_base = V + b * stride_vb + kvh * stride_vh
    dq = tl.zeros([BLOCK_M2, HEAD_DIM], dtype=tl.float32)
    diag_lo = (m0 // BLOCK_N2) * BLOCK_N2
    dq = _dq_step(dq, q, do, lse, delta, k_base, v_base, stride_ks, stride_vs, offs_m, offs_d, 0, diag_lo, S,
                  qk_scale, BLOCK_N2, False, FIX_BF16, STAGES)
    dq = _dq_step(dq, q, do, lse, delta, k_base, v_base, stride_ks, stride_vs, offs_m, offs_d, diag_lo,
                  tl.minimum(m0 + BLOCK_M2, S), S, qk_scale, BLOCK_N2, True, FIX_BF16, STAGES)
    tl.store(DQ + row[:, None] * HEAD_DIM + offs_d[None, :], _to16(dq * sm_scale, DQ.dtype.element_ty, FIX_BF16),
             mask=in_seq[:, None])


# ----------------------------------------------------------------------------------------------

def _launch_params(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, do: torch.Tensor) -> dict:
    key = (tuple(q.shape), tuple(k.shape), q.stride(), k.stride(), v.stride(), o.stride(), do.stride(), q.dtype,
           q.device)
    params = _LAUNCH.get(key)
    if params is None:
        b, h, s, d = q.shape
        kvh = k.shape[1]
        sm_scale = 1.0 / math.sqrt(d)
        params = _LAUNCH[key] = dict(
            sm_scale=sm_scale, qk_scale=sm_scale * _LOG2E, group=h // kvh,
            fix_bf16=_INTERPRETED and q.dtype == torch.bfloat16,
            dkdv_grid=(b * kvh, triton.cdiv(s, BLOCK_N1)),
            dq_grid=(b * h, triton.cdiv(s, BLOCK_M2)),
            dkdv_warps=DKDV_WARPS_D128 if d > 64 else DKDV_WARPS,
        )
    return params


def kernel_fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor, lse: torch.Tensor,
              grad_out: torch.Tensor) -> tuple:
    b, h, s, d = q.shape
    kvh = k.shape[1]
    if k.shape != (b, kvh, s, d) or v.shape != k.shape or o.shape != q.shape or grad_out.shape != q.shape \
            or lse.shape != (b, h, s) or h % kvh:
        raise ValueError(f"flash_attention_bwd: need q[B,H,S,D], k/v[B,KVH,S,D] with KVH | H, o and grad_out like "
                         f"q, lse[B,H,S]; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}, "
                         f"{tuple(o.shape)}, {tuple(lse.shape)}, {tuple(grad_out.shape)}")
    if d not in (16, 32, 64, 128):
        raise ValueError(f"flash_attention_bwd: head dim {d} is not supported (16, 32, 64, 128)")
    # The head dim is read as contiguous (stride 1); other strides are honoured ([B, S, H, D] views).
    q, k, v, o, grad_out = (t if t.stride(3) == 1 else t.contiguous() for t in (q, k, v, o, grad_out))
    if lse.dtype != torch.float32:
        raise ValueError(f"flash_attention_bwd: lse is the forward's float32 logsumexp, got {lse.dtype}")
    lse = lse if lse.is_contiguous() else lse.contiguous()
    p = _launch_params(q, k, v, o, grad_out)
    dev = q.device
    delta = torch.empty((b, h, s), dtype=torch.float32, device=dev)
    dq = torch.empty((b, h, s, d), dtype=q.dtype, device=dev)
    dk = torch.empty((b, kvh, s, d), dtype=k.dtype, device=dev)
    dv = torch.empty((b, kvh, s, d), dtype=v.dtype, device=dev)
    qs = (q.stride(0), q.stride(1), q.stride(2))
    ks = (k.stride(0), k.stride(1), k.stride(2))
    vs = (v.stride(0), v.stride(1), v.stride(2))
    os_ = (o.stride(0), o.stride(1), o.stride(2))
    ds = (grad_out.stride(0), grad_out.stride(1), grad_out.stride(2))
    fix = p["fix_bf16"]
    # dQ first: it writes Delta, which every dK/dV program reads for all the query rows it meets
    _dq[p["dq_grid"]](q, k, v, o, grad_out, lse, delta, dq, p["qk_scale"], p["sm_scale"], h, p["group"], s,
                      *qs, *ks, *vs, *os_, *ds, HEAD_DIM=d, BLOCK_M2=BLOCK_M2, BLOCK_N2=BLOCK_N2, FIX_BF16=fix,
                      STAGES=DQ_STAGES, num_warps=DQ_WARPS)
    _dkdv[p["dkdv_grid"]](q, k, v, grad_out, lse, delta, dk, dv, p["qk_scale"], p["sm_scale"], h, kvh, p["group"], s,
                          *qs, *ks, *vs, *ds, HEAD_DIM=d, BLOCK_M1=BLOCK_M1, BLOCK_N1=BLOCK_N1, FIX_BF16=fix,
                          STAGES=DKDV_STAGES, num_warps=p["dkdv_warps"])
    return dq, dk, dv
