"""GELU in Triton (erf and tanh variants): the one file an agent edits.

Elementwise over the flattened tensor; the variant is a compile-time flag so
each gets its own specialised kernel. Memory-bound: wide contiguous blocks
(16-byte loads per thread), fp32 math, one store.
"""

import collections

import torch
import triton
import triton.language as tl

# Tunable knobs: module-level constants the offline tuner rewrites.
BLOCK_SIZE = 4096  # elements per program
NUM_WARPS = 8


@triton.jit
def _gelu_math(x, TANH: tl.constexpr):
    x = x.to(tl.float32)
    if TANH:
        # x/2 * (1 + tanh(z)) == x * sigmoid(2z) == x / (1 + exp(-2z)); no cancellation
        # near tanh = -1, and exp2 overflowing to inf gives the right -0.
        z = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        y = x / (1.0 + tl.exp2(z * -2.8853900817779268))  # -2 * log2(e)
    else:
        y = x * _normal_cdf(x)
    return y


@triton.jit
def _normal_cdf(x):
    # Phi(x) = 1 - erfc(z)/2 (x >= 0) or erfc(z)/2 (x < 0), z = |x|/sqrt(2), with erfc from a
    # Chebyshev fit (Numerical Recipes erfcc: erfc(z) = t exp(P(t) - z^2), t = 1/(1 + z/2),
    # relative error < 1.2e-7 for every z). Branch-free: one rcp, ten FMAs and one ex2;
    # libdevice's erf costs more instructions, which made 16-bit GELU compute-bound. The
    # x < 0 side never forms 1 + erf, so the tail keeps its digits.
    # P's coefficients are pre-multiplied by log2(e), with the factor 1/2 folded in as -1.
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
    half_erfc = t * tl.exp2(p - x * x * 0.7213475204444817)  # = erfc(z) / 2
    return tl.where(x >= 0, 1.0 - half_erfc, half_erfc)


@triton.jit
def _gelu(X, Y, n_elements, TANH: tl.constexpr, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offs = start + tl.arange(0, BLOCK)
    if start + BLOCK <= n_elements:
        # Full block: no mask, so loads and stores stay 16-byte vectors even when
        # the element count is odd (a mask the compiler cannot prove uniform would split them).
        tl.store(Y + offs, _gelu_math(tl.load(X + offs), TANH).to(Y.dtype.element_ty))
    else:
        mask = offs < n_elements
        y = _gelu_math(tl.load(X + offs, mask=mask, other=0.0), TANH)
        tl.store(Y + offs, y.to(Y.dtype.element_ty), mask=mask)


# Launch plans, decided once per input signature: (numel, approximate) -> _Plan. A call is a key,
# one dict lookup, one allocation and one launch; the plan is computed from the knobs above.
_PLANS: dict = {}
# made_under: the _knobs() it was computed under (see _knobs)
_Plan = collections.namedtuple("_Plan", "made_under launch grid args meta")


def _knobs() -> tuple:
    """Everything a plan is computed from besides the inputs: the knobs and the kernels it binds. A plan
    made under other values (a knob set in place, as knob_sweep.py and the tests do) is made again."""
    return (
        BLOCK_SIZE, NUM_WARPS, _gelu,
    )


def _plan(n: int, approximate: str, made_under: tuple):
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', not {approximate!r}")
    grid = (triton.cdiv(n, BLOCK_SIZE),)
    return _Plan(made_under, _gelu[grid], grid, (n,),
                 dict(TANH=approximate == "tanh", BLOCK=BLOCK_SIZE, num_warps=NUM_WARPS))


def kernel_fn(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    if not x.is_contiguous():
        x = x.contiguous()
    key = (x.numel(), approximate)  # dtype and device: Triton's own specialisation; the grid does not depend on them
    knobs = _knobs()
    p = _PLANS.get(key)
    if p is None or p.made_under != knobs:
        p = _PLANS[key] = _plan(*key, knobs)
    y = torch.empty_like(x)
    p.launch(x, y, *p.args, **p.meta)
    return y
