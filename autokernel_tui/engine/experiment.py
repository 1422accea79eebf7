"""One experiment: propose -> commit -> evaluate -> gate -> record.

``Experiment(lab, n, task).run()`` performs experiment ``n`` on ``task`` with what
the ``Lab`` hands it (agent, typed harness, run record, repo, event bus, gate) and
returns an ``Outcome``; the engine decides what the outcome means for the loop
(which kernel next, a pause while the agent is down).

Crash safety. Every step is journaled before the next begins, in this order:
``experiment_started`` -> agent text -> ``proposal`` -> the candidate committed
at ``refs/autokernel/<tag>/exp-N``, off the branch -> harness verdict
(``verdict``, reports/exp-N.json) -> the commit amended with the metric trailers
(``committed``) -> ``decision`` -> git (keep: the branch advances to the
candidate; otherwise the worktree goes back to the branch) -> results row ->
``result``. The branch holds kept experiments only, also while a candidate
awaits approval. A kill at any point leaves an *open* experiment that the next
start finishes exactly once from what was journaled (``engine/recovery.py``).
"""

from __future__ import annotations

import difflib
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from autokernel_tui.engine.backends import Evaluator
from autokernel_tui.engine.bus import EventBus
from autokernel_tui.engine.gate import ApprovalGate, Pending, status_of
from autokernel_tui.engine.runrecord import RunRecord, Spend, make_row
from autokernel_tui.harness.report import Comparison, Report
from autokernel_tui.ledger import crashpoints
from autokernel_tui.ledger.events import AgentTextBatcher
from autokernel_tui.ledger.gitrepo import RunRepo, message

RECORDED, AGENT_DOWN, NOTHING_LEFT = "recorded", "agent_down", "nothing_left"


@dataclass
class Lab:
    """What every experiment of a session needs; built by the engine."""
    settings: Any
    record: RunRecord
    repo: RunRepo
    bus: EventBus
    gate: ApprovalGate
    agent: Any
    evaluator: Evaluator
    baseline: Callable[[str], Report]          # the task's starting kernel, measured once per run
    stopping: Callable[[], bool]               # a stop was asked for (ends a wait for approval)
    on_ask: Callable[[Pending], None]          # a human is asked (the engine's state and event)
    on_answered: Callable[[], None]            # ... and has answered, or the wait ended


@dataclass
class Outcome:
    """How an experiment ended. ``RECORDED``: its results row was written (``row``);
    ``AGENT_DOWN``: the agent is unavailable (the number is used again); ``NOTHING_LEFT``: the
    agent has nothing left to try on this kernel (the number is used again)."""
    n: int
    task: str
    kind: str
    row: dict[str, Any] | None = None
    report: Report | None = None
    comparison: Comparison | None = None
    seconds: float = 0.0
    reason: str = ""


class Experiment:
    def __init__(self, lab: Lab, n: int, task: str):
        self.lab, self.n, self.task = lab, n, task
        self.emit = lab.bus.emit

    # --- the steps ------------------------------------------------------------------
    def run(self, ready: Any = None, verdict: Any = None) -> Outcome:
        """``ready``: a proposal written while it was in flight (``engine.parallel.Ready``): numbered
        now, its agent text replayed under the number, then judged like any other; ``verdict``: its
        verdict judged ahead (``engine.judging``), used instead of judging it here."""
        from autokernel_tui.agents import base as agents

        lab, n, task = self.lab, self.n, self.task
        t0 = ready.started if ready is not None else time.time()  # the kernel's own clock counts the agent's time too
        self.emit("experiment_started", n=n, task=task, **({"proposal": ready.id} if ready is not None else {}))
        if ready is not None:
            batcher = AgentTextBatcher(lambda kind, text: self.emit("agent", n=n, kind=kind, text=text))
            for kind, text in ready.texts:
                batcher.add(kind, text)
            batcher.flush()
            if ready.error or ready.proposal is None:
                return self._agent_failed(ready.error or "no proposal")
            proposal = ready.proposal
        else:
            try:
                ctx = self._context()
                proposal, batcher = self._propose(ctx)
            except agents.AgentUnavailable as exc:
                self.emit("experiment_abandoned", n=n, reason=f"agent unavailable: {exc}")
                return Outcome(n, task, AGENT_DOWN, reason=str(exc))
            except agents.NothingToPropose as exc:
                self.emit("experiment_abandoned", n=n, reason=f"nothing left to try: {exc}")
                return Outcome(n, task, NOTHING_LEFT, reason=str(exc))
            except agents.AgentError as exc:  # e.g. a submission that stayed malformed: a failed experiment
                return self._agent_failed(str(exc))

        incumbent = (lab.repo.task_dir(task) / "kernel.py").read_text(encoding="utf-8")
        diff = "".join(difflib.unified_diff(incumbent.splitlines(True), proposal.source.splitlines(True),
                                            f"a/kernels/{task}/kernel.py", f"b/kernels/{task}/kernel.py"))
        spend = Spend.of(proposal, getattr(lab.agent, "name", ""))
        header = f"# exp {n}: {proposal.description}\n\n**Hypothesis.** {proposal.hypothesis}\n"
        lab.record.save_reasoning(n, batcher.markdown(header))
        self.emit("proposal", n=n, description=proposal.description, hypothesis=proposal.hypothesis, diff=diff,
                  agent=spend.agent, tokens=spend.tokens, cost_usd=spend.cost_usd)

        trailers: dict[str, object] = {"Autokernel-Task": task, "Autokernel-Experiment": n,
                                       "Autokernel-Agent": spend.agent, "Autokernel-Run": lab.record.tag}
        commit, parent = lab.repo.commit_candidate(n, task, proposal.source,
                                                   message(n, proposal.description, trailers))
        crashpoints.crash_point("committed", n)

        report, comparison = self._evaluate(proposal.source, incumbent, verdict)
        crashpoints.crash_point("evaluated", n)
        summary = report.summary
        trailers.update({
            "Autokernel-Status": report.status,
            "Autokernel-Speedup": f"{comparison.speedup:.4f}" if comparison else None,
            "Autokernel-CI": f"{comparison.ci_low:.4f}..{comparison.ci_high:.4f}" if comparison else None,
            "Autokernel-Speedup-Vs-Baseline": summary.speedup_vs_baseline if summary else None,
            "Autokernel-Latency-Us": summary.latency_us if summary else None,
            "Autokernel-Reason": report.reason,
        })
        commit = lab.repo.amend_candidate(n, commit, message(n, proposal.description, trailers))
        self.emit("committed", n=n, commit=commit)

        decision = lab.gate.decide(n, task, diff, report, comparison, stopping=lab.stopping, on_ask=lab.on_ask,
                                   on_answered=lab.on_answered)
        self.emit("decision", n=n, action=decision.action, by=decision.by, reason=decision.reason)
        crashpoints.crash_point("decided", n)
        if decision.action == "keep":
            lab.repo.advance(commit, parent)
            crashpoints.crash_point("advanced", n)
            status = "keep"
        else:
            crashpoints.crash_point("ref-kept", n)  # the commit has been at its ref since it was made
            lab.repo.drop_candidate()
            status = "vetoed" if decision.action == "veto" else status_of(report)
        row = lab.record.append(make_row(n, task, commit, status, report, comparison, spend, proposal.description),
                                self.emit)
        return Outcome(n, task, RECORDED, row=row, report=report, comparison=comparison, seconds=time.time() - t0)

    # --- helpers ----------------------------------------------------------------------
    def _agent_failed(self, why: str) -> Outcome:
        lab, n, task = self.lab, self.n, self.task
        self.emit("proposal", n=n, description="malformed proposal", hypothesis="", diff="", agent="",
                  tokens=0, cost_usd=0.0)
        self.emit("decision", n=n, action="discard", by="policy", reason=why)
        row = lab.record.append(make_row(n, task, "", "fail", None, None, None, f"agent failed: {why}"), self.emit)
        return Outcome(n, task, RECORDED, row=row)

    def _context(self) -> Any:
        from autokernel_tui.agents.base import AgentContext

        lab, task = self.lab, self.task
        history = []
        for row in lab.record.rows:
            if row["task"] != task:
                continue
            report = lab.record.verdict(row["experiment"]).report
            history.append({**row, "source": self._source_at(row["commit"]),
                            "reason": report.reason if report is not None else ""})
        spec = lab.record.specs[task]
        incumbent = lab.record.kept_report(task) or lab.baseline(task)
        # The agent's contract (docs/ARCHITECTURE.md, "Agents") takes the incumbent's report as a dict.
        return AgentContext(task=spec, incumbent_source=(lab.repo.task_dir(task) / "kernel.py").read_text(
                                encoding="utf-8"),
                            incumbent_report=incumbent.to_dict() if incumbent is not None else None,
                            history=history, profile=dict(spec.profile) or None, experiment=self.n,
                            workspace=lab.record.workspace)

    def _source_at(self, commit: str) -> str:
        if not commit:
            return ""
        try:
            return self.lab.repo.show(commit, self.task)
        except Exception:  # a commit that is gone (a hand-edited row): no source to show the agent
            return ""

    def _propose(self, ctx: Any) -> tuple[Any, AgentTextBatcher]:
        from autokernel_tui.agents import base as agents

        n = self.n
        batcher = AgentTextBatcher(lambda kind, text: self.emit("agent", n=n, kind=kind, text=text))
        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["proposal"] = self.lab.agent.propose(ctx, lambda ev: batcher.add(ev.kind, ev.text))
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

    def _evaluate(self, candidate: str, incumbent: str, ahead: Any = None) -> tuple[Report, Comparison | None]:
        """The harness's verdict on the candidate (in the worktree), and the comparison with the
        incumbent when it passed; or the verdict judged ahead, compared again if the incumbent
        moved since (``engine.judging.settle``). Saved (reports/exp-N.json) and journaled (``verdict``)."""
        from autokernel_tui.engine.judging import settle

        lab, n, task = self.lab, self.n, self.task
        task_dir = lab.repo.task_dir(task)
        judged: dict[str, str] = {}
        if ahead is not None:
            report, comparison, how = settle(ahead, incumbent,
                                             lambda: lab.evaluator.compare(task_dir, candidate, incumbent))
            judged = {"judged": how}
        else:
            report = lab.evaluator.evaluate(task_dir, task, lab.record.owned_hashes(task))
            comparison = lab.evaluator.compare(task_dir, candidate, incumbent) if report.passed else None
        lab.record.save_verdict(n, report, comparison)
        self.emit("verdict", n=n, report=report.to_dict(), comparison=comparison.to_dict() if comparison else None,
                  **judged)
        return report, comparison
