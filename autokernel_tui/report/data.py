"""What the morning report says, gathered from a run's files (nothing is measured here).

Per kernel (task):

* ``now``: the incumbent's harness summary (the newest kept experiment not reverted, else the
  starting kernel's report, ``reports/start-<task>.json``): speedup vs the baseline (the op the
  model calls, eager) and vs torch.compile, geomean over the task's shapes, and its worst shape.
* ``vs_start``: the product of the kept experiments' paired speedups (each against the
  incumbent it replaced), with the products of their 95% interval ends as a conservative
  interval (every keep was confirmed with the roles swapped, ``harness.confirm_keeps``).
* the Amdahl prediction: the task's share of the model's time (``task.toml [profile] share``,
  written by ``init --from-profile``) and its speedup vs the op the model calls; a kernel slower
  than that op counts as 1.00x (it would not be shipped).

A saved ``verify`` result (``verify --json``; ``verify`` on a run's kept kernels also saves it at
``.autokernel/runs/<tag>/verify.json``) is attached when there is one, or from ``--verify FILE``.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autokernel_tui.errors import WorkspaceError
from autokernel_tui.ledger import paths
from autokernel_tui.ledger.history import ExperimentRecord, RunHistory, load_runs
from autokernel_tui.report.paths import VERIFY_FILE, verify_path  # noqa: F401  (re-exported)

REVERT_RE = re.compile(r"revert exp (\d+):")


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


@dataclass
class Experiment:
    record: ExperimentRecord
    hypothesis: str = ""
    decided_by: str = ""          # human | policy | timeout
    decision_reason: str = ""
    report: dict | None = None
    comparison: dict | None = None
    reverted_by: int | None = None  # the experiment that reverted this keep
    diff: str = ""                  # kept experiments only

    @property
    def n(self) -> int:
        return self.record.experiment

    @property
    def kept(self) -> bool:
        return self.record.status == "keep" and self.reverted_by is None


@dataclass
class KernelSummary:
    task: str
    experiments: list[Experiment] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)
    start: dict | None = None       # the starting kernel's harness Report (dict)
    incumbent: Experiment | None = None  # the newest kept experiment not reverted
    now: dict | None = None         # the incumbent's Report summary (else the start's)
    now_report: dict | None = None
    stale_after_revert: bool = False  # a revert came after the incumbent: `now` was not re-measured
    vs_start: float = 1.0           # product of kept paired speedups
    vs_start_low: float | None = None
    vs_start_high: float | None = None
    keeps: list[Experiment] = field(default_factory=list)
    share: float | None = None      # fraction of the model's time (task.toml [profile])
    profile: dict = field(default_factory=dict)
    timing_meaningful: bool = False

    @property
    def now_vs_baseline(self) -> float | None:
        return _num((self.now or {}).get("speedup_vs_baseline"))

    @property
    def start_vs_baseline(self) -> float | None:
        return _num(((self.start or {}).get("summary") or {}).get("speedup_vs_baseline"))

    @property
    def shipped_speedup(self) -> float | None:
        """Speedup the model would see for this op: vs the op it calls, never below 1 (not shipped)."""
        s = self.now_vs_baseline
        return None if s is None else max(1.0, s)

    @property
    def end_to_end(self) -> float | None:
        """Amdahl: the model's speedup from this kernel alone."""
        if self.share is None or self.shipped_speedup is None:
            return None
        return amdahl(self.share, self.shipped_speedup)


@dataclass
class Prediction:
    speedup: float | None
    covered_share: float            # fraction of the model's time the run's kernels cover
    kernels: list[tuple[str, float, float]]  # (task, share, shipped speedup) that entered the sum
    missing: list[str]              # tasks with no share or no measured speedup
    profile: dict                   # model, device, time_kind, batch, seq, dtype, ... of the first task
    note: str = ""


@dataclass
class RunReport:
    tag: str
    workspace: Path
    meta: dict
    device: dict
    policy: str
    agent: str
    started: float | None
    ended: float | None
    state: str
    kernels: list[KernelSummary]
    experiments: list[Experiment]
    prediction: Prediction
    verify: dict | None
    verify_source: str
    tokens: int
    cost_usd: float
    problems: list[str]
    generated_at: float = field(default_factory=time.time)

    @property
    def timing_meaningful(self) -> bool:
        return bool(self.device.get("timing_meaningful"))


def amdahl(share: float, speedup: float) -> float:
    return 1.0 / ((1.0 - share) + share / speedup)


def _chain(keeps: list[Experiment]) -> tuple[float, float | None, float | None]:
    product, low, high = 1.0, 1.0, 1.0
    for e in keeps:
        sp = e.record.speedup_vs_incumbent
        if sp is None:
            continue
        product *= sp
        lo, hi = e.record.ci_low, e.record.ci_high
        low = low * lo if (low is not None and lo is not None) else None
        high = high * hi if (high is not None and hi is not None) else None
    if not keeps:
        return 1.0, None, None
    return product, low, high


def _task_profile(workspace: Path, tag: str, task: str) -> dict:
    from autokernel_tui.errors import AutokernelError
    from autokernel_tui.tasks.spec import load_spec

    for folder in (paths.worktree_dir(workspace, tag) / paths.KERNELS / task, workspace / paths.KERNELS / task):
        try:
            return dict(load_spec(folder).profile or {})
        except (AutokernelError, OSError):
            continue
    return {}


def _events_by_n(run: RunHistory) -> tuple[dict[int, dict], dict[int, dict], dict, str]:
    """(proposal events by experiment, decision events by experiment, the newest run_started
    event, the policy in force at the end)."""
    proposals: dict[int, dict] = {}
    decisions: dict[int, dict] = {}
    started: dict = {}
    policy = ""
    for e in run.events():
        kind = e.get("type")
        if kind == "run_started":
            started, policy = e, str(e.get("policy") or policy)
        elif kind == "policy":
            policy = str(e.get("policy") or policy)
        elif kind == "proposal" and isinstance(e.get("n"), int):
            proposals[e["n"]] = e
        elif kind == "decision" and isinstance(e.get("n"), int):
            decisions[e["n"]] = e
    return proposals, decisions, started, policy


def _read_start(path: Path) -> dict | None:
    """The starting kernel's harness Report (``reports/start-<task>.json`` holds the Report itself)."""
    from autokernel_tui.ledger.schema import upgrade_report

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if isinstance(data, dict) and isinstance(data.get("report"), dict):  # a verdict-shaped file, just in case
        data = data["report"]
    data = upgrade_report(data) if isinstance(data, dict) else None
    return data if isinstance(data, dict) else None


def _read_verify(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) and "correct" in data else None


def pick_run(workspace: str | Path, tag: str | None, problems: list[str] | None = None) -> RunHistory:
    ws = Path(workspace).resolve()
    runs = load_runs(ws, problems)
    if not runs:
        raise WorkspaceError(f"{ws}: no run to report on (start one with `autokernel-tui run --headless -C {shlex.quote(str(ws))}`)")
    if tag is None:
        return runs[-1]
    for run in runs:
        if run.tag == tag:
            return run
    raise WorkspaceError(f"{ws}: no run {tag!r} (runs: {', '.join(r.tag for r in runs)})")


def collect(workspace: str | Path, tag: str | None = None, verify_file: str | Path | None = None) -> RunReport:
    """Everything the report shows about run ``tag`` (default: the newest run) of ``workspace``."""
    problems: list[str] = []
    run = pick_run(workspace, tag, problems)
    ws = run.workspace
    proposals, decisions, started, policy = _events_by_n(run)
    experiments: list[Experiment] = []
    by_n: dict[int, Experiment] = {}
    for rec in run.experiments:
        verdict = run.verdict(rec)
        prop, dec = proposals.get(rec.experiment, {}), decisions.get(rec.experiment, {})
        exp = Experiment(record=rec, hypothesis=str(prop.get("hypothesis") or ""),
                         decided_by=str(dec.get("by") or ""), decision_reason=str(dec.get("reason") or ""),
                         report=verdict.report if verdict else None,
                         comparison=verdict.comparison if verdict else None)
        experiments.append(exp)
        by_n[rec.experiment] = exp
    for exp in experiments:
        if exp.record.status == "reverted":
            m = REVERT_RE.match(exp.record.description or "")
            target = by_n.get(int(m.group(1))) if m else None
            if target is not None:
                target.reverted_by = exp.n

    tasks = [t for t in run.meta.get("tasks", []) if isinstance(t, str)]
    for exp in experiments:
        if exp.record.task not in tasks:
            tasks.append(exp.record.task)
    kernels = []
    for task in tasks:
        k = KernelSummary(task=task)
        k.experiments = [e for e in experiments if e.record.task == task]
        k.statuses = dict(Counter(e.record.status for e in k.experiments))
        k.start = _read_start(paths.start_report_path(run.path, task))
        k.keeps = [e for e in k.experiments if e.kept]
        for e in k.keeps:
            e.diff = run.diff(e.record)
        k.vs_start, k.vs_start_low, k.vs_start_high = _chain(k.keeps)
        k.incumbent = k.keeps[-1] if k.keeps else None
        k.now_report = k.incumbent.report if k.incumbent else k.start
        k.now = (k.now_report or {}).get("summary") if isinstance((k.now_report or {}).get("summary"), dict) else None
        # The code now is the start plus every keep not reverted: the incumbent's measured code
        # only when no keep before it was reverted (all reverted: the start, measured too).
        k.stale_after_revert = k.incumbent is not None and any(
            e.reverted_by is not None and e.n < k.incumbent.n for e in k.experiments)
        k.timing_meaningful = bool((k.now_report or {}).get("timing_meaningful"))
        k.profile = _task_profile(ws, run.tag, task)
        share = _num(k.profile.get("share"))
        k.share = share if share is not None and 0 <= share <= 1 else None
        kernels.append(k)

    verify_source = ""
    verify = None
    if verify_file is not None:
        verify = _read_verify(Path(verify_file))
        if verify is None:
            raise WorkspaceError(f"{verify_file}: not a verify result (write one with `autokernel-tui verify --json FILE`)")
        verify_source = str(verify_file)
    else:
        saved = verify_path(ws, run.tag)
        verify = _read_verify(saved)
        verify_source = str(saved) if verify else ""

    stamps = [e.get("t") for e in run.events() if isinstance(e.get("t"), (int, float))]
    state = "finished" if run.meta.get("finished") else "stopped or running"
    device = started.get("device") if isinstance(started.get("device"), dict) else {}
    return RunReport(
        tag=run.tag, workspace=ws, meta=run.meta, device=device or {},
        policy=policy or str(((run.meta.get("settings") or {}).get("run") or {}).get("policy", "")),
        agent=", ".join(sorted({e.record.agent for e in experiments if e.record.agent})) or "-",
        started=min(stamps) if stamps else _num(run.meta.get("created_at")),
        ended=max(stamps) if stamps else None, state=state, kernels=kernels, experiments=experiments,
        prediction=predict(kernels), verify=verify, verify_source=verify_source,
        tokens=sum(e.record.tokens or 0 for e in experiments),
        cost_usd=sum(e.record.cost_usd or 0.0 for e in experiments), problems=problems)


def predict(kernels: list[KernelSummary]) -> Prediction:
    """The model's end-to-end speedup by Amdahl, from each kernel's profile share and its speedup vs
    the op the model calls (a slower kernel counts as 1.00x: it would not be shipped)."""
    used, missing = [], []
    for k in kernels:
        if k.share is None or k.shipped_speedup is None:
            missing.append(k.task)
        else:
            used.append((k.task, k.share, k.shipped_speedup))
    profile = next((k.profile for k in kernels if k.profile), {})
    covered = sum(p for _, p, _ in used)
    if not used:
        note = ("no task records a profile share (tasks from starters, not `init --from-profile`): "
                "no end-to-end prediction" if not any(k.share is not None for k in kernels)
                else "no kernel with a profile share has a measured speedup yet")
        return Prediction(None, 0.0, [], missing, profile, note)
    if covered > 1.0 + 1e-9:
        return Prediction(None, covered, used, missing, profile,
                          f"the tasks' shares add up to {100 * covered:.1f}% of the model's time: "
                          "they overlap, no prediction")
    speedup = 1.0 / ((1.0 - covered) + sum(p / s for _, p, s in used))
    note = ""
    if profile and not profile.get("time_kind") == "cuda":
        note = "the profile counted CPU op time, not GPU time: the shares are a stand-in"
    return Prediction(speedup, covered, used, missing, profile, note)
