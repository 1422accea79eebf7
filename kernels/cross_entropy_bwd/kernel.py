"""Backward of mean cross-entropy in Triton: the one file an agent edits.

kernel_fn(logits[M, V], targets[M], grad_out[]) -> (dlogits[M, V],)

    dlogits[i, j] = (softmax(logits[i])[j] - (j == target[i])) * grad_out / n_valid

for rows whose target is not ignore_index (-100); ignored rows get zeros. n_valid is the
number of counted rows (the mean's divisor), so an all-ignored batch gives all zeros, as
autograd does (its forward loss is 0/0 = nan, its gradient is not).

Launch 1 (one program): counts the valid rows in a fixed order and writes
scale = grad_out / n_valid (fp32), deterministic, no aten op.
Launch 2 (one program per row), two ways by vocabulary width:
  * one pass (V <= ONE_PASS_MAX_V): the whole row in registers (up to 32 warps, about
    ONE_PASS_ELEMS_PER_THREAD logits a thread): max, sum of exponentials and the gradient from one
    read of the logits, as torch.compile's persistent reduction does (run 18, H100: the two-pass
    way ran 0.75-0.80x torch.compile at 32000-wide rows, reading the logits twice);
  * two passes (wider rows): pass 1, an online max/logsumexp over the row in BLOCK_V chunks (fp32,
    base-2 exponentials); pass 2 re-reads the row and writes (exp(x - lse) - onehot) * scale.
Either way in the logits' dtype, and the softmax is never materialised (not in 16-bit, not at
all): probabilities live in registers only.

Left for the agent: 16-byte aligned row bodies for odd V (the forward's head/body/tail split),
several rows per program for small V.
"""

import os

import torch
import triton
import triton.language as tl

# Tunable knobs: module-level constants the offline tuner rewrites.
BLOCK_V = 4096  # logits per chunk of both row passes
NUM_WARPS = 8
NUM_STAGES = 1  # software-pipelined chunks of the row loops (1: none)
COUNT_BLOCK = 1024  # targets per step of the valid-row count
ONE_PASS_MAX_V = 32768  # widest row held whole in registers (50257 at 32 warps spilled, sm_90)
ONE_PASS_ELEMS_PER_THREAD = 32  # one-pass rows: warps = padded row / this / 32, within NUM_WARPS..32
# Two-pass rows: pass 1 reads the row keeping it in L2 (evict_last) and pass 2 walks it backwards, the
# most recently read chunks first (softmax_bwd's looped path does so: 1.21x torch.compile at 50257 wide,
# H100 run 19). 0: both passes forwards, no hints. Not yet timed here.
PASS2_REVERSED = 0

_IGNORE_INDEX = -100  # F.cross_entropy's default (lower-case-prefixed: not a knob)
_LOG2E = tl.constexpr(1.4426950408889634)  # read inside kernels: a constexpr global
_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

# Launch parameters per (M, V, dtype, device, logits row stride): decided once, reused every call.
_LAUNCH: dict = {}


@triton.jit
def _count_valid(TARGETS, GRAD_OUT, SCALE, M, ignore_index, BLOCK: tl.constexpr):
    # scale = grad_out / n_valid, counted in a fixed order (bitwise deterministic). n_valid = 0
    # gives inf, never used: every row is then ignored and written as zeros.
    count = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, M, BLOCK):
        rows = start + tl.arange(0, BLOCK)
        t = tl.load(TARGETS + rows, mask=rows < M, other=ignore_index)
        count += tl.where(t != ignore_index, 1.0, 0.0)
    g = tl.load(GRAD_OUT).to(tl.float32)
    tl.store(SCALE, g / tl.sum(count, axis=0))


@triton.jit
def _row_grad(LOGITS, TARGETS, SCALE, DLOGITS, V, stride_row, stride_drow, ignore_index,
              BLOCK: tl.constexpr, STAGES: tl.constexpr, ROUND_BF16: tl.constexpr, ONE_PASS: tl.constexpr,
              REVERSED: tl.constexpr, EVICT1: tl.constexpr, EVICT2: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = LOGITS + row * stride_row
    d_row = DLOGITS + row * stride_drow
    offs = tl.arange(0, BLOCK)
    target = tl.load(TARGETS + row)
    if target == ignore_index:
        for start in tl.range(0, V, BLOCK, num_stages=STAGES):
            cols = start + offs
            tl.store(d_row + cols, tl.zeros([BLOCK], tl.float32).to(DLOGITS.dtype.element_ty), mask=cols < V)
    elif ONE_PASS:  # BLOCK >= V: the row read once, everything from registers
        mask = offs < V
        x = tl.load(x_row + offs, mask=mask, other=-float("inf")).to(tl.float32)
        m = tl.max(x, axis=0)
        log2_s = tl.log2(tl.sum(tl.exp2((x - m) * _LOG2E), axis=0))
        p = tl.exp2((x - m) * _LOG2E - log2_s)
        g = (p - tl.where(offs == target, 1.0, 0.0)) * tl.load(SCALE)
        tl.store(d_row + offs, _round_out(g, DLOGITS.dtype.element_ty, ROUND_BF16), mask=mask)
    else:
        # Pass 1: running max m and sum s of exp(x - m) per chunk (base-2 exponentials). m stays
        # in natural units so that pass 2's x - m is exact for logits near the max (+100 offsets).
        m = tl.full([], -float("inf"), tl.float32)
        s = tl.zeros([], tl.float32)
        for start in tl.range(0, V, BLOCK, num_stages=STAGES):
            cols = start + offs
            x = tl.load(x_row + cols, mask=cols < V, other=-float("inf"), eviction_policy=EVICT1).to(tl.float32)
            m_new = tl.maximum(m, tl.max(x, axis=0))  # finite after the first chunk (>= 1 real logit)
            s = s * tl.exp2((m - m_new) * _LOG2E) + tl.sum(tl.exp2((x - m_new) * _LOG2E), axis=0)
            m = m_new
        log2_s = tl.log2(s)
        scale = tl.load(SCALE)
        # Pass 2: (p - onehot) * scale, p = exp(x - m) / s in fp32 registers, one store per logit.
        last = (V - 1) // BLOCK * BLOCK  # the last chunk's start (REVERSED: the first one pass 2 takes)
        for i in tl.range(0, V, BLOCK, num_stages=STAGES):
            start = i
            if REVERSED:
                start = last - i
            cols = start + offs
            mask = cols < V
            x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy=EVICT2).to(tl.float32)
            p = tl.exp2((x - m) * _LOG2E - log2_s)
            g = (p - tl.where(cols == target, 1.0, 0.0)) * scale
            tl.store(d_row + cols, _round_out(g, DLOGITS.dtype.element_ty, ROUND_BF16), mask=mask)


@triton.jit
def _round_out(x, dtype: tl.constexpr, ROUND_BF16: tl.constexpr):
    # fp32 -> output dtype, rounding to nearest even. A GPU's conversion does; Triton 3.7's CPU
    # interpreter truncates fp32 -> bf16 (doubling the error), so there (ROUND_BF16, interpreter
    # only) the rounding is done on the bits first and the truncation is then exact.
    if ROUND_BF16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + (0x7FFF + ((bits >> 16) & 1))) & 0xFFFF0000
        x = bits.to(tl.float32, bitcast=True)
    return x.to(dtype)


def _launch_params(logits: torch.Tensor) -> tuple:
    key = (tuple(logits.shape), logits.stride(0), logits.dtype, logits.device)
    params = _LAUNCH.get(key)
    if params is None:
        m, v = logits.shape
        one_pass = v <= ONE_PASS_MAX_V
        if one_pass:
            block = triton.next_power_of_2(v)
            warps = max(NUM_WARPS, min(32, block // ONE_PASS_ELEMS_PER_THREAD // 32))
        else:
            block, warps = min(BLOCK_V, triton.next_power_of_2(v)), NUM_WARPS
        passes = dict(REVERSED=bool(PASS2_REVERSED), EVICT1="evict_last" if PASS2_REVERSED else "",
                      EVICT2="evict_first" if PASS2_REVERSED else "")
        params = _LAUNCH[key] = ((m,), block, min(COUNT_BLOCK, triton.next_power_of_2(max(m, 1))), one_pass, warps,
                                 passes)
    return params


def kernel_fn(logits: torch.Tensor, targets: torch.Tensor, grad_out: torch.Tensor) -> tuple:
    if logits.dim() != 2 or targets.shape != (logits.shape[0],) or grad_out.numel() != 1:
        raise ValueError(f"cross_entropy_bwd: need logits[M, V], targets[M] and a scalar grad_out, got "
                         f"{tuple(logits.shape)}, {tuple(targets.shape)} and {tuple(grad_out.shape)}")
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    if not targets.is_contiguous():
        targets = targets.contiguous()
    m, v = logits.shape
    grid, block, count_block, one_pass, warps, passes = _launch_params(logits)
    dlogits = torch.empty((m, v), dtype=logits.dtype, device=logits.device)
    scale = torch.empty(1, dtype=torch.float32, device=logits.device)
    _count_valid[(1,)](targets, grad_out, scale, m, _IGNORE_INDEX, BLOCK=count_block, num_warps=4)
    _row_grad[grid](logits, targets, scale, dlogits, v, logits.stride(0), dlogits.stride(0), _IGNORE_INDEX,
                    BLOCK=block, STAGES=NUM_STAGES, ROUND_BF16=_INTERPRETED and logits.dtype == torch.bfloat16,
                    ONE_PASS=one_pass, num_warps=warps, **passes)
    return (dlogits,)
