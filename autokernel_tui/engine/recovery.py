"""Crash recovery: what a new session does before the loop runs again.

Two steps, both from what is on disk (DESIGN.md rule 3):

``repair_run``               results.tsv brought back in line with the journal and git
                             (``engine/repair.py``); each repair is one ``repaired`` event.
``finish_open_experiment``   the experiment the last session died in (``journal.open_experiment``)
                             finished exactly once, from what was journaled, and git re-synced.

How an open experiment ends, by what the journal and git hold:

* no verdict: a ``crash`` row ("interrupted: ..."), with its commit when it was made;
* a verdict but no decision (the engine died while it waited for approval, say): discarded,
  with a ``decision`` journaled now;
* a decision: that decision. A keep whose branch had not advanced yet advances now (the
  candidate's parent must still be the branch tip); any other outcome leaves the branch
  where it was, the candidate at its ref;
* a revert: finished when its commit was made (the branch advanced to it if it had not),
  else abandoned (nothing in git holds its number, so the number is used again).

Runs from before candidates lived off the branch may have the open candidate on the
branch tip: a keep stays, anything else is kept at its ref and the branch moved back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autokernel_tui.engine import journal, repair
from autokernel_tui.engine.bus import EventBus
from autokernel_tui.engine.gate import status_of
from autokernel_tui.engine.revert import Reverts
from autokernel_tui.engine.runrecord import RunRecord, Spend, make_row
from autokernel_tui.harness.report import Comparison, Report
from autokernel_tui.ledger.events import read_events
from autokernel_tui.ledger.gitrepo import RunRepo, parse_trailers
from autokernel_tui.ledger.schema import read_comparison, read_report


def repair_run(record: RunRecord, repo: RunRepo, bus: EventBus) -> list[str]:
    """Bring results.tsv back in line with events.jsonl and git (engine/repair.py), set the run's
    numbering floor, and say what was done: each line one ``repaired`` event (the snapshot's
    ``repairs``; `run --headless` prints them on stderr). Returns the lines."""
    problems: list[str] = []
    events = read_events(record.events.path, problems=problems)
    done = repair.reconcile(record.results, events, repo, record.dir, record.tag, record.base)
    messages = record.events.problems + problems + done.messages
    if len(messages) > repair.MAX_MESSAGES:
        rest = len(messages) - repair.MAX_MESSAGES + 1
        messages = messages[: repair.MAX_MESSAGES - 1] + [f"... and {rest} more problems of the same kind"]
    record.floor = done.floor
    for line in messages:
        bus.emit("repaired", message=line)
    return messages


@dataclass
class Recovered:
    """The row an open experiment was finished with; for a revert, also the reverted experiment's row."""
    row: dict[str, Any]
    report: Report | None = None
    comparison: Comparison | None = None
    reverted: dict[str, Any] | None = None


def _is_experiment(commit: Any, n: int, record: RunRecord) -> bool:
    """``commit`` is experiment ``n``'s commit of this run (not the base, not another run's)."""
    if commit.hexsha == record.base or not commit.message.startswith(f"exp {n}:"):
        return False
    return parse_trailers(commit.message).get("Autokernel-Run", record.tag) == record.tag


def _parent(repo: RunRepo, sha: str) -> str:
    commit = repo.repo.commit(sha)
    return commit.parents[0].hexsha if commit.parents else ""


def finish_open_experiment(record: RunRecord, repo: RunRepo, bus: EventBus, reverts: Reverts) -> Recovered | None:
    """Finish the experiment the last session died in, exactly once (see the module docstring).
    Also journals the ``result`` event of a row written just before a kill. None: nothing was open."""
    emit = bus.emit
    events = record.journal()
    for row in journal.rows_missing_result_event(events, record.rows):
        emit("result", row=row)  # died between the row and its event
    op = journal.open_experiment(events, record.experiments())
    if op is None:
        return None
    n = op.n
    tip = repo.tip()
    on_branch = _is_experiment(tip, n, record)
    ref = repo.ref_sha(n)
    commit = tip.hexsha if on_branch else (ref or "")
    # The candidate can still go on the branch when the branch is where it was made.
    can_advance = bool(not on_branch and ref and _parent(repo, ref) == tip.hexsha)

    if op.revert_of is not None:
        if on_branch or can_advance:
            if can_advance:
                repo.advance(ref, tip.hexsha)
            kept = reverts.finish(n, op.task, op.revert_of, commit, emit)
            return Recovered(record.row(n) or {}, reverted=kept)
        repo.drop_candidate()
        if not ref:
            emit("experiment_abandoned", n=n, reason="engine stopped before the revert was committed")
            return None
        row = make_row(n, op.task, ref, "crash", None, None, None,
                       f"interrupted: the revert of experiment {op.revert_of} could not be applied")
        return Recovered(record.append(row, emit))

    prop, verdict, decision = op.events.get("proposal"), op.events.get("verdict"), op.events.get("decision")
    desc = str((prop or {}).get("description") or "")
    report = read_report(verdict.get("report")) if verdict else None
    comparison = read_comparison(verdict.get("comparison")) if verdict else None
    if verdict and decision:
        action = decision["action"]
    elif verdict:
        action = "discard"
        emit("decision", n=n, action="discard", by="policy",
             reason="the engine stopped before a decision; discarded on resume")
    else:
        action = "crash"
    if action == "keep" and can_advance:
        repo.advance(ref, tip.hexsha)
        on_branch = True
    if action == "keep" and on_branch:
        status = "keep"
    else:
        if on_branch:  # a run from before candidates lived off the branch: its undecided tip
            repo.retract(n, commit, _parent(repo, commit))
        repo.drop_candidate()
        status = {"veto": "vetoed", "keep": "crash", "crash": "crash"}.get(action) or status_of(report)
    if status == "crash" and action != "keep":
        desc = f"interrupted: the engine stopped during this experiment ({desc or 'no proposal yet'})"
    row = make_row(n, op.task, commit, status, report, comparison, Spend.from_event(prop), desc)
    return Recovered(record.append(row, emit), report, comparison)
