"""What the live screen shows, as plain data: a snapshot plus the events since.

No Textual here: ``LiveState.apply(event)`` folds one engine event into the
state and says which panes need a redraw, so the reducer is tested on its own
and the widgets only render.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from autokernel_tui.tui import formatting as fmt
from autokernel_tui.tui.reasoning_buffer import ReasoningBuffer

# Redraw targets a change can touch.
HEADER, KERNELS, REASONING, DIFF, RESULTS, APPROVAL = "header", "kernels", "reasoning", "diff", "results", "approval"


REVERT_OF = re.compile(r"revert exp (\d+):")  # a reverted row's description (engine.loop)


@dataclass
class KernelEntry:
    name: str
    share: float | None = None
    speedup: float | None = None  # vs baseline (the op the model runs): meaningful on a GPU only
    state: str = "queued"  # queued | active | plateaued | done | skipped
    speedup_vs_start: float | None = None  # product of the kept speedups vs incumbent (engine's orchestrator)

    def shown_speedup(self, meaningful: bool | None) -> float | None:
        """What the kernel list shows: vs baseline where timings mean something, else vs the starter."""
        if meaningful is False:
            return self.speedup_vs_start
        return self.speedup

    def projected(self, meaningful: bool | None = True) -> float | None:
        speed = self.shown_speedup(meaningful)
        return fmt.projected_end_to_end(self.share, speed if speed is not None else 1.0)


class StartChain:
    """Each result row's speedup vs the starter kernel, rows fed in experiment order: the engine's own
    arithmetic (orchestrator: the product of kept speedups vs incumbent; a revert divides its
    experiment's back out). A candidate that was not kept gets what it measured against the
    starter: the product so far times its own speedup vs incumbent. None: nothing measured."""

    def __init__(self) -> None:
        self.chain: dict[str, float] = {}  # task -> speedup vs start so far
        self.kept: dict[int, float] = {}  # kept experiment -> its speedup vs incumbent

    def add(self, row: Any) -> float | None:
        get = row.get if isinstance(row, dict) else (lambda k, d=None: getattr(row, k, d))
        task, status = str(get("task") or ""), get("status")
        chain = self.chain.get(task, 1.0)
        vs_inc = fmt.to_float(get("speedup_vs_incumbent"))
        value = None
        if status == "keep" and vs_inc and vs_inc > 0:
            chain *= vs_inc
            self.kept[int(get("experiment") or 0)] = vs_inc
            value = chain
        elif status == "reverted":
            match = REVERT_OF.match(str(get("description") or ""))
            gone = self.kept.pop(int(match.group(1)), None) if match else None
            if gone:
                chain /= gone
            value = chain
        elif vs_inc and vs_inc > 0:
            value = chain * vs_inc
        self.chain[task] = chain
        return value


@dataclass
class Activity:
    """What the engine is busy with between two things on screen, from its events (no event says
    how far the harness is inside an evaluation: see docs/ARCHITECTURE.md, "The app")."""
    kind: str  # start (measuring the starting kernel) | agent | harness | revert
    what: str
    since: float | None  # the event's time
    expect_s: float | None = None  # how long the same kind of work took last time, when known


@dataclass
class Notice:
    severity: str  # information | warning | error
    title: str
    message: str


@dataclass
class LiveState:
    run: str = ""
    state: str = "idle"
    policy: str = "manual"
    experiment: int = 0
    task: str = ""
    kernels: list[KernelEntry] = field(default_factory=list)
    best: dict[str, float] = field(default_factory=dict)
    tokens: float = 0.0
    # The engine's "pool" event / snapshot field (K in flight): in_flight, parallel, workers, ...
    pool: dict | None = None
    cost_usd: float = 0.0
    device: Any = None
    started_at: float | None = None
    pending: dict | None = None
    proposal: dict | None = None  # the current candidate: n, description, hypothesis, diff
    verdict: dict | None = None
    finished: str = ""
    reasoning: ReasoningBuffer = field(default_factory=ReasoningBuffer)
    new_rows: list[dict] = field(default_factory=list)  # result rows not yet drawn
    notices: list[Notice] = field(default_factory=list)  # not yet shown
    repairs: list[str] = field(default_factory=list)  # what the engine repaired when it opened the run
    pause_requested: bool = False  # p pressed: the engine pauses after the current experiment
    stop_requested: bool = False  # x pressed: it stops after the current experiment
    ended_at: float | None = None  # when the session stopped: the elapsed clock stops there
    activity: Activity | None = None
    start_measured: set[str] = field(default_factory=set)  # tasks whose starting kernel this run measured
    quick: bool | None = None  # the harness runs in quick mode (first dtype only); None: not known here
    took_s: dict[str, float] = field(default_factory=dict)  # activity kind -> how long it took last time
    last_check: str = ""  # what the harness ran, from the newest report: "3 test shapes x 1 dtype"
    _starts: "StartChain" = field(default_factory=lambda: StartChain())

    @classmethod
    def from_snapshot(cls, snap: dict, max_reasoning_chars: int | None = None) -> "LiveState":
        state = cls()
        if max_reasoning_chars:
            state.reasoning = ReasoningBuffer(max_reasoning_chars)
        state.load_snapshot(snap)
        return state

    def load_snapshot(self, snap: dict) -> None:
        self.run = str(snap.get("run") or "")
        self.state = str(snap.get("state") or "idle")
        self.policy = str(snap.get("policy") or "manual")
        self.experiment = int(snap.get("experiment") or 0)
        self.task = str(snap.get("task") or "")
        self.best = {k: float(v) for k, v in (snap.get("best") or {}).items() if fmt.to_float(v) is not None}
        self.tokens = float(snap.get("tokens") or 0)
        self.cost_usd = float(snap.get("cost_usd") or 0)
        self.device = snap.get("device")
        self.started_at = fmt.to_float(snap.get("started_at"))
        self.pending = snap.get("pending") or None
        self.pool = snap.get("pool") if isinstance(snap.get("pool"), dict) else None
        self.kernels = [self._kernel_entry(t) for t in (snap.get("tasks") or [])]
        self.ended_at = None
        repairs = snap.get("repairs")
        self.repairs = [str(m) for m in repairs][:20] if isinstance(repairs, list) else []

    def repair_notices(self) -> list[Notice]:
        """One warning per repair the engine made when it opened the run (engine/repair.py)."""
        return [Notice("warning", "Repaired when the run opened", m) for m in self.repairs]

    def _kernel_entry(self, raw: Any) -> KernelEntry:
        if isinstance(raw, str):
            raw = {"name": raw}
        name = str(raw.get("name") or raw.get("task") or raw.get("op") or "?")
        speed = fmt.to_float(raw.get("speedup"))
        if speed is None:
            speed = self.best.get(name)
        return KernelEntry(name=name, share=fmt.to_float(raw.get("share")), speedup=speed,
                           state=str(raw.get("state") or ("active" if name == self.task else "queued")),
                           speedup_vs_start=fmt.to_float(raw.get("speedup_vs_start")))

    def kernel(self, name: str) -> KernelEntry:
        for entry in self.kernels:
            if entry.name == name:
                return entry
        entry = KernelEntry(name)
        self.kernels.append(entry)
        return entry

    @property
    def meaningful(self) -> bool | None:
        """True on a GPU, False on the CPU interpreter (speedups vs baseline mean nothing there),
        None until the engine has said which."""
        return fmt.timing_meaningful(self.device)

    @property
    def best_overall(self) -> float | None:
        """The best kernel's speedup as the header shows it: vs baseline on a GPU; on the CPU vs
        the starter kernel, and only once something was kept (None: nothing to show)."""
        if self.meaningful is False:
            return self.best_vs_start
        return max(self.best.values()) if self.best else None

    @property
    def best_vs_start(self) -> float | None:
        gains = [k.speedup_vs_start for k in self.kernels if k.speedup_vs_start and k.speedup_vs_start != 1.0]
        return max(gains) if gains else None

    def chain(self, task: str) -> float:
        """The task's speedup over its starter kernel so far, from the rows (1.0: nothing kept)."""
        return self._starts.chain.get(task, 1.0)

    def elapsed_s(self, now: float) -> float | None:
        """The session's clock: it stops when the session does."""
        if self.started_at is None:
            return None
        return (self.ended_at if self.ended_at is not None else now) - self.started_at

    # Rows: each gets its speedup vs the starter kernel (``speedup_vs_start``) as it arrives, the
    # engine's own arithmetic (orchestrator: the product of kept speedups vs incumbent; a revert
    # divides its experiment's back out). A candidate that was not kept gets what it measured
    # against the starter: the product so far times its own speedup vs incumbent.
    def add_rows(self, rows: list[dict]) -> None:
        """Rows read from results.tsv when the screen opens (the snapshot already counts them)."""
        for row in rows:
            self._annotate(row)
            if row.get("task"):
                self.start_measured.add(str(row["task"]))
        self.new_rows.extend(rows)

    def _annotate(self, row: dict) -> None:
        row["speedup_vs_start"] = self._starts.add(row)

    @property
    def awaiting(self) -> bool:
        return self.pending is not None

    def apply(self, event: dict) -> set[str]:
        """Fold one event in; return the panes that changed."""
        kind = event.get("type")
        handler = getattr(self, f"_on_{kind}", None)
        return handler(event) if handler else set()

    # One handler per event type (docs/ARCHITECTURE.md, "Engine").
    def _on_run_started(self, e: dict) -> set[str]:
        self.run = str(e.get("run") or self.run)
        self.started_at = fmt.to_float(e.get("t")) or self.started_at
        self.ended_at = None
        self.finished = ""
        self.stop_requested = False
        if e.get("device"):
            self.device = e.get("device")  # a snapshot taken while the harness started had none
        return {HEADER, KERNELS, RESULTS}

    def _on_state(self, e: dict) -> set[str]:
        self.state = str(e.get("state") or self.state)
        if self.state in ("paused", "stopped", "idle"):
            self.pause_requested = False  # done (or moot)
        if self.state == "stopped":
            self.stop_requested = False
            self.ended_at = fmt.to_float(e.get("t"))
            self.activity = None
        elif self.state == "paused":
            self.activity = None
        else:
            self.ended_at = None
        if self.state != "awaiting_approval" and self.pending is not None and self.state != "paused":
            self.pending = None
            return {HEADER, APPROVAL}
        return {HEADER}

    def request_pause(self, pause: bool) -> None:
        """The user pressed p: shown at once, before the engine gets round to it."""
        self.pause_requested = pause

    def request_stop(self) -> None:
        self.stop_requested = True

    @property
    def pausing(self) -> bool:
        """A pause is asked for or in force: p now means resume."""
        return self.pause_requested or self.state == "paused"

    def _on_task_selected(self, e: dict) -> set[str]:
        self.task = str(e.get("task") or "")
        for entry in self.kernels:
            if entry.state == "active":
                entry.state = "queued" if entry.name != self.task else "active"
        if self.task:
            self.kernel(self.task).state = "active"
        return {HEADER, KERNELS}

    def _on_experiment_started(self, e: dict) -> set[str]:
        self.experiment = int(e.get("n") or self.experiment)
        self.task = str(e.get("task") or self.task)
        self.reasoning.clear()
        self.proposal = None
        self.verdict = None
        t = fmt.to_float(e.get("t"))
        if e.get("revert_of") is not None:
            self.activity = Activity("revert", f"reverting exp {e.get('revert_of')}", t)
        elif self.task not in self.start_measured:
            # The engine measures the starting kernel once per run before the agent's first turn
            # on it (engine.loop: _incumbent_report), and a new box times the eager baselines too.
            self.activity = Activity("start", f"exp {self.experiment}: measuring the starting {self.task} kernel "
                                     "first (checks, timings; a new box also times the eager baselines)", t,
                                     self.took_s.get("start"))
        else:
            self.activity = Activity("agent", f"exp {self.experiment}: the agent is proposing a {self.task} kernel", t)
        return {HEADER, REASONING, DIFF}

    def _on_baseline(self, e: dict) -> set[str]:
        task = str(e.get("task") or "")
        self.start_measured.add(task)
        self._read_report(e.get("report"))
        self._took("start", e)
        if self.activity is not None:
            self.activity = Activity("agent", f"exp {self.experiment}: the agent is proposing a {self.task} kernel",
                                     fmt.to_float(e.get("t")))
        return {HEADER}

    def _took(self, kind: str, e: dict) -> None:
        """The activity of this kind just ended: remember how long it took, as the next one's guide."""
        t = fmt.to_float(e.get("t"))
        if self.activity is not None and self.activity.kind == kind and self.activity.since is not None and t:
            self.took_s[kind] = max(0.0, t - self.activity.since)

    def _read_report(self, report: Any) -> None:
        """Keep what a harness report says it ran on (shown beside the harness's activity)."""
        if not isinstance(report, dict):
            return
        shapes = [s for s in report.get("shapes") or [] if isinstance(s, dict)]
        if shapes:
            names = {str(s.get("shape")) for s in shapes}
            dtypes = {str(s.get("dtype")) for s in shapes}
            kind = "test shapes" if report.get("timing_meaningful") is False else "shapes"
            self.last_check = (f"{len(names)} {kind} x {len(dtypes)} dtype{'s' if len(dtypes) != 1 else ''}")

    def _on_agent(self, e: dict) -> set[str]:
        kind, text = str(e.get("kind") or "text"), str(e.get("text") or "")
        if kind in ("progress", "error") and text and not text.endswith("\n"):
            text += "\n"  # status lines, one per line, not run together
        self.reasoning.append(kind, text)
        return {REASONING}

    def _on_proposal(self, e: dict) -> set[str]:
        self.proposal = {k: e.get(k) for k in ("n", "description", "hypothesis", "diff")}
        # The engine commits the candidate, then the harness checks and times it and compares it
        # with the incumbent (engine.loop: _experiment); the next event is its verdict.
        self.activity = Activity("harness", f"exp {e.get('n')}: harness checking and timing the candidate, then "
                                 "comparing it with the incumbent", fmt.to_float(e.get("t")), self.took_s.get("harness"))
        return {DIFF, HEADER}

    def _on_verdict(self, e: dict) -> set[str]:
        self.verdict = e
        self._read_report(e.get("report"))
        report = e.get("report") if isinstance(e.get("report"), dict) else {}
        if report.get("status") == "PASS":  # a failed check stops early: no guide to the next one
            self._took("harness", e)
        self.activity = None
        return {HEADER}

    def _on_awaiting_approval(self, e: dict) -> set[str]:
        self.pending = e
        self.state = "awaiting_approval"
        self.activity = None
        return {HEADER, APPROVAL, DIFF}

    def _on_decision(self, e: dict) -> set[str]:
        if self.pending is not None and self.pending.get("n") == e.get("n"):
            self.pending = None
        self.activity = None
        return {HEADER, APPROVAL}

    def _on_experiment_abandoned(self, e: dict) -> set[str]:
        self.activity = None
        return {HEADER}

    def _on_result(self, e: dict) -> set[str]:
        row = dict(e.get("row") or {})
        self._annotate(row)
        self.new_rows.append(row)
        name = str(row.get("task") or "")
        if name:
            self.start_measured.add(name)
        speed = fmt.to_float(row.get("speedup_vs_baseline"))
        if name and speed is not None and row.get("status") == "keep":
            if speed > self.best.get(name, 0.0):
                self.best[name] = speed
            self.kernel(name).speedup = self.best[name]
        vs_inc = fmt.to_float(row.get("speedup_vs_incumbent"))
        if name and row.get("status") == "keep" and vs_inc and vs_inc > 0:
            entry = self.kernel(name)
            entry.speedup_vs_start = (entry.speedup_vs_start or 1.0) * vs_inc
        elif name and row.get("status") == "reverted" and row.get("speedup_vs_start") is not None:
            self.kernel(name).speedup_vs_start = row["speedup_vs_start"]
        return {HEADER, KERNELS, RESULTS}

    def _on_policy(self, e: dict) -> set[str]:
        self.policy = str(e.get("policy") or self.policy)
        return {HEADER}

    def _on_pool(self, e: dict) -> set[str]:
        self.pool = {k: v for k, v in e.items() if k not in ("t", "type", "run")}
        return {HEADER, APPROVAL} if self.pending is not None else {HEADER}  # "N more waiting"

    def _on_budget(self, e: dict) -> set[str]:
        self.tokens = float(e.get("tokens") or self.tokens)
        self.cost_usd = float(e.get("cost_usd") or self.cost_usd)
        return {HEADER}

    def _on_session_ended(self, e: dict) -> set[str]:
        self._ended(e)
        self.notices.append(Notice("information", "Run stopped",
                                   f"{e.get('reason') or 'stopped'}; it resumes where it stopped with: autokernel-tui"))
        return {HEADER, APPROVAL}

    def _ended(self, e: dict) -> None:
        self.state = "stopped"
        self.pending = None
        self.activity = None
        self.pause_requested = self.stop_requested = False
        if self.ended_at is None:
            self.ended_at = fmt.to_float(e.get("t"))

    def _on_run_finished(self, e: dict) -> set[str]:
        self._ended(e)
        self.finished = str(e.get("reason") or "finished")
        self.notices.append(Notice("information", "Run finished", self.finished))
        return {HEADER, APPROVAL}

    def _on_repaired(self, e: dict) -> set[str]:
        self.notices.append(Notice("warning", "Repaired", str(e.get("message") or "")))
        return set()

    def _on_error(self, e: dict) -> set[str]:
        self.notices.append(Notice("error", "Engine error", str(e.get("message") or "unknown error")))
        return set()
