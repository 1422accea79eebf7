"""The read side for review: every run of a workspace, read from disk only.

Safe to call while an engine is running (nothing here writes). Each experiment
carries ``ref`` (where its commit lives: the run branch for kept ones,
``refs/autokernel/<tag>/exp-N`` otherwise) and ``parent`` (the commit it was
measured against), so a diff can always be shown.

An experiment's harness verdict is ``reports/exp-N.json``, written by the engine as
``{"report": Report dict, "comparison": Comparison dict | null}``: ``verdict(exp)``
hands the two apart (``report(exp)`` and ``comparison(exp)`` are its halves), so no
reader mistakes the file for the report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import git

from autokernel_tui.ledger import badinput, paths
from autokernel_tui.ledger.events import read_events
from autokernel_tui.ledger.gitrepo import ShieldedRepo
from autokernel_tui.ledger.results import COLUMNS, read_rows
from autokernel_tui.ledger.schema import upgrade_event, upgrade_saved

RUNS_DIR = paths.RUNS


@dataclass
class ExperimentRecord:
    experiment: int
    timestamp: str
    task: str
    commit: str
    status: str
    correctness: str
    latency_us: float | None
    speedup_vs_baseline: float | None
    speedup_vs_incumbent: float | None
    ci_low: float | None
    ci_high: float | None
    roofline_pct: float | None  # percent, 0-100
    tflops: float | None
    gbps: float | None
    peak_vram_mib: float | None
    agent: str
    tokens: int | None
    cost_usd: float | None
    description: str
    disturbed_shapes: int | None = None  # shapes whose times were not to be trusted (results.ADDED)
    ref: str = ""
    parent: str = ""

    def row(self) -> dict[str, Any]:
        return {c: getattr(self, c) for c in COLUMNS}


@dataclass(frozen=True)
class Verdict:
    """What the harness said about one experiment (``reports/exp-N.json``).

    ``report``: the harness Report as a dict (status, reason, stage, shapes, summary, ...).
    ``comparison``: the Comparison against the incumbent as a dict (speedup, ci_low,
    ci_high, n_samples, method, ...), or None when none was made (the candidate failed).
    """

    report: dict[str, Any]
    comparison: dict[str, Any] | None


def read_verdict(path: str | Path) -> Verdict | None:
    """The verdict file the engine wrote, or None when it is missing or unreadable."""
    try:
        data = upgrade_saved(json.loads(Path(path).read_text(encoding="utf-8")))  # older field names too
    except (OSError, ValueError, RecursionError):  # ValueError: not JSON, or not UTF-8
        return None
    if not isinstance(data, dict) or not isinstance(data.get("report"), dict):
        return None
    comparison = data.get("comparison")
    return Verdict(report=data["report"], comparison=comparison if isinstance(comparison, dict) else None)


@dataclass
class RunHistory:
    tag: str
    path: Path
    workspace: Path
    meta: dict[str, Any] = field(default_factory=dict)
    experiments: list[ExperimentRecord] = field(default_factory=list)
    problems: list[str] | None = None  # where bad lines are reported; None: logged once as warnings

    @property
    def branch(self) -> str:
        return f"autokernel/{self.tag}"

    def _find(self, exp: int | ExperimentRecord) -> ExperimentRecord:
        if isinstance(exp, ExperimentRecord):
            return exp
        for rec in self.experiments:
            if rec.experiment == exp:
                return rec
        raise KeyError(f"run {self.tag} has no experiment {exp}")

    def diff(self, exp: int | ExperimentRecord) -> str:
        rec = self._find(exp)
        if not rec.commit or not rec.parent:
            return ""
        try:
            return ShieldedRepo(self.workspace).git.diff(rec.parent, rec.commit, "--", f"kernels/{rec.task}/kernel.py")
        except git.GitCommandError:
            return ""

    def source(self, exp: int | ExperimentRecord) -> str:
        rec = self._find(exp)
        if not rec.commit:
            return ""
        try:
            return ShieldedRepo(self.workspace).git.show(f"{rec.commit}:kernels/{rec.task}/kernel.py",
                                                         strip_newline_in_stdout=False)
        except git.GitCommandError:
            return ""

    def verdict(self, exp: int | ExperimentRecord) -> Verdict | None:
        """The harness's report and comparison for one experiment (None: none recorded, e.g. a revert)."""
        return read_verdict(paths.report_path(self.path, self._find(exp).experiment))

    def report(self, exp: int | ExperimentRecord) -> dict | None:
        """The harness Report (as a dict) of one experiment; not the whole verdict file."""
        verdict = self.verdict(exp)
        return verdict.report if verdict else None

    def comparison(self, exp: int | ExperimentRecord) -> dict | None:
        """The Comparison against the incumbent (as a dict), or None when none was made."""
        verdict = self.verdict(exp)
        return verdict.comparison if verdict else None

    def reasoning(self, exp: int | ExperimentRecord) -> str:
        path = paths.agent_text_path(self.path, self._find(exp).experiment)
        try:
            return path.read_bytes().decode("utf-8", "replace")
        except OSError:
            return ""

    def events(self) -> list[dict[str, Any]]:
        """The run's usable events, older field names read as today's; bad lines are skipped and
        reported once (``ledger.badinput``)."""
        return [upgrade_event(e) for e in read_events(self.path / paths.EVENTS_FILE, problems=self.problems)]


def _record(row: dict[str, Any], repo: git.Repo | None, tag: str) -> ExperimentRecord:
    rec = ExperimentRecord(**row)
    if repo is not None and rec.commit:
        try:
            commit = repo.commit(rec.commit)
            rec.parent = commit.parents[0].hexsha if commit.parents else ""
        except Exception:  # not a commit of this repository (a hand-edited row): no diff to show
            pass
        rec.ref = f"autokernel/{tag}" if rec.status in ("keep", "reverted") else f"refs/autokernel/{tag}/exp-{rec.experiment}"
    return rec


def _meta(path: Path, problems: list[str] | None) -> dict[str, Any]:
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError) as exc:
        what = f"not JSON ({exc.msg})" if isinstance(exc, json.JSONDecodeError) else \
            "not UTF-8" if isinstance(exc, UnicodeDecodeError) else type(exc).__name__
        badinput.report(problems, f"{path}: {what}; the run's metadata is ignored here")
        return {}
    if not isinstance(meta, dict):
        badinput.report(problems, f"{path}: a JSON {type(meta).__name__}, not an object; ignored")
        return {}
    created = meta.get("created_at")
    if created is not None and (isinstance(created, bool) or not isinstance(created, (int, float))):
        meta = {**meta, "created_at": 0}
    return meta


def load_run(workspace: str | Path, tag: str, problems: list[str] | None = None) -> RunHistory:
    """One run. Bad lines of its files are skipped (a bad number read as empty), each reported
    once as a one-line warning naming the file and line, or appended to ``problems``."""
    workspace = Path(workspace).resolve()
    path = paths.run_dir(workspace, tag)
    meta = _meta(path / paths.RUN_META_FILE, problems)
    try:
        repo: git.Repo | None = ShieldedRepo(workspace)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        repo = None
    records = [_record(r, repo, tag) for r in read_rows(path / paths.RESULTS_FILE, typed=True, problems=problems)]
    return RunHistory(tag=tag, path=path, workspace=workspace, meta=meta, experiments=records, problems=problems)


def load_runs(workspace: str | Path, problems: list[str] | None = None) -> list[RunHistory]:
    """Every run, oldest first (by creation time recorded in run.json, then name)."""
    root = paths.runs_dir(Path(workspace).resolve())
    if not root.is_dir():
        return []
    runs = [load_run(workspace, p.name, problems) for p in root.iterdir() if (p / paths.RUN_META_FILE).is_file()]
    return sorted(runs, key=lambda r: (r.meta.get("created_at", 0), r.tag))
