"""Judging ahead (issue 22): proposals in flight are checked and timed as they arrive, on every free
member of the harness pool at once, while the loop thread keeps the ledger one experiment at a time.

A ready proposal (``engine.parallel.Ready``) is handed to ``AheadJudge.submit`` by the loop thread.
One thread per pool member takes it, asks the harness for its report (the candidate's source sent
as text: nothing is read from the worktree, which belongs to the loop thread) and, when it passed,
for its comparison with the incumbent of its kernel as the loop last recorded it. The loop then
takes judged proposals in the order they arrived and records each as an experiment (number,
commit, verdict, decision, row: ``engine.experiment``), using the verdict judged ahead.

Rules:

* **Judged against the incumbent at judging time.** When the experiment is recorded, the
  comparison must have been taken against the kernel on the branch *then*. If a keep of the same
  kernel landed after the comparison was taken, the comparison is taken again against the new
  incumbent before the gate sees it (the report, which does not depend on the incumbent, stands).
  The verdict event says which (``judged``: "ahead" or "ahead, compared again").
* **Nothing is journaled ahead.** A verdict judged ahead lives in memory until its experiment is
  recorded; a kill loses it, and the resumed run judges the (journaled) ready proposal again. So
  crash recovery is exactly the serial loop's: nothing lost, nothing counted twice.
* **One timing at a time per GPU.** Each thread holds one pool member for a whole call; a
  ``HarnessPool`` hands a member to one caller at a time.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from autokernel_tui.harness.report import Comparison, Report

AHEAD, AGAIN = "ahead", "ahead, compared again: a keep of this kernel landed after the first comparison"


@dataclass
class Judged:
    """A proposal's verdict judged ahead (the harness's report and comparison)."""
    report: Report
    comparison: Comparison | None
    incumbent: str  # the incumbent source the comparison was taken against ("" when not compared)


class AheadJudge:
    """Judges submitted proposals on ``workers`` threads (one per pool member)."""

    def __init__(self, evaluator: Any, workers: int, cv: threading.Condition,
                 task_dir: Callable[[str], Path], owned_hashes: Callable[[str], dict | None],
                 on_judged: Callable[[], None] = lambda: None) -> None:
        self._evaluator = evaluator
        self._on_judged = on_judged  # e.g. a pool event: the header's queue counts changed
        self._cv = cv
        self._task_dir, self._owned = task_dir, owned_hashes
        self._queue: deque[Any] = deque()
        self._verdicts: dict[str, Judged] = {}
        self._incumbents: dict[str, str] = {}
        self._judging = 0
        self._closed = False
        self._threads = [threading.Thread(target=self._work, name=f"judge-{i}", daemon=True)
                         for i in range(max(1, workers))]
        for t in self._threads:
            t.start()

    # --- the loop thread's side -------------------------------------------------------------
    def set_incumbent(self, task: str, source: str) -> None:
        """The kernel on the branch for ``task`` (the loop says so after every experiment)."""
        with self._cv:
            self._incumbents[task] = source

    def submit(self, ready: Any) -> None:
        with self._cv:
            self._queue.append(ready)
            self._cv.notify_all()

    def verdict(self, pid: str) -> Judged | None:
        with self._cv:
            return self._verdicts.get(pid)

    def forget(self, pid: str) -> None:
        with self._cv:
            self._verdicts.pop(pid, None)

    def judged(self) -> list[Judged]:
        """The verdicts judged ahead and waiting to be recorded."""
        with self._cv:
            return list(self._verdicts.values())

    def counts(self) -> tuple[int, int]:
        """(being judged or queued, judged and waiting to be recorded)."""
        with self._cv:
            return self._judging + len(self._queue), len(self._verdicts)

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._queue.clear()
            self._cv.notify_all()

    # --- the judges' side ----------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._closed:
                    self._cv.wait()
                if self._closed:
                    return
                ready = self._queue.popleft()
                self._judging += 1
            try:
                judged = self._judge(ready)
            except Exception as exc:  # noqa: BLE001 - a judge thread that died would leave its proposal waiting forever
                judged = Judged(Report(status="CRASH", stage="static", task=ready.task,
                                       reason=f"judging ahead failed: {type(exc).__name__}: {exc}"), None, "")
            with self._cv:
                self._judging -= 1
                if self._closed:
                    return
                self._verdicts[ready.id] = judged
                self._cv.notify_all()
            try:
                self._on_judged()
            except Exception:  # noqa: BLE001 - a closed journal at shutdown: the count is only for show
                pass

    def _judge(self, ready: Any) -> Judged:
        task, source = ready.task, ready.proposal.source
        task_dir = self._task_dir(task)
        report = self._evaluator.evaluate(task_dir, task, self._owned(task), kernel_source=source)
        if not report.passed:
            return Judged(report, None, "")
        with self._cv:
            incumbent = self._incumbents.get(task, "")
        comparison = self._evaluator.compare(task_dir, source, incumbent) if incumbent else None
        return Judged(report, comparison, incumbent)


def settle(judged: Judged, incumbent: str, compare: Callable[[], Comparison | None]) -> tuple[
        Report, Comparison | None, str]:
    """A verdict judged ahead, made current: (report, comparison, how it was judged). The
    comparison is taken again when it was against another incumbent than the one on the branch."""
    if not judged.report.passed or judged.incumbent == incumbent:
        return judged.report, judged.comparison, AHEAD
    return judged.report, compare(), AGAIN
