"""The record of one run on disk: ``.autokernel/runs/<tag>/``.

``RunRecord`` owns every file of a run and every path to one: ``run.json`` (the
run's metadata), ``results.tsv`` (one row per experiment), ``events.jsonl`` (the
journal: its writer; the bus publishes what it writes), ``reports/`` (each
experiment's harness verdict and each task's starting kernel), ``agent/`` (the
agent's full text per experiment). It is the one place that builds a results
row (``make_row``) and that adds up what a run has spent (``totals``).

Reports are kept typed (``harness.report.Report`` / ``Comparison``) and turned
into JSON only here, where they are written, and read back through
``ledger.schema.read_saved`` (older field names included).

``open_run`` opens a run (or starts one: its branch, worktree and run.json).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

from autokernel_tui.config import Settings
from autokernel_tui.errors import WorkspaceError
from autokernel_tui.harness.report import Comparison, Report
from autokernel_tui.ledger import crashpoints, paths
from autokernel_tui.ledger.durable import write_file_atomic
from autokernel_tui.ledger.events import EventLog, read_events
from autokernel_tui.ledger.gitrepo import RunRepo, check_tag
from autokernel_tui.ledger.results import ResultsLog
from autokernel_tui.ledger.schema import read_report, read_saved
from autokernel_tui.tasks import spec as taskspec

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


def load_meta(path: Path) -> dict[str, Any]:
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


def check_meta(path: Path, meta: dict[str, Any]) -> None:
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


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass(frozen=True)
class Spend:
    """What one proposal cost: the agent's name, tokens (in + out) and US dollars."""
    agent: str = ""
    tokens: int = 0
    cost_usd: float = 0.0

    @classmethod
    def of(cls, proposal: Any, agent_name: str = "") -> "Spend":
        """From an ``agents.base.Proposal``: the one place its token counts are added up."""
        return cls(agent=proposal.agent or agent_name,
                   tokens=int(proposal.tokens_in or 0) + int(proposal.tokens_out or 0),
                   cost_usd=float(proposal.cost_usd or 0.0))

    @classmethod
    def from_event(cls, event: dict[str, Any] | None) -> "Spend":
        """From a journaled ``proposal`` event (its fields were checked when it was read)."""
        event = event or {}
        tokens, cost = event.get("tokens"), event.get("cost_usd")
        return cls(agent=str(event.get("agent") or ""),
                   tokens=tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else 0,
                   cost_usd=float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else 0.0)


@dataclasses.dataclass(frozen=True)
class Totals:
    """What a run has spent and done so far, over all its sessions (from results.tsv)."""
    tokens: int
    cost_usd: float
    experiments: int  # rows of any kind
    measured: int     # rows that are experiments (reverts not counted): what max_experiments limits


def make_row(n: int, task: str, commit: str, status: str, report: Report | None, comparison: Comparison | None,
             spend: Spend | None, description: str) -> dict[str, Any]:
    """The results row of experiment ``n`` (typed values; ``ledger.results`` writes and checks it)."""
    summary = report.summary if report is not None else None
    spend = spend or Spend()
    return {
        "experiment": n, "timestamp": now_iso(), "task": task, "commit": commit, "status": status,
        "correctness": report.status if report is not None else "",
        "latency_us": summary.latency_us if summary else None,
        "speedup_vs_baseline": summary.speedup_vs_baseline if summary else None,
        "speedup_vs_incumbent": comparison.speedup if comparison else None,
        "ci_low": comparison.ci_low if comparison else None, "ci_high": comparison.ci_high if comparison else None,
        "roofline_pct": summary.roofline_pct if summary else None,
        "tflops": summary.tflops if summary else None, "gbps": summary.gbps if summary else None,
        "peak_vram_mib": report.peak_vram_mib if report is not None else None, "agent": spend.agent,
        "tokens": spend.tokens, "cost_usd": spend.cost_usd, "description": description,
        "disturbed_shapes": summary.disturbed_shapes if summary else None,
    }


class Saved(NamedTuple):
    """An experiment's harness verdict as saved in reports/exp-N.json."""
    report: Report | None
    comparison: Comparison | None


class RunRecord:
    """One run's files; see the module docstring. Built by ``open_run``."""

    def __init__(self, workspace: Path, tag: str, meta: dict[str, Any]):
        self.workspace = Path(workspace)
        self.tag = tag
        self.dir = self.workspace / RUNS / tag
        self.meta = meta
        self.specs: dict[str, Any] = {}
        self.floor = 0  # the highest experiment number in use anywhere when the run opened (engine/repair.py)
        self._saved: dict[int, Saved] = {}
        self.results: ResultsLog  # open_files()
        self.events: EventLog

    def open_files(self) -> None:
        self.results = ResultsLog(self.dir / paths.RESULTS_FILE)
        self.events = EventLog(self.dir / paths.EVENTS_FILE, self.tag)
        self.agent_dir.mkdir(exist_ok=True)
        self.reports_dir.mkdir(exist_ok=True)

    # --- paths ------------------------------------------------------------------
    @property
    def meta_path(self) -> Path:
        return self.dir / paths.RUN_META_FILE

    @property
    def reports_dir(self) -> Path:
        return self.dir / paths.REPORTS_DIR

    @property
    def agent_dir(self) -> Path:
        return self.dir / paths.AGENT_DIR

    def report_path(self, n: int) -> Path:
        return paths.report_path(self.dir, n)

    def start_path(self, task: str) -> Path:
        return paths.start_report_path(self.dir, task)

    def agent_path(self, n: int) -> Path:
        return paths.agent_text_path(self.dir, n)

    # --- run.json -----------------------------------------------------------------
    @property
    def tasks(self) -> list[str]:
        return list(self.meta["tasks"])

    @property
    def base(self) -> str:
        return self.meta["base"]

    @property
    def finished(self) -> bool:
        return bool(self.meta.get("finished"))

    def owned_hashes(self, task: str) -> dict | None:
        return self.meta["owned_hashes"].get(task)

    def save_meta(self) -> None:
        write_file_atomic(self.meta_path, json.dumps(self.meta, indent=2))

    def mark_finished(self) -> None:
        self.meta["finished"] = True
        self.save_meta()

    # --- results rows ---------------------------------------------------------------
    @property
    def rows(self) -> list[dict[str, Any]]:
        return self.results.rows

    def row(self, n: int) -> dict[str, Any] | None:
        return next((r for r in self.results.rows if r["experiment"] == n), None)

    def experiments(self) -> set[int]:
        return self.results.experiments()

    def next_n(self) -> int:
        """Above every number in use: results rows, and (when the run opened) the journal and git refs."""
        return max(self.results.experiments() | {self.floor}) + 1

    def totals(self) -> Totals:
        rows = self.results.rows
        return Totals(tokens=sum(r["tokens"] or 0 for r in rows), cost_usd=sum(r["cost_usd"] or 0.0 for r in rows),
                      experiments=len(rows), measured=sum(1 for r in rows if r["status"] != "reverted"))

    def append(self, row: dict[str, Any], emit: Callable[..., Any]) -> dict[str, Any]:
        """Write experiment ``row`` (the experiment is over), then journal it (``result``) and what the
        run has spent (``budget``). Returns the row as written (typed)."""
        typed = self.results.append(row)
        crashpoints.crash_point("row-written", typed["experiment"])
        emit("result", row=typed)
        totals = self.totals()
        emit("budget", tokens=totals.tokens, cost_usd=totals.cost_usd)
        return typed

    # --- reports/ -----------------------------------------------------------------------
    def save_verdict(self, n: int, report: Report, comparison: Comparison | None) -> None:
        data = {"report": report.to_dict(), "comparison": comparison.to_dict() if comparison else None}
        write_file_atomic(self.report_path(n), json.dumps(data, default=str))
        self._saved[n] = Saved(report, comparison)

    def verdict(self, n: int) -> Saved:
        """reports/exp-N.json, typed; (None, None) when it is missing or unreadable."""
        if n not in self._saved:
            data = _read_json(self.report_path(n))
            self._saved[n] = Saved(*read_saved(data)) if data is not None else Saved(None, None)
        return self._saved[n]

    def save_start(self, task: str, report: Report) -> None:
        write_file_atomic(self.start_path(task), json.dumps(report.to_dict(), default=str))

    def start_report(self, task: str) -> Report | None:
        """What the task's starting kernel measured (reports/start-TASK.json), or None: not yet."""
        return read_report(_read_json(self.start_path(task)))

    def kept_report(self, task: str) -> Report | None:
        """The report of the task's incumbent: its last kept experiment's, else None."""
        for row in reversed(self.results.rows):
            if row["task"] == task and row["status"] == "keep":
                report = self.verdict(row["experiment"]).report
                if report is not None:
                    return report
        return None

    # --- agent/ -----------------------------------------------------------------------------
    def save_reasoning(self, n: int, text: str) -> None:
        write_file_atomic(self.agent_path(n), text)

    # --- events.jsonl ---------------------------------------------------------------------------
    def journal(self) -> list[dict[str, Any]]:
        """events.jsonl as readers may use it; its bad lines were reported once, when the run opened."""
        return read_events(self.events.path, problems=[])


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # ValueError: bad JSON or bytes that are not UTF-8
        return None


def open_run(workspace: Path, settings: Settings, tag: str | None, new: bool,
             tasks: list[str] | None) -> tuple[RunRecord, RunRepo, bool]:
    """Open run ``tag`` (default: the newest unfinished one) or start a new one.
    Returns (record, repo, resumed). Checks everything before creating anything."""
    if tag is None and not new:
        tag = unfinished_run(workspace)
    if tag is None:
        tag = new_tag()
        while (workspace / RUNS / tag).exists():  # two runs started within one second
            tag = f"{new_tag()}-{time.time_ns() % 10000:04d}"
    tag = check_tag(tag)
    repo = RunRepo(workspace, tag)
    meta_path = paths.run_meta_path(workspace, tag)
    if meta_path.exists():
        if new:
            raise WorkspaceError(f"run {tag} already exists; pick another --tag or leave out --new to resume it")
        meta = load_meta(meta_path)
        repo.open()
        check_meta(meta_path, meta)
        if not repo.is_commit(meta["base"]):
            raise WorkspaceError(f"{meta_path}: \"base\" {meta['base'][:40]!r} is not a commit of this "
                                 "repository; restore the file or start a new run with --new")
        if tasks and set(tasks) != set(meta["tasks"]):
            raise WorkspaceError(f"run {tag} works on {', '.join(meta['tasks'])}; use --new for a run on other tasks")
        record, resumed = RunRecord(workspace, tag, meta), True
    else:
        # Check the tasks before creating anything (the checkout's kernels/ must be clean, so
        # what is on disk is what the branch will hold).
        available = [s.name for s in taskspec.find_tasks(workspace / "kernels")]
        if not available:
            raise WorkspaceError(f"{workspace}: no task folders under kernels/ "
                                 f"(add some with `{paths.init_hint(workspace)}`)")
        chosen = list(tasks) if tasks else available
        unknown = [t for t in chosen if t not in available]
        if unknown:
            raise WorkspaceError(f"unknown task(s) {', '.join(unknown)}; the workspace has {', '.join(available)}")
        base = repo.create()
        meta = {
            "tag": tag, "branch": repo.branch, "base": base, "tasks": chosen,
            "owned_hashes": {t: taskspec.owned_file_hashes(repo.task_dir(t)) for t in chosen},
            "settings": dataclasses.asdict(settings), "created_at": time.time(), "finished": False,
        }
        record, resumed = RunRecord(workspace, tag, meta), False
        record.dir.mkdir(parents=True, exist_ok=True)
        record.save_meta()
    record.specs = {t: taskspec.load_spec(repo.task_dir(t)) for t in record.tasks}
    record.open_files()
    return record, repo, resumed
