"""Best speedup so far over experiments, as one line of block characters per kernel (no mouse, no plot lib)."""

from __future__ import annotations

BLOCKS = "▁▂▃▄▅▆▇█"


def best_so_far(values: list[float | None]) -> list[float]:
    """Running maximum; experiments with no number (failures) carry the previous best."""
    out, best = [], 1.0
    for v in values:
        if v is not None and v > best:
            best = v
        out.append(best)
    return out


def sparkline(series: list[float], width: int) -> str:
    """Resample to ``width`` columns (last value per bucket) and map min..max onto eight heights."""
    if not series or width <= 0:
        return ""
    if len(series) > width:
        step = len(series) / width
        series = [series[min(len(series) - 1, int((i + 1) * step) - 1)] for i in range(width)]
    low, high = min(series), max(series)
    if high - low < 1e-9:
        return BLOCKS[0] * len(series)
    return "".join(BLOCKS[round((v - low) / (high - low) * (len(BLOCKS) - 1))] for v in series)
