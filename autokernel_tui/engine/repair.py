"""Before a run resumes: make results.tsv agree with events.jsonl and git again.

results.tsv is one of three records of an experiment. The others: the journal
(``events.jsonl``: ``experiment_started`` ... ``result``, whose ``row`` is the
results row itself) and git (each experiment's commit, ``exp N: ...`` with
``Autokernel-*`` trailers, at ``refs/autokernel/<tag>/exp-N`` and, when kept, on
the run branch). A results file cut mid-line, a line deleted
or edited into nonsense must not make the engine reuse an experiment number:
that would overwrite the ``exp-N`` ref and orphan the old commit.

So on opening a run, for every experiment number that the journal or git show
in use and that has no usable results row (except the one experiment the last
session died in: ``recovery.finish_open_experiment`` finishes that one), the row is rebuilt:
from its ``result`` event when the journal has it (exactly the row that was
written), otherwise from what the journal and git hold (commit, trailers,
``reports/exp-N.json``). A commit on the branch is kept: the branch advances only
on a keep, after the decision is journaled. Runs from before that layout committed
each candidate on the branch first, so there a branch tip with no decision on
record (and no ``exp-N`` ref: the old layout wrote one only when discarding) is an
undecided candidate: it is kept at its ref and the branch moved back, as the
engine does for an open experiment. The file is then rewritten in experiment order; when it
held lines that had to be dropped, the old file is kept beside it
(``results.tsv.bad-K``). Every repair is one line in the returned list, which
the engine journals (``repaired`` events) and shows.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autokernel_tui.engine import journal
from autokernel_tui.engine.gate import status_of
from autokernel_tui.engine.runrecord import Spend, make_row
from autokernel_tui.harness.report import Comparison, Report, Summary
from autokernel_tui.ledger import paths
from autokernel_tui.ledger.gitrepo import parse_trailers
from autokernel_tui.ledger.schema import read_comparison, read_report, read_saved

_SUBJECT = re.compile(r"^exp (\d+): ?(.*)$")
_EXP_REF = re.compile(r"^refs/autokernel/(?P<tag>[^/]+)/exp-(?P<n>[1-9][0-9]*)$")
MAX_MESSAGES = 20


@dataclass
class GitExperiment:
    n: int
    sha: str
    on_branch: bool  # on the run branch's first-parent chain (kept; in an old run, or not yet decided)
    is_tip: bool = False
    ref: str = ""
    subject: str = ""
    trailers: dict[str, str] = field(default_factory=dict)
    time: float = 0.0
    parent: str = ""
    at_ref: bool = False  # refs/autokernel/<tag>/exp-N holds this commit too


def _log(repo: Any, *args: str) -> list[tuple[str, float, str, str]]:
    """(sha, commit time, first parent, message) for each commit of ``git log args``."""
    out = repo.repo.git.log("--format=%H%x1f%ct%x1f%P%x1f%B%x1e", *args)
    commits = []
    for record in out.split("\x1e"):
        parts = record.strip("\n").split("\x1f")
        if len(parts) != 4:
            continue
        sha, ct, parents, body = parts
        try:
            when = float(ct)
        except ValueError:
            when = 0.0
        commits.append((sha, when, (parents.split() or [""])[0], body))
    return commits


def _number(subject: str, trailers: dict[str, str]) -> int | None:
    value = trailers.get("Autokernel-Experiment", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    m = _SUBJECT.match(subject)
    return int(m.group(1)) if m else None


def scan_git(repo: Any, tag: str, base: str, wanted: set[int] | None = None) -> dict[int, GitExperiment]:
    """Experiment commits of run ``tag``: the branch's first-parent chain since ``base`` and the
    ``refs/autokernel/<tag>/exp-N`` refs (read fully only for the numbers in ``wanted``;
    ``None``: all). A commit of another run (its ``Autokernel-Run`` trailer) is ignored."""
    found: dict[int, GitExperiment] = {}
    tip = ""
    for i, (sha, when, parent, body) in enumerate(_log(repo, "--first-parent", f"{base}..{repo.branch}")):
        subject, trailers = body.split("\n", 1)[0], parse_trailers(body)
        n = _number(subject, trailers)
        if i == 0:
            tip = sha
        if n is None or trailers.get("Autokernel-Run", tag) != tag or n in found:
            continue
        found[n] = GitExperiment(n, sha, True, sha == tip, repo.branch, subject, trailers, when, parent)
    refs: dict[int, tuple[str, str]] = {}
    for line in repo.repo.git.for_each_ref("--format=%(refname) %(objectname)", f"refs/autokernel/{tag}/").splitlines():
        name, _, sha = line.partition(" ")
        m = _EXP_REF.match(name)
        if m and m.group("tag") == tag:
            refs[int(m.group("n"))] = (name, sha)
    for n, g in found.items():
        g.at_ref = refs.get(n, ("", ""))[1] == g.sha
    todo = {n: v for n, v in refs.items() if n not in found and (wanted is None or n in wanted)}
    by_sha = {sha: (n, name) for n, (name, sha) in todo.items()}
    if by_sha:
        for sha, when, parent, body in _log(repo, "--no-walk=unsorted", *by_sha):
            n, name = by_sha[sha]
            found[n] = GitExperiment(n, sha, False, False, name, body.split("\n", 1)[0], parse_trailers(body),
                                     when, parent)
    for n, (name, sha) in refs.items():  # numbers only: enough to never reuse one
        found.setdefault(n, GitExperiment(n, sha, False, ref=name))
    return found


def _float(text: str | None) -> float | None:
    try:
        value = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return value if value is not None and value == value and abs(value) != float("inf") else None


def _from_trailers(trailers: dict[str, str]) -> tuple[Report | None, Comparison | None]:
    """The harness verdict as far as the commit's trailers tell it (when reports/ and the journal lack it)."""
    status = trailers.get("Autokernel-Status")
    if not status or status == "reverted":
        return None, None
    summary = Summary(latency_us=_float(trailers.get("Autokernel-Latency-Us")),  # type: ignore[arg-type]
                      speedup_vs_baseline=_float(trailers.get("Autokernel-Speedup-Vs-Baseline")),
                      speedup_vs_compile=None, roofline_pct=None, worst_shape="", worst_speedup=None, gbps=None,
                      tflops=None)
    report = Report(status=status, reason=trailers.get("Autokernel-Reason", ""), summary=summary)
    comparison = None
    speedup = _float(trailers.get("Autokernel-Speedup"))
    if speedup is not None:
        low, _, high = trailers.get("Autokernel-CI", "").partition("..")
        comparison = read_comparison({"speedup": speedup, "ci_low": _float(low), "ci_high": _float(high)})
    return report, comparison


def _read_report(run_dir: Path, n: int) -> tuple[Report | None, Comparison | None]:
    try:
        saved = json.loads((paths.report_path(run_dir, n)).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None, None
    return read_saved(saved)


def _iso(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if t else ""


@dataclass
class Rebuilt:
    row: dict[str, Any]
    source: str  # "git", "events.jsonl" or "git and events.jsonl"
    park: GitExperiment | None = None  # the branch tip to move to its ref (it was never decided)


def rebuild(n: int, evs: dict[str, dict], g: GitExperiment | None, run_dir: Path) -> Rebuilt:
    """The results row of experiment ``n`` from its events (``evs``: type -> event), its commit
    ``g`` and reports/exp-N.json, for an experiment that is over (not the open one)."""
    started = evs.get("experiment_started", {})
    prop, verdict, decision = evs.get("proposal"), evs.get("verdict"), evs.get("decision")
    task = str(started.get("task") or (g.trailers.get("Autokernel-Task") if g else "") or "")
    report = read_report(verdict.get("report")) if verdict else None
    comparison = read_comparison(verdict.get("comparison")) if verdict else None
    from_file = False
    if report is None:
        report, comparison = _read_report(run_dir, n)
        from_file = report is not None
    if report is None and g is not None:
        report, comparison = _from_trailers(g.trailers)
    m = _SUBJECT.match(g.subject) if g and g.subject else None
    desc = (prop or {}).get("description") or (m.group(2) if m else "")
    commit = g.sha if g else str((evs.get("committed") or {}).get("commit") or "")
    action = (decision or {}).get("action")
    park = None
    reverted = started.get("revert_of") is not None or (g is not None and g.trailers.get("Autokernel-Status") == "reverted")
    if reverted:
        status = "reverted" if g is not None and g.on_branch else "crash"
    elif g is not None and g.on_branch and (not g.is_tip or action == "keep" or g.at_ref):
        status = "keep"  # under a later commit on the branch, decided, or advanced to from its ref: kept
    else:
        if g is not None and g.on_branch:
            park = g  # an old run's tip, never decided: keep it at its ref, move the branch back
        if action == "veto":
            status = "vetoed"
        elif report is not None:
            status = status_of(report)
        elif prop is not None and prop.get("description") == "malformed proposal":
            status = "fail"  # the agent's submission stayed malformed: no commit, a failed experiment
        else:
            status = "crash"
            desc = f"interrupted: the engine stopped during this experiment ({desc or 'no proposal yet'})"
    if reverted and not desc.startswith("revert exp"):
        desc = f"revert exp {started.get('revert_of', '?')}: {desc}"
    row = make_row(n, task, commit, status, report, comparison, Spend.from_event(prop), desc)
    row["timestamp"] = _iso(float((evs.get("decision") or evs.get("verdict") or started or {}).get("t") or 0)
                            or (g.time if g else 0.0)) or row["timestamp"]
    source = ", ".join(s for s, have in (("git", g is not None and bool(g.subject)), ("events.jsonl", bool(evs)),
                                         ("reports/", from_file)) if have) or "git"
    return Rebuilt(row, source, park)


def _numbers(ns: list[int]) -> str:
    ns = sorted(ns)
    if len(ns) > 8:
        return f"{', '.join(map(str, ns[:6]))} ... {ns[-1]} ({len(ns)} in all)"
    return ", ".join(map(str, ns))


@dataclass
class Reconciled:
    messages: list[str]
    floor: int  # the highest experiment number in use anywhere; the next one is above it


def reconcile(results: Any, events: list[dict[str, Any]], repo: Any, run_dir: Path, tag: str,
              base: str) -> Reconciled:
    """Make ``results`` (a ``ResultsLog``) hold one row per experiment that the journal or git show
    as over; see the module docstring. Returns the messages and the numbering floor."""
    messages: list[str] = list(results.problems)
    have = results.experiments()
    from_events: dict[int, dict[str, Any]] = {}
    for ev in events:
        if ev.get("type") == "result" and isinstance(ev.get("row"), dict):
            n = ev["row"]["experiment"]
            if n not in have:
                from_events[n] = ev["row"]
    recorded = have | set(from_events)
    op = journal.open_experiment(events, recorded)
    open_n = op.n if op is not None else None
    used = journal.used_numbers(events)
    per_n = journal.experiment_events(events)
    git = scan_git(repo, tag, base, wanted=set())  # numbers (and the branch's commits) only
    missing = {n for n in used | set(git) if n not in recorded and n != open_n}
    unread = {n for n in missing if n in git and not git[n].subject}
    if unread:  # read those refs' commits too
        git.update({n: g for n, g in scan_git(repo, tag, base, wanted=unread).items() if n in unread})
    rebuilt = {n: rebuild(n, per_n.get(n, {}), git.get(n), run_dir) for n in sorted(missing)}
    floor = max((recorded | used | set(git)) - ({open_n} if open_n is not None else set()), default=0)

    for rb in rebuilt.values():  # git first: a commit left undecided on the tip goes to its ref
        g = rb.park
        if g is not None:
            repo.retract(g.n, g.sha, g.parent)
            messages.append(f"git: experiment {g.n}'s commit {g.sha[:10]} was the tip of {repo.branch} with no "
                            f"decision on record; kept at {repo.ref_name(g.n)} and the branch reset "
                            f"({rb.row['status']})")
    if from_events or rebuilt or results.needs_rewrite:
        rows = list(results.rows) + list(from_events.values()) + [rb.row for rb in rebuilt.values()]
        saved = results.rewrite(rows, backup=results.needs_rewrite)
        if from_events:
            messages.append(f"{results.path}: restored the rows of experiments {_numbers(list(from_events))} "
                            "from their result events in events.jsonl")
        by_source: dict[str, list[int]] = {}
        for n, rb in rebuilt.items():
            by_source.setdefault(rb.source, []).append(n)
        for source, ns in by_source.items():
            statuses = ", ".join(f"{n}: {rebuilt[n].row['status']}" for n in sorted(ns)[:8])
            messages.append(f"{results.path}: rebuilt the rows of experiments {_numbers(ns)} from {source} "
                            f"({statuses}{' ...' if len(ns) > 8 else ''})")
        if saved is not None:
            messages.append(f"{results.path}: rewritten without the lines it could not use; the old file is "
                            f"kept as {saved.name}")
    return Reconciled(messages, floor)
