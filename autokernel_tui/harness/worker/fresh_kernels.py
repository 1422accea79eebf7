"""Fresh inputs on the GPU in one pass (worker side; the default on CUDA, ``inputs.FRESH_WAY_VARIABLE``).

Every timed rep gets its own inputs, built on both sides from a recipe: the base set with each float
element scaled by its own factor in [0.5, 1.5). The torch way draws the factors into a float32 buffer
(4 bytes an element written), then reads them back beside the input and writes the product: 12 bytes
moved per 2-byte element, in two kernels a chunk. Here the factor is Philox's uniform draw for the
element's place in its block, made inside the one kernel that reads the input and writes the product
(4 bytes per 2-byte element). The product is taken in float32 (float64 inputs keep float64) and rounded
once into the input's type, as the torch way's ``torch.mul`` does.

The factor is the same function of (seed, element index) (``BLOCK`` fixed) in every process on a device,
so the judge and a contestant build the same tensors; it is not the torch way's factor, so both sides must
take the same way, which the environment variable that reaches them alike decides.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from autokernel_tui.harness.worker.fingerprint_kernels import FLOAT_TYPES

BLOCK = 4096  # elements per program: four quarters of 1024, 8 a thread each at 4 warps
NUM_WARPS = 4
# Seeds enter the kernel as one 64-bit type whatever their size (Triton would type a small one as i32
# and compile a second kernel for it): folded into [2^62, 2^63).
SEED_BASE = 1 << 62


@triton.jit
def _scale_quarter(SRC, DST, idx, n, u, WIDE: tl.constexpr):
    live = idx < n
    factor = 0.5 + u
    x = tl.load(SRC + idx, mask=live, other=0.0)
    if WIDE:  # a float64 input: the product kept in float64
        y = x.to(tl.float64) * factor.to(tl.float64)
    else:
        y = x.to(tl.float32) * factor
    tl.store(DST + idx, y.to(DST.dtype.element_ty), mask=live)


@triton.jit(do_not_specialize=["seed"])
def _scale_uniform(SRC, DST, n, seed, WIDE: tl.constexpr, BLOCK: tl.constexpr):
    # One Philox call (10 rounds of 32-bit multiplies: the cost here, not the bytes) gives four uniforms:
    # the factors of elements t, t + Q, t + 2Q and t + 3Q of the program's block, so each quarter is read
    # and written contiguously and no draw is thrown away (tl.rand keeps one of the four).
    Q: tl.constexpr = BLOCK // 4
    pid = tl.program_id(0).to(tl.int64)
    t = tl.arange(0, Q)
    u0, u1, u2, u3 = tl.rand4x(seed, pid * Q + t)
    base = pid * BLOCK + t
    _scale_quarter(SRC, DST, base, n, u0, WIDE)
    _scale_quarter(SRC, DST, base + Q, n, u1, WIDE)
    _scale_quarter(SRC, DST, base + 2 * Q, n, u2, WIDE)
    _scale_quarter(SRC, DST, base + 3 * Q, n, u3, WIDE)


def fits(t: torch.Tensor) -> bool:
    """Whether ``scaled`` takes ``t``: a contiguous tensor of a floating type (others: the torch way)."""
    return t.dtype in FLOAT_TYPES and t.is_contiguous()


def scaled(t: torch.Tensor, seed: int) -> torch.Tensor:
    """A new tensor: each element of ``t`` (``fits``) times its own factor in [0.5, 1.5) drawn from ``seed``,
    in ``t``'s layout and at its storage offset (``inputs._empty_as``)."""
    from autokernel_tui.harness.worker.inputs import _empty_as  # inputs imports this module when it scales

    n = t.numel()
    out = _empty_as(t, t.dtype)
    if n:
        _scale_uniform[(triton.cdiv(n, BLOCK),)](t, out, n, SEED_BASE | (seed % SEED_BASE),
                                                 WIDE=t.dtype == torch.float64, BLOCK=BLOCK, num_warps=NUM_WARPS)
    return out


def warm(device: torch.device) -> None:
    """Compile ``scaled`` for every floating type in this process (a spare, before it is given a kernel,
    off any evaluation's clock). Best effort: what fails here is compiled when first used."""
    try:
        for dtype in FLOAT_TYPES:
            scaled(torch.ones(BLOCK, dtype=dtype, device=device), 0)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    except Exception:  # noqa: BLE001 - an optimisation only
        pass
