"""`autokernel-tui run [DIR] [--headless] ...`: run (or resume) the optimization loop.

Without ``--headless`` this hands over to the app (``tui.cli``). Headless, the
engine runs in this process, serves the control socket for `attach` and treats
SIGINT (Ctrl-C) and SIGTERM as "stop after the current experiment" (a second one:
stop now; the next `run` records the interrupted experiment). The engine's git
processes run in sessions of their own (``ledger.gitrepo.ShieldedGit``), so the
terminal's signals reach only this process, which decides what they mean.

Closing the terminal (SIGHUP) under a run in the foreground stops it after the
current experiment, cleanly: its output was that terminal, and a run left going
unseen would hold the GPU with nobody knowing. Nothing is lost and `run` resumes
it. To outlive the terminal: ``--detach`` (its own session, logging to
``.autokernel/runs/<tag>/engine.log``), tmux, or nohup; an engine with no
controlling terminal (``--detach``, the app's hand-over) or started with SIGHUP
ignored (nohup) ignores it.
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
    parser.add_argument("--parallel", type=int, default=None, metavar="K",
                        help="agent proposals in flight at once (run.parallel; 0 = auto: 1 on CPU, 4 on GPU)")
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
           "max_cost_usd": getattr(args, "max_cost", None), "parallel": getattr(args, "parallel", None)}
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
    import signal

    from autokernel_tui.config import load_settings
    from autokernel_tui.engine.loop import Engine

    ws = _workspace(args)
    settings = load_settings(ws, overrides=_overrides(args))
    hangup_stops = hangup_means_stop()
    engines: list = []  # a signal while the run opens is acted on once the engine exists
    handler = _StopOnSignal(engines)
    for signum in (signal.SIGINT, signal.SIGTERM) + ((signal.SIGHUP,) if hangup_stops else ()):
        signal.signal(signum, handler)
    if not hangup_stops:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    engine = Engine(ws, settings, **engine_kwargs(args, settings))
    engines.append(engine)
    for line in engine.repairs:  # what opening the run had to repair (also in events.jsonl)
        say(f"autokernel-tui: repaired: {line}")
    if handler.stopping:
        engine.request_stop()
    engine.subscribe(_printer())
    try:
        engine.serve_control()
        say(f"run {engine.tag} on branch {engine.repo.branch} ({'resumed' if engine.resumed else 'new'}); "
            f"control socket {engine.control.path}", fd=1)
        if hangup_stops:
            say("closing this terminal stops the run after its current experiment (--detach runs it in the "
                "background)", fd=1)
        reason = engine.run()
    finally:
        engine.close()
    say(f"run {engine.tag} finished: {reason}", fd=1)
    return 1 if reason.startswith("error") else 0


def hangup_means_stop() -> bool:
    """Whether a SIGHUP means this run's terminal closed: it has a controlling terminal and
    SIGHUP is not already ignored (nohup). With no terminal (--detach, the app's hand-over to
    a headless engine: sessions of their own) a SIGHUP is ignored, as is one under nohup."""
    import os
    import signal

    if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
        return False
    try:
        os.close(os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY))
    except OSError:  # ENXIO: no controlling terminal
        return False
    return True


class _StopOnSignal:
    """SIGINT/SIGTERM/SIGHUP: stop after the current experiment. A second SIGINT or SIGTERM stops now
    (the journal lets the next `run` record the interrupted experiment); a hang-up never does, as a
    closed terminal may send several and nobody is there to mean "now"."""

    def __init__(self, engines: list) -> None:
        self.engines = engines  # empty until the run is open
        self.stopping = False
        self.urgent = 0

    def __call__(self, signum, _frame) -> None:
        import os
        import signal

        name = signal.Signals(signum).name
        if signum != signal.SIGHUP:
            self.urgent += 1
            if self.urgent > 1:
                say(f"autokernel-tui: {name} again: stopping now (the next `run` records the interrupted experiment)")
                os._exit(130)
        if self.stopping:
            return
        self.stopping = True
        why = "the terminal closed (SIGHUP)" if signum == signal.SIGHUP else name
        say(f"autokernel-tui: {why}: stopping after the current experiment"
            + ("" if signum == signal.SIGHUP else " (again to stop now)"))
        for engine in self.engines:
            engine.request_stop()


def say(line: str, fd: int = 2) -> None:
    """One line, written at once and unbuffered (safe in a signal handler). A terminal that was
    closed cannot be written to: the line is dropped, never raised into the engine."""
    import os

    data = (line + "\n").encode("utf-8", "replace")
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        pass


def _printer():
    """One line per notable event, for the log of a headless run."""
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
        say(f"[{stamp}] {line}", fd=1)
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
