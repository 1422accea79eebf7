"""SwiGLU gate in Triton: the one file an agent edits.

out = silu(gate) * up, elementwise over the flattened tensors. Memory-bound:
one wide contiguous block per program so every thread issues 16-byte loads,
fp32 math in registers, one store.
"""

import torch
import triton
import triton.language as tl

# Tunable knobs: module-level constants the offline tuner rewrites.
BLOCK_SIZE = 4096  # elements per program
NUM_WARPS = 8


@triton.jit
def _silu_mul(g, u):
    # silu(g) * u in fp32; exp2 overflows to inf for very negative g, giving -0 as it should.
    g = g.to(tl.float32)
    return g / (1.0 + tl.exp2(g * -1.4426950408889634)) * u.to(tl.float32)


@triton.jit
def _swiglu(G, U, Y, n_elements, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offs = start + tl.arange(0, BLOCK)
    if start + BLOCK <= n_elements:
        # Full block: no mask, so loads and stores stay 16-byte vectors even when
        # the element count is odd (a mask the compiler cannot prove uniform would split them).
        y = _silu_mul(tl.load(G + offs), tl.load(U + offs))
        tl.store(Y + offs, y.to(Y.dtype.element_ty))
    else:
        mask = offs < n_elements
        y = _silu_mul(tl.load(G + offs, mask=mask, other=0.0), tl.load(U + offs, mask=mask, other=0.0))
        tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _swiglu_rows(G, U, Y, n_cols, stride_g, stride_u, BLOCK: tl.constexpr):
    # Rows whose last dim is packed but whose row stride is not n_cols: gate/up as column
    # slices of one fused [M, 2N] projection. Read in place instead of copying both first.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    g = tl.load(G + row * stride_g + cols, mask=mask, other=0.0)
    u = tl.load(U + row * stride_u + cols, mask=mask, other=0.0)
    tl.store(Y + row * n_cols + cols, _silu_mul(g, u).to(Y.dtype.element_ty), mask=mask)


def _row_strided(t: torch.Tensor) -> bool:
    """A 2-D tensor with a packed last dim (rows may be spaced out)."""
    return t.dim() == 2 and t.stride(1) == 1 and t.stride(0) >= t.shape[1]


def kernel_fn(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    if gate.shape != up.shape:
        raise ValueError(f"swiglu: gate {tuple(gate.shape)} and up {tuple(up.shape)} differ")
    if gate.is_contiguous() and up.is_contiguous():
        out = torch.empty_like(gate)
        n = gate.numel()
        _swiglu[(triton.cdiv(n, BLOCK_SIZE),)](gate, up, out, n, BLOCK=BLOCK_SIZE, num_warps=NUM_WARPS)
        return out
    if _row_strided(gate) and _row_strided(up):
        m, n = gate.shape
        out = torch.empty((m, n), dtype=gate.dtype, device=gate.device)
        block = min(BLOCK_SIZE, triton.next_power_of_2(n))
        _swiglu_rows[(m, triton.cdiv(n, block))](gate, up, out, n, gate.stride(0), up.stride(0), BLOCK=block,
                                                  num_warps=NUM_WARPS)
        return out
    return kernel_fn(gate.contiguous(), up.contiguous())  # any other layout: pack it once
