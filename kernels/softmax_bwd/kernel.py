"""Softmax backward over the last dimension in Triton: the one file an agent edits.

kernel_fn(x, grad_out) -> (dx,). The task gives x, not the forward's output y, so each row's
probabilities are recomputed from x (max, sum of exponentials) and never stored:
dx = y * (dy - sum(dy * y)). Memory-bound: the floor is read x, read dy, write dx, once each.
fp32 math, dx in the input dtype. Two paths, by row width:
  * rows (N <= MAX_FUSED_N; MAX_FUSED_N_FP32 for fp32): each program holds one or more whole rows
    of x and dy in registers and does everything in one pass: row max, exponentials, their sum,
    sum(dy * y), dx. Narrow rows are packed several to a program (ROW_BLOCK_ELEMS elements) so enough bytes are in flight;
  * looped (wider rows, up to vocabularies of 50257): one program per row, two passes over it.
    Pass 1 keeps a running max m and, per element slot, sums of e = exp(x - m) and of dy * e,
    both rescaled by the same factor when m grows, so sum(dy * y) = sum(dy * e) / sum(e) needs no
    extra pass over the row. Pass 2 re-reads x and dy (pass 1 loads them evict_last, so a row
    is likely still in L2; LOOP_PASS2_REVERSED walks it backwards, the most recently read chunks
    first) and writes dx. A row of odd width starts anywhere: when x, dy and dx share a row
    stride and are 16-byte aligned, each row begins with a masked head up to a 16-byte
    boundary and moves whole unmasked chunks from there (16-byte vectors), then a masked tail.

Launch parameters are decided once per (shape, strides, dtype, device, alignment) signature and
kept in a dict: a call costs a dict lookup and one launch.
"""

import torch
import triton
import triton.language as tl

# Tunable knobs: module-level constants the offline tuner rewrites.
ROW_BLOCK_ELEMS = 2048  # rows path: elements each program holds (rows x padded row width)
NUM_WARPS = 4  # rows path warps when a program holds several rows
# Widest row the rows path holds in registers (x and dy, as fp32). H100, run 19 (knob_sweep): 32000-wide
# 16-bit rows 477 -> 278 us held whole (torch.compile's persistent reduction, run 18: 255 us); fp32 rows
# of 32000 held whole 711 us against 661 looped, so fp32 keeps 8192.
MAX_FUSED_N = 32768
MAX_FUSED_N_FP32 = 8192
FUSED_BYTES_PER_THREAD = 32  # one-row programs: warps = padded row bytes / this / 32, within NUM_WARPS..32
LOOP_BLOCK_N = 4096  # chunk width of the looped path
# Looped path warps = chunk bytes / this / 32: 8 warps for 16-bit chunks of 4096, 16 for fp32. H100, run 19:
# 50257-wide 16-bit rows 749 -> 668 us at 8 warps (16 before); fp32 best at 16 (661 us; 8: 720).
LOOP_BYTES_PER_THREAD = 32
LOOP_NUM_STAGES = 1  # software-pipelined chunks (1: none; more: cp.async prefetch into shared memory)
LOOP_PASS2_REVERSED = 1  # pass 2 walks the row backwards (1) or forwards (0)

LOG2E = 1.4426950408889634


@triton.jit
def _softmax_bwd_rows(X, DY, DX, M, N, stride_x, stride_dy, stride_dx,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    r64 = rows[:, None].to(tl.int64)
    x = tl.load(X + r64 * stride_x + cols[None, :], mask=mask, other=0.0)
    dy = tl.load(DY + r64 * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    x = tl.where(mask, x.to(tl.float32), float("-inf"))
    row_max = tl.max(x, axis=1)
    e = tl.exp2((x - row_max[:, None]) * 1.4426950408889634)
    y = e * (1.0 / tl.sum(e, axis=1))[:, None]
    dot = tl.sum(y * dy, axis=1)
    dx = y * (dy - dot[:, None])
    tl.store(DX + r64 * stride_dx + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)


@triton.jit
def _fold(m_run, s_vec, t_vec, x, dy):
    """Fold a chunk (x fp32, -inf where masked; dy fp32, 0 where masked) into the running max and
    the per-slot sums of e = exp(x - max) and dy * e, both rescaled when the max grows."""
    m_new = tl.maximum(m_run, tl.max(x, axis=0))
    # While only -inf has been seen, keep the sums at zero (avoids -inf - -inf = nan).
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2((m_run - m_safe) * 1.4426950408889634)
    e = tl.exp2((x - m_safe) * 1.4426950408889634)
    return m_new, s_vec * alpha + e, t_vec * alpha + e * dy


@triton.jit
def _load_edge(X, DY, x_off, dy_off, cols, mask):
    x = tl.load(X + x_off + cols, mask=mask, other=0.0)
    dy = tl.load(DY + dy_off + cols, mask=mask, other=0.0).to(tl.float32)
    return tl.where(mask, x.to(tl.float32), float("-inf")), dy


@triton.jit
def _dx(x, dy, row_max, inv, dot):
    y = tl.exp2((x - row_max) * 1.4426950408889634) * inv
    return y * (dy - dot)


@triton.jit
def _softmax_bwd_looped(X, DY, DX, M, N, stride_x, stride_dy, stride_dx,
                        BLOCK_N: tl.constexpr, VEC: tl.constexpr, NUM_STAGES: tl.constexpr,
                        REVERSED: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_off = row * stride_x
    dy_off = row * stride_dy
    dx_off = row * stride_dx
    # VEC > 1 only when the three share a row stride and are 16-byte aligned (kernel_fn): then
    # one head of `head` (< VEC) elements takes every one of them to a 16-byte boundary.
    head = tl.minimum((VEC - x_off % VEC) % VEC, N)
    n_body = ((N - head) // BLOCK_N) * BLOCK_N
    ar = tl.arange(0, BLOCK_N)
    hmask = ar < head
    tcols = head + n_body + ar
    tmask = tcols < N
    # Pass 1: running max, sums of exp(x - max) and of dy * exp(x - max).
    m_run = tl.max(tl.full([BLOCK_N], float("-inf"), dtype=tl.float32), axis=0)
    s_vec = tl.zeros([BLOCK_N], dtype=tl.float32)
    t_vec = tl.zeros([BLOCK_N], dtype=tl.float32)
    x, dy = _load_edge(X, DY, x_off, dy_off, ar, hmask)
    m_run, s_vec, t_vec = _fold(m_run, s_vec, t_vec, x, dy)
    for start in tl.range(0, n_body, BLOCK_N, num_stages=NUM_STAGES):
        ox = tl.max_contiguous(tl.multiple_of(x_off + head + start + ar, VEC), BLOCK_N)
        ody = tl.max_contiguous(tl.multiple_of(dy_off + head + start + ar, VEC), BLOCK_N)
        # Keep the row in L2 for the second pass.
        x = tl.load(X + ox, eviction_policy="evict_last").to(tl.float32)
        dy = tl.load(DY + ody, eviction_policy="evict_last").to(tl.float32)
        m_run, s_vec, t_vec = _fold(m_run, s_vec, t_vec, x, dy)
    x, dy = _load_edge(X, DY, x_off, dy_off, tcols, tmask)
    m_run, s_vec, t_vec = _fold(m_run, s_vec, t_vec, x, dy)
    total = tl.sum(s_vec, axis=0)
    inv = 1.0 / total
    dot = tl.sum(t_vec, axis=0) * inv  # sum(dy * y)
    # Pass 2: dx = y * (dy - dot), same three parts.
    x, dy = _load_edge(X, DY, x_off, dy_off, ar, hmask)
    tl.store(DX + dx_off + ar, _dx(x, dy, m_run, inv, dot).to(DX.dtype.element_ty), mask=hmask)
    for i in tl.range(0, n_body, BLOCK_N, num_stages=NUM_STAGES):
        start = i
        if REVERSED:
            start = n_body - BLOCK_N - i
        ox = tl.max_contiguous(tl.multiple_of(x_off + head + start + ar, VEC), BLOCK_N)
        ody = tl.max_contiguous(tl.multiple_of(dy_off + head + start + ar, VEC), BLOCK_N)
        odx = tl.max_contiguous(tl.multiple_of(dx_off + head + start + ar, VEC), BLOCK_N)
        x = tl.load(X + ox, eviction_policy="evict_first").to(tl.float32)
        dy = tl.load(DY + ody, eviction_policy="evict_first").to(tl.float32)
        tl.store(DX + odx, _dx(x, dy, m_run, inv, dot).to(DX.dtype.element_ty))
    x, dy = _load_edge(X, DY, x_off, dy_off, tcols, tmask)
    tl.store(DX + dx_off + tcols, _dx(x, dy, m_run, inv, dot).to(DX.dtype.element_ty), mask=tmask)


_LAUNCH = {}  # signature -> (kernel, grid, meta)


def _plan(m, n, strides, elem_size, aligned):
    block_n = triton.next_power_of_2(n)
    if block_n <= (MAX_FUSED_N_FP32 if elem_size == 4 else MAX_FUSED_N):
        block_m = max(1, min(ROW_BLOCK_ELEMS // block_n, triton.next_power_of_2(m)))
        warps = NUM_WARPS
        if block_m == 1:  # one wide row per program: enough threads to hold it
            warps = min(32, max(NUM_WARPS, triton.next_power_of_2(
                max(1, block_n * elem_size // (32 * FUSED_BYTES_PER_THREAD)))))
        return _softmax_bwd_rows, (triton.cdiv(m, block_m),), dict(BLOCK_M=block_m, BLOCK_N=block_n,
                                                                     num_warps=warps)
    vec = 16 // elem_size if aligned and len(set(strides)) == 1 else 1
    loop_warps = min(32, max(1, triton.next_power_of_2(LOOP_BLOCK_N * elem_size // (32 * LOOP_BYTES_PER_THREAD))))
    return _softmax_bwd_looped, (m,), dict(BLOCK_N=LOOP_BLOCK_N, VEC=vec, NUM_STAGES=LOOP_NUM_STAGES,
                                           REVERSED=LOOP_PASS2_REVERSED, num_warps=loop_warps)


def kernel_fn(x: torch.Tensor, grad_out: torch.Tensor) -> tuple:
    n = x.shape[-1]
    x2 = x.reshape(-1, n)
    dy2 = grad_out.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    if dy2.stride(-1) != 1:
        dy2 = dy2.contiguous()
    m = x2.shape[0]
    dx = torch.empty((m, n), dtype=x.dtype, device=x.device)  # fresh: 16-byte aligned
    aligned = x2.data_ptr() % 16 == 0 and dy2.data_ptr() % 16 == 0
    key = (m, n, x2.stride(0), dy2.stride(0), x.dtype, x.device, aligned)
    plan = _LAUNCH.get(key)
    if plan is None:
        plan = _LAUNCH[key] = _plan(m, n, (x2.stride(0), dy2.stride(0), n), x.element_size(), aligned)
    kernel, grid, meta = plan
    kernel[grid](x2, dy2, dx, m, n, x2.stride(0), dy2.stride(0), n, **meta)
    return (dx.view(x.shape),)
