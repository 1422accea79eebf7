"""GELU backward in Triton (erf and tanh variants): the one file an agent edits.

kernel_fn(x, approximate, grad_out) -> (dx,), dx = dy * gelu'(x), elementwise over the flattened
tensors; the variant is a compile-time flag so each gets its own specialised kernel.
Memory-bound (read x and dy, write dx): wide contiguous blocks (16-byte loads per thread),
unmasked full blocks, fp32 math, one store in the input dtype.

  erf:  gelu'(x) = Phi(x) + x * phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi); Phi from an erfc fit
        (as the forward), so the negative tail never forms 1 + erf and keeps its digits.
  tanh: with z = sqrt(2/pi) (x + 0.044715 x^3) and s = (1 + tanh z)/2 = sigmoid(2z),
        gelu'(x) = s + x * 2 s (1 - s) * sqrt(2/pi) (1 + 3 * 0.044715 x^2); s and s (1 - s) come
        from q = exp(-2|z|) <= 1 (s = 1/(1+q) or q/(1+q), s(1-s) = q/(1+q)^2): no overflow, no
        1 - s cancellation in either tail.
"""

import torch
import triton
import triton.language as tl

# Tunable knobs: module-level constants the offline tuner rewrites.
BLOCK_SIZE = 4096  # elements per program
NUM_WARPS = 8


@triton.jit
def _normal_cdf_pdf(x):
    # Phi(x) = 1 - erfc(z)/2 (x >= 0) or erfc(z)/2 (x < 0), z = |x|/sqrt(2), with erfc from a
    # Chebyshev fit (Numerical Recipes erfcc: erfc(z) = t exp(P(t) - z^2), t = 1/(1 + z/2),
    # relative error < 1.2e-7 for every z). P's coefficients are pre-multiplied by log2(e),
    # with the factor 1/2 folded in as -1. Also returns phi(x) = exp(-x^2/2)/sqrt(2 pi).
    t = 1.0 / (1.0 + tl.abs(x) * 0.35355339059327373)
    p = 0.24651729790196045 * t - 1.1861149450768025
    p = p * t + 2.147474463933521
    p = p * t - 1.637753152343414
    p = p * t + 0.40232158165127635
    p = p * t - 0.2687568603388257
    p = p * t + 0.1396300565225048
    p = p * t + 0.5397006155284324
    p = p * t + 1.4427292039075317
    p = p * t - 2.825748218405333
    g = tl.exp2(x * x * -0.7213475204444817)  # exp(-x^2/2)
    half_erfc = t * tl.exp2(p) * g  # = erfc(z) / 2
    return tl.where(x >= 0, 1.0 - half_erfc, half_erfc), g * 0.3989422804014327


@triton.jit
def _gelu_grad(x, dy, TANH: tl.constexpr):
    x = x.to(tl.float32)
    if TANH:
        x2 = x * x
        z = 0.7978845608028654 * (x + 0.044715 * x2 * x)
        q = tl.exp2(tl.abs(z) * -2.8853900817779268)  # exp(-2|z|), in (0, 1]
        r = 1.0 / (1.0 + q)
        s = tl.where(z >= 0, r, q * r)  # sigmoid(2z)
        ds = 2.0 * q * r * r  # 2 s (1 - s) = 1 - tanh(z)^2
        d = s + x * ds * (0.7978845608028654 + 0.10703222440469428 * x2)  # sqrt(2/pi) (1 + 3a x^2)
    else:
        cdf, pdf = _normal_cdf_pdf(x)
        d = cdf + x * pdf
    return d * dy.to(tl.float32)


@triton.jit
def _gelu_bwd(X, DY, DX, n_elements, TANH: tl.constexpr, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offs = start + tl.arange(0, BLOCK)
    if start + BLOCK <= n_elements:
        # Full block: no mask, so loads and stores stay 16-byte vectors even when
        # the element count is odd (a mask the compiler cannot prove uniform would split them).
        dx = _gelu_grad(tl.load(X + offs), tl.load(DY + offs), TANH)
        tl.store(DX + offs, dx.to(DX.dtype.element_ty))
    else:
        mask = offs < n_elements
        dx = _gelu_grad(tl.load(X + offs, mask=mask, other=0.0), tl.load(DY + offs, mask=mask, other=0.0), TANH)
        tl.store(DX + offs, dx.to(DX.dtype.element_ty), mask=mask)


_GRIDS = {}  # numel -> grid


def kernel_fn(x: torch.Tensor, approximate: str, grad_out: torch.Tensor) -> tuple:
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', not {approximate!r}")
    if not x.is_contiguous():
        x = x.contiguous()
    if not grad_out.is_contiguous():
        grad_out = grad_out.contiguous()
    dx = torch.empty_like(x)
    n = x.numel()
    grid = _GRIDS.get(n)
    if grid is None:
        grid = _GRIDS[n] = (triton.cdiv(n, BLOCK_SIZE),)
    _gelu_bwd[grid](x, grad_out, dx, n, TANH=approximate == "tanh", BLOCK=BLOCK_SIZE, num_warps=NUM_WARPS)
    return (dx,)
