"""The run's budgets: experiments, wall time (over all sessions) and dollars (``settings.run.max_*``)."""

from __future__ import annotations

from typing import Any

from autokernel_tui.engine.runrecord import Totals


def spent(run_settings: Any, totals: Totals, active_s: float) -> str | None:
    """Why the run is over for good, or None while every budget has some left. ``active_s``:
    the wall time the run has been worked on, this session included."""
    rs = run_settings
    if rs.max_experiments and totals.measured >= rs.max_experiments:
        return f"experiment budget reached ({rs.max_experiments})"
    if rs.max_wall_s and active_s >= rs.max_wall_s:
        return f"wall-time budget reached ({rs.max_wall_s / 3600:.2f} h)"
    if rs.max_cost_usd and totals.cost_usd >= rs.max_cost_usd:
        return f"cost budget reached (${totals.cost_usd:.2f} of ${rs.max_cost_usd:.2f})"
    return None
