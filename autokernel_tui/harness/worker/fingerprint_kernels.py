"""Output fingerprints on the GPU in one pass (worker side; the default on CUDA, ``AUTOKERNEL_HARNESS_FINGERPRINT``).

The torch way (``inputs._dot``) draws w with ``torch.randn`` (4 bytes an element written), writes the
float32 product (4 more) and reads it back for the float64 sum: about 14 bytes moved per element of a
16-bit output, and a whole w drawn again for every rep of an output over the weight cache. Here w is
Philox's normal draw for each element's place in its block (four per Philox call), made inside the
kernel that reads the output once (2 bytes an element of a 16-bit output): each product rounded once to
float32 (float64 outputs keep float64), summed in float64 within a program, the programs' partial sums
added by torch in a fixed order, so the same output always gives the same number (the determinism check
compares two of them exactly).

w is the same function of (seed, element index) wherever it is drawn: ``fill_normal`` writes it out for
the judge's bound and for the special-value sums, and chunks of it line up because the index is global
(a chunk starts at a multiple of BLOCK, as ``inputs.FINGERPRINT_CHUNK`` does).
The way is chosen by an environment variable that reaches the judge and every contestant alike
(``inputs.FINGERPRINT_WAY_VARIABLE``: ``AUTOKERNEL_HARNESS_`` passes the sandbox's allowlist). The default on
CUDA since run 18 (H100): a warm rmsnorm evaluation's fingerprints went from 0.44 s + 0.33 s (taken, checked)
to 0.18 s + 0.14 s, and its GPU test passed; ``torch`` brings the torch way back.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 4096  # elements per program: four quarters of 1024, 8 a thread each at 4 warps
NUM_WARPS = 4
FLOAT_TYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


# seed and first_block are values, not shapes: one compiled kernel for all of them (an integer argument
# equal to 1, or divisible by 16, would otherwise be specialised into a kernel of its own).
NOT_SPECIALISED = ["seed", "first_block"]


@triton.jit
def _w4(seed, block, Q: tl.constexpr):
    """w of the four quarters of block ``block`` (of the whole output): one Philox call and two Box-Muller
    pairs give four normals, for elements t, t + Q, t + 2Q, t + 3Q of the block (tl.randn spends a Philox
    call and a Box-Muller pair on each element; those multiplies, not the bytes, bounded the kernels)."""
    return tl.randn4x(seed, block * Q + tl.arange(0, Q))


@triton.jit
def _product(X, idx, n, w, WIDE: tl.constexpr):
    live = idx < n
    if WIDE:  # a float64 output: the product kept in float64
        p = tl.load(X + idx, mask=live, other=0.0).to(tl.float64) * w.to(tl.float64)
    else:  # one float32 rounding of each product, as inputs.PRODUCT_ROUNDING allows for
        p = (tl.load(X + idx, mask=live, other=0.0).to(tl.float32) * w).to(tl.float64)
    return tl.sum(tl.where(live, p, 0.0), axis=0)


@triton.jit(do_not_specialize=NOT_SPECIALISED)
def _dot_normal(X, PARTS, n, first_block, seed, WIDE: tl.constexpr, BLOCK: tl.constexpr):
    Q: tl.constexpr = BLOCK // 4
    pid = tl.program_id(0).to(tl.int64)
    w0, w1, w2, w3 = _w4(seed, first_block + pid, Q)
    idx = pid * BLOCK + tl.arange(0, Q)
    total = _product(X, idx, n, w0, WIDE) + _product(X, idx + Q, n, w1, WIDE)
    total += _product(X, idx + 2 * Q, n, w2, WIDE) + _product(X, idx + 3 * Q, n, w3, WIDE)
    tl.store(PARTS + pid, total)


@triton.jit(do_not_specialize=NOT_SPECIALISED)
def _fill_normal(W, n, first_block, seed, BLOCK: tl.constexpr):
    Q: tl.constexpr = BLOCK // 4
    pid = tl.program_id(0).to(tl.int64)
    w0, w1, w2, w3 = _w4(seed, first_block + pid, Q)
    idx = pid * BLOCK + tl.arange(0, Q)
    tl.store(W + idx, w0, mask=idx < n)
    tl.store(W + idx + Q, w1, mask=idx + Q < n)
    tl.store(W + idx + 2 * Q, w2, mask=idx + 2 * Q < n)
    tl.store(W + idx + 3 * Q, w3, mask=idx + 3 * Q < n)


@triton.jit
def _bound_quarter(R, idx, n, w):
    live = idx < n
    d = tl.load(R + idx, mask=live, other=0.0).to(tl.float64)
    w = tl.where(live, w.to(tl.float64), 0.0)
    dw = d * w
    return tl.sum(dw, axis=0), tl.sum(d * d, axis=0), tl.sum(w * w, axis=0), tl.sum(tl.abs(dw), axis=0)


@triton.jit(do_not_specialize=NOT_SPECIALISED)
def _bound_sums(R, PARTS, n, first_block, seed, BLOCK: tl.constexpr):
    Q: tl.constexpr = BLOCK // 4
    pid = tl.program_id(0).to(tl.int64)
    w0, w1, w2, w3 = _w4(seed, first_block + pid, Q)
    idx = pid * BLOCK + tl.arange(0, Q)
    a0, b0, c0, d0 = _bound_quarter(R, idx, n, w0)
    a1, b1, c1, d1 = _bound_quarter(R, idx + Q, n, w1)
    a2, b2, c2, d2 = _bound_quarter(R, idx + 2 * Q, n, w2)
    a3, b3, c3, d3 = _bound_quarter(R, idx + 3 * Q, n, w3)
    out = PARTS + pid * 4
    tl.store(out, a0 + a1 + a2 + a3)
    tl.store(out + 1, b0 + b1 + b2 + b3)
    tl.store(out + 2, c0 + c1 + c2 + c3)
    tl.store(out + 3, d0 + d1 + d2 + d3)


def _first_block(offset: int) -> int:
    if offset % BLOCK:
        raise ValueError(f"offset {offset} is not a multiple of BLOCK ({BLOCK}): w is drawn a block at a time")
    return offset // BLOCK


def bound_sums(chunk: torch.Tensor, offset: int, seed: int) -> torch.Tensor:
    """[<r, w>, sum r^2, sum w^2, sum |r w|] in float64 over one chunk of a reference (elements ``offset``
    onwards of the whole, a multiple of BLOCK; one-dimensional, contiguous, floating), w as ``dot_normal``
    draws it: the four figures of the judge's bound in one pass, no float64 copy of the chunk or of w."""
    n = chunk.numel()
    parts = torch.empty((triton.cdiv(n, BLOCK), 4), dtype=torch.float64, device=chunk.device)
    _bound_sums[(parts.shape[0],)](chunk, parts, n, _first_block(offset), seed, BLOCK=BLOCK, num_warps=NUM_WARPS)
    return parts.sum(0)


def dot_normal(flat: torch.Tensor, seed: int) -> torch.Tensor:
    """<flat, w> as a float64 0-d tensor on flat's device (no sync); ``flat`` one-dimensional, contiguous,
    of a floating type."""
    n = flat.numel()
    parts = torch.empty(triton.cdiv(n, BLOCK), dtype=torch.float64, device=flat.device)
    _dot_normal[(parts.numel(),)](flat, parts, n, 0, seed, WIDE=flat.dtype == torch.float64, BLOCK=BLOCK,
                                  num_warps=NUM_WARPS)
    return parts.sum()


def fill_normal(n: int, offset: int, seed: int, device: torch.device) -> torch.Tensor:
    """w's elements ``offset .. offset + n - 1`` for ``seed`` (float32; ``offset`` a multiple of BLOCK), as
    ``dot_normal`` draws them."""
    w = torch.empty(n, dtype=torch.float32, device=device)
    if n:
        _fill_normal[(triton.cdiv(n, BLOCK),)](w, n, _first_block(offset), seed, BLOCK=BLOCK, num_warps=NUM_WARPS)
    return w


def warm(device: torch.device) -> None:
    """Compile ``dot_normal`` for every floating output type (and ``fill_normal``) in this process: a spare
    does it after starting CUDA, before it is given a kernel, so no evaluation waits on the JIT (each
    candidate has a Triton cache of its own, which would otherwise compile them again for every source).
    Best effort: what fails to compile here is compiled when first used."""
    try:
        for dtype in FLOAT_TYPES:
            dot_normal(torch.zeros(BLOCK, dtype=dtype, device=device), 0)
        fill_normal(BLOCK, 0, 0, device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    except Exception:  # noqa: BLE001 - an optimisation only: the first real use compiles it
        pass
