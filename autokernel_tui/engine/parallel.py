"""K experiments in flight (issue 22): agent proposals written concurrently, judged one at a time.

``run.parallel`` (``run --parallel K``) lets up to K agent proposals be *in flight*: being written
by the agent (each in its own thread: agents are I/O-bound) or written and waiting to be judged.
The engine's loop thread stays the only one that touches git, results.tsv and the gate, so the
ledger keeps every rule it had with one experiment at a time.

Rules (docs/ARCHITECTURE.md, "Engine details"):

* **Numbering in commit order.** A proposal in flight has an id (``proposal_started``), not an
  experiment number. It gets its number when the loop takes it to be judged: ``experiment_started``
  (with ``proposal`` = its id) -> agent text -> ``proposal`` -> commit -> ... exactly as before. So
  numbers are contiguous in commit order and every experiment is one commit, one row, one ref.
* **Judged against the incumbent at judging time.** A proposal is a complete kernel.py; the loop
  judges the ready ones in arrival order, each against the kernel on the branch at that moment
  (its diff, its comparison, the keep's compare-and-swap of the branch). A proposal written
  against an older incumbent of the same kernel is therefore re-judged against the current one:
  it is kept only when it beats what is on the branch now, never because it beat what was there
  when the agent started.
* **Different kernels first.** Each free slot goes to the active kernel with the fewest proposals
  in flight, ties by the orchestrator's expected gain. Proposals for the same kernel see each
  other (``AgentContext.in_flight``: description and, once written, source); the offline tuner
  treats every configuration in flight as tried, so K tuner proposals are K distinct configs.
* **Crash and resume.** ``proposal_ready`` journals the whole proposal (source, description,
  spend, the agent's text) before it can be judged. On the next start, a ready proposal that no
  ``experiment_started`` took is judged first (nothing lost, its tokens counted once, in its
  row); one that was still being written is dropped with a ``proposal_dropped`` event (its
  agent's answer never arrived: there is nothing to judge; it never had a number, so no gap).
  A taken proposal is the open experiment, finished exactly once by ``recovery`` as before.
* **Stop.** A stop drops the proposals still being written (``proposal_dropped``); ready ones
  stay in the journal for the next session. A run that is over for good drops what is left.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

# Auto (run.parallel = 0): 1 on the CPU, 4 on a GPU (see config.RunSettings.parallel).
AUTO_CPU, AUTO_GPU = 1, 4


def resolve(setting: int, device: dict[str, Any] | None) -> int:
    """The number of proposals in flight: the setting, or its auto value for this device."""
    if setting and setting > 0:
        return int(setting)
    return AUTO_GPU if (device or {}).get("timing_meaningful") else AUTO_CPU


@dataclass
class Ready:
    """A proposal written (or failed) and journaled, waiting to be numbered and judged."""
    id: str
    task: str
    proposal: Any                     # agents.base.Proposal, or None when ``error``
    texts: list[tuple[str, str]]      # the agent's (kind, text), replayed under the number
    error: str = ""                   # an AgentError (malformed proposal): judged as a failed experiment
    started: float = field(default_factory=time.time)


@dataclass
class _Slot:
    id: str
    task: str
    started: float
    texts: list[tuple[str, str]] = field(default_factory=list)
    ready: Ready | None = None


def proposal_dict(p: Any) -> dict[str, Any]:
    return {"source": p.source, "description": p.description, "hypothesis": p.hypothesis,
            "tokens_in": int(p.tokens_in or 0), "tokens_out": int(p.tokens_out or 0),
            "cost_usd": float(p.cost_usd or 0.0), "agent": p.agent or ""}


def proposal_from(d: dict[str, Any]) -> Any:
    from autokernel_tui.agents.base import Proposal

    return Proposal(source=str(d.get("source") or ""), description=str(d.get("description") or ""),
                    hypothesis=str(d.get("hypothesis") or ""), tokens_in=int(d.get("tokens_in") or 0),
                    tokens_out=int(d.get("tokens_out") or 0), cost_usd=float(d.get("cost_usd") or 0.0),
                    agent=str(d.get("agent") or ""))


class InFlight:
    """The proposals in flight. ``start`` runs the agent in a thread; the loop ``take``s ready ones
    in arrival order. Shares the engine's condition variable (an arrival notifies it)."""

    def __init__(self, cv: threading.Condition, emit: Callable[..., dict]):
        self._cv = cv
        self._emit = emit
        self._slots: dict[str, _Slot] = {}
        self._arrivals: list[str] = []
        self._handed: set[str] = set()  # arrivals handed out to be judged ahead
        self._down: list[tuple[str, str, str]] = []  # (task, kind, message): unavailable / nothing left
        # Called with each arrival from the agent's thread (the engine judges it ahead at once): the
        # loop thread may be inside the gate for minutes, waiting for a human, and must not be the
        # only one to hand arrivals on. ``arrived`` hands each out once, whoever asks first.
        self.on_arrival: Callable[[Ready], None] | None = None

    # --- what is in flight ---------------------------------------------------------------
    def count(self) -> int:
        with self._cv:
            return len(self._slots)

    def counts(self) -> tuple[int, int]:
        """(being written, ready)."""
        with self._cv:
            ready = sum(1 for s in self._slots.values() if s.ready is not None)
            return len(self._slots) - ready, ready

    def per_task(self) -> dict[str, int]:
        with self._cv:
            out: dict[str, int] = {}
            for s in self._slots.values():
                out[s.task] = out.get(s.task, 0) + 1
            return out

    def for_task(self, task: str) -> list[dict[str, Any]]:
        """What an agent starting on ``task`` is told about the others in flight on it."""
        with self._cv:
            out = []
            for s in self._slots.values():
                if s.task != task:
                    continue
                p = s.ready.proposal if s.ready is not None else None
                out.append({"id": s.id, "state": "ready" if s.ready is not None else "proposing",
                            "description": p.description if p is not None else "",
                            "source": p.source if p is not None else None})
            return out

    # --- in -------------------------------------------------------------------------------
    def restore(self, ready: Ready) -> None:
        """A ready proposal journaled by an earlier session (judged first)."""
        with self._cv:
            self._slots[ready.id] = _Slot(ready.id, ready.task, ready.started, list(ready.texts), ready)
            self._arrivals.append(ready.id)
            self._cv.notify_all()

    def start(self, task: str, agent: Any, ctx: Any) -> str:
        from autokernel_tui.agents import base as agents

        pid = uuid.uuid4().hex[:12]
        slot = _Slot(pid, task, time.time())
        with self._cv:
            self._slots[pid] = slot
        self._emit("proposal_started", id=pid, task=task)

        def work() -> None:
            from autokernel_tui.agents.base import AgentEvent  # noqa: F401  (the agent's emit type)

            error, proposal, down = "", None, None
            try:
                proposal = agent.propose(ctx, lambda ev: slot.texts.append((ev.kind, ev.text)))
            except agents.AgentUnavailable as exc:
                down = ("unavailable", str(exc))
            except agents.NothingToPropose as exc:
                down = ("nothing_left", str(exc))
            except agents.AgentError as exc:
                error = str(exc) or type(exc).__name__
            except Exception as exc:  # a bug in an agent costs one experiment, not the night
                error = f"the agent crashed: {type(exc).__name__}: {exc}"
            with self._cv:
                if pid not in self._slots:  # dropped meanwhile (a stop): its answer is not wanted
                    return
            try:
                if down is not None:
                    self._emit("proposal_dropped", id=pid, reason=f"{down[0]}: {down[1]}")
                    with self._cv:
                        self._slots.pop(pid, None)
                        self._down.append((task, down[0], down[1]))
                        self._cv.notify_all()
                    return
                ready = Ready(pid, task, proposal, list(slot.texts), error, slot.started)
                self._emit("proposal_ready", id=pid, task=task,
                           proposal=proposal_dict(proposal) if proposal is not None else None,
                           texts=[list(t) for t in ready.texts], **({"error": error} if error else {}))
            except Exception:  # the journal cannot be written: the proposal is lost, like a kill
                with self._cv:
                    self._slots.pop(pid, None)
                    self._cv.notify_all()
                return
            with self._cv:
                if pid in self._slots:
                    slot.ready = ready
                    self._arrivals.append(pid)
                self._cv.notify_all()
            hand_on = self.on_arrival
            if hand_on is not None:
                for arrival in self.arrived():
                    hand_on(arrival)

        threading.Thread(target=work, name=f"agent-{pid}", daemon=True).start()
        return pid

    # --- out ------------------------------------------------------------------------------
    def arrived(self) -> list[Ready]:
        """Ready proposals not handed out before (to be judged ahead), in arrival order."""
        with self._cv:
            out = []
            for pid in self._arrivals:
                slot = self._slots.get(pid)
                if slot is not None and slot.ready is not None and pid not in self._handed:
                    self._handed.add(pid)
                    out.append(slot.ready)
            return out

    def _first(self, judged: Callable[[Ready], bool]) -> Ready | None:
        """The oldest arrival that ``judged`` says may be recorded now (arrivals dropped meanwhile
        are forgotten on the way). Under the lock."""
        for pid in list(self._arrivals):
            slot = self._slots.get(pid)
            if slot is None or slot.ready is None:
                self._arrivals.remove(pid)
            elif judged(slot.ready):
                return slot.ready
        return None

    def take(self, judged: Callable[[Ready], bool] = lambda r: True) -> Ready | None:
        """The oldest ready proposal that ``judged`` says may be recorded now (it leaves the set in
        flight when its experiment ends)."""
        with self._cv:
            ready = self._first(judged)
            if ready is not None:
                self._arrivals.remove(ready.id)
            return ready

    def take_is_empty(self, judged: Callable[[Ready], bool]) -> bool:
        """No ready proposal may be recorded now (``take`` would give nothing)."""
        with self._cv:
            return self._first(judged) is None

    def done(self, pid: str) -> None:
        with self._cv:
            self._slots.pop(pid, None)
            self._handed.discard(pid)

    def has_news(self) -> bool:
        """A proposal arrived or an agent gave up since the loop last looked."""
        with self._cv:
            return bool(set(self._arrivals) - self._handed or self._down)

    def take_down(self) -> list[tuple[str, str, str]]:
        with self._cv:
            out, self._down = self._down, []
            return out

    def drop_all(self, reason: str, ready_too: bool) -> None:
        """Forget the proposals still being written (their threads' answers are ignored), and the
        ready ones too when ``ready_too`` (the run is over)."""
        with self._cv:
            gone = [s for s in self._slots.values() if ready_too or s.ready is None]
            for s in gone:
                self._slots.pop(s.id, None)
        for s in gone:
            self._emit("proposal_dropped", id=s.id, reason=reason)


def journaled(events: list[dict[str, Any]]) -> tuple[list[Ready], list[str]]:
    """From the journal: the ready proposals no experiment took (to judge), and the ids of those
    still being written when the last session ended (to drop)."""
    started: dict[str, str] = {}
    ready: dict[str, Ready] = {}
    gone: set[str] = set()  # dropped or taken: never judged (again)
    for ev in events:
        kind, pid = ev.get("type"), ev.get("id")
        if isinstance(pid, str) and pid in gone:
            continue
        if kind == "proposal_started" and isinstance(pid, str):
            started[pid] = str(ev.get("task") or "")
        elif kind == "proposal_ready" and isinstance(pid, str):
            d = ev.get("proposal")
            texts = [(str(t[0]), str(t[1])) for t in ev.get("texts") or [] if isinstance(t, list) and len(t) == 2]
            ready[pid] = Ready(pid, str(ev.get("task") or ""), proposal_from(d) if isinstance(d, dict) else None,
                               texts, str(ev.get("error") or ("" if isinstance(d, dict) else "no proposal")),
                               float(ev.get("t") or time.time()))
        elif kind == "proposal_dropped" and isinstance(pid, str):
            started.pop(pid, None)
            ready.pop(pid, None)
            gone.add(pid)
        elif kind == "experiment_started" and isinstance(ev.get("proposal"), str):
            started.pop(ev["proposal"], None)
            ready.pop(ev["proposal"], None)
            gone.add(ev["proposal"])
    return list(ready.values()), [pid for pid in started if pid not in ready]


class Rate:
    """Experiments per hour over this session (results written / wall time since the first)."""

    def __init__(self) -> None:
        self.t0 = time.time()
        self.n = 0

    def add(self) -> None:
        self.n += 1

    def per_hour(self) -> float:
        dt = time.time() - self.t0
        return round(self.n * 3600.0 / dt, 1) if dt > 0 and self.n else 0.0
