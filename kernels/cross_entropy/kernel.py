"""Mean cross-entropy in Triton: the one file an agent edits.

Pass 1, one program per segment of a row (a whole row, or a few segments of it
when there are too few rows to keep the GPU busy): an online logsumexp over the
segment in BLOCK_V chunks (running max and rescaled sum, base-2 exponentials),
so the softmax is never materialised and the logits are read exactly once; the
segment's max, sum and (if it holds it) the target logit go to an fp32 buffer.
Each segment is split into a short head up to the first 16-byte boundary, full
unmasked chunks whose address the compiler knows is aligned (vector loads even
when V is odd, e.g. 50257), and a masked tail.
Pass 2, one program: combines each row's segments, then sums the row losses and
counts the rows in a fixed order, so the result is bitwise deterministic (no atomics).
"""

import torch
import triton
import triton.language as tl

# Tunable knobs: module-level constants the offline tuner rewrites.
BLOCK_V = 4096  # logits per chunk of the row loop
NUM_WARPS = 4
NUM_STAGES = 1  # software-pipelined chunks of the row loop (1: none; more: cp.async prefetch into shared memory)
REDUCE_BLOCK = 1024  # row losses per step of the final reduction
SEGMENT_PROGRAMS_PER_SM = 16  # rows are split into segments until there are this many programs per SM (0: never)

_IGNORE_INDEX = -100  # F.cross_entropy's default (lower-case-prefixed: not a knob)


@triton.jit
def _online_update(m, s, x):
    # Fold a chunk x into the running max m and the sum s of exp(x - m); base-2 exponentials
    # with log2(e) folded in, so x * log2e - m * log2e is one fused multiply-add per logit.
    m_new = tl.maximum(m, tl.max(x, axis=0))
    m_scaled = m_new * 1.4426950408889634
    return m_new, s * tl.exp2(m * 1.4426950408889634 - m_scaled) + tl.sum(
        tl.exp2(x * 1.4426950408889634 - m_scaled), axis=0)


@triton.jit
def _segment_lse(LOGITS, TARGETS, PARTIAL, M, V, stride_row, span,
                 BLOCK: tl.constexpr, ALIGN: tl.constexpr, STAGES: tl.constexpr):
    row = tl.program_id(0)
    seg = tl.program_id(1)
    lo = seg * span  # this segment is logits [lo, lo + n) of the row
    n = tl.minimum(V - lo, span)
    seg_start = row.to(tl.int64) * stride_row + lo
    seg_ptr = LOGITS + seg_start
    # Head: elements before the first ALIGN-element (16-byte) boundary of this segment.
    head = tl.minimum((ALIGN - seg_start % ALIGN) % ALIGN, n).to(tl.int32)
    cols = tl.arange(0, ALIGN)
    x_head = tl.load(seg_ptr + cols, mask=cols < head, other=-float("inf")).to(tl.float32)
    m = tl.max(x_head, axis=0)  # -inf when the head is empty
    s = tl.sum(tl.where(cols < head, tl.exp2((x_head - m) * 1.4426950408889634), 0.0), axis=0)
    # Body: full chunks from an aligned address, no mask.
    n_full = (n - head) // BLOCK
    body = LOGITS + tl.multiple_of(seg_start + head, ALIGN)
    offs = tl.arange(0, BLOCK)
    for i in tl.range(0, n_full, num_stages=STAGES):
        x_body = tl.load(body + i * BLOCK + offs).to(tl.float32)
        m, s = _online_update(m, s, x_body)
    # Tail: what is left, masked.
    tail = head + n_full * BLOCK
    cols = tail + offs
    x_tail = tl.load(seg_ptr + cols, mask=cols < n, other=-float("inf")).to(tl.float32)
    if tail < n:
        m, s = _online_update(m, s, x_tail)
    # The target logit, from the one segment that holds it (ignored rows: any index, never read out of the row).
    t = tl.load(TARGETS + row) - lo
    mine = (t >= 0) & (t < n)
    x_t = tl.load(seg_ptr + tl.minimum(tl.maximum(t, 0), n - 1)).to(tl.float32)
    # Laid out [3, segments, M]: pass 2 reads each as one contiguous run of rows.
    out = PARTIAL + seg * M + row
    plane = tl.num_programs(1) * M
    tl.store(out, m)
    tl.store(out + plane, s)
    tl.store(out + 2 * plane, tl.where(mine, x_t, 0.0))


@triton.jit
def _mean_loss(PARTIAL, TARGETS, OUT, M, SEGMENTS, ignore_index, BLOCK: tl.constexpr):
    total = tl.zeros([BLOCK], dtype=tl.float32)
    count = tl.zeros([BLOCK], dtype=tl.float32)
    plane = SEGMENTS * M
    for start in range(0, M, BLOCK):
        rows = start + tl.arange(0, BLOCK)
        mask = rows < M
        # Combine the row's segments in order: running max and rescaled sum, as within a segment.
        m = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
        s = tl.zeros([BLOCK], dtype=tl.float32)
        x_t = tl.zeros([BLOCK], dtype=tl.float32)
        for seg in range(0, SEGMENTS):
            m_seg = tl.load(PARTIAL + seg * M + rows, mask=mask, other=0.0)
            s_seg = tl.load(PARTIAL + plane + seg * M + rows, mask=mask, other=0.0)
            x_t += tl.load(PARTIAL + 2 * plane + seg * M + rows, mask=mask, other=0.0)
            m_new = tl.maximum(m, m_seg)
            s = s * tl.exp2((m - m_new) * 1.4426950408889634) + s_seg * tl.exp2((m_seg - m_new) * 1.4426950408889634)
            m = m_new
        lse = m + tl.log2(s) * 0.6931471805599453
        t = tl.load(TARGETS + rows, mask=mask, other=ignore_index)
        valid = t != ignore_index
        total += tl.where(valid & mask, lse - x_t, 0.0)
        count += tl.where(valid, 1.0, 0.0)
    # 0/0 = nan when every row is ignored, as F.cross_entropy returns.
    tl.store(OUT, (tl.sum(total, axis=0) / tl.sum(count, axis=0)).to(OUT.dtype.element_ty))


def kernel_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    if logits.dim() != 2 or targets.shape != (logits.shape[0],):
        raise ValueError(f"cross_entropy: need logits[M, V] and targets[M], got {tuple(logits.shape)} "
                         f"and {tuple(targets.shape)}")
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    if not targets.is_contiguous():
        targets = targets.contiguous()
    m, v = logits.shape
    segments, span = _segments(m, v, logits.device)
    partial = torch.empty((3, segments, m), dtype=torch.float32, device=logits.device)
    out = torch.empty((), dtype=logits.dtype, device=logits.device)
    _segment_lse[(m, segments)](logits, targets, partial, m, v, logits.stride(0), span,
                                BLOCK=BLOCK_V, ALIGN=16 // logits.element_size(), STAGES=NUM_STAGES,
                                num_warps=NUM_WARPS)
    _mean_loss[(1,)](partial, targets, out, m, segments, _IGNORE_INDEX, BLOCK=REDUCE_BLOCK, num_warps=4)
    return out


def _segments(m: int, v: int, device) -> tuple[int, int]:
    """(segments per row, logits per segment): rows split in whole chunks until the grid fills the GPU."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 2
    want = triton.cdiv(SEGMENT_PROGRAMS_PER_SM * sms, m) if SEGMENT_PROGRAMS_PER_SM else 1
    segments = max(1, min(want, triton.cdiv(v, BLOCK_V)))
    span = triton.cdiv(triton.cdiv(v, segments), BLOCK_V) * BLOCK_V
    return triton.cdiv(v, span), span
