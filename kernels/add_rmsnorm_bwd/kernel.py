"""Fused residual add + RMSNorm backward in Triton: the one file an agent edits.

The forward: h = x + residual, returns (y = h * rstd * w, h): h flows on as the next
residual, so the backward takes two incoming gradients, grad_y (dy) and grad_h, and h itself,
which the forward saved (it is its second output: a training step keeps it anyway):

kernel_fn(x, residual, weight, eps, h, grad_y, grad_h) -> (grad_x, grad_residual, grad_weight)

    hhat = h * rstd,   g = dy * w,   c = sum(g * hhat) / N        (per row)
    dh = rstd * (g - hhat * c) + grad_h;   grad_x = grad_residual = dh
    dw = sum over rows of dy * hhat                               (per column)

grad_x and grad_residual are equal (d(x + r)/dx = d(x + r)/dr = 1): the kernel writes dh once
and returns it for both, as autograd itself does for an add. x and residual are not read: h is
(one tensor read where x + residual was two; torch.compile's backward reads the saved h too, and
beat this kernel at 16384 x 4096 while it read both: run 26, H100, 0.89x). rstd is recomputed.
dw without atomics (deterministic, bit for bit): each program of the main kernel owns a
contiguous block of rows, sums their dy * hhat in fp32, and writes one row of an fp32
[programs, N] partial buffer; a second small kernel sums the buffer's columns. The grid is
sized to the GPU (PROGRAMS_PER_SM programs per SM). Two main paths, by row width:
  * rows (N <= MAX_FUSED_N): BLOCK_M rows at a time in registers (h, dy, grad_h
    read once, dh written once); a program walks its row blocks, dw accumulating in registers;
  * looped (wider rows): one row at a time in chunks of LOOP_BLOCK_N. Pass 1 sums h^2 and
    g * h together (sum(g * hhat) = rstd * sum(g * h)), pass 2 re-reads the row's chunks
    (from L2, last-read first) and writes dh; a wide row's dw accumulates in the program's
    own row of the partial buffer (read-modify-write by the same program: deterministic);
  * split (wider rows, WIDE_SPLIT = 1, the default): the looped path reads and writes its
    program's row of N partials for every row it owns (run 18, H100, 1024 x 50257: 34% of
    roofline, 0.67x torch.compile). Here one program per row takes rstd and k (pass 1 above) into
    an [M, 2] buffer, then a grid of (column tile, row group) programs writes dh and sums dw over
    its group's rows in registers: a row of partials per row group (H200, run 25: 35% of roofline,
    0.88x torch.compile, its loads element by element: an odd width's rows start off 16-byte
    boundaries). With WIDE_ALIGN = 1 both kernels read each row from its aligned base: the rows
    r, r + VEC, ... share one shift, so a program takes its group's rows one shift class at a time,
    as 16-byte vectors, with a dw partial row per class (H100 run 26 at wide: 5% faster in fp32,
    3% slower in 16-bit).
Launch parameters are decided once per (shape, dtype, device) and cached: a call costs a
dict lookup, three allocations and two launches (four and three on the split path).
Levers left: 16-byte alignment on the rows path for odd widths, evict hints, a resident path
between the rows and looped paths.
"""

import torch
import triton
import triton.language as tl

# Tunable knobs: module-level constants the offline tuner rewrites.
ROW_BLOCK_ELEMS = 2048  # rows path: elements a program holds per step (rows x padded row width)
NUM_WARPS = 4  # rows path: warps per ROW_BLOCK_ELEMS; a row wider than that gets proportionally more
# Rows path: each program's next row block prefetched by async copies while it computes this one, in up to
# ROWS_STAGES - 1 shared-memory copies (as many as fit: _rows_stages; fp32 at 5120-wide rows ran out of
# shared memory at 3 before the cap). H100, run 24 (knob_sweep at llama7b-layer, odd, llama7b-b4): 3 over 1
# took 16-bit odd 89 -> 77 us, the others within 2% (fp32 llama7b-layer 125 -> 128 us, 2.5% slower).
ROWS_STAGES = 3
MAX_FUSED_N = 16384  # widest row the rows path holds in registers
# Main-kernel programs per SM: more overlap, but more dw partial rows to reduce. H100, run 26 (knob_sweep, bf16 at
# llama7b-layer, odd and llama7b-b4, beside REDUCE_BLOCK_N): 1 best; 4 (the old default) 14% slower geomean.
PROGRAMS_PER_SM = 1
LOOP_BLOCK_N = 4096  # chunk width of the looped path
LOOP_NUM_WARPS = 8
LOOP_PASS2_REVERSED = 1  # the looped path's second pass walks the row backwards (1) or forwards (0)
WIDE_SPLIT = 1  # rows wider than MAX_FUSED_N: the split path (1) or the looped path (0)
SPLIT_TILE_N = 512  # split path: columns per program
SPLIT_TILE_M = 4  # split path: rows per step
SPLIT_NUM_WARPS = 4
SPLIT_STAGES = 1  # split path: 2+ prefetches each next row tile by async copies (as ROWS_STAGES); not yet timed
# Split path, rows of an odd width: each row starts off a 16-byte boundary, so its loads went element by element
# (LDG.U16). 1: both kernels read each row from its aligned base in 16-byte vectors, rows grouped by their
# shift (the rows r, r + VEC, ... share one), each shift class with its own dw partial row. H100, run 26 at wide:
# 1 over 0: 155 vs 150 us fp16 and bf16 (3% slower), 230 vs 243 fp32 (2.28x vs 2.29x eager geomean): kept
# for fp32 and for the rows' 16-byte loads; at 16-bit, 0 is the one to try.
WIDE_ALIGN = 1
REDUCE_BLOCK_N = 16  # dw reduction: columns per program (run 26: with PROGRAMS_PER_SM above, 16 best or within 1%)
REDUCE_BLOCK_P = 64  # dw reduction: partial rows summed per step
REDUCE_NUM_WARPS = 4

# The interpreter (CPU) runs programs one after another at a fixed cost each: few, wide ones.
CPU_SMS = 4  # a few main-kernel programs, so the tests still cover several row blocks
_ROWS_SMEM_BYTES = 200 * 1024  # Hopper's 227 KB per block, less room for the reductions' scratch


@triton.jit
def _add_rmsnorm_bwd_rows(H, W, DY, DH, DX, DWP, M, N, stride_h, stride_dy, stride_dh, stride_dx, eps,
                          BLOCKS_PER_PROG, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          STAGES: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    cmask = cols < N
    w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)  # dw of this program's rows, summed once at the end
    first = pid * BLOCKS_PER_PROG
    for blk in tl.range(first, first + BLOCKS_PER_PROG, num_stages=STAGES):  # STAGES > 1: the next block prefetched
        rows = (blk * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
        mask = (rows < M)[:, None] & cmask[None, :]
        h = tl.load(H + rows[:, None] * stride_h + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dh_in = tl.load(DH + rows[:, None] * stride_dh + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=1) / N + eps)
        hhat = h * rstd[:, None]
        g = dy * w[None, :]
        c = tl.sum(g * hhat, axis=1) / N
        dh = (g - hhat * c[:, None]) * rstd[:, None] + dh_in
        tl.store(DX + rows[:, None] * stride_dx + cols[None, :], dh.to(DX.dtype.element_ty), mask=mask)
        acc += dy * hhat
    tl.store(DWP + pid.to(tl.int64) * N + cols, tl.sum(acc, axis=0), mask=cmask)


@triton.jit
def _row_statistics(h_row, dy_row, W, N, eps, BLOCK_N: tl.constexpr):
    """One wide row's rstd and k = rstd^2 sum(g * h) / N, in one pass over its chunks
    (sum(g * hhat) = rstd * sum(g * h))."""
    ar = tl.arange(0, BLOCK_N)
    ss = tl.zeros([BLOCK_N], dtype=tl.float32)
    sgh = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + ar
        m = cols < N
        h = tl.load(h_row + cols, mask=m, other=0.0, eviction_policy="evict_last").to(tl.float32)
        dy = tl.load(dy_row + cols, mask=m, other=0.0, eviction_policy="evict_last").to(tl.float32)
        w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
        ss += h * h
        sgh += dy * w * h
    rstd = 1.0 / tl.sqrt(tl.sum(ss, axis=0) / N + eps)
    return rstd, rstd * rstd * tl.sum(sgh, axis=0) / N


@triton.jit
def _add_rmsnorm_bwd_looped(H, W, DY, DH, DX, DWP, M, N, stride_h, stride_dy, stride_dh, stride_dx,
                            eps, ROWS_PER_PROG, BLOCK_N: tl.constexpr, REVERSED: tl.constexpr):
    pid = tl.program_id(0)
    ar = tl.arange(0, BLOCK_N)
    dwp = DWP + pid.to(tl.int64) * N
    n_chunks = tl.cdiv(N, BLOCK_N)
    row0 = pid * ROWS_PER_PROG
    for i in range(0, tl.minimum(ROWS_PER_PROG, M - row0)):
        row = (row0 + i).to(tl.int64)
        h_row = H + row * stride_h
        dy_row = DY + row * stride_dy
        rstd, k = _row_statistics(h_row, dy_row, W, N, eps, BLOCK_N)  # dh = rstd * (g - h * k) + grad_h
        for j in range(0, n_chunks):
            chunk = j
            if REVERSED:  # first re-read the chunks pass 1 read last: the likeliest still in L2
                chunk = n_chunks - 1 - j
            cols = chunk * BLOCK_N + ar
            m = cols < N
            h = tl.load(h_row + cols, mask=m, other=0.0, eviction_policy="evict_first").to(tl.float32)
            dy = tl.load(dy_row + cols, mask=m, other=0.0, eviction_policy="evict_first").to(tl.float32)
            dh_in = tl.load(DH + row * stride_dh + cols, mask=m, other=0.0, eviction_policy="evict_first")
            w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
            dh = (dy * w - h * k) * rstd + dh_in.to(tl.float32)
            tl.store(DX + row * stride_dx + cols, dh.to(DX.dtype.element_ty), mask=m)
            prev = tl.load(dwp + cols, mask=m & (i > 0), other=0.0)  # the program's first row starts the sum
            tl.store(dwp + cols, prev + dy * h * rstd, mask=m)


@triton.jit
def _add_rmsnorm_bwd_row_stats(H, W, DY, STATS, N, stride_h, stride_dy, eps, BLOCK_N: tl.constexpr):
    """The split path's first kernel: one program per row, [rstd, k] to STATS[row]."""
    row = tl.program_id(0).to(tl.int64)
    rstd, k = _row_statistics(H + row * stride_h, DY + row * stride_dy, W, N, eps, BLOCK_N)
    tl.store(STATS + row * 2, rstd)
    tl.store(STATS + row * 2 + 1, k)


@triton.jit
def _add_rmsnorm_bwd_split_tiles(H, W, DY, DH, DX, STATS, DWP, M, N, stride_h, stride_dy, stride_dh, stride_dx,
                                 ROWS_PER_GROUP, TILE_M: tl.constexpr, TILE_N: tl.constexpr,
                                 STAGES: tl.constexpr):
    """The split path's second kernel: program (t, g) writes dh of column tile t for row group g's rows,
    TILE_M at a time, and that group's dw partial sum for the tile (in registers, a fixed order)."""
    cols = tl.program_id(0) * TILE_N + tl.arange(0, TILE_N)
    group = tl.program_id(1)
    cmask = cols < N
    w = tl.load(W + cols, mask=cmask, other=0.0).to(tl.float32)
    acc = tl.zeros([TILE_M, TILE_N], dtype=tl.float32)
    row0 = group * ROWS_PER_GROUP
    row_end = tl.minimum(row0 + ROWS_PER_GROUP, M)
    for r in tl.range(row0, row_end, TILE_M, num_stages=STAGES):
        rows = (r + tl.arange(0, TILE_M)).to(tl.int64)
        rmask = rows < row_end
        mask = rmask[:, None] & cmask[None, :]
        h = tl.load(H + rows[:, None] * stride_h + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + rows[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dh_in = tl.load(DH + rows[:, None] * stride_dh + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(STATS + rows * 2, mask=rmask, other=0.0)
        k = tl.load(STATS + rows * 2 + 1, mask=rmask, other=0.0)
        dh = (dy * w[None, :] - h * k[:, None]) * rstd[:, None] + dh_in
        tl.store(DX + rows[:, None] * stride_dx + cols[None, :], dh.to(DX.dtype.element_ty), mask=mask)
        acc += dy * h * rstd[:, None]  # dy is 0 outside the mask
    tl.store(DWP + group.to(tl.int64) * N + cols, tl.sum(acc, axis=0), mask=cmask)


@triton.jit
def _aligned_row_statistics(h_row, dy_row, W, shift, N, eps, BLOCK_N: tl.constexpr, VEC: tl.constexpr):
    """_row_statistics for a row that starts ``shift`` elements past a 16-byte boundary (the row pointers: that
    boundary): frame index f = column + shift, whole VEC-element vectors loaded, other rows' elements in the
    first and last vectors selected away."""
    ar = tl.arange(0, BLOCK_N)
    n_vec = (shift + N + VEC - 1) // VEC
    ss = tl.zeros([BLOCK_N], dtype=tl.float32)
    sgh = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, n_vec * VEC, BLOCK_N):
        f = tl.max_contiguous(tl.multiple_of(start + ar, VEC), BLOCK_N)
        vmask = f // VEC < n_vec
        inrow = (f >= shift) & (f < shift + N)
        h = tl.load(h_row + f, mask=vmask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        dy = tl.load(dy_row + f, mask=vmask, other=0.0, eviction_policy="evict_last").to(tl.float32)
        w = tl.load(W + (f - shift), mask=inrow, other=0.0).to(tl.float32)
        h = tl.where(inrow, h, 0.0)  # selects, not products with 0: past a tensor's end may lie a NaN
        dy = tl.where(inrow, dy, 0.0)
        ss += h * h
        sgh += dy * w * h
    rstd = 1.0 / tl.sqrt(tl.sum(ss, axis=0) / N + eps)
    return rstd, rstd * rstd * tl.sum(sgh, axis=0) / N


@triton.jit
def _add_rmsnorm_bwd_row_stats_aligned(H, W, DY, STATS, N, stride, eps, BLOCK_N: tl.constexpr,
                                       VEC: tl.constexpr):
    """The split path's first kernel for 16-byte aligned rows of one stride: [rstd, k] to STATS[row]."""
    row = tl.program_id(0).to(tl.int64)
    shift = (row * stride) % VEC
    base = tl.multiple_of(row * stride - shift, VEC)
    rstd, k = _aligned_row_statistics(H + base, DY + base, W, shift, N, eps, BLOCK_N, VEC)
    tl.store(STATS + row * 2, rstd)
    tl.store(STATS + row * 2 + 1, k)


@triton.jit
def _add_rmsnorm_bwd_split_tiles_aligned(H, W, DY, DH, DX, STATS, DWP, M, N, stride, ROWS_PER_GROUP,
                                         TILE_M: tl.constexpr, TILE_N: tl.constexpr, VEC: tl.constexpr,
                                         STAGES: tl.constexpr):
    """The split path's second kernel for 16-byte aligned rows of one stride (h, grad_y, grad_h, dh).
    Program (t, g) takes frame tile t (f = column + the row's shift) of row group g's rows, one shift class at
    a time: rows row0 + c, row0 + c + VEC, ... start ``shift`` past a boundary alike, so TILE_M of them load
    and store as 16-byte vectors. dh's first and last vectors of a row, shared with its neighbours, are
    stored element by element; the class's dw partial goes to DWP row g * VEC + c (columns: f - shift)."""
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
        acc = tl.zeros([TILE_M, TILE_N], dtype=tl.float32)
        for r in tl.range(row0 + c, row_end, TILE_M * VEC, num_stages=STAGES):
            rows = (r + tl.arange(0, TILE_M) * VEC).to(tl.int64)
            rmask = rows < row_end
            offs = tl.max_contiguous(tl.multiple_of((rows * stride - shift)[:, None] + f[None, :], [1, VEC]),
                                     [1, TILE_N])
            lmask = rmask[:, None] & vmask[None, :]
            h = tl.load(H + offs, mask=lmask, other=0.0).to(tl.float32)
            dy = tl.load(DY + offs, mask=lmask, other=0.0).to(tl.float32)
            dh_in = tl.load(DH + offs, mask=lmask, other=0.0).to(tl.float32)
            rstd = tl.load(STATS + rows * 2, mask=rmask, other=0.0)
            k = tl.load(STATS + rows * 2 + 1, mask=rmask, other=0.0)
            dh = (dy * w[None, :] - h * k[:, None]) * rstd[:, None] + dh_in  # stored only where it is this row's
            tl.store(DX + offs, dh.to(DX.dtype.element_ty), mask=rmask[:, None] & body[None, :])
            if (tl.program_id(0) == 0) | (tl.program_id(0) == (shift + N - 1) // TILE_N):  # a tile with an edge
                tl.store(DX + offs, dh.to(DX.dtype.element_ty), mask=rmask[:, None] & edge[None, :])
            acc += tl.where(inrow[None, :], dy * h, 0.0) * rstd[:, None]
        tl.store(DWP + (group * VEC + c).to(tl.int64) * N + cols, tl.sum(acc, axis=0), mask=inrow)


@triton.jit
def _column_sum(P, OUT, n_parts, N, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    """OUT[c] = sum over p of P[p, c] in fp32, in a fixed order (deterministic)."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < N
    acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
    for p0 in range(0, n_parts, BLOCK_P):
        parts = p0 + tl.arange(0, BLOCK_P)
        mask = (parts < n_parts)[:, None] & cmask[None, :]
        acc += tl.load(P + parts[:, None].to(tl.int64) * N + cols[None, :], mask=mask, other=0.0)
    tl.store(OUT + cols, tl.sum(acc, axis=0).to(OUT.dtype.element_ty), mask=cmask)


# (m, n, dtype, device) -> launch plan: decided once, so a call is a dict lookup away from its launches
_PLANS: dict = {}


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return CPU_SMS


def _rows_stages(block_m: int, block_n: int, elem: int) -> int:
    """The rows path's pipeline depth: ROWS_STAGES, less where its copies would not fit in shared memory
    (Triton keeps stages - 1 copies of each prefetched tile: the three row tiles h, grad_y, grad_h)."""
    copy = block_m * block_n * elem * 3
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


def _rows(t: torch.Tensor, n: int) -> torch.Tensor:
    t = t.reshape(-1, n)
    return t if t.stride(-1) == 1 else t.contiguous()


def kernel_fn(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, h: torch.Tensor,
              grad_y: torch.Tensor, grad_h: torch.Tensor):
    # x and residual are not read: h = x + residual, as the forward rounded it, is what the forward saved
    n = h.shape[-1]
    h2, dy, dh_in = _rows(h, n), _rows(grad_y, n), _rows(grad_h, n)
    m = h2.shape[0]
    key = (m, n, h.dtype, h.device)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _plan(m, n, h.device)
    path, programs, per, block_m, block_n, warps, reduce_n = plan
    dx = torch.empty((m, n), dtype=h.dtype, device=h.device)
    vec = _vector_width(block_n, h2, dy, dh_in, dx) if path == "split" and WIDE_ALIGN else 1
    # dw partial rows: one per program; on the aligned split path one per row group and shift class
    dwp = torch.empty((programs * vec, n), dtype=torch.float32, device=h.device)
    dw = torch.empty((n,), dtype=weight.dtype, device=h.device)
    args = (h2, weight, dy, dh_in, dx, dwp, m, n, h2.stride(0), dy.stride(0), dh_in.stride(0), dx.stride(0), eps, per)
    if vec > 1:
        stats = torch.empty((m, 2), dtype=torch.float32, device=h.device)
        _add_rmsnorm_bwd_row_stats_aligned[(m,)](h2, weight, dy, stats, n, h2.stride(0), eps,
                                                 BLOCK_N=LOOP_BLOCK_N, VEC=vec, num_warps=LOOP_NUM_WARPS)
        _add_rmsnorm_bwd_split_tiles_aligned[(triton.cdiv(n + vec - 1, block_n), programs)](
            h2, weight, dy, dh_in, dx, stats, dwp, m, n, h2.stride(0), per, TILE_M=block_m, TILE_N=block_n,
            VEC=vec, STAGES=SPLIT_STAGES, num_warps=warps)
    elif path == "split":
        stats = torch.empty((m, 2), dtype=torch.float32, device=h.device)
        _add_rmsnorm_bwd_row_stats[(m,)](h2, weight, dy, stats, n, h2.stride(0), dy.stride(0), eps,
                                         BLOCK_N=LOOP_BLOCK_N, num_warps=LOOP_NUM_WARPS)
        _add_rmsnorm_bwd_split_tiles[(triton.cdiv(n, block_n), programs)](
            h2, weight, dy, dh_in, dx, stats, dwp, m, n, h2.stride(0), dy.stride(0), dh_in.stride(0), dx.stride(0),
            per, TILE_M=block_m, TILE_N=block_n, STAGES=SPLIT_STAGES, num_warps=warps)
    elif path == "looped":
        _add_rmsnorm_bwd_looped[(programs,)](*args, BLOCK_N=block_n, REVERSED=LOOP_PASS2_REVERSED, num_warps=warps)
    else:
        stages = _rows_stages(block_m, block_n, h.element_size())
        _add_rmsnorm_bwd_rows[(programs,)](*args, BLOCK_M=block_m, BLOCK_N=block_n, STAGES=stages, num_warps=warps)
    _column_sum[(triton.cdiv(n, reduce_n),)](dwp, dw, dwp.shape[0], n, BLOCK_P=REDUCE_BLOCK_P, BLOCK_N=reduce_n,
                                             num_warps=REDUCE_NUM_WARPS)
    grad = dx.view(h.shape)
    return grad, grad, dw  # grad_x and grad_residual are one tensor: equal by the chain rule


def _vector_width(tile: int, *rows: torch.Tensor) -> int:
    """Elements per 16-byte vector when these [M, N] tensors share one row stride and 16-byte aligned bases
    (so a row starts equally far past a boundary in each) and the column tiles (``tile``, LOOP_BLOCK_N) are
    whole vectors, else 1."""
    vec = 16 // rows[0].element_size()
    if (len({t.stride(0) for t in rows}) == 1 and all(t.data_ptr() % 16 == 0 for t in rows)
            and tile % vec == 0 and LOOP_BLOCK_N % vec == 0):
        return vec
    return 1
