"""Small number formatters shared by every pane: one place decides how a number reads.

Pick the formatter by the unit the field's name states: ``percent`` for ``_pct``
fields (already 0-100), ``share`` for fractions (``share``, ``_frac``, 0-1),
``speedup`` for ratios, ``micros`` for ``_us``.
"""

from __future__ import annotations

import math
from typing import Any


def to_float(value: Any) -> float | None:
    """results.tsv cells are strings; empty or 'nan' means 'not measured'."""
    if value is None or value == "":
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def speedup(value: Any) -> str:
    """A ratio as "1.68x". Below 0.095 with two significant digits ("0.0033x"): a real measurement
    never reads as 0.00x."""
    number = to_float(value)
    if number is None:
        return "-"
    return f"{number:.2g}x" if 0 < abs(number) < 0.095 else f"{number:.2f}x"


def interval(low: Any, high: Any) -> str:
    lo, hi = to_float(low), to_float(high)
    return "" if lo is None or hi is None else f"[{lo:.2f}, {hi:.2f}]"


def share(value_frac: Any) -> str:
    """A FRACTION (0-1: a ``share`` of model time, a ``_frac``) as a percentage: 0.18 -> "18.0%"."""
    number = to_float(value_frac)
    return "-" if number is None else f"{100 * number:.1f}%"


def percent(value_pct: Any) -> str:
    """A PERCENT (0-100: a ``_pct`` such as the harness's ``roofline_pct``) as it is: 10.47 -> "10.5%"."""
    number = to_float(value_pct)
    return "-" if number is None else f"{number:.1f}%"


def micros(value: Any) -> str:
    number = to_float(value)
    if number is None:
        return "-"
    return f"{number / 1000:.2f} ms" if number >= 1000 else f"{number:.1f} us"


def tokens(value: Any) -> str:
    number = to_float(value) or 0.0
    if number >= 1e6:
        return f"{number / 1e6:.1f}M"
    if number >= 1e3:
        return f"{number / 1e3:.1f}k"
    return f"{number:.0f}"


def dollars(value: Any) -> str:
    return f"${to_float(value) or 0.0:.2f}"


def elapsed(seconds: float | None) -> str:
    if seconds is None or seconds < 0:
        return "--:--:--"
    s = int(seconds)
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def projected_end_to_end(share_of_time: Any, kernel_speedup: Any) -> float | None:
    """Amdahl: the whole model's speedup if this one op ran `kernel_speedup` times faster."""
    p, s = to_float(share_of_time), to_float(kernel_speedup)
    if p is None or s is None or s <= 0:
        return None
    return 1.0 / ((1.0 - p) + p / s)


def timing_meaningful(device: Any) -> bool | None:
    """Whether the run's timings mean something (a GPU), from the harness's device_info(); None
    while the engine has not said yet (its harness is still starting)."""
    if isinstance(device, dict):
        meaningful = device.get("timing_meaningful")
        if isinstance(meaningful, bool):
            return meaningful
        device = device.get("name")
    if not device:
        return None
    return "cpu" not in str(device).lower()


def device_label(device: Any) -> str:
    """A GPU name, or the plain statement that CPU timings mean nothing."""
    if not device:
        return "device: starting the harness…"
    if isinstance(device, dict):
        name = str(device.get("name") or "")
        meaningful = device.get("timing_meaningful", "cpu" not in name.lower())
    else:
        name = str(device or "")
        meaningful = bool(name) and "cpu" not in name.lower()
    if not name or not meaningful:
        return "CPU: Triton interpreter, timings not meaningful"
    return name


def sandbox_warning(device: Any) -> str | None:
    """What the header says when candidate code runs less confined than it should (None: fully)."""
    sandbox = str(device.get("sandbox") or "") if isinstance(device, dict) else ""
    if sandbox.startswith("NO SANDBOX"):
        return "NO SANDBOX: candidates run as you"
    if sandbox.startswith("no bwrap"):
        return "sandbox: Landlock only (no bwrap)"
    return None
