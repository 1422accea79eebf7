"""Flags shared by several commands, defined once, and what they mean to settings and the engine.

* the workspace: ``DIR`` or ``-C DIR`` (default ``.``): app, run, status, init, attach, review, demo;
* the run flags (``--agent``, ``--policy``, limits, ``--tag``, ``--task``, ``--new``): run, the app
  (the default command, which starts or resumes a run in-process) and demo. They are read the
  same way on every path, and handed on as they were given when the app hands a run to a
  headless engine.
"""

from __future__ import annotations

import argparse

# The run flags that are handed on to a headless engine (`run --headless`), in this order.
RUN_FLAGS = ("--agent", "--policy", "--max-experiments", "--max-hours", "--max-cost", "--tag", "--task")
POLICIES = ("manual", "auto", "threshold")


def add_workspace_arguments(parser: argparse.ArgumentParser, default_help: str = "default: .") -> None:
    parser.add_argument("dir", nargs="?", default=None, metavar="DIR", help=f"workspace folder ({default_help})")
    parser.add_argument("-C", dest="workspace", default=None, metavar="DIR", help="workspace folder (same as DIR)")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agent", default=None,
                        help="claude | openai | tuner | auto (Claude if ANTHROPIC_API_KEY is set, ...), "
                             "or module:factory for a plugin agent")
    parser.add_argument("--policy", choices=POLICIES, default=None, help="approval policy")
    parser.add_argument("--max-experiments", type=int, default=None, metavar="N")
    parser.add_argument("--max-hours", type=float, default=None, metavar="H")
    parser.add_argument("--max-cost", type=float, default=None, metavar="USD")
    parser.add_argument("--parallel", type=int, default=None, metavar="K",
                        help="agent proposals in flight at once (run.parallel; 0 = auto: 1 on CPU, 4 on GPU)")
    parser.add_argument("--gpus", default=None, metavar="all|0,2,3",
                        help="GPUs whose warm harnesses judge proposals (run.gpus; default all)")
    parser.add_argument("--backend", choices=("local", "ray"), default=None,
                        help="where the harnesses run: this host, or actors of a Ray cluster (run.backend)")
    parser.add_argument("--tag", default=None, help="run name (branch autokernel/<tag>); default: a timestamp")
    parser.add_argument("--task", action="append", default=None, metavar="NAME", help="restrict to this task")
    parser.add_argument("--new", action="store_true", help="start a new run even if an unfinished one exists")


def workspace_of(args: argparse.Namespace):
    """The workspace a command was given (-C, DIR, else the current folder), resolved."""
    from pathlib import Path

    return Path(getattr(args, "workspace", None) or getattr(args, "dir", None) or ".").resolve()


def settings_overrides(args: argparse.Namespace) -> dict:
    """The settings the run flags override, for ``config.load_settings``; a flag the namespace
    lacks (a command without run flags) counts as not given."""
    policy, agent_spec = getattr(args, "policy", None), getattr(args, "agent", None)
    max_hours = getattr(args, "max_hours", None)
    run = {"policy": policy, "max_experiments": getattr(args, "max_experiments", None),
           "max_wall_s": max_hours * 3600 if max_hours is not None else None,
           "max_cost_usd": getattr(args, "max_cost", None), "parallel": getattr(args, "parallel", None),
           "gpus": getattr(args, "gpus", None), "backend": getattr(args, "backend", None)}
    agent = {"kind": agent_spec} if agent_spec and ":" not in agent_spec else {}
    return {"run": run, "agent": agent}


def load_run_settings(args: argparse.Namespace, workspace, defaults: dict | None = None):
    """Settings for a run on ``workspace``: files and environment, then ``defaults`` (a command's
    own, e.g. the demo's), then the flags."""
    from autokernel_tui.config import load_settings

    merged: dict = {section: dict(values) for section, values in (defaults or {}).items()}
    for section, values in settings_overrides(args).items():
        merged.setdefault(section, {}).update({k: v for k, v in values.items() if v is not None})
    return load_settings(workspace, merged)


def engine_kwargs(args: argparse.Namespace, settings) -> dict:
    """``Engine(...)`` keyword arguments from the run flags: run tag, --new, --task, and a plugin
    agent for ``--agent module:factory``."""
    import os

    from autokernel_tui.engine.backends import load_object

    spec = getattr(args, "agent", None)
    agent = load_object(spec)(settings.agent, dict(os.environ)) if spec and ":" in spec else None
    return {"tag": getattr(args, "tag", None), "new": bool(getattr(args, "new", False)),
            "tasks": getattr(args, "task", None), "agent": agent}


def run_argv(args: argparse.Namespace, skip: tuple[str, ...] = ()) -> list[str]:
    """The run flags as given, to hand on to `run --headless` (``--new`` never: the run exists by then)."""
    argv: list[str] = []
    for flag in RUN_FLAGS:
        if flag in skip:
            continue
        value = getattr(args, flag[2:].replace("-", "_"), None)
        for item in (value if isinstance(value, list) else [value]):  # --task repeats
            if item is not None:
                argv += [flag, str(item)]
    return argv


def command_line(*words) -> str:
    """A command to show the user, each word quoted for the shell where it must be."""
    import shlex

    return " ".join(shlex.quote(str(w)) for w in words)
