"""Reverting a kept experiment: a new experiment that puts back the kernel before it.

A revert is a human's decision, made when it is asked for, so it goes straight to
the branch: its commit ``exp N: revert exp K: ...`` is made like any candidate (at
``refs/autokernel/<tag>/exp-N``), the branch advances to it, and it is recorded
as a ``reverted`` row. Its ``Autokernel-Reverts`` trailer names the reverted
experiment's commit: that, not the row's description, says which experiment a
revert undid. (A revert whose commit cannot be read, e.g. a hand-edited row, is
still read by its description, ``revert exp K: ...``, which every version wrote.)
"""

from __future__ import annotations

import re
from typing import Any, Callable

from autokernel_tui.engine.runrecord import RunRecord, make_row
from autokernel_tui.errors import EngineError
from autokernel_tui.ledger.gitrepo import RunRepo, message, parse_trailers

TRAILER = "Autokernel-Reverts"
_DESCRIPTION = re.compile(r"^revert exp (\d+):")


class Reverts:
    """Which experiments of a run were reverted, and reverting one more."""

    def __init__(self, record: RunRecord, repo: RunRepo):
        self.record = record
        self.repo = repo
        self._targets: dict[int, int | None] = {}  # revert's number -> the experiment it reverted

    def target(self, row: dict[str, Any]) -> int | None:
        """The experiment a ``reverted`` row undid (None: not known)."""
        n = row["experiment"]
        if n not in self._targets:
            self._targets[n] = self._read_target(row)
        return self._targets[n]

    def _read_target(self, row: dict[str, Any]) -> int | None:
        if row["commit"]:
            try:
                sha = parse_trailers(self.repo.message_of(row["commit"])).get(TRAILER, "")
            except Exception:  # git.GitCommandError: the commit is not in this repository
                sha = ""
            if sha:
                for r in self.record.rows:
                    if r["commit"] and r["experiment"] != row["experiment"] and \
                            (r["commit"] == sha or (len(sha) >= 7 and r["commit"].startswith(sha))):
                        return r["experiment"]
        m = _DESCRIPTION.match(row["description"] or "")
        return int(m.group(1)) if m else None

    def reverted(self) -> set[int]:
        """Experiments already reverted."""
        return {k for r in self.record.rows if r["status"] == "reverted" and (k := self.target(r)) is not None}

    def check(self, k: int) -> dict[str, Any]:
        """Experiment ``k``'s row if it can be reverted now; else an EngineError saying why."""
        row = self.record.row(k)
        if row is None:
            raise EngineError(f"run {self.record.tag} has no experiment {k}")
        if row["status"] != "keep":
            raise EngineError(f"experiment {k} was not kept ({row['status']}); only kept experiments can be reverted")
        if k in self.reverted():
            raise EngineError(f"experiment {k} is already reverted")
        return row

    def revert(self, k: int, emit: Callable[..., Any]) -> dict[str, Any]:
        """Revert kept experiment ``k`` as a new experiment; returns ``k``'s row."""
        row = self.check(k)
        n, task = self.record.next_n(), row["task"]
        emit("experiment_started", n=n, task=task, revert_of=k)
        restored = self.repo.show(f"{row['commit']}^", task)
        trailers = {"Autokernel-Task": task, "Autokernel-Experiment": n, "Autokernel-Status": "reverted",
                    TRAILER: row["commit"], "Autokernel-Run": self.record.tag}
        commit, parent = self.repo.commit_candidate(n, task, restored,
                                                    message(n, f"revert exp {k}: {row['description']}", trailers))
        self.repo.advance(commit, parent)
        return self.finish(n, task, k, commit, emit)

    def finish(self, n: int, task: str, k: int, commit: str, emit: Callable[..., Any]) -> dict[str, Any]:
        """Record revert ``n`` of ``k`` (its commit is on the branch); returns ``k``'s row."""
        row = self.record.row(k) or {}
        emit("committed", n=n, commit=commit)
        emit("decision", n=n, action="revert", by="human", reason=f"revert of experiment {k}")
        typed = self.record.append(make_row(n, task, commit, "reverted", None, None, None,
                                            f"revert exp {k}: {row.get('description', '')}"), emit)
        self._targets[typed["experiment"]] = k
        return row
