"""Which kernel to work on next, across the tasks of a run.

Expected end-to-end gain (Amdahl): a task that takes share ``s`` of the model's
GPU time and has already been sped up ``x`` times now takes ``s / x``; the most
that more work can buy is that time times the headroom left below the roofline
target. The orchestrator stays on a task until it plateaus (N experiments
without a keep), spends its own time budget (each kernel's own clock), reaches
the roofline target, or the agent has nothing left to try; then it moves to the
next best. When every task has plateaued it revisits them (counters reset)
rather than stopping: an overnight run keeps trying.

Units: roofline numbers are percent (0-100) here as everywhere, the harness's
``roofline_pct`` against ``run.roofline_target_pct``; ``share`` and the headroom
are fractions (0-1); speedups are ratios.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ACTIVE, PLATEAU, BUDGET, TARGET, EXHAUSTED, SKIPPED = "active", "plateau", "budget", "target", "exhausted", "skipped"
REVISITABLE = (PLATEAU, BUDGET, SKIPPED)


@dataclass
class TaskState:
    name: str
    share: float
    speedup: float = 1.0          # product of kept speedups vs the starting kernel
    best_vs_baseline: float | None = None
    roofline_pct: float | None = None  # percent of roofline (0-100) of the incumbent, GPU timings only
    since_improvement: int = 0
    clock_s: float = 0.0
    experiments: int = 0
    status: str = ACTIVE
    meaningful: bool = False      # timings come from a GPU (not the CPU interpreter)

    def remaining_share(self) -> float:
        """Fraction of model time this op still takes. Against the op the model really runs when
        timings mean something (a kernel slower than it would not be used); else vs the start."""
        if self.meaningful and self.best_vs_baseline:
            return self.share / max(1.0, self.best_vs_baseline)
        return self.share / max(self.speedup, 1e-9)

    def headroom_frac(self, target_pct: float) -> float:
        """Fraction (0-1) of the way to the roofline target still to go; 1 when unknown."""
        if self.roofline_pct is None or target_pct <= 0:
            return 1.0
        return max(0.0, 1.0 - self.roofline_pct / target_pct)

    def to_dict(self, target_pct: float, current: str | None = None) -> dict[str, Any]:
        if self.status == ACTIVE:
            state = "active" if self.name == current else "queued"
        else:
            state = {PLATEAU: "plateaued", BUDGET: "plateaued", TARGET: "done", EXHAUSTED: "done"}.get(
                self.status, self.status)
        return {"name": self.name, "share": self.share, "speedup": self.best_vs_baseline,
                "speedup_vs_start": self.speedup, "state": state, "roofline_pct": self.roofline_pct,
                "experiments": self.experiments, "since_improvement": self.since_improvement,
                "clock_s": round(self.clock_s, 1), "status": self.status,
                "expected_gain": self.remaining_share() * self.headroom_frac(target_pct)}


class Orchestrator:
    def __init__(self, tasks: dict[str, float | None], plateau: int = 8, kernel_budget_s: float = 0.0,
                 roofline_target_pct: float = 90.0):
        """``tasks`` maps each task name to its profile share (None when unprofiled: equal shares)."""
        if not tasks:
            raise ValueError("no tasks to orchestrate")
        known = [s for s in tasks.values() if s]
        default = (sum(known) / len(known)) if known else 1.0 / len(tasks)
        self.tasks = {n: TaskState(n, float(s) if s else default) for n, s in tasks.items()}
        self.plateau = plateau
        self.kernel_budget_s = kernel_budget_s
        self.roofline_target_pct = roofline_target_pct  # percent, like the harness's roofline_pct
        self.current: str | None = None
        self.revisits = 0

    def score(self, name: str) -> float:
        t = self.tasks[name]
        return t.remaining_share() * t.headroom_frac(self.roofline_target_pct)

    def ranked(self) -> list[dict[str, Any]]:
        order = sorted(self.tasks, key=lambda n: -self.score(n))
        return [self.tasks[n].to_dict(self.roofline_target_pct, self.current) for n in order]

    def pick(self) -> tuple[str | None, str]:
        """(task, reason); (None, reason) when every task is finished for good."""
        if self.current and self.tasks[self.current].status == ACTIVE:
            return self.current, "continuing"
        active = [n for n, t in self.tasks.items() if t.status == ACTIVE]
        if not active:
            again = [n for n, t in self.tasks.items() if t.status in REVISITABLE]
            if not again:
                self.current = None
                return None, "every task reached its roofline target or has nothing left to try"
            self.revisits += 1
            for n in again:
                t = self.tasks[n]
                t.status, t.since_improvement, t.clock_s = ACTIVE, 0, 0.0
            active = again
        best = max(active, key=lambda n: (self.score(n), -sorted(self.tasks).index(n)))
        t = self.tasks[best]
        why = (f"largest expected end-to-end gain: {t.remaining_share():.1%} of model time left"
               f" x {t.headroom_frac(self.roofline_target_pct):.0%} headroom")
        if self.revisits and best in active:
            why += f" (revisit {self.revisits}: every task had plateaued)"
        self.current = best
        return best, why

    def observe(self, name: str, kept: bool, speedup_vs_incumbent: float | None, roofline_pct: float | None,
                seconds: float, best_vs_baseline: float | None = None, meaningful: bool = False) -> None:
        t = self.tasks[name]
        t.meaningful = t.meaningful or meaningful
        t.experiments += 1
        t.clock_s += max(0.0, seconds)
        if kept:
            t.since_improvement = 0
            if speedup_vs_incumbent and speedup_vs_incumbent > 0:
                t.speedup *= speedup_vs_incumbent
            if roofline_pct is not None:
                t.roofline_pct = roofline_pct
            if best_vs_baseline is not None:
                t.best_vs_baseline = best_vs_baseline
        else:
            t.since_improvement += 1
        self._update_status(t)

    def set_start(self, name: str, roofline_pct: float | None, vs_baseline: float | None,
                  meaningful: bool = False) -> None:
        """What the starting kernel measured (before any experiment)."""
        t = self.tasks[name]
        t.meaningful = t.meaningful or meaningful
        if t.roofline_pct is None:
            t.roofline_pct = roofline_pct
        if t.best_vs_baseline is None:
            t.best_vs_baseline = vs_baseline
        self._update_status(t)

    def _update_status(self, t: TaskState) -> None:
        if t.status != ACTIVE:
            return
        target = self.roofline_target_pct
        if t.roofline_pct is not None and target > 0 and t.roofline_pct >= target:
            t.status = TARGET
        elif self.plateau and t.since_improvement >= self.plateau:
            t.status = PLATEAU
        elif self.kernel_budget_s and t.clock_s >= self.kernel_budget_s:
            t.status = BUDGET

    def mark(self, name: str, status: str) -> None:
        self.tasks[name].status = status
        if self.current == name:
            self.current = None


def roofline_if_meaningful(report: Any) -> float | None:
    """A harness Report's ``roofline_pct`` (percent, as the harness gives it) when its timings mean
    something (a GPU), else None: the CPU interpreter's times say nothing about the roofline."""
    if report is None or report.timing_meaningful is not True or report.summary is None:
        return None
    pct = report.summary.roofline_pct
    return float(pct) if isinstance(pct, (int, float)) and not isinstance(pct, bool) else None
