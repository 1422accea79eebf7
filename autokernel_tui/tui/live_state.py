"""What the live screen shows, as plain data: a snapshot plus the events since.

No Textual here: ``LiveState.apply(event)`` folds one engine event into the
state and says which panes need a redraw, so the reducer is tested on its own
and the widgets only render.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autokernel_tui.tui import formatting as fmt
from autokernel_tui.tui.reasoning_buffer import ReasoningBuffer

# Redraw targets a change can touch.
HEADER, KERNELS, REASONING, DIFF, RESULTS, APPROVAL = "header", "kernels", "reasoning", "diff", "results", "approval"


@dataclass
class KernelEntry:
    name: str
    share: float | None = None
    speedup: float | None = None
    state: str = "queued"  # queued | active | plateaued | done | skipped

    @property
    def projected(self) -> float | None:
        return fmt.projected_end_to_end(self.share, self.speedup if self.speedup is not None else 1.0)


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
        self.kernels = [self._kernel_entry(t) for t in (snap.get("tasks") or [])]
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
                           state=str(raw.get("state") or ("active" if name == self.task else "queued")))

    def kernel(self, name: str) -> KernelEntry:
        for entry in self.kernels:
            if entry.name == name:
                return entry
        entry = KernelEntry(name)
        self.kernels.append(entry)
        return entry

    @property
    def best_overall(self) -> float | None:
        return max(self.best.values()) if self.best else None

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
        self.finished = ""
        return {HEADER}

    def _on_state(self, e: dict) -> set[str]:
        self.state = str(e.get("state") or self.state)
        if self.state != "awaiting_approval" and self.pending is not None and self.state != "paused":
            self.pending = None
            return {HEADER, APPROVAL}
        return {HEADER}

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
        return {HEADER, REASONING, DIFF}

    def _on_agent(self, e: dict) -> set[str]:
        kind, text = str(e.get("kind") or "text"), str(e.get("text") or "")
        if kind in ("progress", "error") and text and not text.endswith("\n"):
            text += "\n"  # status lines, one per line, not run together
        self.reasoning.append(kind, text)
        return {REASONING}

    def _on_proposal(self, e: dict) -> set[str]:
        self.proposal = {k: e.get(k) for k in ("n", "description", "hypothesis", "diff")}
        return {DIFF}

    def _on_verdict(self, e: dict) -> set[str]:
        self.verdict = e
        return set()

    def _on_awaiting_approval(self, e: dict) -> set[str]:
        self.pending = e
        self.state = "awaiting_approval"
        return {HEADER, APPROVAL, DIFF}

    def _on_decision(self, e: dict) -> set[str]:
        if self.pending is not None and self.pending.get("n") == e.get("n"):
            self.pending = None
        return {HEADER, APPROVAL}

    def _on_result(self, e: dict) -> set[str]:
        row = dict(e.get("row") or {})
        self.new_rows.append(row)
        name = str(row.get("task") or "")
        speed = fmt.to_float(row.get("speedup_vs_baseline"))
        if name and speed is not None and row.get("status") == "keep":
            if speed > self.best.get(name, 0.0):
                self.best[name] = speed
            self.kernel(name).speedup = self.best[name]
        return {HEADER, KERNELS, RESULTS}

    def _on_policy(self, e: dict) -> set[str]:
        self.policy = str(e.get("policy") or self.policy)
        return {HEADER}

    def _on_budget(self, e: dict) -> set[str]:
        self.tokens = float(e.get("tokens") or self.tokens)
        self.cost_usd = float(e.get("cost_usd") or self.cost_usd)
        return {HEADER}

    def _on_run_finished(self, e: dict) -> set[str]:
        self.state = "stopped"
        self.pending = None
        self.finished = str(e.get("reason") or "finished")
        self.notices.append(Notice("information", "Run finished", self.finished))
        return {HEADER, APPROVAL}

    def _on_repaired(self, e: dict) -> set[str]:
        self.notices.append(Notice("warning", "Repaired", str(e.get("message") or "")))
        return set()

    def _on_error(self, e: dict) -> set[str]:
        self.notices.append(Notice("error", "Engine error", str(e.get("message") or "unknown error")))
        return set()
