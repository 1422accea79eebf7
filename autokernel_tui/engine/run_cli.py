"""`autokernel-tui run [DIR] [--headless] ...`: run (or resume) the optimization loop.

Without ``--headless`` this hands over to the app (``tui.cli``). Headless, the
engine runs in this process, serves the control socket for `attach`, ignores
SIGHUP (closing the SSH session does not stop it) and treats SIGTERM/SIGINT as
"stop after the current experiment". ``--detach`` starts it in its own session
in the background, logging to ``.autokernel/runs/<tag>/engine.log``.
"""

from __future__ import annotations

import argparse

ENV_FLAGS = ("--agent", "--policy", "--max-experiments", "--max-hours", "--max-cost", "--tag", "--task")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", nargs="?", default=None, help="workspace folder (default: .)")
    parser.add_argument("-C", dest="workspace", default=None, help="workspace folder (same as DIR)")
    parser.add_argument("--headless", action="store_true", help="no UI; attach later with `autokernel-tui attach`")
    parser.add_argument("--detach", action="store_true", help="with --headless: run in the background")
    parser.add_argument("--agent", default=None,
                        help="claude | openai | tuner | auto, or module:factory for a plugin agent")
    parser.add_argument("--policy", choices=("manual", "auto", "threshold"), default=None)
    parser.add_argument("--max-experiments", type=int, default=None, metavar="N")
    parser.add_argument("--max-hours", type=float, default=None, metavar="H")
    parser.add_argument("--max-cost", type=float, default=None, metavar="USD")
    parser.add_argument("--tag", default=None, help="run name (branch autokernel/<tag>); default: a timestamp")
    parser.add_argument("--task", action="append", default=None, metavar="NAME", help="restrict to this task")
    parser.add_argument("--new", action="store_true", help="start a new run even if an unfinished one exists")


def _workspace(args: argparse.Namespace):
    from pathlib import Path

    return Path(args.workspace or args.directory or ".").resolve()


def _overrides(args: argparse.Namespace) -> dict:
    return settings_overrides(args)


def settings_overrides(args: argparse.Namespace) -> dict:
    """The settings `run`'s flags override, for load_settings. Shared with the app's in-process
    run (tui.cli); flags a namespace lacks count as not given."""
    policy, agent_spec = getattr(args, "policy", None), getattr(args, "agent", None)
    max_hours = getattr(args, "max_hours", None)
    run = {"policy": policy, "max_experiments": getattr(args, "max_experiments", None),
           "max_wall_s": max_hours * 3600 if max_hours is not None else None,
           "max_cost_usd": getattr(args, "max_cost", None)}
    agent = {"kind": agent_spec} if agent_spec and ":" not in agent_spec else {}
    return {"run": run, "agent": agent}


def engine_kwargs(args: argparse.Namespace, settings) -> dict:
    """Engine(...) keyword arguments from `run`'s flags: run tag, --new, --task, and a plugin
    agent for ``--agent module:factory``. Shared with the app's in-process run (tui.cli)."""
    import os

    from autokernel_tui.engine.loop import _load_object

    spec = getattr(args, "agent", None)
    agent = _load_object(spec)(settings.agent, dict(os.environ)) if spec and ":" in spec else None
    return {"tag": getattr(args, "tag", None), "new": bool(getattr(args, "new", False)),
            "tasks": getattr(args, "task", None), "agent": agent}


def main(args: argparse.Namespace) -> int:
    from autokernel_tui.errors import WorkspaceError

    if not args.headless:
        if args.detach:
            raise WorkspaceError("--detach needs --headless")
        try:
            from autokernel_tui.tui import cli as tui_cli
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("autokernel_tui"):
                raise WorkspaceError("the app is not installed here; use `run --headless`") from None
            raise
        args.dir = args.directory  # the app's own flag name for the positional folder
        return int(tui_cli.main(args) or 0)
    if args.detach:
        return _detach(args)
    return _headless(args)


def _headless(args: argparse.Namespace) -> int:
    import os
    import signal
    import sys

    from autokernel_tui.config import load_settings
    from autokernel_tui.engine.loop import Engine

    ws = _workspace(args)
    settings = load_settings(ws, overrides=_overrides(args))
    engine = Engine(ws, settings, **engine_kwargs(args, settings))
    for line in engine.repairs:  # what opening the run had to repair (also in events.jsonl)
        print(f"autokernel-tui: repaired: {line}", file=sys.stderr, flush=True)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # closing the SSH session must not stop the night

    stopping = []

    def stop(signum, _frame):
        name = signal.Signals(signum).name
        if stopping:  # a second signal: leave now; the journal lets the next `run` finish the experiment
            print(f"autokernel-tui: {name} again: stopping now (the next `run` records the interrupted experiment)",
                  file=sys.stderr, flush=True)
            os._exit(130)
        stopping.append(signum)
        print(f"autokernel-tui: {name}: stopping after the current experiment (again to stop now)",
              file=sys.stderr, flush=True)
        engine.request_stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    engine.subscribe(_printer())
    try:
        engine.serve_control()
        print(f"run {engine.tag} on branch {engine.repo.branch} ({'resumed' if engine.resumed else 'new'}); "
              f"control socket {engine.control.path}", flush=True)
        reason = engine.run()
    finally:
        engine.close()
    print(f"run {engine.tag} finished: {reason}", flush=True)
    return 1 if reason.startswith("error") else 0


def _printer():
    """One line per notable event, for the log of a headless run."""
    import sys
    import time

    def show(ev: dict) -> None:
        kind = ev.get("type")
        stamp = time.strftime("%H:%M:%S", time.localtime(ev.get("t", time.time())))
        if kind == "result":
            r = ev["row"]
            sp = r.get("speedup_vs_incumbent")
            line = (f"exp {r['experiment']:>3} {r['task']:<14} {r['status']:<8} "
                    f"{(f'{sp:.3f}x' if sp else '-'):>8}  {r['description']}")
        elif kind in ("task_selected",):
            line = f"task {ev['task']}: {ev['reason']}"
        elif kind in ("error", "run_finished", "session_ended", "state", "awaiting_approval", "decision"):
            line = f"{kind}: " + ", ".join(f"{k}={v}" for k, v in ev.items()
                                           if k in ("message", "reason", "state", "n", "action", "by"))
        else:
            return
        print(f"[{stamp}] {line}", file=sys.stdout, flush=True)
    return show


def _detach(args: argparse.Namespace) -> int:
    import os
    import subprocess
    import sys
    import time

    from autokernel_tui.engine.client import socket_path
    from autokernel_tui.engine.lock import live_pid
    from autokernel_tui.engine.loop import new_tag, unfinished_run

    ws = _workspace(args)
    pid = live_pid(ws)
    if pid:
        from autokernel_tui.errors import WorkspaceError

        raise WorkspaceError(f"another engine (pid {pid}) is running on this workspace")
    tag = args.tag or (None if args.new else unfinished_run(ws)) or new_tag()
    log_dir = ws / ".autokernel" / "runs" / tag
    log_dir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "autokernel_tui", "run", "--headless", "-C", str(ws), "--tag", tag]
    for flag in ENV_FLAGS[:-2]:
        value = getattr(args, flag[2:].replace("-", "_"))
        if value is not None:
            argv += [flag, str(value)]
    for t in args.task or []:
        argv += ["--task", t]
    if args.new:
        argv.append("--new")
    log_path = log_dir / "engine.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                                cwd=str(ws))
    for _ in range(600):  # wait until it serves the control socket, or died
        if proc.poll() is not None:
            print(f"the engine exited at once (code {proc.returncode}); see {log_path}", file=sys.stderr)
            return 1
        if socket_path(ws).exists() and live_pid(ws) == proc.pid:
            break
        time.sleep(0.1)
    print(f"engine running in the background: pid {proc.pid}, run {tag}, log {log_path}")
    print(f"attach: autokernel-tui attach {ws}    stop: kill {proc.pid}")
    return 0
