"""Review: every experiment of every run, kept or not, with its diff, harness report and reasoning.

Reads the workspace through ledger.history (the disk is the truth). Reverting
a kept experiment is the engine's job: through the live client when one is
attached, else the engine's revert entry point on the workspace.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static
from textual.widgets.data_table import ColumnKey

from autokernel_tui.ledger import paths
from autokernel_tui.tui import formatting as fmt
from autokernel_tui.tui import keys
from autokernel_tui.tui.diff_render import render_diff
from autokernel_tui.tui.screens.fitted import FittedFooter
from autokernel_tui.tui.screens.live_screen import bindings
from autokernel_tui.tui.sparkline import best_so_far, sparkline
from autokernel_tui.tui.widgets.approval_panel import approval_renderable
from autokernel_tui.tui.widgets.results_table import STATUS_STYLE

STATUSES = ("all", "keep", "discard", "fail", "crash", "timeout", "rejected", "vetoed", "reverted")
VIEWS = ("diff", "report", "reasoning")


def _get(record: Any, name: str) -> Any:
    return record.get(name) if isinstance(record, dict) else getattr(record, name, None)


def run_timing_meaningful(run: Any) -> bool | None:
    """Whether a run's timings mean something (a GPU), from its saved harness reports: the starting
    kernels' first, else the first experiment with one. None: no report says."""
    folder = Path(getattr(run, "path", "") or ".") / paths.REPORTS_DIR
    candidates = sorted(folder.glob("start-*.json")) if folder.is_dir() else []
    for path in candidates[:1]:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        report = data.get("report", data) if isinstance(data, dict) else None
        if isinstance(report, dict) and isinstance(report.get("timing_meaningful"), bool):
            return report["timing_meaningful"]
    for rec in getattr(run, "experiments", [])[:20]:
        try:
            report = run.report(rec)
        except Exception:
            report = None
        if isinstance(report, dict) and isinstance(report.get("timing_meaningful"), bool):
            return report["timing_meaningful"]
    return None


def shown_speedups(run: Any, meaningful: bool | None) -> list[float | None]:
    """Per experiment of the run, the speedup the list shows: vs baseline, or on the CPU (where that
    means nothing) vs the starter kernel (live_state.StartChain, the engine's arithmetic)."""
    if meaningful is not False:
        return [fmt.to_float(_get(rec, "speedup_vs_baseline")) for rec in run.experiments]
    from autokernel_tui.tui.live_state import StartChain

    chain = StartChain()
    return [chain.add(rec) for rec in run.experiments]


class ReviewList(DataTable):
    pass


class ReviewDetail(VerticalScroll):
    def compose(self) -> ComposeResult:
        yield Static("", id="detail-body")


class SpeedupPlot(Static):
    def show(self, runs: list, kernel_filter: str, speeds: dict[str, list[float | None]] | None = None) -> None:
        """``speeds``: per run tag, each experiment's speedup as the list shows it (shown_speedups)."""
        width = max(10, (self.size.width or 60) - 24)
        out = Text()
        by_task: dict[str, list[float | None]] = {}
        for run in runs:
            shown = (speeds or {}).get(run.tag) or [fmt.to_float(_get(r, "speedup_vs_baseline")) for r in run.experiments]
            for rec, speed in zip(run.experiments, shown):
                kept = _get(rec, "status") == "keep"
                by_task.setdefault(str(_get(rec, "task")), []).append(speed if kept else None)
        for i, (task, values) in enumerate(sorted(by_task.items())):
            if kernel_filter not in ("all", task):
                continue
            series = best_so_far(values)
            if out:
                out.append("\n")
            out.append(f"{task[:12]:<12} ", "bold")
            out.append(sparkline(series, width), "#5fd75f")
            out.append(f" {series[-1]:.2f}x", "bold")
            out.append(f" /{len(values)}", "dim")
        self.update(out or Text("no experiments yet", "dim italic"))


def revert_consequences(run: Any, rec: Any, live: bool) -> str:
    """What a revert does (engine.loop: _process_reverts), in words, before anyone agrees to it."""
    n, task = _get(rec, "experiment"), _get(rec, "task")
    later = [_get(r, "experiment") for r in run.experiments
             if _get(r, "task") == task and _get(r, "status") == "keep" and (_get(r, "experiment") or 0) > (n or 0)]
    lines = [f"The engine adds a new commit on {run.branch} that puts kernels/{task}/kernel.py back as it was "
             f"before exp {n}, and a 'reverted' row to results.tsv. Nothing is deleted: exp {n}'s commit stays "
             "in the history."]
    if later:
        lines.append(f"The whole file goes back, so the later kept {task} experiment{'s' if len(later) > 1 else ''} "
                     f"({', '.join(f'exp {k}' for k in later)}) {'are' if len(later) > 1 else 'is'} undone too.")
    lines.append(f"The live run goes on from that {task} kernel." if live else
                 "No engine is running: the run is opened idle to do it, then closed.")
    return "\n".join(lines)


class Reverted(Message):
    def __init__(self, label: str, error: str = "") -> None:
        super().__init__()
        self.label = label
        self.error = error


class ReviewScreen(FittedFooter, Screen):
    BINDINGS = bindings(keys.REVIEW) + [
        Binding(keys.NAVIGATION[3].key, "help", "Help", id="help"),
        Binding(keys.NAVIGATION[4].key, "quit_app", "Quit", id="quit"),
    ]
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]

    def __init__(self, workspace: Path, history: Any = None, client: Any = None, standalone: bool = False) -> None:
        super().__init__()
        self.workspace = Path(workspace)
        self.load_history = history
        self.client = client
        self.standalone = standalone
        self.runs: list = []
        self.status_filter = "all"
        self.kernel_filter = "all"
        self.view = "diff"
        self.rows: dict[str, tuple[Any, Any]] = {}  # row key -> (run, record)
        self.counts = (0, 0)
        self.meaningful: dict[str, bool | None] = {}  # run tag -> its timings mean something (GPU)
        self.speeds: dict[str, list[float | None]] = {}  # run tag -> each experiment's shown speedup

    def compose(self) -> ComposeResult:
        yield Static("", id="review-filters")
        with Horizontal(id="review-main"):
            with Vertical(id="review-left"):
                yield ReviewList(id="review-list", cursor_type="row", zebra_stripes=True)
                yield SpeedupPlot(id="review-plot")
            yield ReviewDetail(id="review-detail")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(ReviewList).border_title = "experiments"
        self.query_one(SpeedupPlot).border_title = "best speedup vs baseline, per kernel"
        table = self.query_one(ReviewList)
        for label in ("run", "exp", "kernel", "status", "vs base", "CI vs inc", "description"):
            table.add_column(label, key=label)  # "vs base": relabelled for CPU runs (_fill)
        self.reload()
        table.focus()

    def reload(self) -> None:
        problems: list[str] = []  # lines of the run files that could not be used, one line each
        if self.load_history is None:
            from autokernel_tui.ledger.history import load_runs

            self.runs = load_runs(self.workspace, problems=problems)
        else:
            self.runs = self.load_history(self.workspace)
        self._fill()
        for line in problems[:5]:
            self.notify(line, title="Skipped in the run files", severity="warning", timeout=20)
        if len(problems) > 5:
            self.notify(f"... and {len(problems) - 5} more", title="Skipped in the run files", severity="warning",
                        timeout=20)

    def _kernels(self) -> list[str]:
        return ["all"] + sorted({str(_get(r, "task")) for run in self.runs for r in run.experiments})

    def _speeds(self) -> None:
        """Per run: are its timings meaningful, and the speedup each experiment shows."""
        for run in self.runs:
            if run.tag not in self.meaningful:
                self.meaningful[run.tag] = run_timing_meaningful(run)
            self.speeds[run.tag] = shown_speedups(run, self.meaningful[run.tag])
        cpu = [run.tag for run in self.runs if self.meaningful.get(run.tag) is False]
        label = "vs start" if cpu and len(cpu) == len(self.runs) else "vs base/start" if cpu else "vs base"
        table = self.query_one(ReviewList)
        column = table.columns[ColumnKey("vs base")]
        if column.label.plain != label:
            column.label = Text(label)
            column.content_width = max(column.content_width, len(label))
            table.refresh(layout=True)
        self.query_one(SpeedupPlot).border_title = (
            "best speedup vs the starter kernel (CPU), per kernel" if label == "vs start" else
            "best speedup vs baseline (GPU runs) or the starter (CPU runs), per kernel" if cpu else
            "best speedup vs baseline, per kernel")

    def _fill(self) -> None:
        table = self.query_one(ReviewList)
        table.clear()
        self.rows.clear()
        self._speeds()
        shown = total = 0
        for run in self.runs:
            for rec, speed in zip(run.experiments, self.speeds[run.tag]):
                total += 1
                status, task = str(_get(rec, "status")), str(_get(rec, "task"))
                if self.status_filter not in ("all", status) or self.kernel_filter not in ("all", task):
                    continue
                shown += 1
                key = f"{run.tag}/{_get(rec, 'experiment')}"
                self.rows[key] = (run, rec)
                table.add_row(
                    Text(run.tag, "dim"), Text(str(_get(rec, "experiment")), justify="right"), task,
                    Text(status, STATUS_STYLE.get(status, "")),
                    Text(fmt.speedup(speed), justify="right"),
                    Text(fmt.interval(_get(rec, "ci_low"), _get(rec, "ci_high")), "dim"),
                    str(_get(rec, "description") or ""), key=key)
        self.counts = (shown, total)
        self._show_filters()
        self.query_one(SpeedupPlot).show(self.runs, self.kernel_filter, self.speeds)
        self._show_detail()

    def _show_filters(self) -> None:
        shown, total = self.counts
        bar = Text()
        bar.append(" status ", "dim")
        bar.append(self.status_filter, "bold #87d7ff")
        bar.append("   kernel ", "dim")
        bar.append(self.kernel_filter, "bold #d7afff")
        bar.append(f"   {shown} of {total} experiments in {len(self.runs)} run(s)", "dim")
        bar.append(f"   view {self.view}", "dim")
        if any(m is False for m in self.meaningful.values()):
            bar.append("   CPU: vs base n/a, speedups vs the starter kernel", "#d78700")
        self.query_one("#review-filters", Static).update(bar)

    def _selected(self) -> tuple[Any, Any] | None:
        table = self.query_one(ReviewList)
        if table.row_count == 0:
            return None
        key = table.coordinate_to_cell_key((table.cursor_row, 0)).row_key.value
        return self.rows.get(key)

    @on(DataTable.RowHighlighted)
    def _on_highlight(self) -> None:
        self._show_detail()

    def _show_detail(self) -> None:
        detail = self.query_one(ReviewDetail)
        body = detail.query_one("#detail-body", Static)
        picked = self._selected()
        if picked is None:
            detail.border_title = "nothing to show"
            body.update(Text("no experiments match the filters", "dim italic"))
            return
        run, rec = picked
        n = _get(rec, "experiment")
        detail.border_title = f"{run.tag} exp {n} · {self.view}  (t: diff / report / reasoning)"
        if self.view == "diff":
            diff = run.diff(rec)
            body.update(render_diff(diff) if diff else Text("no diff recorded (no parent commit)", "dim italic"))
        elif self.view == "report":
            verdict = run.verdict(rec)
            if verdict is None:
                body.update(Text("no harness report recorded", "dim italic"))
            else:
                report = verdict.report
                reason = Text(report.get("reason") or "", "bold #ff5f5f")
                body.update(Group(reason, approval_renderable({"n": n, "task": _get(rec, "task"), "report": report,
                                                               "comparison": verdict.comparison}),
                                  Text("\n" + (report.get("stderr_tail") or ""), "dim")))
        else:
            body.update(Text(run.reasoning(rec) or "no reasoning recorded (offline tuner or empty)", ""))
        detail.scroll_home(animate=False)

    # --- actions -------------------------------------------------------------------
    def action_filter_status(self) -> None:
        self.status_filter = STATUSES[(STATUSES.index(self.status_filter) + 1) % len(STATUSES)]
        self._fill()

    def action_filter_kernel(self) -> None:
        kernels = self._kernels()
        current = kernels.index(self.kernel_filter) if self.kernel_filter in kernels else 0
        self.kernel_filter = kernels[(current + 1) % len(kernels)]
        self._fill()

    def action_next_view(self) -> None:
        self.view = VIEWS[(VIEWS.index(self.view) + 1) % len(VIEWS)]
        self._show_filters()
        self._show_detail()

    def action_revert(self) -> None:
        picked = self._selected()
        if picked is None:
            return
        run, rec = picked
        if _get(rec, "status") != "keep":
            self.notify("only a kept experiment can be reverted", severity="warning", timeout=4)
            return
        from autokernel_tui.tui.screens.confirm_screen import ConfirmScreen

        n, task = int(_get(rec, "experiment")), str(_get(rec, "task"))

        def answered(yes: bool | None) -> None:
            if yes:
                self._revert(run.tag, n)

        self.app.push_screen(ConfirmScreen(f"Revert exp {n} of run {run.tag} ({task}: {_get(rec, 'description') or ''})?",
                                           revert_consequences(run, rec, live=self.client is not None), "Revert"),
                             answered)

    @work(thread=True, group="revert", exclusive=True)
    def _revert(self, tag: str, n: int) -> None:
        label = f"{tag} exp {n}"
        try:
            if self.client is not None:
                reply = self.client.send("revert", run=tag, n=n)
                if isinstance(reply, dict) and reply.get("ok") is False:
                    raise RuntimeError(reply.get("error") or "refused")
            else:
                from autokernel_tui.tui.engine_link import offline_revert
                offline_revert(self.workspace, tag, n)
        except Exception as exc:
            self.post_message(Reverted(label, f"{type(exc).__name__}: {exc}"))
            return
        self.post_message(Reverted(label))

    @on(Reverted)
    def _on_reverted(self, message: Reverted) -> None:
        if message.error:
            self.notify(f"revert {message.label}: {message.error}", title="Revert failed", severity="error", timeout=15)
            return
        self.notify(f"reverted {message.label}: a new commit and a 'reverted' row", title="Reverted", timeout=6)
        self.reload()

    def action_close(self) -> None:
        if self.standalone:
            self.app.exit(None)
        else:
            self.dismiss()

    def action_help(self) -> None:
        self.app.open_help()

    def action_quit_app(self) -> None:
        if self.standalone:
            self.app.exit(None)
        else:
            self.app.ask_quit()
