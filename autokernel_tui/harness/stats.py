"""Small statistics for timings (stdlib only): percentiles, geometric means, bootstrap CIs."""

from __future__ import annotations

import math
import random
from typing import Callable, Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]."""
    xs = sorted(values)
    if not xs:
        raise ValueError("percentile of no values")
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50.0)


def geomean(values: Sequence[float]) -> float:
    vals = [v for v in values if v is not None]
    if not vals or any(v <= 0 for v in vals):
        raise ValueError("geometric mean needs positive values")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def _bootstrap(pairs: Sequence[tuple[Sequence[float], Sequence[float]]],
               resample: Callable[[random.Random, int], float], n_boot: int, seed: int,
               level: float) -> tuple[float, float, float]:
    """The geomean over shapes of median(incumbent) / median(candidate), and its percentile-bootstrap
    CI; ``resample(rng, k)`` draws shape ``k``'s ratio of one bootstrap sample."""
    point = geomean([median(inc) / median(cand) for cand, inc in pairs])
    rng = random.Random(seed)
    stats = [math.exp(sum(math.log(resample(rng, k)) for k in range(len(pairs))) / len(pairs))
             for _ in range(n_boot)]
    tail = (1.0 - level) / 2 * 100
    return point, percentile(stats, tail), percentile(stats, 100 - tail)


def bootstrap_speedup(pairs: Sequence[tuple[Sequence[float], Sequence[float]]], n_boot: int = 1000,
                      seed: int = 0, level: float = 0.95) -> tuple[float, float, float]:
    """Speedup = geomean over shapes of median(incumbent) / median(candidate), with a
    percentile-bootstrap CI (each shape's two samples resampled independently).

    ``pairs`` holds (candidate_times, incumbent_times) per shape.
    """
    def resample(rng: random.Random, k: int) -> float:
        cand, inc = pairs[k]
        c = median(rng.choices(cand, k=len(cand)))
        return median(rng.choices(inc, k=len(inc))) / c

    return _bootstrap(pairs, resample, n_boot, seed, level)


def paired_bootstrap_speedup(pairs: Sequence[tuple[Sequence[float], Sequence[float]]], batch: Sequence[int | None],
                             n_boot: int = 1000, seed: int = 0,
                             level: float = 0.95) -> tuple[float, float, float]:
    """``bootstrap_speedup``'s point and CI with each shape's reps resampled as pairs: the candidate's
    rep j with the incumbent's rep j (the same inputs, timed in the same batch pair), drawn within each
    batch of ``batch[shape]`` reps (None: the whole shape one batch). What the two sides of a batch pair
    shared (the card's clocks, drift, the machine's state then) then moves both medians of a resample
    together, as it moved both sides' times, instead of counting once per side as noise; and every
    resample keeps the design's balance of batches (each side first in half of them)."""
    for cand, inc in pairs:
        if len(cand) != len(inc):
            raise ValueError("paired resampling needs as many candidate as incumbent times per shape")
    groups = []
    for (cand, _), b in zip(pairs, batch):
        size = b if b and b > 0 else len(cand)
        groups.append([range(start, min(start + size, len(cand))) for start in range(0, len(cand), size)])

    def resample(rng: random.Random, k: int) -> float:
        cand, inc = pairs[k]
        idx = [j for g in groups[k] for j in rng.choices(g, k=len(g))]
        return median([inc[j] for j in idx]) / median([cand[j] for j in idx])

    return _bootstrap(pairs, resample, n_boot, seed, level)


def screen_passed(speedup: float, ci_low: float, margin: float) -> bool:
    """Whether a first comparison calls for the roles-swapped confirming one: it said faster (its CI's low
    end past the keep margin) or it was undecided (its median past the margin, its CI's low end not)."""
    return ci_low > margin or speedup > margin
