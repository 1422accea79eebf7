"""The live screen: watch the loop and steer it.

Events arrive from the client's thread as EngineEvent messages; the handler here
owns the state (LiveState) and redraws only the panes an event touched.
Steering commands go out from thread workers, which post CommandDone back.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any, Callable

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Static

from autokernel_tui.config import POLICIES
from autokernel_tui.tui import formatting as fmt
from autokernel_tui.tui import keys, workspace_files
from autokernel_tui.tui.live_state import APPROVAL, DIFF, HEADER, KERNELS, REASONING, RESULTS, LiveState, Notice
from autokernel_tui.tui.messages import CommandDone, EngineEvent
from autokernel_tui.tui.screens.fitted import FittedFooter
from autokernel_tui.tui.widgets.approval_panel import ApprovalPanel
from autokernel_tui.tui.widgets.diff_view import DiffView
from autokernel_tui.tui.widgets.kernel_table import KernelTable
from autokernel_tui.tui.widgets.reasoning_view import ReasoningView
from autokernel_tui.tui.widgets.results_table import ResultsTable
from autokernel_tui.tui.widgets.run_header import RunHeader

REASONING_FPS = 8  # redraws of the streaming text per second, whatever the token rate


FREEZE_FROM_ROWS = 1000
_heap_frozen = False


def freeze_heap(rows_loaded: int) -> None:
    """The results loaded at start (10,000 rows are ~400,000 objects) live as long as the screen.
    Moved out of the cyclic GC's sight, they no longer make every full collection rescan them
    (one took 150-380 ms, a hitch on whatever key came next). Collected first, so no garbage is
    frozen with them; once per process and only for a big table, so garbage made later is
    still collected."""
    global _heap_frozen
    if _heap_frozen or rows_loaded < FREEZE_FROM_ROWS:
        return
    _heap_frozen = True
    gc.collect()
    gc.freeze()


def bindings(specs) -> list[Binding]:
    return [Binding(s.key, s.action, s.description, show=s.show, id=s.id) for s in specs]


class LiveScreen(FittedFooter, Screen):
    PALETTE_WHEN_NARROW = False  # ten keys: ctrl+p is in help and the palette lists every key anyway
    BINDINGS = bindings(keys.STEERING) + bindings(keys.NAVIGATION)
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]

    def __init__(self, client: Any, workspace: Path, attached: bool = False,
                 clock: Callable[[], float] | None = None) -> None:
        super().__init__()
        self.client = client
        self.workspace = Path(workspace)
        self.attached = attached
        self.clock = clock or __import__("time").time
        self.state = LiveState()
        self._bell_for: Any = None

    def compose(self) -> ComposeResult:
        yield RunHeader(id="run-header")
        yield Static("", id="approval-banner")
        with Horizontal(id="live-main"):
            with Vertical(id="live-left"):
                yield KernelTable(id="kernels")
                yield ResultsTable(id="results")
            with Vertical(id="live-right"):
                yield ApprovalPanel(id="approval")
                yield ReasoningView(id="reasoning")
                yield DiffView(id="diff")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#kernels").border_title = "kernels by Amdahl share"
        self.query_one("#results").border_title = "results.tsv"
        self.query_one("#reasoning").border_title = "agent reasoning"
        self.query_one("#diff").border_title = "kernel.py: candidate vs incumbent"
        self.query_one("#approval").border_title = "awaiting your approval"
        self.state = LiveState.from_snapshot(self.client.snapshot())
        self.state.quick = getattr(self.app, "harness_quick", None)
        self._catch_up()
        self.state.notices.extend(self.state.repair_notices())  # said once, when the screen opens
        self.state.notices.extend(Notice("information", "autokernel-tui", note) for note in getattr(self.app, "notes", []))
        # Subscribe after the catch-up: events are pushed, never replayed.
        self.client.subscribe(self._from_engine_thread)
        self._redraw({HEADER, KERNELS, REASONING, DIFF, RESULTS, APPROVAL})
        freeze_heap(self.query_one(ResultsTable).row_count)
        self.set_interval(1.0, self._tick)
        self.set_interval(1.0 / REASONING_FPS, self._flush_reasoning)

    def _catch_up(self) -> None:
        """Results from results.tsv; the current experiment's stream from the tail of events.jsonl."""
        if not self.state.run:
            return
        self.state.start_measured |= workspace_files.measured_starts(self.workspace, self.state.run)
        self.state.add_rows(workspace_files.read_results(workspace_files.results_path(self.workspace, self.state.run)))
        events = workspace_files.tail_events(workspace_files.events_path(self.workspace, self.state.run))
        pending, state = self.state.pending, self.state.state
        for event in workspace_files.catch_up_events(events, self.state.experiment):
            self.state.apply(event)
        self.state.pending = pending  # the snapshot is the authority on what awaits approval
        self.state.state = state
        if state not in ("running", "awaiting_approval"):
            self.state.activity = None  # nothing is under way
        if state == "stopped" and events:
            self.state.ended_at = events[-1].get("t")  # the clock stopped with the session's last event
        self.state.notices.clear()

    def _from_engine_thread(self, event: dict) -> None:
        self.post_message(EngineEvent(event))

    # --- drawing -----------------------------------------------------------------
    def _tick(self) -> None:
        self.query_one(RunHeader).show(self.state, self.clock(), self.attached)

    def _flush_reasoning(self) -> None:
        self.query_one(ReasoningView).show(self.state.reasoning)

    def _redraw(self, parts: set[str]) -> None:
        state = self.state
        if HEADER in parts:
            self._tick()
        if KERNELS in parts:
            table = self.query_one(KernelTable)
            if any(k.name not in table.kinds for k in state.kernels):  # read once, again only for a new task
                table.kinds = workspace_files.task_kinds(self.workspace)
            table.show(state.kernels, state.task, state.meaningful)
            cpu = state.meaningful is False
            table.border_title = "kernels by Amdahl share (CPU: vs starter)" if cpu else "kernels by Amdahl share"
        if RESULTS in parts:
            cpu = state.meaningful is False
            self.query_one(ResultsTable).use_vs_start(cpu)
            self.query_one(ResultsTable).border_title = "results.tsv · vs base n/a on CPU" if cpu else "results.tsv"
        if RESULTS in parts and state.new_rows:
            rows, state.new_rows = state.new_rows, []
            self.query_one(ResultsTable).add_results(rows)
        if DIFF in parts:
            if state.pending:
                self.query_one(DiffView).show(state.pending.get("diff") or "", f"exp {state.pending.get('n')}: candidate vs incumbent")
            elif state.proposal:
                self.query_one(DiffView).show(state.proposal.get("diff") or "",
                                              f"exp {state.proposal.get('n')}: {state.proposal.get('description') or 'candidate'}")
            else:
                self.query_one(DiffView).show(None, "kernel.py: candidate vs incumbent")
        if REASONING in parts:
            self._flush_reasoning()
        if APPROVAL in parts:
            self._show_approval()
        for notice in state.notices:
            self.notify(notice.message, title=notice.title, severity=notice.severity,
                        timeout=30 if notice.severity == "error" or notice.title == "autokernel-tui" else 10)
        state.notices.clear()

    @property
    def awaiting(self) -> bool:
        return self.query_one("#approval").has_class("-awaiting")

    def _show_approval(self) -> None:
        pending = self.state.pending
        for selector in ("#approval-banner", "#approval", "#diff", "#reasoning"):
            self.query_one(selector).set_class(pending is not None, "-awaiting")
        self._sync_left_pane()
        waiting = int(fmt.to_float((self.state.pool or {}).get("waiting_approval")) or 0)
        self.query_one(ApprovalPanel).show(pending, self.state.chain(str((pending or {}).get("task") or "")),
                                           max(0, waiting - 1))
        banner = self.query_one("#approval-banner", Static)
        if pending is None:
            banner.update("")
            return
        approve = keys.display_key(keys.STEERING[1], self.app.user_keys)
        veto = keys.display_key(keys.STEERING[2], self.app.user_keys)
        comparison = pending.get("comparison") or {}
        banner.update(Text(f" ▶ {approve} approve · {veto} veto — exp {pending.get('n')} {pending.get('task', '')}: "
                      f"{fmt.speedup(comparison.get('speedup'))} {fmt.interval(comparison.get('ci_low'), comparison.get('ci_high'))}"
                      " vs incumbent"))
        if self._bell_for != pending.get("n"):
            self._bell_for = pending.get("n")
            self.app.bell()
        self.refresh_bindings()

    def _sync_left_pane(self) -> None:
        """A narrow screen hides the tables while something awaits approval (app.tcss). Only a
        narrow one gets the class: restyling the left pane repaints the whole results table."""
        self.query_one("#live-left").set_class(self.state.pending is not None and self.has_class("-narrow"), "-awaiting")

    def on_resize(self) -> None:
        self._sync_left_pane()  # after Screen._on_resize has set the breakpoint class
        self.fit_footer()

    def binding_description(self, binding_id: str, description: str, narrow: bool = False) -> str:
        """Pause reads "Resume" while a pause is asked for or in force."""
        if binding_id == "pause" and self.state.pausing:
            return keys.RESUME
        return super().binding_description(binding_id, description, narrow)

    @on(EngineEvent)
    def _on_engine_event(self, message: EngineEvent) -> None:
        parts = self.state.apply(message.event)
        if APPROVAL in parts or message.event.get("type") in ("state", "session_ended", "run_finished"):
            self.refresh_bindings()  # Pause / Resume, Approve / Veto enabled
        self._redraw(parts - {REASONING})  # streaming text is drawn by the frame timer

    # --- steering ------------------------------------------------------------------
    @work(thread=True, group="commands")
    def send(self, command: str, **args: Any) -> None:
        try:
            reply = self.client.send(command, **args)
        except Exception as exc:  # the engine said no, or the channel broke: tell the user, keep running
            self.post_message(CommandDone(command, None, f"{type(exc).__name__}: {exc}"))
            return
        self.post_message(CommandDone(command, reply if isinstance(reply, dict) else {}))

    @on(CommandDone)
    def _on_command_done(self, message: CommandDone) -> None:
        if message.error or message.reply.get("ok") is False:
            reason = message.error or message.reply.get("error") or message.reply.get("message") or "refused"
            self.notify(f"{message.command}: {reason}", title="Command failed", severity="error", timeout=15)
            if message.command == "pause":
                self.state.request_pause(False)
            elif message.command == "stop":
                self.state.stop_requested = False
            self._acknowledged()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("approve", "veto"):
            return True if self.state.pending else None  # shown but greyed out until something awaits
        if action == "detach":
            return self.attached
        return True

    def _acknowledged(self) -> None:
        """A key was pressed: the header and the footer say so now, not when the engine gets there."""
        self._tick()
        self.refresh_bindings()

    def action_toggle_pause(self) -> None:
        resume = self.state.pausing  # asked for, or in force: p takes it back
        self.state.request_pause(not resume)
        self.send("resume" if resume else "pause")
        if resume:
            self.notify("resuming" if self.state.state == "paused" else "pause cancelled: the run goes on", timeout=3)
        else:
            self.notify("pausing after this experiment…", timeout=4)
        self._acknowledged()

    def action_approve(self) -> None:
        if self.state.pending:
            self.send("approve", n=self.state.pending.get("n"))

    def action_veto(self) -> None:
        if self.state.pending:
            self.send("veto", n=self.state.pending.get("n"))

    def action_skip(self) -> None:
        self.send("skip")
        self.notify(f"moving on from {self.state.task or 'this kernel'} after the current step", timeout=4)

    def action_cycle_policy(self) -> None:
        current = self.state.policy if self.state.policy in POLICIES else POLICIES[-1]
        new = POLICIES[(POLICIES.index(current) + 1) % len(POLICIES)]
        self.send("set_policy", policy=new)
        self.notify(f"policy: {new}", timeout=3)

    def action_stop(self) -> None:
        if self.state.state == "stopped":
            self.notify("the run is already stopped", timeout=3)
            return
        self.state.request_stop()
        self.send("stop")
        self.notify("stopping after this experiment…", timeout=5)
        self._acknowledged()

    def action_sort(self) -> None:
        label = self.query_one(ResultsTable).sort_by_cursor_column()
        self.notify(f"results sorted by {label}", timeout=2)

    def action_review(self) -> None:
        self.app.open_review()

    def action_help(self) -> None:
        self.app.open_help()

    def action_quit_app(self) -> None:
        self.app.ask_quit()

    def action_detach(self) -> None:
        from autokernel_tui.tui.screens.quit_screen import DETACH
        self.app.exit(DETACH)
