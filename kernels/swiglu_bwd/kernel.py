"""SwiGLU backward in Triton: the one file an agent edits.

kernel_fn(gate, up, grad_out) -> (d_gate, d_up) of out = silu(gate) * up, elementwise:
with s = sigmoid(gate),
    d_up   = dy * gate * s
    d_gate = dy * up * s * (1 + gate * (1 - s))
One kernel reads gate, up and dy once and writes both gradients (5 tensors' worth of bytes,
the floor): wide contiguous blocks so every thread issues 16-byte accesses, unmasked full
blocks, fp32 math, stores in the input dtype. Gate and up as column slices of one fused
[M, 2N] projection are read in place (row-strided kernel) instead of copied first.
"""

import torch
import triton
import triton.language as tl

# Tunable knobs: module-level constants the offline tuner rewrites.
BLOCK_SIZE = 4096  # elements per program
NUM_WARPS = 8


@triton.jit
def _swiglu_grads(g, u, dy):
    g = g.to(tl.float32)
    u = u.to(tl.float32)
    dy = dy.to(tl.float32)
    # exp2 overflows to inf for very negative g: s = 0, both gradients 0 as they should be.
    s = 1.0 / (1.0 + tl.exp2(g * -1.4426950408889634))
    dys = dy * s
    return dys * u * (1.0 + g * (1.0 - s)), dys * g


@triton.jit
def _swiglu_bwd(G, U, DY, DG, DU, n_elements, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offs = start + tl.arange(0, BLOCK)
    if start + BLOCK <= n_elements:
        # Full block: no mask, so loads and stores stay 16-byte vectors even when
        # the element count is odd (a mask the compiler cannot prove uniform would split them).
        dg, du = _swiglu_grads(tl.load(G + offs), tl.load(U + offs), tl.load(DY + offs))
        tl.store(DG + offs, dg.to(DG.dtype.element_ty))
        tl.store(DU + offs, du.to(DU.dtype.element_ty))
    else:
        mask = offs < n_elements
        dg, du = _swiglu_grads(tl.load(G + offs, mask=mask, other=0.0), tl.load(U + offs, mask=mask, other=0.0),
                               tl.load(DY + offs, mask=mask, other=0.0))
        tl.store(DG + offs, dg.to(DG.dtype.element_ty), mask=mask)
        tl.store(DU + offs, du.to(DU.dtype.element_ty), mask=mask)


@triton.jit
def _swiglu_bwd_rows(G, U, DY, DG, DU, n_cols, stride_g, stride_u, stride_dy, BLOCK: tl.constexpr):
    # Rows whose last dim is packed but whose row stride is not n_cols (gate/up as column slices
    # of one fused projection): read in place; the gradients are written packed.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    g = tl.load(G + row * stride_g + cols, mask=mask, other=0.0)
    u = tl.load(U + row * stride_u + cols, mask=mask, other=0.0)
    dy = tl.load(DY + row * stride_dy + cols, mask=mask, other=0.0)
    dg, du = _swiglu_grads(g, u, dy)
    tl.store(DG + row * n_cols + cols, dg.to(DG.dtype.element_ty), mask=mask)
    tl.store(DU + row * n_cols + cols, du.to(DU.dtype.element_ty), mask=mask)


def _row_strided(t: torch.Tensor) -> bool:
    """A 2-D tensor with a packed last dim (rows may be spaced out)."""
    return t.dim() == 2 and t.stride(1) == 1 and t.stride(0) >= t.shape[1]


_GRIDS = {}  # (numel or (rows, cols), path) -> (grid, block)


def kernel_fn(gate: torch.Tensor, up: torch.Tensor, grad_out: torch.Tensor) -> tuple:
    if gate.shape != up.shape or gate.shape != grad_out.shape:
        raise ValueError(f"swiglu: gate {tuple(gate.shape)}, up {tuple(up.shape)} and grad_out "
                         f"{tuple(grad_out.shape)} differ")
    if gate.is_contiguous() and up.is_contiguous() and grad_out.is_contiguous():
        d_gate = torch.empty_like(gate)
        d_up = torch.empty_like(up)
        n = gate.numel()
        grid = _GRIDS.get(n)
        if grid is None:
            grid = _GRIDS[n] = (triton.cdiv(n, BLOCK_SIZE),)
        _swiglu_bwd[grid](gate, up, grad_out, d_gate, d_up, n, BLOCK=BLOCK_SIZE, num_warps=NUM_WARPS)
        return d_gate, d_up
    if _row_strided(gate) and _row_strided(up) and _row_strided(grad_out):
        m, n = gate.shape
        d_gate = torch.empty((m, n), dtype=gate.dtype, device=gate.device)
        d_up = torch.empty((m, n), dtype=up.dtype, device=up.device)
        plan = _GRIDS.get((m, n))
        if plan is None:
            block = min(BLOCK_SIZE, triton.next_power_of_2(n))
            plan = _GRIDS[(m, n)] = ((m, triton.cdiv(n, block)), block)
        grid, block = plan
        _swiglu_bwd_rows[grid](gate, up, grad_out, d_gate, d_up, n, gate.stride(0), up.stride(0),
                               grad_out.stride(0), BLOCK=block, num_warps=NUM_WARPS)
        return d_gate, d_up
    return kernel_fn(gate.contiguous(), up.contiguous(), grad_out.contiguous())  # any other layout: pack it once
