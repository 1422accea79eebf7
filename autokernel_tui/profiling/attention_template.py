"""The GEMM template's attention: a flash-attention kernel for the SDPA calls Inductor leaves to a library.

A bidirectional attention (a ViT's, BERT's or T5's encoder), recorded at the dispatcher, is one of
SDPA's private backend calls (``_scaled_dot_product_cudnn_attention`` on an H100 or H200,
``_scaled_dot_product_flash_attention_for_cpu`` on the CPU, ...). Inductor calls the library kernel for
it and writes no Triton, so such a task had no starter (run 26, ViT on the H100: "no starter kernel
yet"). This module writes the call as one FlashAttention-2 forward (online softmax in base 2, fp32
accumulators, K and V streamed through the key loop), for any strides of Q, K and V, grouped-query
heads, a causal mask, and an additive or boolean mask of any broadcast shape. Its output is laid out
as the library kernels return theirs ([B, S, H, D] in memory, viewed as [B, H, S, D]), so the chain's
transpose and view after it are free views, as in the model.

What it does not write, it says (``NoTemplate``): dropout (a random draw), a head dimension over
``MAX_HEAD_DIM``, a chain that reads the call's other outputs (its log-sum-exp, for a backward).
"""

from __future__ import annotations

from typing import Any

# SDPA's private backend calls (the public op is CompositeImplicit: the dispatcher records these).
ATTENTION_OPS = {
    "aten._scaled_dot_product_flash_attention.default",
    "aten._scaled_dot_product_flash_attention_for_cpu.default",
    "aten._scaled_dot_product_efficient_attention.default",
    "aten._scaled_dot_product_cudnn_attention.default",
    "aten.scaled_dot_product_attention.default",
}
MAX_HEAD_DIM = 256  # a [BLOCK_M, D] query tile and [BLOCK_N, D] key/value tiles in registers and shared memory
ATTENTION_KNOBS = {"ATTN_BLOCK_M": [64, 128], "ATTN_BLOCK_N": [32, 64, 128], "ATTN_NUM_WARPS": [4, 8],
                   "ATTN_NUM_STAGES": [1, 2, 3]}
ATTENTION_FP32_KNOBS = {"ATTN_FP32_BLOCK_M": [32, 64, 128], "ATTN_FP32_BLOCK_N": [16, 32, 64],
                        "ATTN_FP32_NUM_WARPS": [4, 8]}


class NoAttentionTemplate(ValueError):
    """The call is an attention this template does not write; the message says which part."""


def knobs_for(dtypes) -> dict[str, list[int]]:
    """The attention knobs a kernel for inputs of ``dtypes`` reads (the fp32 tile only for float32)."""
    out = dict(ATTENTION_FP32_KNOBS) if "float32" in dtypes else {}
    if set(dtypes) - {"float32"} or not out:
        out.update(ATTENTION_KNOBS)
    return out


def is_attention(name: str) -> bool:
    return name in ATTENTION_OPS


def _arguments(op: dict) -> dict[str, Any]:
    """The call's arguments by name, from the overload's schema (positional ones, then keywords)."""
    import torch

    _, packet, overload = op["op"].split(".")
    schema = getattr(getattr(torch.ops.aten, packet), overload)._schema
    named = {a.name: a.default_value if a.has_default_value() else None for a in schema.arguments}
    named.update({a.name: v for a, v in zip(schema.arguments, op["args"])})
    named.update(op.get("kwargs", {}))
    return named


def _tensor(v: Any) -> str | None:
    return f"t{v['tensor']}" if isinstance(v, dict) and "tensor" in v else None


def _float(v: Any) -> float | None:
    if v is None:
        return None
    return float(v["float"]) if isinstance(v, dict) and "float" in v else float(v)


def attention_call(op: dict, tensors: dict, used: set[int]) -> str:
    """The call as a line of kernel_fn (``tensors``: the chain's tensor metadata by id; ``used``: the tensor
    ids the chain reads later or returns). Raises NoAttentionTemplate for what it does not write."""
    a = _arguments(op)
    if _float(a.get("dropout_p")) not in (None, 0.0):
        raise NoAttentionTemplate(f"attention with dropout p = {_float(a['dropout_p'])} (a random draw) has no template")
    if a.get("return_debug_mask"):
        raise NoAttentionTemplate("attention that returns its debug mask has no template")
    others = [t for t in op["outputs"][1:] if t is not None and t in used]
    if others:
        raise NoAttentionTemplate("the chain reads the attention's other outputs (its log-sum-exp): no template")
    q, k, v = (_tensor(a[n]) for n in ("query", "key", "value"))
    d = tensors[str(a["query"]["tensor"])]["shape"][-1]
    if d > MAX_HEAD_DIM or len(tensors[str(a["query"]["tensor"])]["shape"]) != 4:
        raise NoAttentionTemplate(f"attention over [B, H, S, D] with D <= {MAX_HEAD_DIM} only (D = {d})")
    mask = _tensor(a.get("attn_mask") if a.get("attn_mask") is not None else a.get("attn_bias"))
    out = f"t{op['outputs'][0]}"
    return (f"    {out} = _attention({q}, {k}, {v}, {mask or 'None'}, {bool(a.get('is_causal'))!r}, "
            f"{_float(a.get('scale'))!r})")


# kernel.py's head for a chain whose only library call is the attention (the GEMM template's HEAD otherwise);
# a format string, as the GEMM template's
HEAD = '''"""Starter for generated task {name}: {chain}, from autokernel_tui/profiling/attention_template.py.

Inductor calls a library attention kernel (cuDNN's, FlashAttention's) for this chain, so this starter
is a template rather than Inductor's Triton: the attention is FlashAttention-2's forward in Triton
(_attention_kernel: one program per block of query rows and head, K and V streamed through the key
loop, an online softmax in base 2 with fp32 accumulators), views the recorded views, pointwise ops
elementwise Triton kernels. Knobs: the tile (ATTN_* for 16-bit inputs, ATTN_FP32_* for float32) and
the K/V pipeline depth.
"""

import torch
import triton
import triton.language as tl

# float32 inputs: dots at about fp32's accuracy (three TF32 tensor-core products per step), as torch runs
# the op with torch.backends.cuda.matmul.allow_tf32 off
FP32_DOT = "tf32x3"
# Launch plans, decided once per input signature (shapes, strides, dtype, device, the knobs): a call is a
# key, one dict lookup, its allocation and its launch (dict(), not braces: this head is a format string)
_PLANS = dict()


'''
SOURCE = '''# Attention (SDPA's library call, written as FlashAttention-2's forward). 16-bit inputs:
ATTN_BLOCK_M = 128  # query rows per program
ATTN_BLOCK_N = 64  # keys per step of the key loop
ATTN_NUM_WARPS = 8
ATTN_NUM_STAGES = 2  # K/V software pipeline depth
# float32 inputs (fp32 dots at FP32_DOT need more registers per element): a smaller tile
ATTN_FP32_BLOCK_M = 64
ATTN_FP32_BLOCK_N = 32
ATTN_FP32_NUM_WARPS = 4
# Triton's CPU interpreter multiplies bf16 tiles as raw bits: it widens them (never on a GPU)
import os  # noqa: E402 - only to ask whether Triton runs interpreted

_ATTN_WIDEN = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _attention_kernel(Q, K, V, O, MASK, qk_scale, H, KV_GROUP, SQ, SK, D,
                      sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sob, soh, som, sod,
                      smb, smh, smm, smn, MASK_KIND: tl.constexpr, CAUSAL: tl.constexpr, FP32: tl.constexpr,
                      DOT: tl.constexpr, WIDEN: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                      BD: tl.constexpr):
    # One program per (BM query rows, batch x head); K and V stream through in blocks of BN keys. The
    # scores are in base 2 (qk_scale has log2(e) folded in; an additive mask is scaled by it too).
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    hk = h // KV_GROUP  # grouped-query heads: KV_GROUP query heads share a key/value head
    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_d = tl.arange(0, BD)
    offs_n0 = tl.arange(0, BN)
    row_in = offs_m < SQ
    d_in = offs_d < D
    q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqm + offs_d[None, :] * sqd,
                mask=row_in[:, None] & d_in[None, :], other=0.0)
    if WIDEN:
        q = q.to(tl.float32)
    K += b * skb + hk * skh
    V += b * svb + hk * svh
    MASK += b * smb + h * smh
    m_i = tl.full((BM,), float("-inf"), tl.float32)
    l_i = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, BD), tl.float32)
    end = SK
    if CAUSAL:  # top-left aligned, as SDPA's is_causal: row i sees keys 0..i
        end = tl.minimum(SK, (pid_m + 1) * BM)
    for start_n in range(0, end, BN):
        offs_n = start_n + offs_n0
        key_in = offs_n < SK
        k = tl.load(K + offs_n[None, :] * skn + offs_d[:, None] * skd, mask=key_in[None, :] & d_in[:, None],
                    other=0.0)
        v = tl.load(V + offs_n[:, None] * svn + offs_d[None, :] * svd, mask=key_in[:, None] & d_in[None, :],
                    other=0.0)
        if WIDEN:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        if FP32:
            s = tl.dot(q, k, input_precision=DOT) * qk_scale
        else:
            s = tl.dot(q, k) * qk_scale
        # (rows past SQ keep their keys: their zero queries give finite scores, never 0 / 0, and are not stored)
        keep = key_in[None, :] & (offs_m[:, None] >= 0)
        inside = keep & row_in[:, None]
        if MASK_KIND == 1:  # additive (a float mask or bias), any broadcast shape
            s += tl.load(MASK + offs_m[:, None] * smm + offs_n[None, :] * smn, mask=inside, other=0.0).to(tl.float32) \\
                * 1.4426950408889634
        if MASK_KIND == 2:  # boolean: True keeps the key
            keep = keep & ((tl.load(MASK + offs_m[:, None] * smm + offs_n[None, :] * smn, mask=inside, other=1) != 0))
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= offs_m[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # a row that has seen no key yet keeps m = -inf: subtract 0 there, so exp2 gives 0, not NaN
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        if FP32:
            acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=DOT)
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    # a row every key is masked from divides 0 by 0: NaN, as SDPA's math gives for it
    out = acc / l_i[:, None]
    tl.store(O + b * sob + h * soh + offs_m[:, None] * som + offs_d[None, :] * sod, out.to(O.dtype.element_ty),
             mask=row_in[:, None] & d_in[None, :])


def _attention_knobs():
    # a knob set in place (knob_sweep.py, the tests) makes new plans
    return (ATTN_BLOCK_M, ATTN_BLOCK_N, ATTN_NUM_WARPS, ATTN_NUM_STAGES, ATTN_FP32_BLOCK_M, ATTN_FP32_BLOCK_N,
            ATTN_FP32_NUM_WARPS, FP32_DOT, _attention_kernel)


def _attention(q, k, v, mask, causal, scale):
    """softmax(q k^T * scale + mask) v over [B, H, S, D] tensors of any strides (k and v may have fewer
    heads: grouped-query); ``mask``: None, additive (float) or boolean (True keeps), broadcast to
    [B, H, SQ, SK]. The result is [B, SQ, H, D] in memory, viewed as [B, H, SQ, D] (the library's layout)."""
    B, H, SQ, D = q.shape
    key = ("attention", q.shape, q.stride(), k.shape, k.stride(), v.stride(), q.dtype, q.device,
           None if mask is None else (mask.shape, mask.stride(), mask.dtype), causal, scale, _attention_knobs())
    o = torch.empty((B, SQ, H, D), dtype=q.dtype, device=q.device).transpose(1, 2)
    p = _PLANS.get(key)
    if p is None:
        fp32 = q.dtype == torch.float32
        bm, bn, warps = ((ATTN_FP32_BLOCK_M, ATTN_FP32_BLOCK_N, ATTN_FP32_NUM_WARPS) if fp32 else
                         (ATTN_BLOCK_M, ATTN_BLOCK_N, ATTN_NUM_WARPS))
        bd = max(16, triton.next_power_of_2(D))
        # Wider heads: fewer keys a step (4096 / D), and 8 warps for fp32's three-product dots, so the tiles
        # stay in registers (sm_90 compiles, tests/kernels/template_compile.py: no spills in 16-bit to D = 256)
        bn = min(bn, max(16, 4096 // bd))
        warps = max(warps, 8) if fp32 and bd >= 128 else warps
        sk = k.shape[2]
        mask_strides = (0, 0, 0, 0) if mask is None else mask.expand(B, H, SQ, sk).stride()
        sm_scale = scale if scale is not None else D ** -0.5
        p = _PLANS[key] = dict(
            launch=_attention_kernel[(triton.cdiv(SQ, bm), B * H)],
            args=(sm_scale * 1.4426950408889634, H, H // k.shape[1], SQ, sk, D, *q.stride(), *k.stride(),
                  *v.stride(), *o.stride(), *mask_strides),
            meta=dict(MASK_KIND=0 if mask is None else 2 if mask.dtype == torch.bool else 1, CAUSAL=bool(causal),
                      FP32=fp32, DOT=FP32_DOT, WIDEN=_ATTN_WIDEN and q.dtype == torch.bfloat16, BM=bm, BN=bn,
                      BD=bd, num_warps=warps,
                      num_stages=1 if fp32 else ATTN_NUM_STAGES))
    p["launch"](q, k, v, o, o if mask is None else mask, *p["args"], **p["meta"])
    return o


'''
