"""The candidate awaiting a human: verdict, speedup with its interval, per-shape numbers, checks passed."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from autokernel_tui.harness.report import caution
from autokernel_tui.tui import formatting as fmt

STAGES = ("static", "smoke", "shapes", "stability", "determinism", "timing")


def checks_text(report: dict) -> Text:
    """Each harness stage with a tick if the candidate got past it."""
    status = report.get("status", "")
    reached = report.get("stage", "")
    done = STAGES.index(reached) + 1 if reached in STAGES else 0
    if status == "PASS":
        done = len(STAGES)
    out = Text("checks ", "dim")
    for i, stage in enumerate(STAGES):
        ok = i < done and (status == "PASS" or i < done - 1)
        out.append(("✓ " if ok else "✗ ") + stage + "  ", "#5fd75f" if ok else "#ff5f5f")
    return out


def _spread(shape: dict) -> str:
    """Half the p20-p80 range as a share of the median: how noisy this shape's timing is."""
    lo, hi, mid = (fmt.to_float(shape.get(k)) for k in ("p20_us", "p80_us", "median_us"))
    if lo is None or hi is None or not mid:
        return "-"
    return f"{50 * (hi - lo) / mid:.1f}%"


def _note(shape: dict) -> Text:
    """Why a shape's time should be read with care: a disturbed measurement (left out of the summary),
    or a host-bound call (the host's launch work per call exceeds the kernel's device time, so an
    eager model pays the host time: the as-called figure, not the median)."""
    word = caution(shape.get("disturbed"), fmt.to_float(shape.get("host_us")), fmt.to_float(shape.get("median_us")))
    called = fmt.to_float(shape.get("as_called_us"))
    if word == "host-bound" and called:
        word += f" ({fmt.micros(called)} as called)"
    return Text(word, "#d78700")


def shapes_table(report: dict) -> Table:
    """Per shape: checks, time, spread, the baseline's time and the speedup over it (n/a on the CPU:
    the Triton interpreter against eager torch compares nothing a GPU would run); where the report
    has them, host us per call and a note (disturbed, host-bound)."""
    meaningful = report.get("timing_meaningful") is not False
    shapes = report.get("shapes") or []
    with_host = meaningful and any(s.get("host_us") for s in shapes)
    notes = [_note(s) if meaningful else Text("") for s in shapes]
    columns = [("shape", "left"), ("dtype", "left"), ("ok", "center"), ("median", "right"), ("±", "right"),
               ("baseline", "right"), ("speedup", "right"), ("roof", "right")]
    with_notes = any(n.plain for n in notes)
    columns += [("host", "right")] if with_host else []
    columns += [("note", "left")] if with_notes else []
    table = Table(box=None, pad_edge=False, header_style="bold dim", expand=False)
    for label, justify in columns:
        table.add_column(label, justify=justify, no_wrap=True)
    for s, note in zip(shapes, notes):
        cells = [
            str(s.get("shape", "")), str(s.get("dtype", "")),
            Text("✓", "#5fd75f") if s.get("passed") else Text("✗", "bold #ff5f5f"),
            fmt.micros(s.get("median_us")),
            _spread(s),
            fmt.micros(s.get("baseline_us")),
            Text(fmt.speedup(s.get("speedup_vs_baseline")),
                 "#5fd75f" if (fmt.to_float(s.get("speedup_vs_baseline")) or 0) >= 1 else "#ff8700")
            if meaningful else Text("n/a", "dim"),
            fmt.percent(s.get("roofline_pct")),
        ]
        cells += [fmt.micros(s.get("host_us"))] if with_host else []
        cells += [note] if with_notes else []
        table.add_row(*cells)
    return table


def approval_renderable(pending: dict, vs_start: float | None = None, behind: int = 0) -> Group:
    """``vs_start``: the kernel's speedup over the starter before this candidate (LiveState), shown
    times the candidate's speedup vs incumbent where vs baseline means nothing (the CPU); ``behind``:
    questions queued after this one (K experiments in flight), each asked when this is answered."""
    report = pending.get("report") or {}
    comparison = pending.get("comparison") or {}
    summary = report.get("summary") or {}
    head = Text()
    head.append(f"exp {pending.get('n', '?')} · {pending.get('task', '')}  ", "bold")
    head.append(f"{report.get('status', '?')}  ", "bold #5fd75f" if report.get("status") == "PASS" else "bold #ff5f5f")
    if comparison:
        head.append("vs incumbent ", "dim")
        head.append(fmt.speedup(comparison.get("speedup")), "bold")
        head.append(f" CI {fmt.interval(comparison.get('ci_low'), comparison.get('ci_high'))}", "")
        head.append(f" ({comparison.get('n_samples', '?')} samples, {comparison.get('method', '')})", "dim")
    if behind > 0:
        head.append(f"  {behind} more waiting", "bold #ffaf00")
    lines = [head]
    if summary and report.get("timing_meaningful") is False:
        line = Text()
        line.append("vs baseline ", "dim")
        line.append("n/a (CPU)", "bold")
        speed = fmt.to_float(comparison.get("speedup"))
        if vs_start and speed:
            line.append("  vs starter kernel ", "dim")
            line.append(fmt.speedup(vs_start * speed), "bold")
            line.append(" if kept", "dim")
        lines.append(line)
    elif summary:
        line = Text()
        line.append("vs baseline ", "dim")
        line.append(fmt.speedup(summary.get("speedup_vs_baseline")), "bold")
        line.append("  vs torch.compile ", "dim")
        line.append(fmt.speedup(summary.get("speedup_vs_compile")))
        line.append("  roofline ", "dim")
        line.append(fmt.percent(summary.get("roofline_pct")))
        line.append("  worst ", "dim")
        line.append(f"{summary.get('worst_shape', '-')} {fmt.speedup(summary.get('worst_speedup'))}")
        lines.append(line)
    if report.get("timing_meaningful") is False:
        lines.append(Text("CPU: Triton interpreter, timings not meaningful", "#d78700"))
    lines.append(checks_text(report))
    lines.append(shapes_table(report))
    return Group(*lines)


class ApprovalPanel(VerticalScroll):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._body = Static("")

    def compose(self):
        yield self._body

    def show(self, pending: dict | None, vs_start: float | None = None, behind: int = 0) -> None:
        self._body.update(approval_renderable(pending, vs_start, behind) if pending else Text(""))
