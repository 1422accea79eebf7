"""GPU ceilings: a spec table, measured ceilings cached per GPU, and the roofline floor.

Spec rates are dense (no sparsity), per the vendors' datasheets. Measured ceilings
(copy bandwidth, matmul rate per dtype) are taken once per GPU by the worker and
cached on disk; where present they set the percentage of roofline, because they
are what this box really reaches. The REJECT floor uses the higher of spec and
measured (a kernel cannot beat the hardware's paper peak), so honest kernels that
beat our measured copy are never rejected.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class GpuSpec:
    name: str
    bandwidth_gbps: float  # HBM/GDDR GB/s (1e9 bytes/s)
    tflops: dict[str, float] = field(default_factory=dict)  # dense TFLOP/s per dtype (tensor cores where used)


# Order matters: the first whose every key word appears in the device name wins.
SPECS: list[tuple[tuple[str, ...], GpuSpec]] = [
    (("h200",), GpuSpec("H200", 4800.0, {"float16": 989.0, "bfloat16": 989.0, "tf32": 494.0, "float32": 67.0})),
    (("h100", "pcie"), GpuSpec("H100 PCIe", 2000.0, {"float16": 756.0, "bfloat16": 756.0, "tf32": 378.0,
                                                     "float32": 51.0})),
    (("h100",), GpuSpec("H100 SXM", 3350.0, {"float16": 989.0, "bfloat16": 989.0, "tf32": 494.0, "float32": 67.0})),
    (("b200",), GpuSpec("B200", 8000.0, {"float16": 2250.0, "bfloat16": 2250.0, "tf32": 1100.0, "float32": 80.0})),
    (("a100",), GpuSpec("A100", 2039.0, {"float16": 312.0, "bfloat16": 312.0, "tf32": 156.0, "float32": 19.5})),
    (("l40s",), GpuSpec("L40S", 864.0, {"float16": 362.0, "bfloat16": 362.0, "tf32": 183.0, "float32": 91.6})),
    (("4090",), GpuSpec("RTX 4090", 1008.0, {"float16": 330.0, "bfloat16": 330.0, "tf32": 82.6, "float32": 82.6})),
    (("5090",), GpuSpec("RTX 5090", 1792.0, {"float16": 419.0, "bfloat16": 419.0, "tf32": 105.0, "float32": 105.0})),
    (("mi300x",), GpuSpec("MI300X", 5300.0, {"float16": 1307.0, "bfloat16": 1307.0, "tf32": 654.0,
                                             "float32": 163.4})),
]


def lookup_spec(device_name: str) -> GpuSpec | None:
    name = device_name.lower()
    for keys, spec in SPECS:
        if all(k in name for k in keys):
            return spec
    return None


@dataclass(frozen=True)
class Ceilings:
    """The rates a report is measured against: measured where present, else spec."""

    device: str
    bandwidth_gbps: float | None
    tflops: dict[str, float]
    reject_bandwidth_gbps: float | None  # max(spec, measured): below this floor a time is impossible
    reject_tflops: dict[str, float]
    source: str  # "measured", "spec", "measured+spec" or "none"


def ceilings_for(device_name: str, measured: dict[str, Any] | None) -> Ceilings:
    spec = lookup_spec(device_name)
    measured = measured or {}
    m_bw = measured.get("bandwidth_gbps")
    m_tf = dict(measured.get("tflops", {}))
    s_bw = spec.bandwidth_gbps if spec else None
    s_tf = dict(spec.tflops) if spec else {}
    bw = m_bw if m_bw else s_bw
    tf = {**s_tf, **m_tf}
    # Without a spec, allow 25% headroom over what we measured before calling a time impossible.
    rej_bw = max(x for x in (s_bw, (m_bw or 0) * (1.0 if s_bw else 1.25)) if x is not None) if (s_bw or m_bw) else None
    rej_tf = {k: max(s_tf.get(k, 0.0), m_tf.get(k, 0.0) * (1.0 if k in s_tf else 1.25)) for k in set(s_tf) | set(m_tf)}
    source = "+".join(s for s, present in (("measured", bool(measured)), ("spec", bool(spec))) if present) or "none"
    return Ceilings(device_name, bw, tf, rej_bw, rej_tf, source)


def floor_us(bytes_moved: float, flops: float, compute_tflops: float | None,
             bandwidth_gbps: float | None) -> float | None:
    """The shortest time the hardware allows: max(bytes / bandwidth, flops / compute rate)."""
    terms = []
    if bandwidth_gbps and bytes_moved > 0:
        terms.append(bytes_moved / (bandwidth_gbps * 1e3))  # GB/s -> bytes/us
    if compute_tflops and flops > 0:
        terms.append(flops / (compute_tflops * 1e6))  # TFLOP/s -> flop/us
    return max(terms) if terms else None


def roofline_floor(ceil: Ceilings, bytes_moved: float, flops: float, dtype: str) -> tuple[float | None, float | None]:
    """(floor for the percentage, floor below which a time is REJECTED).

    The percentage uses the dtype's own rate; the reject floor allows the fastest
    unit that could touch the dtype (TF32 tensor cores for float32), so an honest
    kernel is never called impossible.
    """
    pct_rate = ceil.tflops.get(dtype)
    keys = (dtype, "tf32") if dtype == "float32" else (dtype,)
    rej_rates = [ceil.reject_tflops[k] for k in keys if ceil.reject_tflops.get(k)]
    return (floor_us(bytes_moved, flops, pct_rate, ceil.bandwidth_gbps),
            floor_us(bytes_moved, flops, max(rej_rates) if rej_rates else None, ceil.reject_bandwidth_gbps))


def pct_of_roofline(floor: float | None, median_us: float) -> float | None:
    """Percent of the roofline reached, clamped to [0, 100]: no report ever shows more."""
    if floor is None or median_us <= 0:
        return None
    return max(0.0, min(100.0, 100.0 * floor / median_us))


def cache_dir() -> Path:
    base = os.environ.get("AUTOKERNEL_CACHE_DIR") or str(Path.home() / ".cache" / "autokernel-tui")
    return Path(base)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def measured_path(device_name: str, torch_version: str) -> Path:
    return cache_dir() / "ceilings" / f"{_safe(device_name)}--torch{_safe(torch_version)}.json"


def load_measured(device_name: str, torch_version: str) -> dict[str, Any] | None:
    path = measured_path(device_name, torch_version)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def save_measured(device_name: str, torch_version: str, data: dict[str, Any]) -> None:
    path = measured_path(device_name, torch_version)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
    tmp.replace(path)
