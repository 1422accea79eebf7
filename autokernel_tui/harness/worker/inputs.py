"""Inputs both sides build from the same recipe, and output fingerprints (worker side).

The judge never sends tensors to a contestant: it sends a recipe (the task's
``make_inputs`` at a shape, dtype and secret base seed, then perturbations and
adversarial transforms with their own seeds), and both processes build the same
tensors with this module. A contestant that builds anything else only makes its
own outputs wrong, since the judge checks them against the reference on the
inputs it built itself.

A fingerprint of an output is its dot product with a random vector drawn from a
seed the judge reveals only after the calls it covers have returned, so it
cannot be computed ahead, and computing it later costs as much as the call.

The judge's bound on a correct output's fingerprint is statistical, not worst-case: for an error
e fixed before w is drawn, <e, w> ~ N(0, ||e||^2), so a correct output (||e|| within the task's
relative-L2 tolerance) lies within FINGERPRINT_Z of those standard deviations of the reference's
fingerprint but for a chance of 2.6e-12. The worst case (Cauchy-Schwarz, ||e|| ||w||) is sqrt(n)
times wider: at GPT-2's 6.3M-element outputs in bfloat16 it let a stale output (28% off) pass 19
checks of 20; this bound refuses it 4 times in 5 per check (tests/harness/test_units.py).
"""

from __future__ import annotations

import math
import os
from typing import Any, Iterable, Iterator, Sequence

import torch

from autokernel_tui.harness.worker.correctness import ROUNDING_FACTOR

FINGERPRINT_CHUNK = 1 << 24
FINGERPRINT_Z = 7.0  # standard deviations of a correct output's fingerprint error allowed (two-sided 2.6e-12)
# A product's float32 rounding (2^-24 relative) with room for the float64 sums (n 2^-53, n < 2^28 a chunk).
PRODUCT_ROUNDING = 2.0 ** -22
# A batch keeps each output's w up to this many elements (256 MB of float32); a larger output's w is drawn a
# chunk at a time as it is used. A whole w of KernelBench ReLU's 6.4 GB output was 6.4 GB more in the judge
# and again in the contestant, where a 141 GB H200 fitted it and an 80 GB H100 ran out (run 14).
WEIGHT_CACHE_ELEMENTS = 1 << 26
# "kernel" (the default): on a CUDA device, fingerprints by the fused kernels of ``fingerprint_kernels``
# (run 18, H100: a warm evaluation's fingerprints 0.77 s -> 0.32 s, its GPU test passed), elsewhere the torch
# way; "torch": the torch way everywhere; "kernel-anywhere": the fused kernels on the CPU too, under Triton's
# interpreter (slow: the tests drive the real harness through it)
FINGERPRINT_WAY_VARIABLE = "AUTOKERNEL_HARNESS_FINGERPRINT"
# The same three ways for the fresh inputs of every rep (``perturb``): "kernel" scales each float element by a
# factor drawn inside one fused kernel (``fresh_kernels``) on a CUDA device, where the torch way moved three
# times the bytes in two kernels a chunk. Judge and contestants read it alike, so both build the same tensors.
FRESH_WAY_VARIABLE = "AUTOKERNEL_HARNESS_FRESH"
PERTURB_CHUNK = 1 << 25  # elements scaled at a time (a 128 MB float32 factor)


def perturb(inputs: tuple, seed: int, device: str | torch.device) -> tuple:
    """Fresh contents for a trial: each float element scaled by its own random factor
    in [0.5, 1.5) (zeros, signs, infinities and row structure survive), integer
    tensors permuted. Every element changes, so no pointer, id, version or
    fingerprint cache can replay an old output. On a CUDA device the float tensors
    are scaled by the fused kernel (``FRESH_WAY_VARIABLE``), each from its own seed."""
    gen = torch.Generator(device=device).manual_seed(seed)
    fused = _fresh_way(torch.device(device))
    out = []
    for k, t in enumerate(inputs):
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel():
            if fused:
                from autokernel_tui.harness.worker import fresh_kernels
                if fresh_kernels.fits(t):
                    out.append(fresh_kernels.scaled(t, _chunk_seed(seed, k + 1)))
                    continue
            out.append(_scaled(t, gen))
        elif isinstance(t, torch.Tensor) and t.numel() > 1 and t.dtype != torch.bool:
            base = t[_first_copy(t)]  # a broadcast one: its own elements permuted, broadcast again
            perm = torch.randperm(base.numel(), generator=gen, device=t.device)
            out.append(_same_layout(base.reshape(-1)[perm].reshape(base.shape), base).expand(t.shape))
        else:
            out.append(t)
    return tuple(out)


def _scaled(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """``t`` with each element scaled by its own factor in [0.5, 1.5), a chunk at a time: a whole float32
    copy and a whole factor tensor of a 6.4 GB input (KernelBench's) were 13 GB more at the peak."""
    if not t.is_contiguous():  # a strided input keeps its layout, as built whole
        r = torch.rand(t.shape, generator=gen, device=t.device, dtype=torch.float32)
        return _same_layout((t.float() * r.add_(0.5)).to(t.dtype), t)
    out = _empty_as(t, t.dtype)
    r = torch.empty(min(t.numel(), PERTURB_CHUNK), dtype=torch.float32, device=t.device)
    for src, dst in zip(t.view(-1).split(PERTURB_CHUNK), out.view(-1).split(PERTURB_CHUNK)):
        # Two kernels a chunk: the factors drawn in their range, then one product computed in float32 and
        # rounded into ``dst`` (12 bytes moved per 2-byte element, where a rand, an add, an upcast, a
        # product and a copy moved 36). The fused kernel moves 4 (``fresh_kernels``).
        factors = r[:src.numel()].uniform_(0.5, 1.5, generator=gen)
        torch.mul(src, factors, out=dst)
    return out


def _same_layout(value: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``value`` in ``like``'s exact strides, gaps included (a q of a packed qkv projection: [B, H, S, D] with
    the row stride 3 H D), broadcast dims broadcast again (a class token expanded over the batch: its first
    copy); TensorIterator's result is dense, and a generated starter made for the recorded layout would
    meet another."""
    first = _first_copy(like)
    if any(f != slice(None) for f in first):
        return _same_layout(value[first], like[first]).expand(like.shape)
    try:
        return _empty_as(like, value.dtype, value.device).copy_(value)
    except RuntimeError:  # another overlapping layout (as_strided): as computed
        return value


def _empty_as(like: torch.Tensor, dtype: torch.dtype, device: torch.device | None = None) -> torch.Tensor:
    """An empty tensor in ``like``'s strides and at its storage offset (a generated task's inputs sit a
    little way into their storage, as a model's views do: a kernel that counts a view's offset from its
    storage's start must meet one in every rep, not only the first)."""
    off = like.storage_offset()
    if not off:
        return torch.empty_strided(like.shape, like.stride(), dtype=dtype, device=device or like.device)
    span = 1 + sum((n - 1) * st for n, st in zip(like.shape, like.stride()))
    return torch.empty(off + span, dtype=dtype, device=device or like.device).as_strided(like.shape, like.stride(), off)


def nbytes(inputs: tuple) -> int:
    return sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))


class InputBuilder:
    """Builds inputs from recipes for one reference module on one device; keeps base inputs.

    A recipe: ``{"dims": {...}, "dtype": "float16", "base_seed": int, "steps": [...]}`` with
    steps ``["perturb", seed]`` and ``["transform", name, seed]``.
    """

    def __init__(self, ref: Any, device: str, cache_bytes: int) -> None:
        self.ref = ref
        self.device = device
        self.cache_bytes = cache_bytes
        self._base: dict[tuple, tuple] = {}

    def base(self, dims: dict, dtype: str, seed: int) -> tuple:
        key = (tuple(sorted(dims.items())), dtype, seed)
        if key not in self._base:
            self._base[key] = tuple(self.ref.make_inputs(dict(dims), getattr(torch, dtype), self.device, seed))
            self._evict()
        return self._base[key]

    def _evict(self, limit: int | None = None, keep: int = 1) -> None:
        """Oldest first, until the cache fits ``limit`` (default: its own size) or ``keep`` sets are left."""
        limit = self.cache_bytes if limit is None else limit
        while len(self._base) > keep and sum(nbytes(v) for v in self._base.values()) > limit:
            self._base.pop(next(iter(self._base)))

    def trim(self, limit: int) -> None:
        """Between evaluations: keep only what fits ``limit``, possibly nothing."""
        self._evict(limit, keep=0)

    def build(self, recipe: dict) -> tuple:
        inputs = self.base(recipe["dims"], recipe["dtype"], int(recipe["base_seed"]))
        for step in recipe.get("steps", ()):
            if step[0] == "perturb":
                inputs = perturb(inputs, int(step[1]), self.device)
            elif step[0] == "transform":
                transform = (getattr(self.ref, "ADVERSARIAL", {}) or {})[step[1]]
                inputs = tuple(transform(inputs, torch.Generator().manual_seed(int(step[2]))))
            else:
                raise ValueError(f"unknown recipe step {step[0]!r}")
        # A backward task's saved tensors (a forward's output, its logsumexp) belong to the forward inputs
        # beside them: computed again after fresh contents (a transform, last, computes them itself)
        steps = recipe.get("steps", ())
        refresh = getattr(self.ref, "refresh", None)
        if refresh is not None and steps and steps[-1][0] == "perturb":
            inputs = refresh(inputs)
        return inputs


def refill_(inputs: tuple, fresh: tuple) -> None:
    """New contents in the same tensors: same address, id and ``_version`` (written through .data); a
    broadcast input through the memory it has (its first copy along each broadcast dim)."""
    for t, new in zip(inputs, fresh):
        if isinstance(t, torch.Tensor):
            first = _first_copy(t)
            t.data[first].copy_(new[first])


def _first_copy(t: torch.Tensor) -> tuple:
    """An index of ``t`` that drops its broadcast dims (stride 0) to their first element: memory it owns."""
    return tuple(slice(0, 1) if st == 0 and n > 1 else slice(None) for n, st in zip(t.shape, t.stride()))


def _chunk_seed(seed: int, j: int) -> int:
    """The seed of w's chunk ``j``: ``seed`` itself for the first (an output of one chunk draws w as one
    randn from ``seed``), a 63-bit mix of both for the others."""
    return seed if j == 0 else (seed * 0x9E3779B97F4A7C15 + j) % (1 << 63)


def _weight_chunks(numel: int, seed: int, device: torch.device) -> Iterator[torch.Tensor]:
    """w ~ N(0, 1) of ``numel`` elements, FINGERPRINT_CHUNK at a time: never more than a chunk of it alive.
    Where fingerprints are taken by the fused kernels, w is theirs (``fingerprint_kernels.fill_normal``)."""
    device = torch.device(device)
    if _kernel_way(device):
        from autokernel_tui.harness.worker import fingerprint_kernels
        for start in range(0, numel, FINGERPRINT_CHUNK):
            yield fingerprint_kernels.fill_normal(min(FINGERPRINT_CHUNK, numel - start), start, seed, device)
        return
    for j, start in enumerate(range(0, numel, FINGERPRINT_CHUNK)):
        gen = torch.Generator(device=device).manual_seed(_chunk_seed(seed, j))
        yield torch.randn(min(FINGERPRINT_CHUNK, numel - start), generator=gen, device=device, dtype=torch.float32)


def _dot(flat: torch.Tensor, w: Iterable[torch.Tensor]) -> torch.Tensor:
    """<flat, w> as a float64 0-d tensor on the device (no sync): each product rounded once to float32
    (or kept in float64 for a float64 output), every sum in float64, so the rounding error is at most
    PRODUCT_ROUNDING of sum |flat_i w_i| (a float32 dot's accumulation could err far more)."""
    parts = [torch.mul(a, b).sum(dtype=torch.float64) for a, b in zip(flat.split(FINGERPRINT_CHUNK), w)]
    return parts[0] if len(parts) == 1 else torch.stack(parts).sum()


def _fused(device: torch.device, variable: str) -> bool:
    """Whether the fused kernels do the work whose way ``variable`` chooses, on ``device``."""
    way = os.environ.get(variable, "kernel")
    return way == "kernel-anywhere" or (way == "kernel" and device.type == "cuda")


def _kernel_way(device: torch.device) -> bool:
    """Whether fingerprints on ``device`` come from the fused kernels (``FINGERPRINT_WAY_VARIABLE``)."""
    return _fused(device, FINGERPRINT_WAY_VARIABLE)


def _fresh_way(device: torch.device) -> bool:
    """Whether fresh inputs on ``device`` come from the fused kernel (``FRESH_WAY_VARIABLE``)."""
    return _fused(device, FRESH_WAY_VARIABLE)


def warm_fingerprints(device: torch.device) -> None:
    """Where the fused kernels take the fingerprints or build fresh inputs, compile them now (a spare,
    before its kernel)."""
    if _kernel_way(device):
        from autokernel_tui.harness.worker import fingerprint_kernels
        fingerprint_kernels.warm(device)
    if _fresh_way(device):
        from autokernel_tui.harness.worker import fresh_kernels
        fresh_kernels.warm(device)


def _fingerprint_t(out: torch.Tensor, seed: int, weights: dict | None = None) -> torch.Tensor:
    """<out, w>; ``weights`` keeps each (seed, size, device)'s w for the other reps of a batch (up to
    WEIGHT_CACHE_ELEMENTS; a larger w is drawn again, a chunk at a time, for each rep). The fused
    kernels, where chosen, draw w inside the one pass over the output and keep nothing."""
    flat = out.detach().reshape(-1)
    if not flat.numel():
        return torch.zeros((), dtype=torch.float64, device=flat.device)
    if _kernel_way(flat.device):
        from autokernel_tui.harness.worker import fingerprint_kernels
        if flat.dtype in fingerprint_kernels.FLOAT_TYPES:
            return fingerprint_kernels.dot_normal(flat.contiguous(), seed)
        return _dot(flat, _weight_chunks(flat.numel(), seed, flat.device))
    if flat.numel() > WEIGHT_CACHE_ELEMENTS:
        return _dot(flat, _weight_chunks(flat.numel(), seed, flat.device))
    weights = {} if weights is None else weights
    key = (seed, flat.numel(), flat.device)
    if key not in weights:
        weights[key] = list(_weight_chunks(flat.numel(), seed, flat.device))
    return _dot(flat, weights[key])


def fingerprint(out: torch.Tensor, seed: int) -> float:
    """<out, w> for w ~ N(0, 1) drawn from ``seed``, summed in float64 over float32 chunk dots."""
    return float(_fingerprint_t(out, seed))


def fingerprints(outs: Sequence[torch.Tensor], seed: int) -> list[float]:
    return fingerprint_batch([outs], seed)[0]


def fingerprint_batch(batch: Sequence[Sequence[torch.Tensor]], seed: int) -> list[list[float]]:
    """Fingerprints of every output of every rep (output ``i`` of every rep with seed ``seed + i``), read back
    from the device once: a sync per output cost more than the dots on a GPU.

    One w per output serves every rep of the batch (drawing a w per rep was most of the contestant's
    fingerprint time): the seed is revealed only after the batch's calls returned, and each rep's inputs,
    hence its right output, differ, so a shared w tells a replayed or wrong output apart as well.
    """
    weights: dict = {}
    values = [[_fingerprint_t(o, seed + i, weights) for i, o in enumerate(outs)] for outs in batch]
    flat = [v for rep in values for v in rep]
    if not flat:
        return [[] for _ in values]
    if len({v.device for v in flat}) == 1:
        got = iter(torch.stack(flat).tolist())
    else:  # outputs on different devices: each read on its own
        got = iter(float(v) for v in flat)
    out: list[list] = [[next(got) for _ in rep] for rep in values]
    for rep, outs in zip(out, batch):  # an output with inf or nan: its finite part and where its specials are
        for i, value in enumerate(rep):
            if not math.isfinite(value):
                rep[i] = _special_sums(outs[i], seed + i)[:2]
    return out


def _special_codes(t: torch.Tensor) -> torch.Tensor:
    """inf and nan as codes (nan 1, inf 2, -inf 3; else 0): an output with any of them is fingerprinted as
    two numbers, its finite elements' dot with w and its codes' (``_special_sums``), which the judge's
    reference must match."""
    codes = torch.zeros(t.shape, dtype=torch.float32, device=t.device)
    codes[torch.isnan(t)] = 1.0
    codes[torch.isposinf(t)] = 2.0
    codes[torch.isneginf(t)] = 3.0
    return codes


def _special_sums(out: torch.Tensor, seed: int, device: torch.device | None = None) -> list[float]:
    """[<out's finite elements, w>, <codes of its inf and nan, w>, the finite elements' sum of squares and
    sum of |x w|], each summed in float64: the pair a fingerprint is where inf or nan is, and what the
    judge's bound needs of the finite part."""
    flat = out.detach().reshape(-1)
    device = flat.device if device is None else device
    sums = []
    for a, w in zip(flat.split(FINGERPRINT_CHUNK), _weight_chunks(flat.numel(), seed, device)):
        a = a.to(device)
        finite = torch.where(torch.isfinite(a), a, torch.zeros((), dtype=a.dtype, device=device))
        d = finite.double()
        sums.append(torch.stack([torch.mul(finite, w).sum(dtype=torch.float64),
                                 torch.mul(_special_codes(a), w).sum(dtype=torch.float64),
                                 d.square().sum(), (d.abs() * w.double().abs()).sum()]))
    return torch.stack(sums).sum(0).tolist()


def fingerprint_bound(ref: torch.Tensor, seed: int, max_rel_l2: float,
                      device: torch.device | str | None = None, out_dtype: torch.dtype | None = None
                      ) -> tuple[Any, float]:
    """(the reference's fingerprint, how far a correct output's may lie from it).

    A correct output passes ``correctness.compare``, so its error e has ||e|| <= tol ||ref||, tol the
    task's ``max_rel_l2`` or, where rounding the reference to ``out_dtype`` alone errs more, that rounding
    times ``ROUNDING_FACTOR`` (as ``compare`` allows; here an upper bound of the rounding, no extra pass
    over the output). w is drawn after e is fixed, so <e, w> is normal with standard deviation ||e||: the
    bound is FINGERPRINT_Z of those, plus the contestant's rounding (``_dot``). One read back from the
    device. ``device``: where the candidate's fingerprint was taken (w is drawn there; a reference
    computed on the host is brought over a chunk at a time); default the reference's own.
    ``out_dtype``: the candidate output's dtype (default the reference's). A reference with inf or nan
    gives the pair ``_special_sums`` gives (its finite part's fingerprint, its specials'), the bound then
    for the finite part.
    """
    flat = ref.detach().reshape(-1)
    if not flat.numel():
        return 0.0, 1e-30
    sums = []  # in float64 a chunk at a time: no whole double copy of a many-GB output, no whole w
    device = flat.device if device is None else torch.device(device)
    if _kernel_way(device):
        from autokernel_tui.harness.worker import fingerprint_kernels
        flat = flat if flat.dtype in fingerprint_kernels.FLOAT_TYPES else flat.double()
        for start in range(0, flat.numel(), FINGERPRINT_CHUNK):
            chunk = flat[start:start + FINGERPRINT_CHUNK].to(device).contiguous()
            sums.append(fingerprint_kernels.bound_sums(chunk, start, seed))
    else:
        for a, b in zip(flat.split(FINGERPRINT_CHUNK), _weight_chunks(flat.numel(), seed, device)):
            d, wd = a.to(device).double(), b.double()
            sums.append(torch.stack([torch.dot(d, wd), d.square().sum(), wd.square().sum(),
                                     (d.abs() * wd.abs()).sum()]))
    ref_fp, ref_sq, w_sq, abs_sum = torch.stack(sums).sum(0).tolist()
    special = not math.isfinite(ref_fp)
    if special:  # the pair a correct output's fingerprint must give, and the finite part's figures
        finite_fp, codes_fp, ref_sq, abs_sum = _special_sums(ref, seed, device)
        pair = [finite_fp, codes_fp]
    ref_norm, w_norm = math.sqrt(ref_sq), math.sqrt(w_sq)
    tol = max_rel_l2
    if out_dtype in (torch.float16, torch.bfloat16) and ref_norm > 0:
        info = torch.finfo(out_dtype)  # |round(x) - x| <= eps/2 |x| in range, <= tiny eps/2 below it
        rounding = info.eps / 2 * ref_norm + info.tiny * info.eps / 2 * math.sqrt(flat.numel())
        tol = max(tol, ROUNDING_FACTOR * rounding / ref_norm)
    err_norm = tol * (ref_norm if ref_norm > 0 else 1.0)  # compare's rel_l2 is absolute for a zero reference
    bound = FINGERPRINT_Z * err_norm + PRODUCT_ROUNDING * (abs_sum + err_norm * w_norm) + 1e-30
    return (pair if special else ref_fp), bound


def fingerprint_ok(value: Any, ref_fp: Any, bound: float) -> bool:
    """Whether a claimed fingerprint is a correct output's: within ``bound`` of the reference's, or, where
    either has inf or nan, the same pair (finite part within ``bound``, the specials' codes exactly)."""
    if isinstance(ref_fp, list) or isinstance(value, list):
        if not (isinstance(ref_fp, list) and isinstance(value, list) and len(value) == 2
                and all(isinstance(v, (int, float)) and math.isfinite(v) for v in value)):
            return False
        # the codes' dot is a sum of exact float32 products in float64: equal but for the order of the sums
        return abs(value[0] - ref_fp[0]) <= bound and abs(value[1] - ref_fp[1]) <= 1e-9 * (1.0 + abs(ref_fp[1]))
    return isinstance(value, (int, float)) and math.isfinite(value) and abs(value - ref_fp) <= bound
