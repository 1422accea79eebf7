"""What `autokernel-tui demo` runs: a throwaway workspace, the offline tuner, manual approval, and the
harness in quick mode, said on screen. The command (``commands/demo.py``: where the demo lives, the
hand-over and the exit hint) takes its settings and its notes from here.

Quick mode checks and times the first dtype of each task only (harness ``quick``); on a machine without
a GPU the harness runs the tasks' small test shapes under the Triton interpreter either way. A full
evaluation of a starter on a 2-core CPU took 40-100 s (3 test shapes x 3 dtypes, the interpreter at
~0.6-0.9 s per call of the 37-row shape), so each experiment (evaluation, comparison, confirming
comparison) took 3-4 minutes; quick mode divides that by three. ``AUTOKERNEL_HARNESS_QUICK=0`` runs the
full check in the demo too.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

DEMO_TASKS = ("rmsnorm", "softmax")
QUICK_ENV = "AUTOKERNEL_HARNESS_QUICK"


def demo_overrides(env: dict[str, str] | None = None) -> dict[str, dict]:
    """The demo's settings over the user's: tuner, manual approval, quick mode unless the environment
    says otherwise (AUTOKERNEL_HARNESS_QUICK)."""
    env = os.environ if env is None else env
    overrides: dict[str, dict] = {"run": {"policy": "manual"}, "agent": {"kind": "tuner"}}
    if QUICK_ENV not in env:
        overrides["harness"] = {"quick": True}
    return overrides


def demo_notes(settings, workspace: str | Path | None = None) -> list[str]:
    """What the demo tells the user when the screen opens (``workspace``: where the demo lives)."""
    check = ("the harness in quick mode: the first dtype of each task only (on a machine without a GPU, "
             "its small test shapes under the Triton interpreter)" if settings.harness.quick else
             "the harness's full check: every dtype")
    return [f"Demo: the offline tuner proposes, you approve each candidate the harness calls faster; {check}. "
            + (f"`autokernel-tui -C {shlex.quote(str(workspace))}` later runs it with your own settings."
               if workspace is not None else "`autokernel-tui` in this folder later runs with your own settings.")]
