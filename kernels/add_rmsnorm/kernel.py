"""Fused residual add + RMSNorm in Triton: the one file an agent edits.

new_residual = x + residual (rounded to the input dtype, as a model stores it),
out = rmsnorm(new_residual) * weight, both written in one kernel. Three paths,
by row width:
  * rows: several short rows per program, for widths Triton can prove 16-byte
    aligned: x and residual read once, both outputs written once;
  * resident: one program per row holds the row's new_residual in registers (up
    to RESIDENT_MAX_KB), again one read of each input and one write of each
    output. A row of odd width starts anywhere, so the program loads from the
    16-byte boundary at or before the row's start: every load moves whole
    16-byte vectors (the few elements outside the row stay out of the sum),
    whole vectors inside the row are stored as vectors, and the row's partial
    first and last vectors element by element;
  * looped (wider rows): the second pass re-reads the freshly written
    new_residual.
"""

import collections

import torch
import triton
import triton.language as tl

# Tunable knobs: module-level constants the offline tuner rewrites.
# Rows path: 2 rows of 768 (padded to 1024) on 4 warps, the H200 sweep's best (run 4a:
# geomean 1.017x the 8192 x 8-warp default over 8192x768, 4096x4096 and 16384x4096 bf16).
ROW_BLOCK_ELEMS = 2048  # elements each program holds (rows x padded row width)
NUM_WARPS = 4
MAX_FUSED_N = 16384  # widest (aligned) row the rows path takes
RESIDENT_MAX_KB = 128  # widest row, alignment slack included, held in registers by one program
RESIDENT_PART_KB = 32  # a resident row is held as up to four parts of this size plus a tail
RESIDENT_BYTES_PER_THREAD = 128  # resident path warps = row bytes / this / 32, within 4..32
LOOP_BLOCK_N = 2048  # chunk width of the looped path
LOOP_NUM_WARPS = 8
LOOP_NUM_STAGES = 1  # software-pipelined chunks of the looped path (1: none; more: cp.async prefetch into shared memory)
LOOP_PASS2_REVERSED = 1  # the looped path's second pass walks the row backwards (1) or forwards (0)


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


# ---- resident path: c counts elements from the row's 16-byte-aligned base; the row is
# ---- c in [shift, shift + N), so its weight index is c - shift.

@triton.jit
def _load_part(X, base, start, n_vec, VEC: tl.constexpr, SIZE: tl.constexpr):
    """SIZE elements from X + base + start as whole VEC-element vectors; vectors past the row's last are masked."""
    c = start + tl.arange(0, SIZE)
    return tl.load(X + _vec_offs(base, c, VEC, SIZE), mask=c // VEC < n_vec, other=0.0, eviction_policy="evict_first")


@triton.jit
def _add_part(X, R, RO, base, start, n_vec, first, last, VEC: tl.constexpr, SIZE: tl.constexpr):
    """new_residual for this part, its whole vectors [first, last) stored; returned for the norm."""
    h = (_load_part(X, base, start, n_vec, VEC, SIZE).to(tl.float32)
         + _load_part(R, base, start, n_vec, VEC, SIZE).to(tl.float32)).to(RO.dtype.element_ty)
    c = start + tl.arange(0, SIZE)
    v = c // VEC
    tl.store(RO + _vec_offs(base, c, VEC, SIZE), h, mask=(v >= first) & (v < last))
    return h


@triton.jit
def _part_sum_sq(h, start, shift, N, SIZE: tl.constexpr):
    c = start + tl.arange(0, SIZE)
    hf = tl.where((c >= shift) & (c < shift + N), h.to(tl.float32), 0.0)  # a select: neighbours' values never enter
    return tl.sum(hf * hf, axis=0)


@triton.jit
def _norm_part(W, Y, h, base, start, shift, first, last, rstd, VEC: tl.constexpr, SIZE: tl.constexpr):
    """out for the whole vectors [first, last) of the row within this part, stored as vectors."""
    c = start + tl.arange(0, SIZE)
    v = c // VEC
    body = (v >= first) & (v < last)
    w = tl.load(W + (c - shift), mask=body, other=0.0).to(tl.float32)
    tl.store(Y + _vec_offs(base, c, VEC, SIZE), (h.to(tl.float32) * rstd * w).to(Y.dtype.element_ty), mask=body)


@triton.jit
def _store_edge(X, R, W, Y, RO, base, lo, hi, shift, rstd, VEC: tl.constexpr):
    """Elements [lo, hi) (within one vector) of both outputs, recomputed from a reload, stored one by one."""
    c = (lo // VEC) * VEC + tl.arange(0, VEC)
    mask = (c >= lo) & (c < hi)
    x = tl.load(X + base + c, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(R + base + c, mask=mask, other=0.0).to(tl.float32)
    h = (x + r).to(RO.dtype.element_ty)
    tl.store(RO + base + c, h, mask=mask)
    w = tl.load(W + (c - shift), mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + base + c, (h.to(tl.float32) * rstd * w).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _add_rmsnorm_resident(X, R, W, Y, RO, N, stride, eps, PART: tl.constexpr, PARTS: tl.constexpr,
                          TAIL: tl.constexpr, VEC: tl.constexpr, SHIFTED: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    # The four [M, N] tensors share the row stride and are 16-byte aligned (kernel_fn); when the
    # stride is a whole number of vectors every row starts on a boundary, and the weight loads as vectors.
    if SHIFTED:
        shift = (row * stride) % VEC
    else:
        shift = 0
    base = row * stride - shift
    n_vec = (shift + N + VEC - 1) // VEC
    first = (shift + VEC - 1) // VEC  # the row's first whole vector
    last = (shift + N) // VEC  # one past its last whole vector
    if PARTS >= 1:
        h0 = _add_part(X, R, RO, base, 0, n_vec, first, last, VEC, PART)
    if PARTS >= 2:
        h1 = _add_part(X, R, RO, base, PART, n_vec, first, last, VEC, PART)
    if PARTS >= 3:
        h2 = _add_part(X, R, RO, base, 2 * PART, n_vec, first, last, VEC, PART)
    if PARTS >= 4:
        h3 = _add_part(X, R, RO, base, 3 * PART, n_vec, first, last, VEC, PART)
    if TAIL > 0:
        ht = _add_part(X, R, RO, base, PARTS * PART, n_vec, first, last, VEC, TAIL)
    acc = 0.0
    if PARTS >= 1:
        acc += _part_sum_sq(h0, 0, shift, N, PART)
    if PARTS >= 2:
        acc += _part_sum_sq(h1, PART, shift, N, PART)
    if PARTS >= 3:
        acc += _part_sum_sq(h2, 2 * PART, shift, N, PART)
    if PARTS >= 4:
        acc += _part_sum_sq(h3, 3 * PART, shift, N, PART)
    if TAIL > 0:
        acc += _part_sum_sq(ht, PARTS * PART, shift, N, TAIL)
    rstd = 1.0 / tl.sqrt(acc / N + eps)
    if PARTS >= 1:
        _norm_part(W, Y, h0, base, 0, shift, first, last, rstd, VEC, PART)
    if PARTS >= 2:
        _norm_part(W, Y, h1, base, PART, shift, first, last, rstd, VEC, PART)
    if PARTS >= 3:
        _norm_part(W, Y, h2, base, 2 * PART, shift, first, last, rstd, VEC, PART)
    if PARTS >= 4:
        _norm_part(W, Y, h3, base, 3 * PART, shift, first, last, rstd, VEC, PART)
    if TAIL > 0:
        _norm_part(W, Y, ht, base, PARTS * PART, shift, first, last, rstd, VEC, TAIL)
    _store_edge(X, R, W, Y, RO, base, shift, tl.minimum(first * VEC, shift + N), shift, rstd, VEC)
    _store_edge(X, R, W, Y, RO, base, tl.maximum(last, first) * VEC, shift + N, shift, rstd, VEC)


# ---- looped path

@triton.jit
def _vec_offs(base, cols, VEC: tl.constexpr, BLOCK_N: tl.constexpr):
    """Offsets of whole 16-byte vectors from an aligned base: aligned and contiguous (both paths)."""
    return tl.max_contiguous(tl.multiple_of(base + cols, VEC), BLOCK_N)


@triton.jit
def _add_piece(X, R, RO, x_offs, r_offs, ro_offs, mask):
    """One masked piece of a row (its unaligned head or its tail): store x + r, return its square."""
    x = tl.load(X + x_offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(R + r_offs, mask=mask, other=0.0).to(tl.float32)
    h = (x + r).to(RO.dtype.element_ty)
    tl.store(RO + ro_offs, h, mask=mask, eviction_policy="evict_last")  # re-read below
    hf = h.to(tl.float32)
    return hf * hf


@triton.jit
def _norm_piece(RO, W, Y, ro_offs, y_offs, cols, mask, rstd):
    h = tl.load(RO + ro_offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + y_offs, (h * rstd * w).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _pass2_start(i, n_body, BLOCK_N: tl.constexpr, REVERSED: tl.constexpr):
    """Chunk start of the second pass's i-th step. Reversed, it first re-reads the chunks the
    first pass read last, the likeliest still in L2: when the rows in flight overflow L2, a
    forward re-read misses on nearly every chunk (LRU evicts each just before it is needed)."""
    start = i
    if REVERSED:
        start = n_body - BLOCK_N - i
    return start


@triton.jit
def _add_rmsnorm_looped(X, R, W, Y, RO, N, stride_x, stride_r, stride_y, stride_ro, eps,
                        BLOCK_N: tl.constexpr, VEC: tl.constexpr, NUM_STAGES: tl.constexpr,
                        REVERSED: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_off = row * stride_x
    r_off = row * stride_r
    y_off = row * stride_y
    ro_off = row * stride_ro
    # A row of odd width starts anywhere. Its first `head` elements (< VEC) take it to a
    # 16-byte boundary; from there whole chunks of x, residual and both outputs move unmasked,
    # as 16-byte vectors (VEC elements) instead of one element per instruction, then a masked
    # tail. The four share the row stride and are 16-byte aligned (checked by kernel_fn), so one
    # head serves all; VEC = 1 when they are not. (weight stays scalar: its chunks start off-boundary.)
    head = tl.minimum((VEC - x_off % VEC) % VEC, N)
    n_body = ((N - head) // BLOCK_N) * BLOCK_N
    ar = tl.arange(0, BLOCK_N)
    hmask = ar < head
    tcols = head + n_body + ar
    tmask = tcols < N
    acc = _add_piece(X, R, RO, x_off + ar, r_off + ar, ro_off + ar, hmask)
    for start in tl.range(0, n_body, BLOCK_N, num_stages=NUM_STAGES):
        cols = head + start + ar
        x = tl.load(X + _vec_offs(x_off, cols, VEC, BLOCK_N)).to(tl.float32)
        r = tl.load(R + _vec_offs(r_off, cols, VEC, BLOCK_N)).to(tl.float32)
        h = (x + r).to(RO.dtype.element_ty)
        tl.store(RO + _vec_offs(ro_off, cols, VEC, BLOCK_N), h, eviction_policy="evict_last")  # re-read below
        hf = h.to(tl.float32)
        acc += hf * hf
    acc += _add_piece(X, R, RO, x_off + tcols, r_off + tcols, ro_off + tcols, tmask)
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    tl.debug_barrier()  # make this program's new_residual stores visible to all its threads
    _norm_piece(RO, W, Y, ro_off + ar, y_off + ar, ar, hmask, rstd)
    for i in tl.range(0, n_body, BLOCK_N, num_stages=NUM_STAGES):
        cols = head + _pass2_start(i, n_body, BLOCK_N, REVERSED) + ar
        h = tl.load(RO + _vec_offs(ro_off, cols, VEC, BLOCK_N), eviction_policy="evict_first").to(tl.float32)
        w = tl.load(W + cols).to(tl.float32)
        tl.store(Y + _vec_offs(y_off, cols, VEC, BLOCK_N), (h * rstd * w).to(Y.dtype.element_ty))
    _norm_piece(RO, W, Y, ro_off + tcols, y_off + tcols, tcols, tmask, rstd)


# Launch plans, decided once per input signature: (shapes, strides, dtype, 16-byte alignment) -> _Plan.
# A call is a key, one dict lookup, two allocations and one launch; the plan is computed from the knobs above.
_PLANS: dict = {}
# direct_x, direct_r: the input's [M, N] rows are a view of it (launch on it); otherwise each call packs them
# made_under: the _knobs() it was computed under (see _knobs)
_Plan = collections.namedtuple("_Plan", "made_under launch grid args meta direct_x direct_r")


def _rows_of(t: torch.Tensor, n: int):
    """t as [M, N] rows with a packed last dim, and whether that is a view of t itself."""
    t2 = t.reshape(-1, n)
    if t2.stride(-1) != 1:
        t2 = t2.contiguous()
    return t2, t2.data_ptr() == t.data_ptr() and t.numel() > 0


def _knobs() -> tuple:
    """Everything a plan is computed from besides the inputs: the knobs and the kernels it binds. A plan
    made under other values (a knob set in place, as knob_sweep.py and the tests do) is made again."""
    return (
        ROW_BLOCK_ELEMS, NUM_WARPS, MAX_FUSED_N, RESIDENT_MAX_KB, RESIDENT_PART_KB, RESIDENT_BYTES_PER_THREAD,
        LOOP_BLOCK_N, LOOP_NUM_WARPS, LOOP_NUM_STAGES, LOOP_PASS2_REVERSED, _add_rmsnorm_rows,
        _add_rmsnorm_resident, _add_rmsnorm_looped,
    )


def _plan(x: torch.Tensor, residual: torch.Tensor, made_under: tuple):
    n = x.shape[-1]
    x2, direct_x = _rows_of(x, n)
    r2, direct_r = _rows_of(residual, n)
    m = x2.shape[0]
    # like every call's outputs: fresh, packed, aligned
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    new_residual = torch.empty((m, n), dtype=x.dtype, device=x.device)
    vec = _vector_width(x2, r2, y, new_residual)
    resident = _resident_layout(n, vec, x2.stride(0), x.element_size())
    strides = (x2.stride(0), r2.stride(0), y.stride(0), new_residual.stride(0))
    if n <= MAX_FUSED_N and (_rows_aligned(n, x2, r2, y, new_residual) or resident is None):
        block_n = triton.next_power_of_2(n)
        block_m = max(1, min(ROW_BLOCK_ELEMS // block_n, triton.next_power_of_2(m)))
        grid = (triton.cdiv(m, block_m),)
        return _Plan(made_under, _add_rmsnorm_rows[grid], grid, (m, n, *strides),
                     dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=NUM_WARPS), direct_x, direct_r)
    grid = (m,)
    if resident is not None and vec > 1:  # one shared stride (vec > 1 says so)
        part, parts, tail, warps = resident
        return _Plan(made_under, _add_rmsnorm_resident[grid], grid, (n, x2.stride(0)),
                     dict(PART=part, PARTS=parts, TAIL=tail, VEC=vec, SHIFTED=x2.stride(0) % vec != 0,
                          num_warps=warps), direct_x, direct_r)
    return _Plan(made_under, _add_rmsnorm_looped[grid], grid, (n, *strides),
                 dict(BLOCK_N=LOOP_BLOCK_N, VEC=vec, NUM_STAGES=LOOP_NUM_STAGES, REVERSED=LOOP_PASS2_REVERSED,
                      num_warps=LOOP_NUM_WARPS), direct_x, direct_r)


def kernel_fn(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float):
    key = (x.shape, x.stride(), residual.shape, residual.stride(), x.dtype,
           x.data_ptr() % 16 == 0, residual.data_ptr() % 16 == 0)
    knobs = _knobs()
    p = _PLANS.get(key)
    if p is None or p.made_under != knobs:
        p = _PLANS[key] = _plan(x, residual, knobs)
    n = x.shape[-1]
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    new_residual = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    p.launch(x if p.direct_x else x.reshape(-1, n).contiguous(),
             residual if p.direct_r else residual.reshape(-1, n).contiguous(),
             weight, y, new_residual, *p.args, eps, **p.meta)
    return y, new_residual


def _vector_width(*rows: torch.Tensor) -> int:
    """Elements per 16-byte vector when these [M, N] tensors can share one alignment head, else 1."""
    if len({t.stride(0) for t in rows}) == 1 and all(t.data_ptr() % 16 == 0 for t in rows):
        return 16 // rows[0].element_size()
    return 1


def _rows_aligned(n: int, *rows: torch.Tensor) -> bool:
    """Triton specialises integers divisible by 16: then the rows path's loads are vectors."""
    return n % 16 == 0 and all(t.stride(0) % 16 == 0 and t.data_ptr() % 16 == 0 for t in rows)


def _resident_layout(n: int, vec: int, stride: int, elem_size: int):
    """(part, parts, tail, warps) holding an n-wide row in registers, or None when it does not fit."""
    need = n + (vec - 1 if stride % vec else 0)  # room for the row's shift past its aligned base
    part = RESIDENT_PART_KB * 1024 // elem_size
    parts, rest = divmod(need, part)
    if need * elem_size > RESIDENT_MAX_KB * 1024 or parts > 4 or (parts == 4 and rest):
        return None
    tail = triton.next_power_of_2(rest) if rest else 0
    row_bytes = (parts * part + tail) * elem_size
    warps = min(32, max(4, triton.next_power_of_2(max(1, row_bytes // (32 * RESIDENT_BYTES_PER_THREAD)))))
    return part, parts, tail, warps
