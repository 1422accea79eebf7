"""The engine: the façade the TUI and the control socket use, and the loop it runs all night.

``Engine(workspace, settings)`` opens (or resumes) a run and offers ``snapshot()``,
``command()``, ``subscribe()``, ``start()`` / ``run()`` / ``join()`` / ``close()``
and ``serve_control()``. It owns the engine's state (idle, running, paused,
awaiting_approval, stopped) and the loop: pick a kernel (``orchestrator``), run
one experiment (``experiment``), respect the budgets (``budget``), pause on an
outage or an error, finish what a crash left open (``recovery``), process
reverts (``revert``).

One thread runs the loop (``run()`` blocks; ``start()`` runs it in the
background); commands from the TUI or the control socket only set flags under
one condition variable, so the loop acts on them at safe points.

What each part owns: ``runrecord`` the run's files and paths (run.json,
results.tsv, events.jsonl, reports/, agent/) and its totals; ``bus`` the event
journal-then-publish; ``gate`` the keep decision and the question to a human;
``experiment`` one propose -> commit -> evaluate -> gate -> record; ``recovery``
and ``repair`` what a new session does first; ``revert`` reverts;
``backends`` the agent, the harness and plugins.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

from autokernel_tui.config import Settings, load_settings
from autokernel_tui.engine import budget, journal, parallel, recovery
from autokernel_tui.engine.backends import Evaluator, make_agent, make_harness
from autokernel_tui.engine.bus import EventBus
from autokernel_tui.engine.experiment import AGENT_DOWN, NOTHING_LEFT, Experiment, Lab, Outcome
from autokernel_tui.engine.gate import ApprovalGate, Pending
from autokernel_tui.engine.gate import decide as gate_rule
from autokernel_tui.engine.judging import AheadJudge, Judged
from autokernel_tui.engine.lock import EngineLock
from autokernel_tui.engine.orchestrator import ACTIVE, EXHAUSTED, SKIPPED, Orchestrator, roofline_if_meaningful
from autokernel_tui.engine.revert import Reverts
from autokernel_tui.engine.runrecord import RUNS, new_tag, open_run, unfinished_run
from autokernel_tui.errors import AutokernelError, EngineError, describe_os_error
from autokernel_tui.harness.report import Report
from autokernel_tui.ledger import paths

IDLE, RUNNING, PAUSED, AWAITING, STOPPED = "idle", "running", "paused", "awaiting_approval", "stopped"

# Kept importable from here for callers of the engine before the split (the commands import
# runrecord and backends directly).
__all__ = ["Engine", "EngineError", "RUNS", "new_tag", "unfinished_run", "IDLE", "RUNNING", "PAUSED", "AWAITING",
           "STOPPED"]


class Engine:
    def __init__(self, workspace: str | Path, settings: Settings | None = None, *, tag: str | None = None,
                 new: bool = False, tasks: list[str] | None = None, agent: Any = None, harness: Any = None,
                 env: dict[str, str] | None = None):
        self.workspace = Path(workspace).resolve()
        self.settings = (settings or load_settings(self.workspace)).validate()  # e.g. built in code, not loaded
        self.env = dict(os.environ if env is None else env)
        self._cv = threading.Condition(threading.RLock())
        self.gate = ApprovalGate(self._cv, self.settings.run.policy, self.settings.run)
        self.state = IDLE
        self._pause = self._stop = False
        self._skip: str | None = None
        self._revert_queue: list[int] = []
        self._needs_recovery = False
        self._retry_at: float | None = None
        self._looping = False
        self._thread: threading.Thread | None = None
        self.current_n: int | None = None
        self.current_task: str | None = None
        self.device: dict[str, Any] | None = None
        self.session_started = time.time()
        self.finish_reason = ""
        self._agent, self._harness = agent, harness
        self._lab: Lab | None = None
        self._inflight = parallel.InFlight(self._cv, self._emit_any)
        self._rate = parallel.Rate()
        self._judging = False
        self._ahead: AheadJudge | None = None
        self.control = None
        self.bus: EventBus | None = None
        self.lock = EngineLock(self.workspace).acquire()
        try:
            self.record, self.repo, self.resumed = open_run(self.workspace, self.settings, tag, new, tasks)
            self.bus = EventBus(self.record.events)
            self.reverts = Reverts(self.record, self.repo)
            self.repairs: list[str] = recovery.repair_run(self.record, self.repo, self.bus)
            self._recover()
            self._restore_in_flight()
            self.orch = self._replay_orchestrator()
            self.prior_active_s = journal.active_seconds(self.record.journal())
        except BaseException:
            self.lock.release()
            if self.bus is not None:
                self.bus.close()
            raise

    # --- what the run record holds, under the names viewers and tests use ----------------
    @property
    def tag(self) -> str:
        return self.record.tag

    @property
    def run_dir(self) -> Path:
        return self.record.dir

    @property
    def meta(self) -> dict[str, Any]:
        return self.record.meta

    @property
    def specs(self) -> dict[str, Any]:
        return self.record.specs

    @property
    def results(self) -> Any:
        return self.record.results

    @property
    def policy(self) -> str:
        return self.gate.policy

    # --- opening: recovery and the orchestrator's state --------------------------------
    def _recover(self) -> None:
        """Finish an experiment the last session died in, exactly once (engine/recovery.py)."""
        done = recovery.finish_open_experiment(self.record, self.repo, self.bus, self.reverts)
        self._needs_recovery = False
        if done is None or not hasattr(self, "orch") or done.row.get("task") not in self.orch.tasks:
            return  # when the run opens, the orchestrator is built from the rows afterwards
        if done.reverted is not None:
            self._unkeep(done.row["task"], done.reverted)
        else:
            self._observe(done.row, done.report, 0.0)

    def _emit_any(self, type_: str, **fields: Any) -> dict:
        return self.bus.emit(type_, **fields)

    def _restore_in_flight(self) -> None:
        """Proposals the last session had in flight (engine/parallel.py): a ready one is judged
        first, one still being written is dropped (its answer never arrived)."""
        ready, writing = parallel.journaled(self.record.journal())
        for pid in writing:
            self.bus.emit("proposal_dropped", id=pid,
                          reason="the engine stopped while the agent was writing it; dropped on resume")
        for r in ready:
            if r.task in self.record.tasks:
                self._inflight.restore(r)
            else:
                self.bus.emit("proposal_dropped", id=r.id, reason=f"task {r.task!r} is not in this run")

    def _replay_orchestrator(self) -> Orchestrator:
        """The orchestrator as the run's record leaves it: starting kernels, then every row."""
        rs = self.settings.run
        shares = {t: (self.specs[t].profile or {}).get("share") for t in self.record.tasks}
        orch = Orchestrator(shares, plateau=rs.plateau_experiments, kernel_budget_s=rs.kernel_time_budget_s,
                            roofline_target_pct=rs.roofline_target_pct)
        self.orch = orch
        for t in self.record.tasks:
            start = self.record.start_report(t)
            if start is not None:
                self._set_start(t, start)
        seconds = journal.experiment_seconds(self.record.journal())
        for row in self.record.rows:
            if row["task"] not in orch.tasks:
                continue
            if row["status"] == "reverted":
                k = self.reverts.target(row)
                self._unkeep(row["task"], self.record.row(k) if k is not None else None)
                continue
            self._observe(row, self.record.verdict(row["experiment"]).report, seconds.get(row["experiment"], 0.0))
        return orch

    def _observe(self, row: dict[str, Any], report: Report | None, seconds: float) -> None:
        """One finished experiment as the orchestrator counts it: its row's numbers (the same live
        and when a run is replayed), its report's roofline when its timings mean something."""
        self.orch.observe(row["task"], row["status"] == "keep", row["speedup_vs_incumbent"],
                          roofline_if_meaningful(report), seconds, row["speedup_vs_baseline"],
                          bool(report is not None and report.timing_meaningful))

    def _unkeep(self, task: str, reverted: dict[str, Any] | None) -> None:
        """A revert takes the reverted experiment's speedup back out of its kernel's."""
        if reverted and reverted.get("speedup_vs_incumbent") and task in self.orch.tasks:
            self.orch.tasks[task].speedup /= reverted["speedup_vs_incumbent"]

    def _set_start(self, task: str, report: Report) -> None:
        summary = report.summary
        self.orch.set_start(task, roofline_if_meaningful(report), summary.speedup_vs_baseline if summary else None,
                            report.timing_meaningful)

    def _baseline(self, task: str) -> Report:
        """The task's starting kernel, measured once per run, so the agent sees where it starts."""
        report = self.record.start_report(task)
        if report is None:
            assert self._lab is not None
            report = self._lab.evaluator.evaluate(self.repo.task_dir(task), task, self.record.owned_hashes(task))
            self.record.save_start(task, report)
            self.bus.emit("baseline", task=task, report=report.to_dict())
            self._set_start(task, report)
        return report

    # --- events ---------------------------------------------------------------------------
    def subscribe(self, callback: Callable[[dict], None]) -> Callable[[], None]:
        return self.bus.subscribe(callback)

    def _set_state(self, state: str) -> None:
        with self._cv:
            if self.state == state:
                return
            self.state = state
            self._cv.notify_all()
        self.bus.tell("state", state=state)

    def _error(self, message_: str) -> None:
        self.bus.tell("error", message=message_)

    # --- snapshot and commands --------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        with self._cv:
            best = {t: s.best_vs_baseline for t, s in self.orch.tasks.items() if s.best_vs_baseline is not None}
            totals = self.record.totals()
            pending = self.gate.pending
            return {
                "run": self.tag, "state": self.state, "policy": self.policy, "experiment": self.current_n,
                "task": self.current_task, "tasks": self.orch.ranked(), "best": best,
                "tokens": totals.tokens, "cost_usd": totals.cost_usd,
                "device": self.device, "pending": pending.to_dict() if pending else None,
                "started_at": self.session_started, "experiments": totals.experiments, "branch": self.repo.branch,
                "workspace": str(self.workspace), "pid": os.getpid(), "repairs": list(self.repairs),
                "pool": self._pool_fields(),
            }

    def _pool_fields(self) -> dict[str, Any]:
        """In flight, the harness pool's use and experiments/hour (the ``pool`` event, the header)."""
        proposing, ready = self._inflight.counts()
        h = self._harness
        workers = int(getattr(h, "size", 1) or 1)
        busy = getattr(h, "busy", None)
        busy = int(busy) if isinstance(busy, int) else int(self._judging)
        judging, judged = self._ahead.counts() if self._ahead is not None else (0, 0)
        # The approvals queue: the question asked now, and the judged proposals that will ask one.
        waiting = int(self.gate.pending is not None) + sum(
            1 for v in (self._ahead.judged() if self._ahead is not None else ())
            if gate_rule(self.policy, v.report, v.comparison, self.settings.run.threshold).action == "ask")
        return {"in_flight": proposing + ready, "proposing": proposing,
                "ready": ready, "judging": judging, "judged": judged,
                "parallel": parallel.resolve(self.settings.run.parallel, self.device),
                "waiting_approval": waiting, "workers": workers,
                "workers_busy": busy, "experiments_per_hour": self._rate.per_hour()}

    def _pool_event(self) -> None:
        try:
            self.bus.emit("pool", **self._pool_fields())
        except OSError:
            pass

    def command(self, cmd: str, **args: Any) -> dict[str, Any]:
        """Apply one command; returns ``{"ok": bool, ...}`` (never raises for bad input)."""
        try:
            return {"ok": True, **(self._command(cmd, **args) or {})}
        except (AutokernelError, ValueError, KeyError, TypeError) as exc:
            return {"ok": False, "error": str(exc)}

    def _command(self, cmd: str, **args: Any) -> dict[str, Any] | None:
        with self._cv:
            if cmd == "snapshot":
                return {"snapshot": self.snapshot()}
            if cmd == "pause":
                self._pause = True
                self._retry_at = None  # a human pause is not undone by the outage timer
            elif cmd in ("resume", "start"):
                self._pause = False
                if self._thread is None and self.state == IDLE:
                    self.start()
            elif cmd in ("approve", "veto"):
                self.gate.answer(cmd == "approve", args.get("n"), args.get("reason"))
            elif cmd == "skip":
                if self.current_task is None:
                    raise EngineError("no kernel is being worked on")
                self._skip = self.current_task
            elif cmd == "stop":
                self._stop = True
            elif cmd == "set_policy":
                self.gate.set_policy(str(args.get("policy")))
                self.bus.emit("policy", policy=self.policy)
            elif cmd == "revert":
                if args.get("run") not in (None, self.tag):
                    raise EngineError(f"the live run is {self.tag}: only its experiments can be reverted here, "
                                      f"not run {args['run']}'s")
                n = int(args["n"])
                self.reverts.check(n)
                if n in self._revert_queue:
                    raise EngineError(f"experiment {n} is already queued for revert")
                self._revert_queue.append(n)
                if not self._looping:  # no loop to pick it up: do it now
                    self._process_reverts()
            else:
                raise EngineError(f"unknown command {cmd!r}")
            self._cv.notify_all()
            return {"state": self.state}

    def request_stop(self) -> None:
        """Stop after the current experiment (SIGTERM/SIGINT in headless mode)."""
        with self._cv:
            self._stop = True
            self._cv.notify_all()

    def _process_reverts(self) -> None:
        with self._cv:
            todo, self._revert_queue = self._revert_queue, []
        for k in todo:
            try:
                reverted = self.reverts.revert(k, self.bus.emit)
                self._unkeep(reverted["task"], reverted)
            except EngineError as exc:
                self._error(str(exc))

    # --- lifecycle ------------------------------------------------------------------------
    def start(self) -> threading.Thread:
        with self._cv:
            if self._thread is None:
                self._thread = threading.Thread(target=self.run, name="autokernel-engine", daemon=True)
                self._thread.start()
            return self._thread

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def close(self) -> None:
        self.bus.close()  # deliver what is queued, then stop the dispatcher
        if self.control is not None:
            self.control.close()
            self.control = None
        for obj in (self._agent, self._harness):
            try:
                if obj is not None:
                    obj.close()
            except Exception:
                pass
        self.lock.release()

    def serve_control(self) -> Any:
        from autokernel_tui.engine.control import ControlServer

        if self.control is None:
            self.control = ControlServer(self, paths.socket_path(self.workspace)).start()
        return self.control

    def _ensure_backends(self) -> Lab:
        if self._harness is None:
            self._harness = make_harness(self.settings, self.env)
        if self._agent is None:
            self._agent = make_agent(self.settings, self.env)
        if self.device is None:
            self.device = self._harness.device_info()
        if self._lab is None or self._lab.agent is not self._agent or self._lab.evaluator.harness is not self._harness:
            self._lab = Lab(settings=self.settings, record=self.record, repo=self.repo, bus=self.bus, gate=self.gate,
                            agent=self._agent, evaluator=Evaluator(self._harness, self.settings, self._error),
                            baseline=self._baseline, stopping=lambda: self._stop, on_ask=self._on_ask,
                            on_answered=lambda: self._set_state(RUNNING))
        return self._lab

    def _on_ask(self, pending: Pending) -> None:
        self._set_state(AWAITING)
        self.bus.emit("awaiting_approval", **pending.to_dict())

    def run(self) -> str:
        """The loop; blocks until the run stops. Returns why it stopped."""
        with self._cv:
            if self._thread is None:
                self._thread = threading.current_thread()
            self._looping = True
        try:
            return self._run()
        finally:
            with self._cv:
                self._looping = False

    def _run(self) -> str:
        try:
            self._ensure_backends()
            self.session_started = time.time()  # the journal's clock: run_started -> last event
            self.bus.emit("run_started", resumed=self.resumed, tasks=self.record.tasks, policy=self.policy,
                          device=self.device, branch=self.repo.branch, pid=os.getpid())
            self.bus.emit("policy", policy=self.policy)
            reason = self._loop()
        except AutokernelError as exc:
            reason = f"error: {exc}"
            self._error(str(exc))
        self.finish_reason = reason
        self._set_state(STOPPED)
        # run_finished means the run is over for good (budget spent, nothing left to try); a stop
        # or an error ends only this session, and `run` resumes the same run later.
        self.bus.tell("run_finished" if self.record.finished else "session_ended", reason=reason)
        return reason

    # --- the loop -------------------------------------------------------------------------------
    def _wait_while_paused(self) -> None:
        with self._cv:
            if self._pause and not self._stop:
                self._set_state(PAUSED)
            while self._pause and not self._stop:
                if self._revert_queue:
                    self._process_reverts()
                if self._retry_at and time.time() >= self._retry_at:
                    self._pause, self._retry_at = False, None  # a night does not stall on an outage
                    self._error("retrying the agent after its outage")
                    break
                self._cv.wait(0.5)

    def _settle(self) -> bool:
        """Before each step of either loop: finish an interrupted experiment and any asked-for reverts.
        False (paused on the error) when the disk or git refused."""
        try:
            if self._needs_recovery:
                self._recover()
            self._process_reverts()
        except OSError as exc:
            self.repo.reset_git_processes()  # a dead git helper is one cause: retry with fresh ones
            self._pause_on_error(f"cannot record the interrupted experiment: {describe_os_error(exc)}")
            return False
        return True

    def _pause_on_error(self, message_: str) -> None:
        self._error(message_)
        with self._cv:
            self._pause = True

    def _loop(self) -> str:
        k = parallel.resolve(self.settings.run.parallel, self.device)
        if k > 1 or self._inflight.count():
            return self._loop_parallel(k)
        return self._loop_serial()

    def _loop_serial(self) -> str:
        announced: str | None = None
        while True:
            self._wait_while_paused()
            if self._stop:  # before recovery: a stopped session leaves it to the next start
                return "stopped by request"
            if not self._settle():
                continue
            spent = budget.spent(self.settings.run, self.record.totals(),
                                 self.prior_active_s + time.time() - self.session_started)
            if spent:
                self.record.mark_finished()
                return spent
            task, why = self.orch.pick()
            if task is None:
                self.record.mark_finished()
                return why
            self._set_state(RUNNING)
            try:
                if task != announced:
                    self.bus.emit("task_selected", task=task, reason=why, ranking=self.orch.ranked())
                    announced = task
                self.current_task = task
                self.current_n = self.record.next_n()
                self._after(Experiment(self._ensure_backends(), self.current_n, task).run())
            except OSError as exc:  # the journal (disk full, read-only...) or a dead git helper (EPIPE)
                self._needs_recovery = True
                self.repo.reset_git_processes()
                self._pause_on_error(f"experiment {self.current_n} interrupted: {describe_os_error(exc)}")
                continue
            except Exception as exc:  # e.g. git failing: stop safely, finish the experiment on resume
                self._needs_recovery = True
                self._pause_on_error(f"experiment failed inside the engine ({type(exc).__name__}: "
                                     f"{' '.join(str(exc).split())[:300]}); paused — resume to retry")
                continue
            finally:
                self.current_n = None
            with self._cv:
                if self._skip:
                    self.orch.mark(self._skip, SKIPPED)
                    self._skip = None

    def _after(self, outcome: Outcome) -> None:
        """What an experiment's outcome means for the loop."""
        if outcome.kind == AGENT_DOWN:
            retry = self.settings.run.agent_retry_s
            self._pause_on_error(f"agent unavailable: {outcome.reason} — paused; resume when it is back"
                                 + (f" (retrying by itself in {retry / 60:.0f} min)" if retry else ""))
            with self._cv:
                self._retry_at = time.time() + retry if retry else None
        elif outcome.kind == NOTHING_LEFT:
            self.orch.mark(outcome.task, EXHAUSTED)
        elif outcome.row is not None:
            self._rate.add()
            self._observe(outcome.row, outcome.report, outcome.seconds)

    # --- K in flight (engine/parallel.py) ---------------------------------------------------------
    def _loop_parallel(self, k: int) -> str:
        """Up to ``k`` proposals written at once; each judged ahead as it arrives, on every free
        harness of the pool (``engine.judging``); the judged ones recorded one by one in arrival
        order, each numbered when it is taken (commit order) and judged against the incumbent on
        the branch then."""
        lab = self._ensure_backends()
        judge = self._ahead = AheadJudge(lab.evaluator, int(getattr(self._harness, "size", 1) or 1), self._cv,
                                         self.repo.task_dir, self.record.owned_hashes, on_judged=self._pool_event)

        def judged(r: parallel.Ready) -> bool:
            return bool(r.error) or r.proposal is None or judge.verdict(r.id) is not None

        def judge_ahead(arrival: parallel.Ready) -> None:
            if not judged(arrival):
                judge.submit(arrival)

        self._inflight.on_arrival = judge_ahead  # also while this thread waits in the gate for a human
        try:
            return self._loop_parallel_judging(k, judge, judged, judge_ahead)
        finally:
            self._inflight.on_arrival = None
            judge.close()

    def _loop_parallel_judging(self, k: int, judge: AheadJudge, judged: Callable[[parallel.Ready], bool],
                               judge_ahead: Callable[[parallel.Ready], None]) -> str:
        flight = self._inflight
        announced: str | None = None
        incumbents_at = -1  # the row count when the judge was last told the incumbents
        self._pool_event()

        while True:
            self._wait_while_paused()
            if self._stop:
                flight.drop_all("the session stopped while the agent was writing it", ready_too=False)
                return "stopped by request"
            if not self._settle():
                continue
            for task, kind, why in flight.take_down():  # an agent that is down, a kernel with nothing left
                if kind == "nothing_left":
                    self.orch.mark(task, EXHAUSTED)
                else:
                    self._after(Outcome(0, task, AGENT_DOWN, reason=why))
            if self._pause:
                continue
            totals = self.record.totals()
            spent = budget.spent(self.settings.run, totals, self.prior_active_s + time.time() - self.session_started)
            if spent:
                flight.drop_all(f"the run is over: {spent}", ready_too=True)
                self.record.mark_finished()
                return spent
            # Between experiments the worktree is the branch: its kernels are the incumbents. They change
            # only with a new row (a keep, a revert), so they are read again only then
            # (and before new proposals start: an agent's answer is judged as soon as it arrives).
            if len(self.record.rows) != incumbents_at:
                incumbents_at = len(self.record.rows)
                for task in self.record.tasks:
                    judge.set_incumbent(task, (self.repo.task_dir(task) / "kernel.py").read_text(encoding="utf-8"))
            # Fill the free slots: different kernels first, by expected gain.
            limit = self.settings.run.max_experiments
            finished_why = ""
            # K agents write at once; a written proposal frees its agent's slot while it is judged and
            # recorded, but no more than 2K are in flight (waiting ones go stale against the incumbent).
            while flight.counts()[0] < k and flight.count() < 2 * k and \
                    not (limit and totals.experiments + flight.count() >= limit):
                task, why = self.orch.pick()
                if task is None:
                    finished_why = why
                    break
                busy = flight.per_task()
                if busy.get(task):
                    task = min((n for n, t in self.orch.tasks.items() if t.status == ACTIVE),
                               key=lambda n: (busy.get(n, 0), -self.orch.score(n), n))
                    why = f"{why} ({busy.get(task, 0)} already in flight on it)"
                if task != announced:
                    self.bus.emit("task_selected", task=task, reason=why, ranking=self.orch.ranked())
                    announced = task
                self.current_task = self.current_task or task
                self._start_proposal(task)
            for arrival in flight.arrived():  # restored from the journal, or arrived before on_arrival was set
                judge_ahead(arrival)
            ready = flight.take(judged)
            if ready is None:
                if not flight.count():
                    if finished_why:
                        self.record.mark_finished()
                        return finished_why
                with self._cv:
                    if not self._stop and not self._pause and not flight.has_news() and \
                            flight.take_is_empty(judged):
                        self._cv.wait(0.5)
                continue
            verdict = judge.verdict(ready.id)
            judge.forget(ready.id)
            self._judge(ready, verdict)

    def _start_proposal(self, task: str) -> None:
        lab = self._ensure_backends()
        hint = self.record.next_n() + self._inflight.count()  # the number it gets if judged in order
        ctx = Experiment(lab, hint, task)._context()
        ctx.in_flight = self._inflight.for_task(task)
        self._inflight.start(task, lab.agent, ctx)
        self._pool_event()

    def _judge(self, ready: parallel.Ready, verdict: Judged | None) -> None:
        self._set_state(RUNNING)
        self.current_task = ready.task
        self.current_n = self.record.next_n()
        self._judging = True
        try:
            self._after(Experiment(self._ensure_backends(), self.current_n, ready.task).run(ready, verdict))
        except OSError as exc:
            self._needs_recovery = True
            self.repo.reset_git_processes()
            self._pause_on_error(f"experiment {self.current_n} interrupted: {describe_os_error(exc)}")
        except Exception as exc:
            self._needs_recovery = True
            self._pause_on_error(f"experiment failed inside the engine ({type(exc).__name__}: "
                                 f"{' '.join(str(exc).split())[:300]}); paused — resume to retry")
        finally:
            self._inflight.done(ready.id)  # taken: its experiment_started holds it from now on
            self._judging = False
            self.current_n = None
        with self._cv:
            if self._skip:
                self.orch.mark(self._skip, SKIPPED)
                self._skip = None
        self._pool_event()
