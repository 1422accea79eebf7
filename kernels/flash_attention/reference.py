"""Harness-owned PyTorch side of the flash_attention task (read-only to the agent).

Causal self-attention forward, softmax scale 1/sqrt(D), grouped-query heads:
query head h reads key/value head h // (H // KVH).
"""

import math

import torch
import torch.nn.functional as F


def _check(shape: dict) -> None:
    if shape["H"] % shape["KVH"]:
        raise ValueError(f"flash_attention: KVH={shape['KVH']} must divide H={shape['H']}")


def make_inputs(shape: dict, dtype: torch.dtype, device: str, seed: int) -> tuple:
    _check(shape)
    g = torch.Generator(device=device).manual_seed(seed)  # on the device: fast at 1 GB inputs
    b, h, kvh, s, d = shape["B"], shape["H"], shape["KVH"], shape["S"], shape["D"]
    # Post-projection activations: unit-variance entries, a per-head scale spread
    # (some heads attend sharply, some diffusely), and a shared key direction so
    # logits carry a per-query offset as real keys do.
    q_scale = torch.exp(torch.randn(1, h, 1, 1, generator=g, device=device) * 0.3)
    k_scale = torch.exp(torch.randn(1, kvh, 1, 1, generator=g, device=device) * 0.3)
    q = torch.randn(b, h, s, d, generator=g, device=device) * q_scale
    k_shared = 0.5 * torch.randn(1, kvh, 1, d, generator=g, device=device)
    k = torch.randn(b, kvh, s, d, generator=g, device=device) * k_scale + k_shared
    v = torch.randn(b, kvh, s, d, generator=g, device=device)
    to = dict(device=device, dtype=dtype)
    return q.to(**to), k.to(**to), v.to(**to)


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The baseline: SDPA (flash / cuDNN / efficient backends on a GPU), causal."""
    gqa = q.shape[1] != k.shape[1]
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)


def naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """matmul - mask - softmax - matmul, materialising the S x S scores."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    return torch.softmax(_causal_scores(q, k), dim=-1) @ v


def _causal_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """q k^T / sqrt(D), -inf where a key comes after its query (k already has q's heads)."""
    s = q.shape[-2]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    causal = torch.ones(s, s, dtype=torch.bool, device=q.device).tril()
    return scores.masked_fill(~causal, float("-inf"))


def saved_for_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple:
    """What a training forward keeps for the backward, as FlashAttention's does: O (the output, in the
    inputs' dtype, contiguous [B, H, S, D]) and each query row's logsumexp of its scaled, masked scores
    (float32, natural log, [B, H, S]). The flash_attention_bwd task hands both to kernel_fn."""
    group = q.shape[1] // k.shape[1]
    if q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) and q.shape[-1] <= 256:
        # torch's FlashAttention forward: exact to the dtype's rounding, float32 logsumexp, milliseconds
        # at LLaMA-7B sizes (the harness calls this for every rep's fresh inputs)
        kk, vv = (k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)) if group > 1 else (k, v)
        try:
            out = torch.ops.aten._scaled_dot_product_flash_attention(q, kk, vv, 0.0, True)
            return out[0].contiguous(), out[1].float().contiguous()
        except (RuntimeError, NotImplementedError):  # a build or card without it: the float32 way below
            pass
    # Elsewhere (the CPU, float32): in float32, one batch element at a time
    outs, lses = [], []
    for i in range(q.shape[0]):
        vi = v[i].float().repeat_interleave(group, dim=0)
        scores = _causal_scores(q[i].float(), k[i].float().repeat_interleave(group, dim=0))
        lse = torch.logsumexp(scores, dim=-1)
        outs.append((torch.exp(scores - lse[..., None]) @ vi).to(q.dtype))
        lses.append(lse)
    return torch.stack(outs).contiguous(), torch.stack(lses).contiguous()


def flops(shape: dict) -> int:
    b, h, s, d = shape["B"], shape["H"], shape["S"], shape["D"]
    # Two matmuls (QK^T and PV) over the causal half: S(S+1)/2 query-key pairs.
    return 4 * b * h * d * (s * (s + 1) // 2)


def bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    size = torch.finfo(dtype).bits // 8
    b, h, kvh, s, d = shape["B"], shape["H"], shape["KVH"], shape["S"], shape["D"]
    return (2 * b * h * s * d + 2 * b * kvh * s * d) * size  # read q, k, v once, write out


def backward_flops(shape: dict) -> int:
    # The backward as flash_attention_bwd runs it (q, k, v, O, logsumexp, dO in; dq, dk, dv out: the
    # forward's O and logsumexp saved, as a training step's forward keeps them), over the causal half:
    # FlashAttention-2's five matmuls, QK^T again, dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q. A
    # kernel that computes QK^T and dP once more for a separate dQ pass does more.
    b, h, s, d = shape["B"], shape["H"], shape["S"], shape["D"]
    return 10 * b * h * d * (s * (s + 1) // 2)


def backward_bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    size = torch.finfo(dtype).bits // 8
    b, h, kvh, s, d = shape["B"], shape["H"], shape["KVH"], shape["S"], shape["D"]
    # Read q, O, dO, k, v and the float32 logsumexp once; write dq, dk, dv (Delta is the kernel's own).
    return (4 * b * h * s * d + 4 * b * kvh * s * d) * size + 4 * b * h * s


def _mixed_scales(inputs, g):
    # Some heads x30 on queries and keys (logits ~1e3): the predecessor produced NaN here.
    q, k, v = inputs
    hq = (torch.rand(1, q.shape[1], 1, 1, generator=g) < 0.5).to(q.device)
    hk = (torch.rand(1, k.shape[1], 1, 1, generator=g) < 0.5).to(k.device)
    return (torch.where(hq, q.float() * 30.0, q.float()).to(q.dtype),
            torch.where(hk, k.float() * 30.0, k.float()).to(k.dtype), v)


def _key_offset(inputs, g):
    # A large shared key component: every logit of a query row shifts by ~ +-100,
    # softmax is invariant, only a correct running max keeps exp() finite.
    q, k, v = inputs
    direction = torch.randn(1, k.shape[1], 1, k.shape[3], generator=g).to(k.device)
    return q, (k.float() + 8.0 * direction).to(k.dtype), v


def _attention_sink(inputs, g):
    # Every query aligned with key 0 (an "attention sink", logit ~ +15 above the rest):
    # the weight sits in the first key block and must survive every later rescaling.
    return _with_sink(inputs, g, 1.5)


def _attention_sink_soft(inputs, g):
    # The backward's sink: key 0's logit ~ +0.5 sqrt(D) above the rest, most of each row's weight
    # and still a well-conditioned gradient. (At +1.5 sqrt(D) the softmax saturates, dq and dk are
    # ~1e-3 of their usual size and 16-bit rounding of P and O is all of them: eager autograd in fp16
    # is off by rel_l2 ~1 there, so no tolerance could check a kernel.)
    return _with_sink(inputs, g, 0.5)


def _with_sink(inputs, g, boost):
    q, k, v = inputs
    d = q.shape[3]
    group = q.shape[1] // k.shape[1]
    sink = torch.randn(1, k.shape[1], 1, d, generator=g)
    sink = (sink / sink.norm(dim=-1, keepdim=True) * math.sqrt(d)).to(q.device)
    q = (q.float() + sink.repeat_interleave(group, dim=1)).to(q.dtype)
    k = k.float().clone()
    k[:, :, :1, :] += boost * sink
    return q, k.to(v.dtype), v


def _bshd_layout(inputs, g):
    # q/k/v as models hand them over: [B, S, H, D] projections viewed as [B, H, S, D]
    # (transpose(1, 2), not contiguous). Same values; the kernel must honour the strides.
    return tuple(t.transpose(1, 2).contiguous().transpose(1, 2) for t in inputs)


ADVERSARIAL = {"mixed_scales": _mixed_scales, "key_offset": _key_offset, "attention_sink": _attention_sink,
               "bshd_layout": _bshd_layout}
# The flash_attention_bwd task's transforms (harness/worker/reference.py reads BACKWARD_ADVERSARIAL
# where a reference defines it): the same, with the saturating sink replaced by a softer one.
BACKWARD_ADVERSARIAL = {"mixed_scales": _mixed_scales, "key_offset": _key_offset,
                        "attention_sink": _attention_sink_soft, "bshd_layout": _bshd_layout}
