"""LayerNorm backward in Triton: the one file an agent edits.

kernel_fn(x, weight, bias, eps, grad_out) -> (grad_x, grad_weight, grad_bias). A backward task
gets the forward's inputs, not its saved statistics, so each row's mean and rstd are
recomputed in fp32 from x (sums over a row already in registers; no extra memory traffic):

    xhat = (x - mean) * rstd,   g = dy * w
    c1 = sum(g * xhat) / N,   c2 = sum(g) / N                    (per row)
    dx = rstd * (g - xhat * c1 - c2)
    dw = sum over rows of dy * xhat,   db = sum over rows of dy    (per column)

dw and db without atomics (deterministic, bit for bit): each program of the main kernel owns a
contiguous block of rows, sums their dy * xhat and dy in fp32, and writes one row of each of
two fp32 [programs, N] partial buffers; a second small kernel sums both buffers' columns. The
grid is sized to the GPU (PROGRAMS_PER_SM programs per SM). Two main paths, by row width:
  * rows (N <= MAX_FUSED_N): BLOCK_M rows at a time in registers (x and dy read once, dx
    written once); mean, then the variance of the centred values (never E[x^2] - E[x]^2,
    which cancels when rows sit far from zero); dw and db accumulate in registers;
  * looped (wider rows): one row at a time in chunks of LOOP_BLOCK_N. Pass 1 sums
    deviations d = x - shift from the first chunk's mean (small even for rows far from
    zero, as the forward does): sum d, sum d^2, sum g, sum g * d, which give mean, rstd and
    sum(g * xhat) = rstd * (sum(g * d) - mean_d * sum(g)); pass 2 re-reads the row's chunks
    (from L2, last-read first) and writes dx. A wide row's dw and db do not fit in registers:
    they accumulate in the program's own rows of the partial buffers (read-modify-write of
    L2-resident lines by the same program: still deterministic);
  * split (wider rows, WIDE_SPLIT = 1, the default): the looped path's partials are a row of N per
    program, read and written for every row it owns (run 18, H100, 1024 x 50257: 528 programs'
    212 MB of partials for 309 MB of data, 14% of roofline, 0.43x torch.compile). Here one program
    per row takes the row's statistics (pass 1 above: mean, rstd, c1, c2 to a [M, 4] buffer), then
    a grid of (column tile, row group) programs writes dx and sums dw, db over its group's rows in
    registers: partials are a row of N per row group (a few), and x, dy are read twice (5/3 of the
    minimum traffic; H200, run 25: 25% of roofline, 0.94x torch.compile, its loads element by
    element: an odd width's rows start off 16-byte boundaries). With WIDE_ALIGN = 1 both kernels
    read each row from its aligned base: the rows r, r + VEC, ... share one shift, so a program takes
    its group's rows one shift class at a time, as 16-byte vectors, with dw and db partial rows per
    class (H100 run 26 at wide: 7% faster in bf16, 13% in fp32, 3% slower in fp16).
Launch parameters are decided once per (shape, dtype, device) and cached: a call costs a
dict lookup, four allocations and two launches (five and three on the split path).
Levers left: 16-byte alignment on the rows path for odd widths, evict hints, a resident path
between the rows and looped paths.
"""

import torch
import triton
import triton.language as tl

# Tunable knobs: module-level constants the offline tuner rewrites.
ROW_BLOCK_ELEMS = 2048  # rows path: elements a program holds per step (rows x padded row width)
NUM_WARPS = 2  # rows path: warps per ROW_BLOCK_ELEMS; a row wider than that gets proportionally more (run 27's
# tuner, H100 fp16: 4 -> 2 a confirmed 1.030x keep)
# Rows path: each program's next row block prefetched by async copies while it computes this one, in up to
# ROWS_STAGES - 1 shared-memory copies (as many as fit: _rows_stages). H100, run 24 (knob_sweep at
# gpt2-small-b32, odd and large, every dtype): 3 over 1 took 16-bit 81 -> 65, 137 -> 109 and 392 -> 299 us,
# fp32 118 -> 111, 178 -> 147 and 598 -> 570 us; 2 was slower than 1 at odd and large, 4 within 3% of 3.
ROWS_STAGES = 3
MAX_FUSED_N = 16384  # widest row the rows path holds in registers
# Main-kernel programs per SM: more overlap, but more dw partial rows to reduce. H100, run 26 (knob_sweep, bf16 at
# llama7b-layer, odd and llama7b-b4, beside REDUCE_BLOCK_N): 2 best; 4 (the old default) 13% slower geomean.
PROGRAMS_PER_SM = 2
LOOP_BLOCK_N = 4096  # chunk width of the looped path
LOOP_NUM_WARPS = 8
LOOP_PASS2_REVERSED = 1  # the looped path's second pass walks the row backwards (1) or forwards (0)
WIDE_SPLIT = 1  # rows wider than MAX_FUSED_N: the split path (1) or the looped path (0)
SPLIT_TILE_N = 512  # split path: columns per program (1024 x 4 rows took 198 registers at 4 warps, sm_90)
SPLIT_TILE_M = 4  # split path: rows per step
SPLIT_NUM_WARPS = 4
SPLIT_STAGES = 1  # split path: 2+ prefetches each next row tile by async copies (as ROWS_STAGES); not yet timed
# Split path, rows of an odd width: each row starts off a 16-byte boundary, so its loads went element by element
# (LDG.U16). 1: both kernels read each row from its aligned base in 16-byte vectors, rows grouped by their
# shift (the rows r, r + VEC, ... share one), each shift class with its own dw and db partial rows. H100, run 26
# at wide: 1 over 0: 318 vs 309 us fp16, 288 vs 309 bf16, 448 vs 517 fp32 (2.14x vs 2.01x eager geomean).
WIDE_ALIGN = 1
REDUCE_BLOCK_N = 32  # dw reduction: columns per program (run 27's tuner, H100 fp16: 64 -> 32 a confirmed 1.019x keep)
# dw reduction: partial rows summed per step (64 -> 128: 1.18x the whole backward, run 20's tuner, H100 fp16)
REDUCE_BLOCK_P = 128
REDUCE_NUM_WARPS = 4

# The interpreter (CPU) runs programs one after another at a fixed cost each: few, wide ones.
CPU_SMS = 4  # a few main-kernel programs, so the tests still cover several row blocks
_ROWS_SMEM_BYTES = 200 * 1024  # Hopper's 227 KB per block, less room for the reductions' scratch


@triton.jit
def _layernorm_bwd_rows(X, W, DY, DX, DWP, DBP, M, N, stride_x, stride_dy, stride_dx, eps, BLOCKS_PER_PROG,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    cmask = cols < N
    w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
    acc_w = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)  # this program's dw and db, summed once at the end
    acc_b = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    first = pid * BLOCKS_PER_PROG
    for blk in tl.range(first, first + BLOCKS_PER_PROG, num_stages=STAGES):  # STAGES > 1: the next block prefetched
        rows = (blk * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
        mask = (rows < M)[:, None] & cmask[None, :]
        x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=1) / N
        d = tl.where(mask, x - mean[:, None], 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=1) / N + eps)
        xhat = d * rstd[:, None]
        g = dy * w[None, :]
        c1 = tl.sum(g * xhat, axis=1) / N
        c2 = tl.sum(g, axis=1) / N
        dx = (g - xhat * c1[:, None] - c2[:, None]) * rstd[:, None]
        tl.store(DX + rows[:, None] * stride_dx + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
        acc_w += dy * xhat
        acc_b += dy
    base = pid.to(tl.int64) * N
    tl.store(DWP + base + cols, tl.sum(acc_w, axis=0), mask=cmask)
    tl.store(DBP + base + cols, tl.sum(acc_b, axis=0), mask=cmask)


@triton.jit
def _row_statistics(x_row, dy_row, W, N, eps, BLOCK_N: tl.constexpr):
    """One wide row's mean, rstd, c1 = sum(g * xhat) / N and c2 = sum(g) / N, in one pass over its
    chunks (deviations from the first chunk's mean: small even for rows far from zero)."""
    ar = tl.arange(0, BLOCK_N)
    x0 = tl.load(x_row + ar, mask=ar < N, other=0.0).to(tl.float32)
    shift = tl.sum(x0, axis=0) / tl.minimum(N, BLOCK_N)
    s1 = tl.zeros([BLOCK_N], dtype=tl.float32)
    s2 = tl.zeros([BLOCK_N], dtype=tl.float32)
    sg = tl.zeros([BLOCK_N], dtype=tl.float32)
    sgd = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + ar
        m = cols < N
        x = tl.load(x_row + cols, mask=m, other=0.0, eviction_policy="evict_last").to(tl.float32)
        dy = tl.load(dy_row + cols, mask=m, other=0.0, eviction_policy="evict_last").to(tl.float32)
        w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
        d = tl.where(m, x - shift, 0.0)
        g = dy * w
        s1 += d
        s2 += d * d
        sg += g
        sgd += g * d
    return _statistics(shift, s1, s2, sg, sgd, N, eps)


@triton.jit
def _statistics(shift, s1, s2, sg, sgd, N, eps):
    """mean, rstd, c1 = sum(g * xhat) / N and c2 = sum(g) / N from a row's lane sums of d = x - shift,
    d^2, g and g * d."""
    mean_d = tl.sum(s1, axis=0) / N
    var = tl.maximum(tl.sum(s2, axis=0) / N - mean_d * mean_d, 0.0)
    rstd = 1.0 / tl.sqrt(var + eps)
    c2 = tl.sum(sg, axis=0) / N
    c1 = rstd * (tl.sum(sgd, axis=0) / N - mean_d * c2)
    return shift + mean_d, rstd, c1, c2


@triton.jit
def _layernorm_bwd_looped(X, W, DY, DX, DWP, DBP, M, N, stride_x, stride_dy, stride_dx, eps, ROWS_PER_PROG,
                          BLOCK_N: tl.constexpr, REVERSED: tl.constexpr):
    pid = tl.program_id(0)
    ar = tl.arange(0, BLOCK_N)
    dwp = DWP + pid.to(tl.int64) * N
    dbp = DBP + pid.to(tl.int64) * N
    n_chunks = tl.cdiv(N, BLOCK_N)
    row0 = pid * ROWS_PER_PROG
    for i in range(0, tl.minimum(ROWS_PER_PROG, M - row0)):
        row = (row0 + i).to(tl.int64)
        x_row = X + row * stride_x
        dy_row = DY + row * stride_dy
        dx_row = DX + row * stride_dx
        mean, rstd, c1, c2 = _row_statistics(x_row, dy_row, W, N, eps, BLOCK_N)
        for j in range(0, n_chunks):
            chunk = j
            if REVERSED:  # first re-read the chunks pass 1 read last: the likeliest still in L2
                chunk = n_chunks - 1 - j
            cols = chunk * BLOCK_N + ar
            m = cols < N
            x = tl.load(x_row + cols, mask=m, other=0.0, eviction_policy="evict_first").to(tl.float32)
            dy = tl.load(dy_row + cols, mask=m, other=0.0, eviction_policy="evict_first").to(tl.float32)
            w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
            xhat = (x - mean) * rstd
            tl.store(dx_row + cols, ((dy * w - xhat * c1 - c2) * rstd).to(DX.dtype.element_ty), mask=m)
            first = m & (i > 0)  # the program's first row starts the sums
            tl.store(dwp + cols, tl.load(dwp + cols, mask=first, other=0.0) + dy * xhat, mask=m)
            tl.store(dbp + cols, tl.load(dbp + cols, mask=first, other=0.0) + dy, mask=m)


@triton.jit
def _layernorm_bwd_row_stats(X, W, DY, STATS, N, stride_x, stride_dy, eps, BLOCK_N: tl.constexpr):
    """The split path's first kernel: one program per row, [mean, rstd, c1, c2] to STATS[row]."""
    row = tl.program_id(0).to(tl.int64)
    mean, rstd, c1, c2 = _row_statistics(X + row * stride_x, DY + row * stride_dy, W, N, eps, BLOCK_N)
    tl.store(STATS + row * 4, mean)
    tl.store(STATS + row * 4 + 1, rstd)
    tl.store(STATS + row * 4 + 2, c1)
    tl.store(STATS + row * 4 + 3, c2)


@triton.jit
def _layernorm_bwd_split_tiles(X, W, DY, DX, STATS, DWP, DBP, M, N, stride_x, stride_dy, stride_dx, ROWS_PER_GROUP,
                               TILE_M: tl.constexpr, TILE_N: tl.constexpr, STAGES: tl.constexpr):
    """The split path's second kernel: program (t, g) writes dx of column tile t for row group g's
    rows, TILE_M at a time, and that group's dw, db partial sums for the tile (in registers, summed
    in a fixed order: deterministic)."""
    cols = tl.program_id(0) * TILE_N + tl.arange(0, TILE_N)
    group = tl.program_id(1)
    cmask = cols < N
    w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
    acc_w = tl.zeros([TILE_M, TILE_N], dtype=tl.float32)
    acc_b = tl.zeros([TILE_M, TILE_N], dtype=tl.float32)
    row0 = group * ROWS_PER_GROUP
    row_end = tl.minimum(row0 + ROWS_PER_GROUP, M)
    for r in tl.range(row0, row_end, TILE_M, num_stages=STAGES):
        rows = (r + tl.arange(0, TILE_M)).to(tl.int64)
        rmask = rows < row_end
        mask = rmask[:, None] & cmask[None, :]
        x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(STATS + rows * 4, mask=rmask, other=0.0)
        rstd = tl.load(STATS + rows * 4 + 1, mask=rmask, other=0.0)
        c1 = tl.load(STATS + rows * 4 + 2, mask=rmask, other=0.0)
        c2 = tl.load(STATS + rows * 4 + 3, mask=rmask, other=0.0)
        xhat = (x - mean[:, None]) * rstd[:, None]
        dx = (dy * w[None, :] - xhat * c1[:, None] - c2[:, None]) * rstd[:, None]
        tl.store(DX + rows[:, None] * stride_dx + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
        acc_w += dy * xhat  # dy is 0 outside the mask
        acc_b += dy
    base = group.to(tl.int64) * N
    tl.store(DWP + base + cols, tl.sum(acc_w, axis=0), mask=cmask)
    tl.store(DBP + base + cols, tl.sum(acc_b, axis=0), mask=cmask)


@triton.jit
def _aligned_row_statistics(x_row, dy_row, W, shift, N, eps, BLOCK_N: tl.constexpr, VEC: tl.constexpr):
    """_row_statistics for a row that starts ``shift`` elements past a 16-byte boundary (``x_row``, ``dy_row``:
    that boundary): frame index f = column + shift, whole VEC-element vectors loaded, other rows' elements
    in the first and last vectors selected away."""
    ar = tl.arange(0, BLOCK_N)
    x0 = tl.load(x_row + shift + ar, mask=ar < N, other=0.0).to(tl.float32)
    mu0 = tl.sum(x0, axis=0) / tl.minimum(N, BLOCK_N)
    n_vec = (shift + N + VEC - 1) // VEC
    s1 = tl.zeros([BLOCK_N], dtype=tl.float32)
    s2 = tl.zeros([BLOCK_N], dtype=tl.float32)
    sg = tl.zeros([BLOCK_N], dtype=tl.float32)
    sgd = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, n_vec * VEC, BLOCK_N):
        f = tl.max_contiguous(tl.multiple_of(start + ar, VEC), BLOCK_N)
        vmask = f // VEC < n_vec
        inrow = (f >= shift) & (f < shift + N)
        x = tl.load(x_row + f, mask=vmask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        dy = tl.load(dy_row + f, mask=vmask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        w = tl.load(W + (f - shift), mask=inrow, other=0.0).to(tl.float32)
        d = tl.where(inrow, x - mu0, 0.0)  # selects, not products with 0: past a tensor's end may lie a NaN
        g = tl.where(inrow, dy, 0.0) * w
        s1 += d
        s2 += d * d
        sg += g
        sgd += g * d
    return _statistics(mu0, s1, s2, sg, sgd, N, eps)


@triton.jit
def _layernorm_bwd_row_stats_aligned(X, W, DY, STATS, N, stride, eps, BLOCK_N: tl.constexpr, VEC: tl.constexpr):
    """The split path's first kernel for 16-byte aligned x and dy of one row stride: [mean, rstd, c1, c2]."""
    row = tl.program_id(0).to(tl.int64)
    shift = (row * stride) % VEC
    base = tl.multiple_of(row * stride - shift, VEC)
    mean, rstd, c1, c2 = _aligned_row_statistics(X + base, DY + base, W, shift, N, eps, BLOCK_N, VEC)
    tl.store(STATS + row * 4, mean)
    tl.store(STATS + row * 4 + 1, rstd)
    tl.store(STATS + row * 4 + 2, c1)
    tl.store(STATS + row * 4 + 3, c2)


@triton.jit
def _layernorm_bwd_split_tiles_aligned(X, W, DY, DX, STATS, DWP, DBP, M, N, stride, ROWS_PER_GROUP,
                                       TILE_M: tl.constexpr, TILE_N: tl.constexpr, VEC: tl.constexpr,
                                       STAGES: tl.constexpr):
    """The split path's second kernel for 16-byte aligned x, dy and dx of one row stride. Program (t, g) takes
    frame tile t (f = column + the row's shift) of row group g's rows, one shift class at a time: rows
    row0 + c, row0 + c + VEC, ... start ``shift`` past a boundary alike, so TILE_M of them load and store as
    16-byte vectors. dx's first and last vectors of a row, shared with its neighbours, are stored element by
    element; the class's dw and db partials go to row g * VEC + c (columns: f - shift)."""
    f = tl.max_contiguous(tl.multiple_of(tl.program_id(0) * TILE_N + tl.arange(0, TILE_N), VEC), TILE_N)
    group = tl.program_id(1)
    row0 = group * ROWS_PER_GROUP
    row_end = tl.minimum(row0 + ROWS_PER_GROUP, M)
    vec = f // VEC
    for c in range(0, VEC):
        shift = ((row0 + c).to(tl.int64) * stride) % VEC
        cols = f - shift
        inrow = (cols >= 0) & (cols < N)
        vmask = vec < (shift + N + VEC - 1) // VEC
        body = (vec >= (shift + VEC - 1) // VEC) & (vec < (shift + N) // VEC)  # whole vectors of this row alone
        edge = inrow & ~body
        w = tl.load(W + cols, mask=inrow, other=0.0).to(tl.float32)
        acc_w = tl.zeros([TILE_M, TILE_N], dtype=tl.float32)
        acc_b = tl.zeros([TILE_M, TILE_N], dtype=tl.float32)
        for r in tl.range(row0 + c, row_end, TILE_M * VEC, num_stages=STAGES):
            rows = (r + tl.arange(0, TILE_M) * VEC).to(tl.int64)
            rmask = rows < row_end
            offs = tl.max_contiguous(tl.multiple_of((rows * stride - shift)[:, None] + f[None, :], [1, VEC]),
                                     [1, TILE_N])
            lmask = rmask[:, None] & vmask[None, :]
            x = tl.load(X + offs, mask=lmask, other=0.0).to(tl.float32)
            dy = tl.load(DY + offs, mask=lmask, other=0.0).to(tl.float32)
            x = tl.where(inrow[None, :], x, 0.0)  # the neighbours' elements in a shared vector (or past the end)
            dy = tl.where(inrow[None, :], dy, 0.0)
            mean = tl.load(STATS + rows * 4, mask=rmask, other=0.0)
            rstd = tl.load(STATS + rows * 4 + 1, mask=rmask, other=0.0)
            c1 = tl.load(STATS + rows * 4 + 2, mask=rmask, other=0.0)
            c2 = tl.load(STATS + rows * 4 + 3, mask=rmask, other=0.0)
            xhat = (x - mean[:, None]) * rstd[:, None]
            dx = (dy * w[None, :] - xhat * c1[:, None] - c2[:, None]) * rstd[:, None]
            tl.store(DX + offs, dx.to(DX.dtype.element_ty), mask=rmask[:, None] & body[None, :])
            if (tl.program_id(0) == 0) | (tl.program_id(0) == (shift + N - 1) // TILE_N):  # a tile with an edge
                tl.store(DX + offs, dx.to(DX.dtype.element_ty), mask=rmask[:, None] & edge[None, :])
            acc_w += dy * xhat
            acc_b += dy
        part = (group * VEC + c).to(tl.int64) * N
        tl.store(DWP + part + cols, tl.sum(acc_w, axis=0), mask=inrow)
        tl.store(DBP + part + cols, tl.sum(acc_b, axis=0), mask=inrow)


@triton.jit
def _column_sums(P, OUT, Q, OUT_Q, n_parts, N, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    """OUT[c] = sum over p of P[p, c], OUT_Q likewise of Q, in fp32 and a fixed order (deterministic)."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < N
    acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
    acc_q = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
    for p0 in range(0, n_parts, BLOCK_P):
        parts = p0 + tl.arange(0, BLOCK_P)
        mask = (parts < n_parts)[:, None] & cmask[None, :]
        offs = parts[:, None].to(tl.int64) * N + cols[None, :]
        acc += tl.load(P + offs, mask=mask, other=0.0)
        acc_q += tl.load(Q + offs, mask=mask, other=0.0)
    tl.store(OUT + cols, tl.sum(acc, axis=0).to(OUT.dtype.element_ty), mask=cmask)
    tl.store(OUT_Q + cols, tl.sum(acc_q, axis=0).to(OUT_Q.dtype.element_ty), mask=cmask)


# (m, n, dtype, device) -> launch plan: decided once, so a call is a dict lookup away from its launches
_PLANS: dict = {}


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return CPU_SMS


def _rows_stages(block_m: int, block_n: int, elem: int) -> int:
    """The rows path's pipeline depth: ROWS_STAGES, less where its copies would not fit in shared memory
    (Triton keeps stages - 1 copies of each prefetched tile: x, dy)."""
    copy = block_m * block_n * elem * 2
    return max(1, min(ROWS_STAGES, 1 + _ROWS_SMEM_BYTES // copy))


def _plan(m: int, n: int, device: torch.device) -> tuple:
    """(path, programs, per_program, block_m, block_n, warps, reduce_block_n), path "rows", "looped" or
    "split": per_program counts row blocks (rows), rows (looped) or a row group's rows (split, whose
    programs are its row groups, each over every column tile)."""
    target = max(1, _num_sms(device) * PROGRAMS_PER_SM)
    reduce_n = REDUCE_BLOCK_N  # the same on the CPU: what the interpreter checks is what a GPU runs
    if n <= MAX_FUSED_N:
        block_n = triton.next_power_of_2(n)
        block_m = max(1, min(ROW_BLOCK_ELEMS // block_n, triton.next_power_of_2(m)))
        blocks = triton.cdiv(m, block_m)
        per = triton.cdiv(blocks, min(blocks, target))
        warps = min(32, NUM_WARPS * max(1, block_n // ROW_BLOCK_ELEMS))
        return "rows", triton.cdiv(blocks, per), per, block_m, block_n, warps, reduce_n
    if WIDE_SPLIT:  # as many row groups as keep ~target programs busy over the column tiles
        groups = max(1, min(triton.cdiv(m, SPLIT_TILE_M), triton.cdiv(target, triton.cdiv(n, SPLIT_TILE_N))))
        per = triton.cdiv(triton.cdiv(m, groups), SPLIT_TILE_M) * SPLIT_TILE_M
        return "split", triton.cdiv(m, per), per, SPLIT_TILE_M, SPLIT_TILE_N, SPLIT_NUM_WARPS, reduce_n
    per = triton.cdiv(m, min(m, target))
    return "looped", triton.cdiv(m, per), per, 1, LOOP_BLOCK_N, LOOP_NUM_WARPS, reduce_n


def kernel_fn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, grad_out: torch.Tensor):
    n = x.shape[-1]
    x2 = x.reshape(-1, n)
    dy = grad_out.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    if dy.stride(-1) != 1:
        dy = dy.contiguous()
    m = x2.shape[0]
    key = (m, n, x.dtype, x.device)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _plan(m, n, x.device)
    path, programs, per, block_m, block_n, warps, reduce_n = plan
    dx = torch.empty((m, n), dtype=x.dtype, device=x.device)
    vec = _vector_width(block_n, x2, dy, dx) if path == "split" and WIDE_ALIGN else 1
    # dw and db partial rows: one per program; on the aligned split path one per row group and shift class
    partials = torch.empty((2, programs * vec, n), dtype=torch.float32, device=x.device)
    dw = torch.empty((n,), dtype=weight.dtype, device=x.device)
    db = torch.empty((n,), dtype=bias.dtype, device=x.device)
    args = (x2, weight, dy, dx, partials[0], partials[1], m, n, x2.stride(0), dy.stride(0), dx.stride(0), eps, per)
    if vec > 1:
        stats = torch.empty((m, 4), dtype=torch.float32, device=x.device)
        _layernorm_bwd_row_stats_aligned[(m,)](x2, weight, dy, stats, n, x2.stride(0), eps, BLOCK_N=LOOP_BLOCK_N,
                                               VEC=vec, num_warps=LOOP_NUM_WARPS)
        _layernorm_bwd_split_tiles_aligned[(triton.cdiv(n + vec - 1, block_n), programs)](
            x2, weight, dy, dx, stats, partials[0], partials[1], m, n, x2.stride(0), per, TILE_M=block_m,
            TILE_N=block_n, VEC=vec, STAGES=SPLIT_STAGES, num_warps=warps)
    elif path == "split":
        stats = torch.empty((m, 4), dtype=torch.float32, device=x.device)
        _layernorm_bwd_row_stats[(m,)](x2, weight, dy, stats, n, x2.stride(0), dy.stride(0), eps, BLOCK_N=LOOP_BLOCK_N,
                                       num_warps=LOOP_NUM_WARPS)
        _layernorm_bwd_split_tiles[(triton.cdiv(n, block_n), programs)](
            x2, weight, dy, dx, stats, partials[0], partials[1], m, n, x2.stride(0), dy.stride(0), dx.stride(0), per,
            TILE_M=block_m, TILE_N=block_n, STAGES=SPLIT_STAGES, num_warps=warps)
    elif path == "looped":
        _layernorm_bwd_looped[(programs,)](*args, BLOCK_N=block_n, REVERSED=LOOP_PASS2_REVERSED, num_warps=warps)
    else:
        stages = _rows_stages(block_m, block_n, x.element_size())
        _layernorm_bwd_rows[(programs,)](*args, BLOCK_M=block_m, BLOCK_N=block_n, STAGES=stages, num_warps=warps)
    _column_sums[(triton.cdiv(n, reduce_n),)](partials[0], dw, partials[1], db, partials.shape[1], n,
                                              BLOCK_P=REDUCE_BLOCK_P, BLOCK_N=reduce_n, num_warps=REDUCE_NUM_WARPS)
    return dx.view(x.shape), dw, db


def _vector_width(tile: int, *rows: torch.Tensor) -> int:
    """Elements per 16-byte vector when these [M, N] tensors share one row stride and 16-byte aligned bases
    (so a row starts equally far past a boundary in each) and the column tiles (``tile``, LOOP_BLOCK_N) are
    whole vectors, else 1."""
    vec = 16 // rows[0].element_size()
    if (len({t.stride(0) for t in rows}) == 1 and all(t.data_ptr() % 16 == 0 for t in rows)
            and tile % vec == 0 and LOOP_BLOCK_N % vec == 0):
        return vec
    return 1
