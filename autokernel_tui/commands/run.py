"""`autokernel-tui run [DIR] [--headless] ...`: run (or resume) the optimization loop.

Without ``--headless`` this hands over to the app (``commands.app``). Headless, the
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

A folder that is not a workspace is refused before anything is written there.
"""

from __future__ import annotations

import argparse

from autokernel_tui.commands import common


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workspace_arguments(parser)
    parser.add_argument("--headless", action="store_true", help="no UI; attach later with `autokernel-tui attach`")
    parser.add_argument("--detach", action="store_true", help="with --headless: run in the background")
    common.add_run_arguments(parser)


def main(args: argparse.Namespace) -> int:
    from autokernel_tui.errors import WorkspaceError

    if not args.headless:
        if args.detach:
            raise WorkspaceError("--detach needs --headless")
        try:
            from autokernel_tui.commands import app
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("autokernel_tui"):
                raise WorkspaceError("the app is not installed here; use `run --headless`") from None
            raise
        return int(app.main(args) or 0)
    ws = common.workspace_of(args)
    settings = common.load_run_settings(args, ws)  # a bad flag or setting first: one line, nothing written
    _require_workspace(ws)
    if args.detach:
        return _detach(args)
    return _headless(args, ws, settings)


def _require_workspace(ws) -> None:
    """Refuse a folder that is not a workspace before the engine takes its lock (or anything else
    is written there): `run` in the wrong folder leaves that folder as it was."""
    from autokernel_tui.errors import WorkspaceError
    from autokernel_tui.ledger import paths

    if not paths.is_workspace(ws):
        what = "does not exist" if not ws.exists() else "is not a workspace (a git repository with kernels/)"
        raise WorkspaceError(f"{ws} {what}; create one with `{paths.init_hint(ws)}`")


def _headless(args: argparse.Namespace, ws, settings) -> int:
    import signal

    from autokernel_tui.engine.loop import Engine

    hangup_stops = hangup_means_stop()
    engines: list = []  # a signal while the run opens is acted on once the engine exists
    handler = _StopOnSignal(engines)
    for signum in (signal.SIGINT, signal.SIGTERM) + ((signal.SIGHUP,) if hangup_stops else ()):
        signal.signal(signum, handler)
    if not hangup_stops:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    engine = Engine(ws, settings, **common.engine_kwargs(args, settings))
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
    import subprocess
    import sys
    import time

    from autokernel_tui.engine.client import socket_path
    from autokernel_tui.engine.lock import live_pid
    from autokernel_tui.engine.runrecord import new_tag, unfinished_run
    from autokernel_tui.ledger import paths

    ws = common.workspace_of(args)
    pid = live_pid(ws)
    if pid:
        from autokernel_tui.errors import WorkspaceError

        raise WorkspaceError(f"another engine (pid {pid}) is running on this workspace")
    tag = args.tag or (None if args.new else unfinished_run(ws)) or new_tag()
    log_path = paths.engine_log_path(ws, tag)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "autokernel_tui", "run", "--headless", "-C", str(ws), "--tag", tag,
            *common.run_argv(args, skip=("--tag",))]
    if args.new:
        argv.append("--new")
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
    print(f"attach: {common.command_line('autokernel-tui', 'attach', ws)}    stop: kill {proc.pid}")
    return 0
