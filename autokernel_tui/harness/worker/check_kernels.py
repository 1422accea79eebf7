"""An output's check against its float64 reference in one pass (judge side; the default on CUDA,
``CHECK_WAY_VARIABLE``).

``correctness.compare`` needs six sums over the output and its reference: elements outside atol + rtol|ref|,
the reference's and the difference's squared norms, the largest difference, whether any difference is NaN,
and (16-bit outputs) the reference's own rounding error. The torch way builds float64 copies, a difference,
masks and each sum in its own kernel, about 150 bytes moved per element, and reads a flag back per chunk:
0.16 s of a warm rmsnorm evaluation (run 21, H100), the judge's largest part. Here one kernel reads the
output and the reference once (10-12 bytes an element) and writes seven float64 partials per block; one
readback of their totals gives the verdict. A block also counts the reference's non-finite elements: where
there are any, the torch way checks that output (their positions must match exactly, which it tests).

The rounding term rounds the reference to float32, then to the output's type (torch rounds float64 to
the 16-bit type directly); the two differ only where the first rounding lands on a tie of the second,
which moves a sum of squares over millions of elements by nothing a tolerance can see.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any

import torch
import triton
import triton.language as tl

# "kernel" (the default): the fused check on a CUDA device, the torch way elsewhere; "torch": the torch way
# everywhere; "kernel-anywhere": the fused check on the CPU too, under Triton's interpreter (the tests)
CHECK_WAY_VARIABLE = "AUTOKERNEL_HARNESS_CHECK"
BLOCK = 1024
NUM_WARPS = 4
LOW_TYPES = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}
TAKEN = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# the partials, in this order, one row per block
BAD, REF_SQ, ERR_SQ, MAX_DIFF, ANY_NAN, ROUND_SQ, NONFINITE = range(7)


@triton.jit
def _check_partials(OUT, REF, PART, TOL, n, LOW: tl.constexpr, BLOCK: tl.constexpr):
    # atol and rtol from a float64 pair in memory: a Python float argument reaches a kernel as float32, which
    # would move the bound off the torch way's at its last bits
    atol = tl.load(TOL)
    rtol = tl.load(TOL + 1)
    pid = tl.program_id(0).to(tl.int64)
    idx = pid * BLOCK + tl.arange(0, BLOCK)
    live = idx < n
    o = tl.load(OUT + idx, mask=live, other=0.0).to(tl.float64)
    r = tl.load(REF + idx, mask=live, other=0.0).to(tl.float64)
    diff = tl.abs(o - r)
    bound = atol + rtol * tl.abs(r)
    bad = live & ~(diff <= bound)  # NaN in the output is outside every bound
    is_nan = diff != diff
    gap = r - r  # NaN where r is inf or NaN, else 0
    nonfinite = live & (gap != gap)
    zero = tl.zeros_like(diff)
    row = PART + pid * 7
    tl.store(row + 0, tl.sum(tl.where(bad, 1.0, zero)))
    tl.store(row + 1, tl.sum(r * r))
    tl.store(row + 2, tl.sum(diff * diff))
    tl.store(row + 3, tl.max(tl.where(is_nan, zero, diff)))  # NaN said by ANY_NAN, not by the max
    tl.store(row + 4, tl.max(tl.where(is_nan, 1.0, zero)))
    if LOW is not None:
        rounded = r.to(tl.float32).to(LOW).to(tl.float64) - r
        tl.store(row + 5, tl.sum(rounded * rounded))
    else:
        tl.store(row + 5, 0.0)
    tl.store(row + 6, tl.sum(tl.where(nonfinite, 1.0, zero)))


# Why the fused check was given up in this process (its first failure), if it was: the torch way from then on.
_given_up: list[str] = []
# Output types on which the fused check has agreed with the torch way in this process: it decides for those.
_trusted: set[torch.dtype] = set()
AGREE_REL = 1e-6  # the two ways' largest difference and relative L2 error may differ by this much (sum order)


def chosen(device: torch.device) -> bool:
    """Whether checks on ``device`` take the fused kernel (``CHECK_WAY_VARIABLE``), unless given up here."""
    way = os.environ.get(CHECK_WAY_VARIABLE, "kernel")
    return not _given_up and (way == "kernel-anywhere" or (way == "kernel" and device.type == "cuda"))


def give_up(exc: BaseException) -> None:
    """The fused check failed (a Triton or driver this build was not tried on): the torch way decides from now
    on in this process, which says so once on stderr (the judge's log)."""
    if not _given_up:
        _given_up.append(f"{type(exc).__name__}: {exc}".splitlines()[0][:300])
        print(f"harness: the fused output check failed ({_given_up[0]}); checking the torch way from now on",
              file=sys.stderr, flush=True)


def trusted(dtype: torch.dtype) -> bool:
    return dtype in _trusted


def vouch(dtype: torch.dtype, fused: Any, plain: Any) -> None:
    """The first fused check of an output type in this process, beside the torch way's on the same output:
    the same verdict and figures make it trusted for that type; anything else hands every later check to the
    torch way (``give_up``). A kernel never run on this Triton or driver could be wrong without failing."""
    def close(a: float, b: float) -> bool:
        return (math.isinf(a) and math.isinf(b)) or math.isclose(a, b, rel_tol=AGREE_REL, abs_tol=1e-300)
    if (fused.ok == plain.ok and close(fused.max_abs_err, plain.max_abs_err)
            and close(fused.rel_l2_err, plain.rel_l2_err)):
        _trusted.add(dtype)
    else:
        give_up(ValueError(f"{dtype} output: fused {fused.ok} max {fused.max_abs_err:.6g} rel_l2 "
                           f"{fused.rel_l2_err:.6g}, torch {plain.ok} max {plain.max_abs_err:.6g} rel_l2 "
                           f"{plain.rel_l2_err:.6g}"))


def takes(out: torch.Tensor, ref: torch.Tensor) -> bool:
    """Whether ``sums`` can check ``out`` against ``ref``: the way chosen on the output's device, both there,
    contiguous, the output a floating type and the reference float64 (a reference computed in host memory,
    or an integer output: the torch way)."""
    return (chosen(out.device) and out.dtype in TAKEN and ref.dtype == torch.float64
            and ref.device == out.device and out.shape == ref.shape and out.is_contiguous() and ref.is_contiguous())


def sums(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> list[float] | None:
    """[elements outside the bound, sum ref^2, sum diff^2, max |diff| of the non-NaN, any NaN (0/1), rounding
    error^2], read back once; None where the reference has inf or NaN (the torch way checks their places)."""
    n = out.numel()
    if n == 0:
        return [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    blocks = triton.cdiv(n, BLOCK)
    part = torch.empty((blocks, 7), dtype=torch.float64, device=out.device)
    tol = torch.tensor([float(atol), float(rtol)], dtype=torch.float64).to(out.device)
    _check_partials[(blocks,)](out.detach(), ref.detach(), part, tol, n, LOW=LOW_TYPES.get(out.dtype), BLOCK=BLOCK,
                               num_warps=NUM_WARPS)
    total = part.sum(0)
    total[MAX_DIFF] = part[:, MAX_DIFF].max()
    total[ANY_NAN] = part[:, ANY_NAN].max()
    values = total.tolist()
    if values[NONFINITE] > 0:
        return None
    return values[:NONFINITE]


def warm(device: torch.device) -> None:
    """Compile the check for every output type in this process (the judge, before its first evaluation); where
    that fails, the torch way checks from the start (``give_up``)."""
    if not chosen(device):
        return
    try:
        ref = torch.ones(BLOCK, dtype=torch.float64, device=device)
        for dtype in TAKEN:
            sums(ref.to(dtype), ref, 1e-3, 1e-3)
    except Exception as exc:  # noqa: BLE001 - an optimisation only
        give_up(exc)
