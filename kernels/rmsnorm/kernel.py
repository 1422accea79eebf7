"""RMSNorm in Triton: the one file an agent edits.

Three paths, by row width:
  * rows: several short rows per program (so small hidden sizes still keep
    enough bytes in flight), for widths Triton can prove 16-byte aligned;
    rows that are a multiple of ROWS_CHUNK_N wide are walked in chunks, twice (the second from L2);
  * resident: one program per row holds the whole row in registers, in the
    input dtype (up to RESIDENT_MAX_KB), so x is read from memory exactly once.
    A row of odd width starts anywhere, so the program loads from the 16-byte
    boundary at or before the row's start: every load moves whole 16-byte
    vectors (the few elements outside the row stay out of the sums), whole
    vectors inside the row are stored as vectors, and the row's partial first
    and last vectors element by element;
  * looped: wider rows in two passes over chunks (sum of squares, then write).
"""

import collections

import torch
import triton
import triton.language as tl

# Tunable knobs: module-level constants the offline tuner rewrites.
# 2048 x 4 warps: 1.013x the geomean of 8192 x 8 over all shapes, bf16 and fp32 (H200, run 6h sweep)
ROW_BLOCK_ELEMS = 2048  # elements each program holds (rows x padded row width)
NUM_WARPS = 4  # per ROW_BLOCK_ELEMS of a program's rows: a row wider than that gets proportionally more
MAX_FUSED_N = 16384  # widest (aligned) row the rows path takes
# Chunks of 4096 x 16 warps: 16384x8192 bf16 126.3 vs 128.9 us held, fp32 254.6 vs 258.6, the only shape they
# touch (run 6j sweep; 2% in runs 6h and 6i too). Under the 1% geomean bar the sweep applies by, so set by hand.
ROWS_CHUNK_N = 4096  # rows path: rows that are whole multiples of this are walked in chunks of it, twice (0: held)
CHUNK_NUM_WARPS = 16  # warps of a chunked rows program
# 32-bit offsets: neutral (run 6i sweeps: layernorm 32768x768 bf16 27.1 vs 28.0 us, not reproduced by run 6j's
# side by side, 27.9), one register less; Inductor indexes these shapes in 32 bits too
ROWS_INT32 = 1  # rows paths: 32-bit element offsets when every offset fits (1), else always 64-bit (0)
# Rows held in registers: up to 32 KB; wider ones loop, measured faster (H200, run 4b: 1024x50257 bf16 79 vs 93 us).
RESIDENT_MAX_KB = 32  # widest row, alignment slack included, held in registers
RESIDENT_PART_KB = 32  # a resident row is held as up to four parts of this size plus a tail
RESIDENT_BYTES_PER_THREAD = 128  # resident path warps = row bytes / this / 32, within 4..32
LOOP_BLOCK_N = 4096  # chunk width of the looped path
LOOP_NUM_WARPS = 8
LOOP_NUM_STAGES = 1  # software-pipelined chunks of the looped path (1: none; more: cp.async prefetch into shared memory)
LOOP_PASS2_REVERSED = 1  # the looped path's second pass walks the row backwards (1) or forwards (0)


@triton.jit
def _row_index(BLOCK_M: tl.constexpr, INT32: tl.constexpr):
    """This program's row numbers; 64-bit unless the caller proved every element offset fits 32 bits."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    if not INT32:
        rows = rows.to(tl.int64)
    return rows


@triton.jit
def _rmsnorm_rows(X, W, Y, M, N, stride_x, stride_y, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  INT32: tl.constexpr):
    rows = _row_index(BLOCK_M, INT32)
    cols = tl.arange(0, BLOCK_N)
    rmask = rows < M
    cmask = cols < N
    mask = rmask[:, None] & cmask[None, :]
    # No evict-first on x though it is read once: 5 of 8 cases slower, by up to 8% (16384x8192 bf16
    # 137.8 vs 130.0 us), one 2% faster (6001x5120 bf16); geomean 0.98x (H200, run 6i).
    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / N + eps)
    w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
    y = x * rstd[:, None] * w[None, :]
    tl.store(Y + rows[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _rmsnorm_rows_chunked(X, W, Y, M, N, stride_x, stride_y, eps,
                          BLOCK_M: tl.constexpr, CHUNK_N: tl.constexpr, INT32: tl.constexpr):
    """The rows path for wide aligned rows, holding only a chunk in registers (as Inductor's kernel
    does): pass 1 sums squares, pass 2 re-reads x from L2 (only the programs' own rows are in flight)."""
    rows = _row_index(BLOCK_M, INT32)
    rmask = rows < M
    x_rows = X + rows[:, None] * stride_x
    acc = tl.zeros([BLOCK_M, CHUNK_N], dtype=tl.float32)
    for start in tl.range(0, N, CHUNK_N):
        cols = start + tl.arange(0, CHUNK_N)
        mask = rmask[:, None] & (cols < N)[None, :]
        x = tl.load(x_rows + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=1) / N + eps)
    y_rows = Y + rows[:, None] * stride_y
    for start in tl.range(0, N, CHUNK_N):
        cols = start + tl.arange(0, CHUNK_N)
        cmask = cols < N
        mask = rmask[:, None] & cmask[None, :]
        x = tl.load(x_rows + cols[None, :], mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        w = tl.load(W + cols, mask=cmask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        tl.store(y_rows + cols[None, :], (x * rstd[:, None] * w[None, :]).to(Y.dtype.element_ty), mask=mask)


# ---- resident path: c counts elements from the row's 16-byte-aligned base; the row is
# ---- c in [shift, shift + N), so its weight index is c - shift.

@triton.jit
def _load_part(X, base, start, n_vec, VEC: tl.constexpr, SIZE: tl.constexpr):
    """SIZE elements from X + base + start as whole VEC-element vectors; vectors past the row's last are masked."""
    c = start + tl.arange(0, SIZE)
    offs = tl.max_contiguous(tl.multiple_of(base + c, VEC), SIZE)
    return tl.load(X + offs, mask=c // VEC < n_vec, other=0.0, eviction_policy="evict_first")


@triton.jit
def _part_sum_sq(x, start, shift, N, SIZE: tl.constexpr):
    c = start + tl.arange(0, SIZE)
    xf = tl.where((c >= shift) & (c < shift + N), x.to(tl.float32), 0.0)  # a select: neighbours' values never enter
    return tl.sum(xf * xf, axis=0)


@triton.jit
def _store_part(W, Y, x, y_base, start, shift, first, last, rstd, VEC: tl.constexpr, SIZE: tl.constexpr):
    """y for the whole vectors [first, last) of the row within this part, stored as vectors."""
    c = start + tl.arange(0, SIZE)
    v = c // VEC
    body = (v >= first) & (v < last)
    w = tl.load(W + (c - shift), mask=body, other=0.0).to(tl.float32)
    offs = tl.max_contiguous(tl.multiple_of(y_base + c, VEC), SIZE)
    tl.store(Y + offs, (x.to(tl.float32) * rstd * w).to(Y.dtype.element_ty), mask=body)


@triton.jit
def _store_edge(X, W, Y, x_base, y_base, lo, hi, shift, rstd, VEC: tl.constexpr):
    """Elements [lo, hi) (within one vector) recomputed from a reload and stored one by one."""
    c = (lo // VEC) * VEC + tl.arange(0, VEC)
    _rmsnorm_write(X, W, Y, x_base + c, y_base + c, c - shift, (c >= lo) & (c < hi), rstd)


@triton.jit
def _rmsnorm_resident(X, W, Y, N, stride_x, stride_y, eps, PART: tl.constexpr, PARTS: tl.constexpr,
                      TAIL: tl.constexpr, VEC: tl.constexpr, SHIFTED: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    # x and y share the row stride and are 16-byte aligned (kernel_fn); when the stride is a
    # whole number of vectors every row starts on a boundary, and the weight loads are vectors too.
    if SHIFTED:
        shift = (row * stride_x) % VEC
    else:
        shift = 0
    x_base = row * stride_x - shift
    y_base = row * stride_y - shift
    n_vec = (shift + N + VEC - 1) // VEC
    # Every load is issued before the first sum, so the whole row is in flight at once.
    if PARTS >= 1:
        x0 = _load_part(X, x_base, 0, n_vec, VEC, PART)
    if PARTS >= 2:
        x1 = _load_part(X, x_base, PART, n_vec, VEC, PART)
    if PARTS >= 3:
        x2 = _load_part(X, x_base, 2 * PART, n_vec, VEC, PART)
    if PARTS >= 4:
        x3 = _load_part(X, x_base, 3 * PART, n_vec, VEC, PART)
    if TAIL > 0:
        xt = _load_part(X, x_base, PARTS * PART, n_vec, VEC, TAIL)
    acc = 0.0
    if PARTS >= 1:
        acc += _part_sum_sq(x0, 0, shift, N, PART)
    if PARTS >= 2:
        acc += _part_sum_sq(x1, PART, shift, N, PART)
    if PARTS >= 3:
        acc += _part_sum_sq(x2, 2 * PART, shift, N, PART)
    if PARTS >= 4:
        acc += _part_sum_sq(x3, 3 * PART, shift, N, PART)
    if TAIL > 0:
        acc += _part_sum_sq(xt, PARTS * PART, shift, N, TAIL)
    rstd = 1.0 / tl.sqrt(acc / N + eps)
    first = (shift + VEC - 1) // VEC  # the row's first whole vector
    last = (shift + N) // VEC  # one past its last whole vector
    if PARTS >= 1:
        _store_part(W, Y, x0, y_base, 0, shift, first, last, rstd, VEC, PART)
    if PARTS >= 2:
        _store_part(W, Y, x1, y_base, PART, shift, first, last, rstd, VEC, PART)
    if PARTS >= 3:
        _store_part(W, Y, x2, y_base, 2 * PART, shift, first, last, rstd, VEC, PART)
    if PARTS >= 4:
        _store_part(W, Y, x3, y_base, 3 * PART, shift, first, last, rstd, VEC, PART)
    if TAIL > 0:
        _store_part(W, Y, xt, y_base, PARTS * PART, shift, first, last, rstd, VEC, TAIL)
    _store_edge(X, W, Y, x_base, y_base, shift, tl.minimum(first * VEC, shift + N), shift, rstd, VEC)
    _store_edge(X, W, Y, x_base, y_base, tl.maximum(last, first) * VEC, shift + N, shift, rstd, VEC)


# ---- looped path

@triton.jit
def _rmsnorm_write(X, W, Y, x_offs, y_offs, cols, mask, rstd):
    """One masked piece of a row (an unaligned head or a tail): y = x * rstd * w."""
    x = tl.load(X + x_offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + y_offs, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)


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
def _rmsnorm_looped(X, W, Y, N, stride_x, stride_y, eps, BLOCK_N: tl.constexpr, VEC: tl.constexpr,
                    NUM_STAGES: tl.constexpr, REVERSED: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_off = row * stride_x
    y_off = row * stride_y
    # A row of odd width starts anywhere. Its first `head` elements (< VEC) take it to a
    # 16-byte boundary; from there whole chunks of x and y move unmasked, as 16-byte vectors
    # (VEC elements) instead of one element per instruction, then a masked tail. x and y
    # share the row stride and are both 16-byte aligned (checked by kernel_fn), so one head
    # serves both; VEC = 1 when they are not. (weight stays scalar: its chunks start off-boundary.)
    head = tl.minimum((VEC - x_off % VEC) % VEC, N)
    n_body = ((N - head) // BLOCK_N) * BLOCK_N
    ar = tl.arange(0, BLOCK_N)
    hmask = ar < head
    tcols = head + n_body + ar
    tmask = tcols < N
    xh = tl.load(X + x_off + ar, mask=hmask, other=0.0).to(tl.float32)
    xt = tl.load(X + x_off + tcols, mask=tmask, other=0.0).to(tl.float32)
    acc = xh * xh + xt * xt
    for start in tl.range(0, n_body, BLOCK_N, num_stages=NUM_STAGES):
        offs = tl.max_contiguous(tl.multiple_of(x_off + head + start + ar, VEC), BLOCK_N)
        xb = tl.load(X + offs, eviction_policy="evict_last").to(tl.float32)  # kept in L2 for pass 2
        acc += xb * xb
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    _rmsnorm_write(X, W, Y, x_off + ar, y_off + ar, ar, hmask, rstd)
    for i in tl.range(0, n_body, BLOCK_N, num_stages=NUM_STAGES):
        cols = head + _pass2_start(i, n_body, BLOCK_N, REVERSED) + ar
        offs_x = tl.max_contiguous(tl.multiple_of(x_off + cols, VEC), BLOCK_N)
        offs_y = tl.max_contiguous(tl.multiple_of(y_off + cols, VEC), BLOCK_N)
        xb = tl.load(X + offs_x, eviction_policy="evict_first").to(tl.float32)
        w = tl.load(W + cols).to(tl.float32)
        tl.store(Y + offs_y, (xb * rstd * w).to(Y.dtype.element_ty))
    _rmsnorm_write(X, W, Y, x_off + tcols, y_off + tcols, tcols, tmask, rstd)


# Launch plans, decided once per input signature: (shape, strides, dtype, 16-byte alignment) -> _Plan.
# A call is a key, one dict lookup, one allocation and one launch; the plan is computed from the knobs above.
_PLANS: dict = {}
# direct: x's [M, N] rows are a view of x itself (launch on x); otherwise each call packs them first
# made_under: the _knobs() it was computed under (see _knobs)
_Plan = collections.namedtuple("_Plan", "made_under launch grid args meta direct")


def _knobs() -> tuple:
    """Everything a plan is computed from besides the inputs: the knobs and the kernels it binds. A plan
    made under other values (a knob set in place, as knob_sweep.py and the tests do) is made again."""
    return (
        ROW_BLOCK_ELEMS, NUM_WARPS, MAX_FUSED_N, ROWS_CHUNK_N, CHUNK_NUM_WARPS, ROWS_INT32, RESIDENT_MAX_KB,
        RESIDENT_PART_KB, RESIDENT_BYTES_PER_THREAD, LOOP_BLOCK_N, LOOP_NUM_WARPS, LOOP_NUM_STAGES,
        LOOP_PASS2_REVERSED, _rmsnorm_rows, _rmsnorm_rows_chunked, _rmsnorm_resident, _rmsnorm_looped,
    )


def _plan(x: torch.Tensor, made_under: tuple):
    n = x.shape[-1]
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    direct = x2.data_ptr() == x.data_ptr() and x.numel() > 0
    m = x2.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)  # like every call's output: fresh, packed, aligned
    vec = _vector_width(x2, y)
    resident = _resident_layout(n, vec, x2.stride(0), x.element_size())
    strides = (x2.stride(0), y.stride(0))
    if n <= MAX_FUSED_N and (_rows_aligned(n, x2, y) or resident is None):
        block_n = triton.next_power_of_2(n)
        block_m = max(1, min(ROW_BLOCK_ELEMS // block_n, triton.next_power_of_2(m)))
        grid = (triton.cdiv(m, block_m),)
        int32 = bool(ROWS_INT32) and _offsets_fit_int32(grid[0] * block_m, n, x2, y)
        if 0 < ROWS_CHUNK_N < n and n % ROWS_CHUNK_N == 0:  # only where chunks tile the row: 6001x5120 in
            # chunks of 4096 (masked three quarters of its second) ran 39.0 us against 34.6 held (run 6h)
            return _Plan(made_under, _rmsnorm_rows_chunked[grid], grid, (m, n, *strides),
                         dict(BLOCK_M=block_m, CHUNK_N=ROWS_CHUNK_N, INT32=int32, num_warps=CHUNK_NUM_WARPS), direct)
        warps = min(32, NUM_WARPS * max(1, block_n // ROW_BLOCK_ELEMS))
        return _Plan(made_under, _rmsnorm_rows[grid], grid, (m, n, *strides),
                     dict(BLOCK_M=block_m, BLOCK_N=block_n, INT32=int32, num_warps=warps), direct)
    grid = (m,)
    if resident is not None:
        part, parts, tail, warps = resident
        return _Plan(made_under, _rmsnorm_resident[grid], grid, (n, *strides),
                     dict(PART=part, PARTS=parts, TAIL=tail, VEC=vec, SHIFTED=x2.stride(0) % vec != 0,
                          num_warps=warps), direct)
    return _Plan(made_under, _rmsnorm_looped[grid], grid, (n, *strides),
                 dict(BLOCK_N=LOOP_BLOCK_N, VEC=vec, NUM_STAGES=LOOP_NUM_STAGES, REVERSED=LOOP_PASS2_REVERSED,
                      num_warps=LOOP_NUM_WARPS), direct)


def kernel_fn(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    key = (x.shape, x.stride(), x.dtype, x.data_ptr() % 16 == 0)
    knobs = _knobs()
    p = _PLANS.get(key)
    if p is None or p.made_under != knobs:
        p = _PLANS[key] = _plan(x, knobs)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    p.launch(x if p.direct else x.reshape(-1, x.shape[-1]).contiguous(), weight, y, *p.args, eps, **p.meta)
    return y


def _vector_width(*rows: torch.Tensor) -> int:
    """Elements per 16-byte vector when these [M, N] tensors can share one alignment head, else 1."""
    if len({t.stride(0) for t in rows}) == 1 and all(t.data_ptr() % 16 == 0 for t in rows):
        return 16 // rows[0].element_size()
    return 1


def _offsets_fit_int32(rows: int, n: int, *tensors: torch.Tensor) -> bool:
    """Every element offset the rows programs form (rows of them, padded ones included: masked, but
    computed) fits int32: the largest is (rows - 1) * stride + next_power_of_2(n) - 1."""
    return all((rows - 1) * t.stride(0) + triton.next_power_of_2(n) - 1 < 2**31 for t in tensors)


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
