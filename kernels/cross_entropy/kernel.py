"""Mean cross-entropy in Triton: the one file an agent edits.

Pass 1, one program per row: an online logsumexp over the row in BLOCK_V
chunks (running max and rescaled sum, base-2 exponentials), so the softmax is
never materialised and the logits are read exactly once; the row's loss
(lse - logit[target], 0 for ignored rows) goes to an fp32 buffer.
Each row is split into a short head up to the first 16-byte boundary, full
unmasked chunks whose address the compiler knows is aligned (vector loads even
when V is odd, e.g. 50257), and a masked tail.
Pass 1 keeps a running max and sum per 16-byte lane for 16-bit logits (no block
reduction per chunk) and a row max per chunk for fp32 (faster there, H200 run 6c).
Pass 2: a second one-program launch (or, FUSED_MEAN, the last row program to
finish) sums the row losses and counts the rows in a fixed order, so the result
is bitwise deterministic (no atomic adds of losses).
"""

import collections

import torch
import triton
import triton.language as tl

# Tunable knobs: module-level constants the offline tuner rewrites.
BLOCK_V = 4096  # logits per chunk of the row loop
NUM_WARPS = 4
NUM_STAGES = 1  # software-pipelined chunks of the row loop (1: none; more: cp.async prefetch into shared memory)
REDUCE_BLOCK = 1024  # row losses per step of the final reduction
LANE_MAX = 1  # 16-bit logits: 1, a running max per 16-byte lane, no block reduction per chunk; 0, a row max per chunk
FP32_LANE_MAX = 0  # the same for fp32 logits (lanes of 4: slower at 1024 rows, H200 run 6c)
FUSED_MEAN = 0  # 1: the last row program sums the losses (after a memset of its counter); 0: a second kernel

_IGNORE_INDEX = -100  # F.cross_entropy's default (lower-case-prefixed: not a knob)


@triton.jit
def _online_update(m, s, x):
    # Fold a chunk x into the running max m and the sum s of exp(x - m); base-2 exponentials
    # with log2(e) folded in, so x * log2e - m * log2e is one fused multiply-add per logit.
    m_new = tl.maximum(m, tl.max(x, axis=0))
    m_scaled = tl.where(m_new == -float("inf"), 0.0, m_new * 1.4426950408889634)  # only -inf so far: s stays 0
    return m_new, s * tl.exp2(m * 1.4426950408889634 - m_scaled) + tl.sum(
        tl.exp2(x * 1.4426950408889634 - m_scaled), axis=0)


@triton.jit
def _lane_update(m, s, x):
    # Fold a chunk x[LANES, ALIGN] (-inf where masked) into per-lane running maxima m and sums s
    # of exp(x - m). A lane is one thread's 16-byte vector, so its max and sum never leave the
    # thread: no block reduction (shuffles and barriers) per chunk, for one more exponential per lane.
    m_new = tl.maximum(m, tl.max(x, axis=1))
    m_scaled = tl.where(m_new == -float("inf"), 0.0, m_new * 1.4426950408889634)  # lanes of only -inf keep s = 0
    s = s * tl.exp2(m * 1.4426950408889634 - m_scaled) + tl.sum(
        tl.exp2(x * 1.4426950408889634 - m_scaled[:, None]), axis=1)
    return m_new, s


@triton.jit
def _row_loss(LOGITS, TARGETS, LOSS, OUT, DONE, M, V, stride_row, ignore_index,
              BLOCK: tl.constexpr, ALIGN: tl.constexpr, STAGES: tl.constexpr, LANES: tl.constexpr,
              FUSED: tl.constexpr, REDUCE: tl.constexpr):
    row = tl.program_id(0)
    row_start = row.to(tl.int64) * stride_row
    row_ptr = LOGITS + row_start
    # Head: elements before the first ALIGN-element (16-byte) boundary of this row.
    head = tl.minimum((ALIGN - row_start % ALIGN) % ALIGN, V).to(tl.int32)
    cols = tl.arange(0, ALIGN)
    x_head = tl.load(row_ptr + cols, mask=cols < head, other=-float("inf")).to(tl.float32)
    m = tl.max(x_head, axis=0)  # -inf when the head is empty (or masked out: -inf logits)
    m_safe = tl.where(m == -float("inf"), 0.0, m)
    s = tl.sum(tl.where(cols < head, tl.exp2((x_head - m_safe) * 1.4426950408889634), 0.0), axis=0)
    # Body: full chunks from an aligned address, no mask.
    n_full = (V - head) // BLOCK
    body = LOGITS + tl.multiple_of(row_start + head, ALIGN)
    tail = head + n_full * BLOCK
    if LANES:
        # The chunk as [BLOCK // ALIGN, ALIGN]: row j is lane j's 16-byte vector.
        offs = tl.arange(0, BLOCK // ALIGN)[:, None] * ALIGN + tl.arange(0, ALIGN)[None, :]
        m_l = tl.full([BLOCK // ALIGN], -float("inf"), tl.float32)
        s_l = tl.zeros([BLOCK // ALIGN], tl.float32)
        for i in tl.range(0, n_full, num_stages=STAGES):
            m_l, s_l = _lane_update(m_l, s_l, tl.load(body + i * BLOCK + offs).to(tl.float32))
        cols = tail + offs  # the tail, masked; lanes wholly past the row see only -inf
        m_l, s_l = _lane_update(m_l, s_l, tl.load(row_ptr + cols, mask=cols < V, other=-float("inf")).to(tl.float32))
        # Lanes and head into the row's max and sum (one block reduction per row, not per chunk).
        m_row = tl.maximum(m, tl.max(m_l, axis=0))
        m_scaled = tl.where(m_row == -float("inf"), 0.0, m_row * 1.4426950408889634)
        s = s * tl.exp2(m * 1.4426950408889634 - m_scaled) + tl.sum(
            s_l * tl.exp2(m_l * 1.4426950408889634 - m_scaled), axis=0)
        m = m_row
    else:
        offs = tl.arange(0, BLOCK)
        for i in tl.range(0, n_full, num_stages=STAGES):
            x_body = tl.load(body + i * BLOCK + offs).to(tl.float32)
            m, s = _online_update(m, s, x_body)
        # Tail: what is left, masked.
        cols = tail + offs
        x_tail = tl.load(row_ptr + cols, mask=cols < V, other=-float("inf")).to(tl.float32)
        if tail < V:
            m, s = _online_update(m, s, x_tail)
    lse = m + tl.log2(s) * 0.6931471805599453
    target = tl.load(TARGETS + row)
    valid = target != ignore_index
    safe = tl.minimum(tl.maximum(target, 0), V - 1)  # never read outside the row
    x_t = tl.load(row_ptr + safe).to(tl.float32)
    tl.store(LOSS + row, tl.where(valid, lse - x_t, 0.0))
    if FUSED:
        # acq_rel: this row's loss is visible before the count says so, and the last program
        # to count sees every row's.
        if tl.atomic_add(DONE, 1, sem="acq_rel") == M - 1:
            _mean_of_rows(LOSS, TARGETS, OUT, M, ignore_index, REDUCE)


@triton.jit
def _mean_loss(LOSS, TARGETS, OUT, M, ignore_index, BLOCK: tl.constexpr):
    _mean_of_rows(LOSS, TARGETS, OUT, M, ignore_index, BLOCK)


@triton.jit
def _mean_of_rows(LOSS, TARGETS, OUT, M, ignore_index, BLOCK: tl.constexpr):
    total = tl.zeros([BLOCK], dtype=tl.float32)
    count = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, M, BLOCK):
        rows = start + tl.arange(0, BLOCK)
        mask = rows < M
        total += tl.load(LOSS + rows, mask=mask, other=0.0)
        t = tl.load(TARGETS + rows, mask=mask, other=ignore_index)
        count += tl.where(t != ignore_index, 1.0, 0.0)
    # 0/0 = nan when every row is ignored, as F.cross_entropy returns.
    tl.store(OUT, (tl.sum(total, axis=0) / tl.sum(count, axis=0)).to(OUT.dtype.element_ty))


# Launch plans, decided once per input signature: (logits shape and strides, dtype, targets shape) ->
# _Plan. A call is a key, one dict lookup, the allocations and the launches; the plan is computed
# from the knobs above.
_PLANS: dict = {}
# made_under: the _knobs() it was computed under (see _knobs)
_Plan = collections.namedtuple("_Plan", "made_under launch grid args meta reduce reduce_args reduce_meta pack")


def _knobs() -> tuple:
    """Everything a plan is computed from besides the inputs: the knobs and the kernels it binds. A plan
    made under other values (a knob set in place, as knob_sweep.py and the tests do) is made again."""
    return (
        BLOCK_V, NUM_WARPS, NUM_STAGES, REDUCE_BLOCK, LANE_MAX, FP32_LANE_MAX, FUSED_MEAN, _IGNORE_INDEX,
        _row_loss, _mean_loss,
    )


def _plan(logits: torch.Tensor, targets: torch.Tensor, made_under: tuple):
    if logits.dim() != 2 or targets.shape != (logits.shape[0],):
        raise ValueError(f"cross_entropy: need logits[M, V] and targets[M], got {tuple(logits.shape)} "
                         f"and {tuple(targets.shape)}")
    pack = logits.stride(1) != 1  # pack the logits once per call (then their row stride is V)
    m, v = logits.shape
    stride_row = v if pack else logits.stride(0)
    lanes = FP32_LANE_MAX if logits.element_size() == 4 else LANE_MAX
    grid = (m,)
    meta = dict(BLOCK=BLOCK_V, ALIGN=16 // logits.element_size(), STAGES=NUM_STAGES, LANES=lanes,
                FUSED=FUSED_MEAN, REDUCE=REDUCE_BLOCK, num_warps=NUM_WARPS)
    reduce = None if FUSED_MEAN else _mean_loss[(1,)]
    return _Plan(made_under, _row_loss[grid], grid, (m, v, stride_row, _IGNORE_INDEX), meta,
                 reduce, (m, _IGNORE_INDEX), dict(BLOCK=REDUCE_BLOCK, num_warps=4), pack)


def kernel_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    key = (logits.shape, logits.stride(), logits.dtype, targets.shape)
    knobs = _knobs()
    p = _PLANS.get(key)
    if p is None or p.made_under != knobs:
        p = _PLANS[key] = _plan(logits, targets, knobs)
    if p.pack:
        logits = logits.contiguous()
    if not targets.is_contiguous():
        targets = targets.contiguous()
    row_loss = torch.empty(p.grid, dtype=torch.float32, device=logits.device)
    out = torch.empty((), dtype=logits.dtype, device=logits.device)
    if p.reduce is None:  # FUSED_MEAN: the last row program sums, counting programs in `done`
        done = torch.zeros(1, dtype=torch.int32, device=logits.device)
        p.launch(logits, targets, row_loss, out, done, *p.args, **p.meta)
    else:
        p.launch(logits, targets, row_loss, out, row_loss, *p.args, **p.meta)  # DONE unused unfused
        p.reduce(row_loss, targets, out, *p.reduce_args, **p.reduce_meta)
    return out
