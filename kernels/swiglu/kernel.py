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


def kernel_fn(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    if gate.shape != up.shape:
        raise ValueError(f"swiglu: gate {tuple(gate.shape)} and up {tuple(up.shape)} differ")
    if not (gate.is_contiguous() and up.is_contiguous()):
        gate, up = gate.contiguous(), up.contiguous()
    out = torch.empty_like(gate)
    n = gate.numel()
    _swiglu[(triton.cdiv(n, BLOCK_SIZE),)](gate, up, out, n, BLOCK=BLOCK_SIZE, num_warps=NUM_WARPS)
    return out
