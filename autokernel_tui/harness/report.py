"""The harness's verdicts as plain dataclasses (stdlib only: the engine and TUI read them).

Every number carries its meaning in its name; ``timing_meaningful`` says whether
times come from CUDA events on a GPU (True) or a wall clock around the Triton
interpreter (False).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

STATUSES = ("PASS", "FAIL", "CRASH", "TIMEOUT", "REJECTED")
STAGES = ("static", "smoke", "shapes", "stability", "determinism", "timing")

# What a comparison's speedup is of (setting harness.measure): "device", the kernel's GPU time with
# the host kept ahead (what a model pays under torch.compile or CUDA graphs, where launches are
# replayed), or "as_called", calls back to back with the host's launch cost (what an eager model pays).
MEASURES = ("device", "as_called")


def _pick(cls, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass
class ShapeResult:
    shape: str
    dims: dict[str, Any]
    dtype: str
    passed: bool
    max_abs_err: float | None = None
    rel_l2_err: float | None = None
    median_us: float | None = None
    p20_us: float | None = None
    p80_us: float | None = None
    baseline_us: float | None = None
    compile_ref_us: float | None = None
    speedup_vs_baseline: float | None = None
    speedup_vs_compile: float | None = None
    # Host side of a call (median us to launch it with the GPU busy; GPU only) and the eager
    # reference's; a call costs a model max(host, device) when it runs eagerly one after another.
    host_us: float | None = None
    baseline_host_us: float | None = None
    # Per call when run back to back as an eager model runs it (host and GPU overlapping; GPU only):
    # above median_us the launch, not the kernel, sets the pace (host-bound). Informational.
    as_called_us: float | None = None
    baseline_as_called_us: float | None = None
    gbps: float | None = None
    tflops: float | None = None
    roofline_pct: float | None = None  # percent of the roofline, 0-100 (clamped)
    # Why this shape's times are not to be trusted (its spread stayed wide after one retake), or "".
    # A disturbed shape is left out of the summary's speedups, never counted as a gain or a loss.
    disturbed: str = ""
    baseline_note: str = ""  # "in window" (the eager reference re-timed beside the kernel) or why not
    baseline_cached_us: float | None = None  # the cached eager figure the in-window one replaced (GPU only)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ShapeResult":
        return cls(**_pick(cls, data))


@dataclass
class Summary:
    latency_us: float
    speedup_vs_baseline: float | None
    speedup_vs_compile: float | None
    roofline_pct: float | None  # percent, 0-100: geomean of the shapes' roofline_pct
    worst_shape: str
    worst_speedup: float | None
    gbps: float | None
    tflops: float | None
    disturbed_shapes: int = 0  # left out of the speedups above (ShapeResult.disturbed)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Summary":
        return cls(**_pick(cls, data))


@dataclass
class Report:
    status: str
    reason: str = ""
    stage: str = "static"
    task: str = ""
    device: str = ""
    timing_meaningful: bool = False
    shapes: list[ShapeResult] = field(default_factory=list)
    summary: Summary | None = None
    compile_s: float = 0.0
    wall_s: float = 0.0
    peak_vram_mib: float = 0.0  # MiB (2**20 bytes)
    stderr_tail: str = ""
    sandbox: str = ""  # what confined the candidate (bwrap, landlock, ...) and what was unavailable
    time_split: dict[str, float] = field(default_factory=dict)  # where wall_s went, seconds by part

    @property
    def passed(self) -> bool:
        return self.status == "PASS"

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["summary"] = self.summary.to_dict() if self.summary else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Report":
        fields = _pick(cls, data)
        fields["shapes"] = [ShapeResult.from_dict(s) for s in data.get("shapes", [])]
        fields["summary"] = Summary.from_dict(data["summary"]) if data.get("summary") else None
        return cls(**fields)


@dataclass
class Comparison:
    speedup: float  # incumbent_time / candidate_time: > 1 means the candidate is faster
    ci_low: float
    ci_high: float
    faster: bool  # ci_low clears the keep margin (in both comparisons, when confirmed)
    n_samples: int
    method: str
    status: str = "PASS"  # PASS, or why the comparison could not be made (FAIL/CRASH/TIMEOUT/REJECTED)
    reason: str = ""
    per_shape: list[dict[str, Any]] = field(default_factory=list)
    # The first comparison's speedup and CI, and whether it called the candidate faster (else it was
    # undecided: its median above the margin, its CI's low end not), when this one is its confirmation.
    screen: dict[str, Any] | None = None
    # The judge's clock against the reported times (GPU): the median per-call difference between the
    # two sides' unexplained time, its tolerance, and how many batch pairs it rests on.
    cross_check: dict[str, Any] | None = None
    # With Harness(keep_samples=True): each comparison's raw times per shape, in the candidate's and
    # incumbent's roles (the screening one first when this one confirms it), for benchmarks/ci_methods.py.
    samples: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Comparison":
        return cls(**_pick(cls, data))


def caution(disturbed: str | None, host_us: float | None, median_us: float | None) -> str:
    """Why a shape's time should be read with care, one word: "disturbed" (its spread stayed wide after
    a retake, so it is left out of the summary), "host-bound" (the host's launch work per call exceeds
    the kernel's device time, so an eager model pays the host time, the as-called figure), or ""."""
    if disturbed:
        return "disturbed"
    if host_us and median_us and host_us > median_us:
        return "host-bound"
    return ""
