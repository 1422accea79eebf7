"""The experiment loop: propose -> commit -> evaluate -> gate -> record, all night.

States: idle (built, not started), running, paused, awaiting_approval, stopped.
One thread runs the loop (``run()`` blocks; ``start()`` runs it in the
background); commands from the TUI or the control socket only set flags under
one condition variable, so the loop acts on them at safe points.

Crash safety. Every step is journaled before the next begins, in this order:
``experiment_started`` -> agent text -> ``proposal`` -> commit on the run
branch -> harness verdict (``verdict``, reports/exp-N.json) -> commit message
amended with the metric trailers (``committed``) -> ``decision`` -> git (keep:
nothing; otherwise ref kept, then branch reset) -> results row -> ``result``.
A kill at any point leaves an *open* experiment that the next start finishes
exactly once from what was journaled (see ``_recover``).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import difflib
import json
import os
import queue
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable

from autokernel_tui.config import Settings, load_settings
from autokernel_tui.engine import gate as gatemod
from autokernel_tui.engine import journal, repair
from autokernel_tui.engine.lock import EngineLock
from autokernel_tui.engine.orchestrator import EXHAUSTED, SKIPPED, Orchestrator
from autokernel_tui.errors import AutokernelError, WorkspaceError, describe_os_error
from autokernel_tui.harness.report import Comparison, Report
from autokernel_tui.ledger import crashpoints
from autokernel_tui.ledger.durable import write_file_atomic
from autokernel_tui.ledger.events import AgentTextBatcher, EventLog, read_events
from autokernel_tui.ledger import paths
from autokernel_tui.ledger.gitrepo import RunRepo, check_tag, message
from autokernel_tui.ledger.results import ResultsLog
from autokernel_tui.ledger.schema import upgrade_report, upgrade_saved
from autokernel_tui.tasks import spec as taskspec

IDLE, RUNNING, PAUSED, AWAITING, STOPPED = "idle", "running", "paused", "awaiting_approval", "stopped"
RUNS = paths.RUNS


def new_tag() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime())


def unfinished_run(workspace: Path) -> str | None:
    """The newest run of the workspace that has not finished (the one `run` resumes)."""
    root = Path(workspace) / RUNS
    best: tuple[float, str] | None = None
    for meta_path in root.glob("*/run.json"):
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue  # opening that run says what is wrong with it
        if not isinstance(meta, dict):
            continue
        if not meta.get("finished"):
            created = meta.get("created_at", 0)
            created = created if isinstance(created, (int, float)) and not isinstance(created, bool) else 0
            key = (float(created), meta_path.parent.name)
            best = key if best is None or key > best else best
    return best[1] if best else None


def _load_meta(path: Path) -> dict[str, Any]:
    """run.json, checked: a WorkspaceError naming the file and what is wrong, never a traceback."""
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise WorkspaceError(f"{path}: bytes that are not UTF-8 (at byte {exc.start}); restore the file "
                             "or start a new run with --new") from None
    except json.JSONDecodeError as exc:
        raise WorkspaceError(f"{path} line {exc.lineno}: not JSON ({exc.msg}); restore the file or start a new "
                             "run with --new") from None
    except RecursionError:
        raise WorkspaceError(f"{path}: nested too deeply to read; restore the file or start a new run with --new") \
            from None
    except OSError as exc:
        raise WorkspaceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not isinstance(meta, dict):
        raise WorkspaceError(f"{path}: a JSON {type(meta).__name__}, not an object; restore the file or start a "
                             "new run with --new")
    return meta


def _check_meta(path: Path, meta: dict[str, Any]) -> None:
    """The fields of run.json a resume needs, each of the right kind (after the branch is known to exist)."""
    problems = []
    tasks, hashes = meta.get("tasks"), meta.get("owned_hashes")
    if not isinstance(meta.get("base"), str) or not meta.get("base"):
        problems.append('"base" (the commit the run started from) is not a commit id')
    if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) and t for t in tasks):
        problems.append('"tasks" is not a list of task names')
    if not isinstance(hashes, dict) or not all(isinstance(v, dict) for v in hashes.values()):
        problems.append('"owned_hashes" is not an object of task -> file hashes')
    if problems:
        raise WorkspaceError(f"{path}: {problems[0]}; restore the file or start a new run with --new")


def _as_dict(obj: Any) -> dict[str, Any] | None:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    return dataclasses.asdict(obj)


def _now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_row(n: int, task: str, commit: str, status: str, report: dict | None, comparison: dict | None,
             proposal: dict | None, description: str) -> dict[str, Any]:
    report = upgrade_report(report)  # a verdict journaled by an older version, when resuming its run
    summary = (report or {}).get("summary") or {}
    summary = summary if isinstance(summary, dict) else {}  # a hand-edited report must not stop a resume
    comparison = comparison or {}
    proposal = proposal or {}
    return {
        "experiment": n, "timestamp": _now_iso(), "task": task, "commit": commit, "status": status,
        "correctness": (report or {}).get("status", ""),
        "latency_us": summary.get("latency_us"), "speedup_vs_baseline": summary.get("speedup_vs_baseline"),
        "speedup_vs_incumbent": comparison.get("speedup"), "ci_low": comparison.get("ci_low"),
        "ci_high": comparison.get("ci_high"), "roofline_pct": summary.get("roofline_pct"),
        "tflops": summary.get("tflops"), "gbps": summary.get("gbps"),
        "peak_vram_mib": (report or {}).get("peak_vram_mib"), "agent": proposal.get("agent", ""),
        "tokens": int(proposal.get("tokens", 0) or 0), "cost_usd": float(proposal.get("cost_usd", 0.0) or 0.0),
        "description": description,
    }


class EngineError(AutokernelError):
    """A command the engine cannot carry out now (e.g. approve with nothing pending)."""


class Engine:
    def __init__(self, workspace: str | Path, settings: Settings | None = None, *, tag: str | None = None,
                 new: bool = False, tasks: list[str] | None = None, agent: Any = None, harness: Any = None,
                 env: dict[str, str] | None = None):
        self.workspace = Path(workspace).resolve()
        self.settings = (settings or load_settings(self.workspace)).validate()  # e.g. built in code, not loaded
        self.env = dict(os.environ if env is None else env)
        self._cv = threading.Condition(threading.RLock())
        self._subscribers: list[Callable[[dict], None]] = []
        self.state = IDLE
        self.policy = gatemod.check_policy(self.settings.run.policy)
        self._pause = self._stop = False
        self._skip: str | None = None
        self._decision: tuple[str, str, str] | None = None
        self._pending: dict[str, Any] | None = None
        self._reverts: list[int] = []
        self._needs_recovery = False
        self.repairs: list[str] = []  # what opening the run repaired (engine/repair.py), one line each
        self._n_floor = 0
        self._retry_at: float | None = None
        self._looping = False
        self._thread: threading.Thread | None = None
        self.current_n: int | None = None
        self.current_task: str | None = None
        self.device: dict[str, Any] | None = None
        self.session_started = time.time()
        self.finish_reason = ""
        self._sources: dict[str, str] = {}
        self._agent, self._harness = agent, harness
        self._outbox: queue.Queue[dict | None] = queue.Queue()
        self._dispatcher = threading.Thread(target=self._dispatch, name="autokernel-events", daemon=True)
        self._dispatcher.start()
        self.lock = EngineLock(self.workspace).acquire()
        try:
            self._open_run(tag, new, tasks)
        except BaseException:
            self.lock.release()
            self._outbox.put(None)
            raise
        self.control = None

    # --- opening and resuming -------------------------------------------------
    def _open_run(self, tag: str | None, new: bool, tasks: list[str] | None) -> None:
        if tag is None and not new:
            tag = unfinished_run(self.workspace)
        if tag is None:
            tag = new_tag()
            while (self.workspace / RUNS / tag).exists():  # two runs started within one second
                tag = f"{new_tag()}-{time.time_ns() % 10000:04d}"
        tag = check_tag(tag)
        self.tag = tag
        self.run_dir = self.workspace / RUNS / tag
        self.repo = RunRepo(self.workspace, tag)
        meta_path = self.run_dir / "run.json"
        if meta_path.exists():
            if new:
                raise WorkspaceError(f"run {tag} already exists; pick another --tag or leave out --new to resume it")
            self.meta = _load_meta(meta_path)
            self.repo.open()
            _check_meta(meta_path, self.meta)
            if not repair.is_commit(self.repo, self.meta["base"]):
                raise WorkspaceError(f"{meta_path}: \"base\" {self.meta['base'][:40]!r} is not a commit of this "
                                     "repository; restore the file or start a new run with --new")
            self.resumed = True
            if tasks and set(tasks) != set(self.meta["tasks"]):
                raise WorkspaceError(f"run {tag} works on {', '.join(self.meta['tasks'])}; "
                                     "use --new for a run on other tasks")
        else:
            # Check the tasks before creating anything (the checkout's kernels/ must be clean, so
            # what is on disk is what the branch will hold).
            available = [s.name for s in taskspec.find_tasks(self.workspace / "kernels")]
            if not available:
                raise WorkspaceError(f"{self.workspace}: no task folders under kernels/ (run `autokernel-tui init`)")
            chosen = list(tasks) if tasks else available
            unknown = [t for t in chosen if t not in available]
            if unknown:
                raise WorkspaceError(f"unknown task(s) {', '.join(unknown)}; the workspace has {', '.join(available)}")
            base = self.repo.create()
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.meta = {
                "tag": tag, "branch": self.repo.branch, "base": base, "tasks": chosen,
                "owned_hashes": {t: taskspec.owned_file_hashes(self.repo.task_dir(t)) for t in chosen},
                "settings": dataclasses.asdict(self.settings), "created_at": time.time(), "finished": False,
            }
            write_file_atomic(meta_path, json.dumps(self.meta, indent=2))
            self.resumed = False
        self.specs = {t: taskspec.load_spec(self.repo.task_dir(t)) for t in self.meta["tasks"]}
        self.results = ResultsLog(self.run_dir / "results.tsv")
        self.events = EventLog(self.run_dir / "events.jsonl", tag)
        (self.run_dir / "agent").mkdir(exist_ok=True)
        (self.run_dir / "reports").mkdir(exist_ok=True)
        self._repair()
        self._recover()
        self._rebuild_orchestrator()
        self.prior_active_s = journal.active_seconds(self._journal())

    def _journal(self) -> list[dict[str, Any]]:
        """events.jsonl as readers may use it; its bad lines were reported once, when the run opened."""
        return read_events(self.events.path, problems=[])

    def _repair(self) -> None:
        """Bring results.tsv back in line with events.jsonl and git (engine/repair.py) and say what
        was done: each line a ``repaired`` event, kept in ``self.repairs`` (the snapshot's
        ``repairs``; `run --headless` prints them on stderr)."""
        problems: list[str] = []
        events = read_events(self.events.path, problems=problems)
        done = repair.reconcile(self.results, events, self.repo, self.run_dir, self.tag, self.meta["base"], make_row)
        messages = self.events.problems + problems + done.messages
        if len(messages) > repair.MAX_MESSAGES:
            rest = len(messages) - repair.MAX_MESSAGES + 1
            messages = messages[: repair.MAX_MESSAGES - 1] + [f"... and {rest} more problems of the same kind"]
        self.repairs = messages
        self._n_floor = done.floor
        for line in messages:
            self._emit("repaired", message=line)

    def _rebuild_orchestrator(self) -> None:
        rs = self.settings.run
        shares = {t: (self.specs[t].profile or {}).get("share") for t in self.meta["tasks"]}
        self.orch = Orchestrator(shares, plateau=rs.plateau_experiments, kernel_budget_s=rs.kernel_time_budget_s,
                                 roofline_target_pct=rs.roofline_target_pct)
        seconds = journal.experiment_seconds(self._journal())
        for t in self.meta["tasks"]:
            start = self._read_json(self.run_dir / "reports" / f"start-{t}.json")
            if start:
                s = start.get("summary") if isinstance(start.get("summary"), dict) else {}
                sp = s.get("speedup_vs_baseline")
                self.orch.set_start(t, self._meaningful_pct(start),
                                    sp if isinstance(sp, (int, float)) and not isinstance(sp, bool) else None,
                                    bool(start.get("timing_meaningful")))
        for row in self.results.rows:
            if row["task"] not in self.orch.tasks:
                continue
            if row["status"] == "reverted":
                m = re.match(r"revert exp (\d+):", row["description"] or "")
                prev = self._row(int(m.group(1))) if m else None
                if prev and prev.get("speedup_vs_incumbent"):
                    self.orch.tasks[row["task"]].speedup /= prev["speedup_vs_incumbent"]
                continue
            saved = (self._read_json(self.run_dir / "reports" / f"exp-{row['experiment']}.json") or {}).get("report")
            report = saved if isinstance(saved, dict) else {}
            self.orch.observe(row["task"], row["status"] == "keep", row["speedup_vs_incumbent"],
                              self._meaningful_pct(report), seconds.get(row["experiment"], 0.0),
                              row["speedup_vs_baseline"], bool(report.get("timing_meaningful")))

    @staticmethod
    def _meaningful_pct(report: dict | None) -> float | None:
        """The report's roofline_pct (percent, as the harness gives it), when its timings mean something."""
        report = upgrade_report(report) if isinstance(report, dict) else None
        if not report or not report.get("timing_meaningful"):
            return None
        pct = (report.get("summary") or {}).get("roofline_pct") if isinstance(report.get("summary"), dict) else None
        return float(pct) if isinstance(pct, (int, float)) and not isinstance(pct, bool) else None

    def _recover(self) -> None:
        """Finish an experiment the last session died in, exactly once, and re-sync git."""
        events = self._journal()
        for row in journal.rows_missing_result_event(events, self.results.rows):
            self._emit("result", row=row)  # died between the row and its event
        op = journal.open_experiment(events, self.results.experiments())
        if op is None:
            self._needs_recovery = False
            return
        n = op.n
        head = self.repo.head()
        head_is_n = head.message.startswith(f"exp {n}:")
        commit = head.hexsha if head_is_n else (self.repo.ref_sha(n) or "")
        parent = head.parents[0].hexsha if head_is_n and head.parents else head.hexsha
        prop = op.events.get("proposal")
        desc = (prop or {}).get("description", "")
        if op.revert_of is not None:
            if head_is_n:
                self._finish_revert(n, op.task, op.revert_of, commit)
            else:
                self._emit("experiment_abandoned", n=n, reason="engine stopped before the revert was committed")
            self._needs_recovery = False
            return
        verdict, decision = op.events.get("verdict"), op.events.get("decision")
        report = (verdict or {}).get("report")
        comparison = (verdict or {}).get("comparison")
        if verdict and decision:
            action = decision["action"]
        elif verdict:
            action = "discard"
            self._emit("decision", n=n, action="discard", by="policy",
                       reason="the engine stopped before a decision; discarded on resume")
        else:
            action = "crash"
        if action == "keep" and head_is_n:
            status = "keep"
        else:
            if commit:
                self.repo.keep_ref(n, commit)
                if head_is_n:
                    self.repo.reset_to(parent)
            status = {"veto": "vetoed", "keep": "crash", "crash": "crash"}.get(action) or self._status_of(report)
        if status == "crash" and action != "keep":
            desc = f"interrupted: the engine stopped during this experiment ({desc or 'no proposal yet'})"
        row = make_row(n, op.task, commit, status, report, comparison, prop, desc)
        self._record(row)
        self._needs_recovery = False

    @staticmethod
    def _status_of(report: dict | None) -> str:
        if isinstance(report, dict) and isinstance(report.get("status"), str) \
                and report["status"] in gatemod.FAILED_STATUS:
            return gatemod.FAILED_STATUS[report["status"]]
        return "discard"

    # --- events ---------------------------------------------------------------
    def subscribe(self, callback: Callable[[dict], None]) -> Callable[[], None]:
        with self._cv:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._cv:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)
        return unsubscribe

    def _publish(self, event: dict) -> None:
        # Delivered from one dispatcher thread, in order, never under the engine's lock: a slow or
        # re-entrant viewer (one that calls snapshot() from its callback) cannot stall the loop.
        self._outbox.put(event)

    def _dispatch(self) -> None:
        while True:
            event = self._outbox.get()
            if event is None:
                return
            for cb in list(self._subscribers):
                try:
                    cb(event)
                except Exception:  # a broken viewer must not stop the night
                    pass

    def _emit(self, type_: str, **fields: Any) -> dict:
        event = self.events.make(type_, **fields)
        self.events.append(event)  # journal first: a viewer never sees what the disk lacks
        self._publish(event)
        return event

    def _set_state(self, state: str) -> None:
        with self._cv:
            if self.state == state:
                return
            self.state = state
            self._cv.notify_all()
        try:
            self._emit("state", state=state)
        except OSError:
            self._publish(self.events.make("state", state=state))

    def _error(self, message_: str) -> None:
        try:
            self._emit("error", message=message_)
        except OSError:
            self._publish(self.events.make("error", message=message_))

    # --- snapshot and commands --------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        with self._cv:
            best = {t: s.best_vs_baseline for t, s in self.orch.tasks.items() if s.best_vs_baseline is not None}
            rows = self.results.rows
            return {
                "run": self.tag, "state": self.state, "policy": self.policy, "experiment": self.current_n,
                "task": self.current_task, "tasks": self.orch.ranked(), "best": best,
                "tokens": sum(r["tokens"] or 0 for r in rows), "cost_usd": sum(r["cost_usd"] or 0.0 for r in rows),
                "device": self.device, "pending": dict(self._pending) if self._pending else None,
                "started_at": self.session_started, "experiments": len(rows), "branch": self.repo.branch,
                "workspace": str(self.workspace), "pid": os.getpid(), "repairs": list(self.repairs),
            }

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
                if self._pending is None:
                    raise EngineError("no candidate is awaiting approval")
                want = args.get("n")
                if want is not None and int(want) != self._pending["n"]:
                    raise EngineError(f"experiment {want} is not the one awaiting approval ({self._pending['n']})")
                self._decision = ("keep" if cmd == "approve" else "veto", "human",
                                  str(args.get("reason") or ("approved" if cmd == "approve" else "vetoed")))
            elif cmd == "skip":
                if self.current_task is None:
                    raise EngineError("no kernel is being worked on")
                self._skip = self.current_task
            elif cmd == "stop":
                self._stop = True
            elif cmd == "set_policy":
                self.policy = gatemod.check_policy(str(args.get("policy")))
                self._emit("policy", policy=self.policy)
            elif cmd == "revert":
                if args.get("run") not in (None, self.tag):
                    raise EngineError(f"the live run is {self.tag}: only its experiments can be reverted here, "
                                      f"not run {args['run']}'s")
                n = int(args["n"])
                self._check_revertable(n)
                if n in self._reverts:
                    raise EngineError(f"experiment {n} is already queued for revert")
                self._reverts.append(n)
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

    # --- lifecycle ------------------------------------------------------------
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
        self._outbox.put(None)  # deliver what is queued, then stop the dispatcher
        self._dispatcher.join(5)
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

    def _ensure_backends(self) -> None:
        if self._harness is None:
            factory = self.env.get("AUTOKERNEL_HARNESS_FACTORY")
            if factory:  # plugin hook, used by the resume tests to swap in a fast harness
                self._harness = _load_object(factory)(self.settings)
            else:
                from autokernel_tui.harness.runner import Harness

                self._harness = Harness(timeout_s=self.settings.harness.timeout_s, device="auto",
                                        keep_margin=self.settings.harness.keep_margin,
                                        confirm_keeps=self.settings.harness.confirm_keeps,
                                        sandbox=self.settings.harness.sandbox)
        if self._agent is None:
            from autokernel_tui.agents.base import make_agent

            self._agent = make_agent(self.settings.agent, env=self.env)
        if self.device is None:
            self.device = self._harness.device_info()

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
            self._emit("run_started", resumed=self.resumed, tasks=self.meta["tasks"], policy=self.policy,
                       device=self.device, branch=self.repo.branch, pid=os.getpid())
            self._emit("policy", policy=self.policy)
            reason = self._loop()
        except AutokernelError as exc:
            reason = f"error: {exc}"
            self._error(str(exc))
        self.finish_reason = reason
        self._set_state(STOPPED)
        # run_finished means the run is over for good (budget spent, nothing left to try); a stop
        # or an error ends only this session, and `run` resumes the same run later.
        kind = "run_finished" if self.meta.get("finished") else "session_ended"
        try:
            self._emit(kind, reason=reason)
        except OSError:
            self._publish(self.events.make(kind, reason=reason))
        return reason

    def _budget_reason(self) -> str | None:
        rs = self.settings.run
        done = [r for r in self.results.rows if r["status"] != "reverted"]
        if rs.max_experiments and len(done) >= rs.max_experiments:
            return f"experiment budget reached ({rs.max_experiments})"
        if rs.max_wall_s and self.prior_active_s + time.time() - self.session_started >= rs.max_wall_s:
            return f"wall-time budget reached ({rs.max_wall_s / 3600:.2f} h)"
        cost = sum(r["cost_usd"] or 0.0 for r in self.results.rows)
        if rs.max_cost_usd and cost >= rs.max_cost_usd:
            return f"cost budget reached (${cost:.2f} of ${rs.max_cost_usd:.2f})"
        return None

    def _mark_finished(self) -> None:
        self.meta["finished"] = True
        write_file_atomic(self.run_dir / "run.json", json.dumps(self.meta, indent=2))

    def _wait_while_paused(self) -> None:
        with self._cv:
            if self._pause and not self._stop:
                self._set_state(PAUSED)
            while self._pause and not self._stop:
                if self._reverts:
                    self._process_reverts()
                if self._retry_at and time.time() >= self._retry_at:
                    self._pause, self._retry_at = False, None  # a night does not stall on an outage
                    self._error("retrying the agent after its outage")
                    break
                self._cv.wait(0.5)

    def _loop(self) -> str:
        announced: str | None = None
        while True:
            self._wait_while_paused()
            if self._stop:  # before recovery: a stopped session leaves it to the next start
                return "stopped by request"
            try:
                if self._needs_recovery:
                    self._recover()
                self._process_reverts()
            except OSError as exc:
                self.repo.reset_git_processes()  # a dead git helper is one cause: retry with fresh ones
                self._pause_on_error(f"cannot record the interrupted experiment: {describe_os_error(exc)}")
                continue
            budget = self._budget_reason()
            if budget:
                self._mark_finished()
                return budget
            task, why = self.orch.pick()
            if task is None:
                self._mark_finished()
                return why
            self._set_state(RUNNING)
            try:
                if task != announced:
                    self._emit("task_selected", task=task, reason=why, ranking=self.orch.ranked())
                    announced = task
                self.current_task = task
                self._experiment(task)
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

    def _pause_on_error(self, message_: str) -> None:
        self._error(message_)
        with self._cv:
            self._pause = True

    # --- one experiment -------------------------------------------------------
    def _next_n(self) -> int:
        # Above every number in use: results rows, and (when the run opened) the journal and git refs.
        return max(self.results.experiments() | {self._n_floor}) + 1

    def _read_json(self, path: Path) -> dict | None:
        """A saved report (reports/*.json), field names of older versions read as today's."""
        try:
            data = upgrade_saved(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, RecursionError):  # ValueError: bad JSON or bytes that are not UTF-8
            return None
        return data if isinstance(data, dict) else None

    def _row(self, n: int) -> dict | None:
        return next((r for r in self.results.rows if r["experiment"] == n), None)

    def _source_at(self, commit: str, task: str) -> str:
        if commit not in self._sources:
            try:
                self._sources[commit] = self.repo.show(commit, task)
            except Exception:
                self._sources[commit] = ""
        return self._sources[commit]

    def _incumbent_report(self, task: str) -> dict | None:
        for row in reversed(self.results.rows):
            if row["task"] == task and row["status"] == "keep":
                saved = self._read_json(self.run_dir / "reports" / f"exp-{row['experiment']}.json")
                if saved:
                    return saved.get("report")
        path = self.run_dir / "reports" / f"start-{task}.json"
        saved = self._read_json(path)
        if saved is None:  # measure the starting kernel once, so the agent sees where it starts
            saved = self._evaluate(task)
            write_file_atomic(path, json.dumps(saved, default=str))
            self._emit("baseline", task=task, report=saved)
            s = saved.get("summary") or {}
            self.orch.set_start(task, self._meaningful_pct(saved), s.get("speedup_vs_baseline"),
                                bool(saved.get("timing_meaningful")))
        return saved

    def _context(self, n: int, task: str) -> Any:
        from autokernel_tui.agents.base import AgentContext

        history = []
        for row in self.results.rows:
            if row["task"] != task:
                continue
            saved = self._read_json(self.run_dir / "reports" / f"exp-{row['experiment']}.json") or {}
            report = saved.get("report") or {}
            history.append({**row, "source": self._source_at(row["commit"], task) if row["commit"] else "",
                            "reason": report.get("reason", "")})
        spec = self.specs[task]
        return AgentContext(task=spec, incumbent_source=(self.repo.task_dir(task) / "kernel.py").read_text(encoding="utf-8"),
                            incumbent_report=self._incumbent_report(task), history=history,
                            profile=dict(spec.profile) or None, experiment=n, workspace=self.workspace)

    def _propose(self, n: int, ctx: Any) -> tuple[Any, AgentTextBatcher]:
        from autokernel_tui.agents import base as agents

        batcher = AgentTextBatcher(lambda kind, text: self._emit("agent", n=n, kind=kind, text=text))
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["proposal"] = self._agent.propose(ctx, lambda ev: batcher.add(ev.kind, ev.text))
            except agents.AgentError as exc:  # re-raised in the loop thread
                box["error"] = exc
            except Exception as exc:  # a bug in an agent costs one experiment, not the night
                box["error"] = agents.ProposalRejected(f"the agent crashed: {type(exc).__name__}: {exc}")

        worker = threading.Thread(target=work, name=f"agent-exp-{n}", daemon=True)
        worker.start()
        crashpoints.crash_point("agent", n)
        while worker.is_alive():
            worker.join(0.25)
            batcher.flush_if_due()
        batcher.flush()
        if "error" in box:
            raise box["error"]
        return box["proposal"], batcher

    def _evaluate(self, task: str) -> dict:
        try:
            report = self._harness.evaluate(self.repo.task_dir(task), kernel_source=None,
                                            quick=self.settings.harness.quick,
                                            owned_hashes=self.meta["owned_hashes"].get(task))
            # The schema's fields, under today's names (a plugin harness may still say pct_roofline).
            return Report.from_dict(upgrade_report(_as_dict(report)) or {"status": "CRASH"}).to_dict()
        except Exception as exc:  # a harness failure costs one experiment, never the night
            return Report(status="CRASH", reason=f"harness error: {type(exc).__name__}: {exc}", stage="static",
                          task=task).to_dict()

    def _compare(self, task: str, candidate: str, incumbent: str) -> dict | None:
        try:
            comparison = _as_dict(self._harness.compare(self.repo.task_dir(task), candidate, incumbent))
            return Comparison.from_dict(comparison).to_dict() if comparison is not None else None
        except Exception as exc:
            self._error(f"comparison failed: {type(exc).__name__}: {exc}")
            return None

    def _experiment(self, task: str) -> None:
        from autokernel_tui.agents import base as agents

        n = self._next_n()
        self.current_n = n
        t0 = time.time()  # the kernel's own clock counts the agent's time too
        self._emit("experiment_started", n=n, task=task)
        try:
            ctx = self._context(n, task)
            proposal, batcher = self._propose(n, ctx)
        except agents.AgentUnavailable as exc:
            self._emit("experiment_abandoned", n=n, reason=f"agent unavailable: {exc}")
            retry = self.settings.run.agent_retry_s
            self._pause_on_error(f"agent unavailable: {exc} — paused; resume when it is back"
                                 + (f" (retrying by itself in {retry / 60:.0f} min)" if retry else ""))
            with self._cv:
                self._retry_at = time.time() + retry if retry else None
            return
        except agents.NothingToPropose as exc:
            self._emit("experiment_abandoned", n=n, reason=f"nothing left to try: {exc}")
            self.orch.mark(task, EXHAUSTED)
            return
        except agents.AgentError as exc:  # e.g. a submission that stayed malformed: a failed experiment
            self._emit("proposal", n=n, description="malformed proposal", hypothesis="", diff="", agent="",
                       tokens=0, cost_usd=0.0)
            self._emit("decision", n=n, action="discard", by="policy", reason=str(exc))
            self._record(make_row(n, task, "", "fail", None, None, None, f"agent failed: {exc}"))
            self.orch.observe(task, False, None, None, 0.0)
            return
        incumbent = (self.repo.task_dir(task) / "kernel.py").read_text(encoding="utf-8")
        diff = "".join(difflib.unified_diff(incumbent.splitlines(True), proposal.source.splitlines(True),
                                            f"a/kernels/{task}/kernel.py", f"b/kernels/{task}/kernel.py"))
        pinfo = {"agent": proposal.agent or getattr(self._agent, "name", ""),
                 "tokens": int(proposal.tokens_in or 0) + int(proposal.tokens_out or 0),
                 "cost_usd": float(proposal.cost_usd or 0.0)}
        header = f"# exp {n}: {proposal.description}\n\n**Hypothesis.** {proposal.hypothesis}\n"
        write_file_atomic(self.run_dir / "agent" / f"exp-{n}.md", batcher.markdown(header))
        self._emit("proposal", n=n, description=proposal.description, hypothesis=proposal.hypothesis, diff=diff,
                   **pinfo)
        parent = self.repo.head().hexsha
        trailers = {"Autokernel-Task": task, "Autokernel-Experiment": n, "Autokernel-Agent": pinfo["agent"],
                    "Autokernel-Run": self.tag}
        self.repo.commit_kernel(task, proposal.source, message(n, proposal.description, trailers))
        crashpoints.crash_point("committed", n)
        report = self._evaluate(task)
        comparison = self._compare(task, proposal.source, incumbent) if report.get("status") == "PASS" else None
        write_file_atomic(self.run_dir / "reports" / f"exp-{n}.json",
                          json.dumps({"report": report, "comparison": comparison}, default=str))
        self._emit("verdict", n=n, report=report, comparison=comparison)
        crashpoints.crash_point("evaluated", n)
        summary = report.get("summary") or {}
        trailers.update({
            "Autokernel-Status": report.get("status"),
            "Autokernel-Speedup": f"{comparison['speedup']:.4f}" if comparison else None,
            "Autokernel-CI": f"{comparison['ci_low']:.4f}..{comparison['ci_high']:.4f}" if comparison else None,
            "Autokernel-Speedup-Vs-Baseline": summary.get("speedup_vs_baseline"),
            "Autokernel-Latency-Us": summary.get("latency_us"),
            "Autokernel-Reason": report.get("reason"),
        })
        commit = self.repo.amend_message(message(n, proposal.description, trailers))
        self._emit("committed", n=n, commit=commit)
        action, by, reason = self._gate(n, task, diff, report, comparison)
        self._emit("decision", n=n, action=action, by=by, reason=reason)
        crashpoints.crash_point("decided", n)
        if action == "keep":
            status = "keep"
        else:
            self.repo.keep_ref(n, commit)
            crashpoints.crash_point("ref-kept", n)
            self.repo.reset_to(parent)
            status = "vetoed" if action == "veto" else self._status_of(report)
        self._record(make_row(n, task, commit, status, report, comparison, pinfo, proposal.description))
        self.orch.observe(task, status == "keep", (comparison or {}).get("speedup"), self._meaningful_pct(report),
                          time.time() - t0, summary.get("speedup_vs_baseline"), bool(report.get("timing_meaningful")))

    def _record(self, row: dict) -> None:
        typed = self.results.append(row)
        crashpoints.crash_point("row-written", row["experiment"])
        self._emit("result", row=typed)
        rows = self.results.rows
        self._emit("budget", tokens=sum(r["tokens"] or 0 for r in rows),
                   cost_usd=sum(r["cost_usd"] or 0.0 for r in rows))

    def _gate(self, n: int, task: str, diff: str, report: dict, comparison: dict | None) -> tuple[str, str, str]:
        rs = self.settings.run
        verdict = gatemod.decide(self.policy, report, comparison, rs.threshold)
        if verdict.action != "ask":
            return verdict.action, "policy", verdict.reason
        deadline = time.time() + rs.approval_timeout_s
        with self._cv:
            self._decision = None
            self._pending = {"n": n, "task": task, "diff": diff, "report": report, "comparison": comparison,
                             "deadline": deadline}
            self._set_state(AWAITING)
            self._emit("awaiting_approval", **self._pending)
            try:
                while self._decision is None:
                    again = gatemod.decide(self.policy, report, comparison, rs.threshold)
                    if again.action != "ask":  # the policy changed while we waited
                        self._decision = (again.action, "policy", again.reason)
                        break
                    if self._stop:
                        self._decision = (rs.timeout_action, "timeout", "run stopped while awaiting approval")
                        break
                    left = deadline - time.time()
                    if left <= 0:
                        self._decision = (rs.timeout_action, "timeout",
                                          f"no decision within {rs.approval_timeout_s:.0f} s")
                        break
                    self._cv.wait(min(left, 0.5))
                decision = self._decision
            finally:
                self._pending = None
                self._decision = None
        self._set_state(RUNNING)
        return decision

    # --- revert ---------------------------------------------------------------
    def _check_revertable(self, k: int) -> dict:
        row = self._row(k)
        if row is None:
            raise EngineError(f"run {self.tag} has no experiment {k}")
        if row["status"] != "keep":
            raise EngineError(f"experiment {k} was not kept ({row['status']}); only kept experiments can be reverted")
        if any(r["status"] == "reverted" and r["description"].startswith(f"revert exp {k}:") for r in self.results.rows):
            raise EngineError(f"experiment {k} is already reverted")
        return row

    def _process_reverts(self) -> None:
        with self._cv:
            todo, self._reverts = self._reverts, []
        for k in todo:
            try:
                row = self._check_revertable(k)
            except EngineError as exc:
                self._error(str(exc))
                continue
            n = self._next_n()
            task = row["task"]
            self._emit("experiment_started", n=n, task=task, revert_of=k)
            restored = self._source_at(f"{row['commit']}^", task)
            desc = f"revert exp {k}: {row['description']}"
            trailers = {"Autokernel-Task": task, "Autokernel-Experiment": n, "Autokernel-Status": "reverted",
                        "Autokernel-Reverts": row["commit"], "Autokernel-Run": self.tag}
            commit = self.repo.commit_kernel(task, restored, message(n, desc, trailers))
            self._finish_revert(n, task, k, commit)

    def _finish_revert(self, n: int, task: str, k: int, commit: str) -> None:
        row = self._row(k) or {}
        self._emit("committed", n=n, commit=commit)
        self._emit("decision", n=n, action="revert", by="human", reason=f"revert of experiment {k}")
        self._record(make_row(n, task, commit, "reverted", None, None, None,
                              f"revert exp {k}: {row.get('description', '')}"))
        if row.get("speedup_vs_incumbent") and hasattr(self, "orch") and task in self.orch.tasks:
            self.orch.tasks[task].speedup /= row["speedup_vs_incumbent"]


def _load_object(spec: str) -> Any:
    """``package.module:attribute`` -> the attribute (plugin agents and harnesses)."""
    import importlib

    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise WorkspaceError(f"{spec!r}: expected module:attribute")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise WorkspaceError(f"cannot load {spec!r}: {exc}") from None
