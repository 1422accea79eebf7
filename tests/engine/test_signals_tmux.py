"""The newcomer's path, Ctrl-C and a closed terminal under `autokernel-tui run --headless` (issue 25).

The real command runs in tmux, on a small CPU workspace with the offline tuner. A terminal's
SIGINT and SIGHUP go to its whole foreground process group: they used to kill GitPython's git
helpers too, the next object read failed with a broken pipe, reported as "free space", and the
experiment in progress reached events.jsonl but never results.tsv. Now the engine alone hears
the signal and stops after the current experiment, which is recorded in both files; `run`
resumes and numbers on without reuse.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from autokernel_tui.engine.lock import live_pid
from autokernel_tui.ledger.events import read_events
from autokernel_tui.ledger.results import read_rows
from subproc import HERE, check_consistent

pytestmark = [pytest.mark.tmux, pytest.mark.slow, pytest.mark.timeout(900)]

TAG = "sig"


class Tmux:
    """A tmux server of the test's own (its own socket: other tmux users on the box are not touched),
    started with the test's environment, one session running one shell command."""

    def __init__(self, name: str, env: dict) -> None:
        if shutil.which("tmux") is None:
            pytest.skip("tmux is not installed: these tests drive the real command in it")
        self.dir = tempfile.mkdtemp(prefix=f"akt-{name}-")  # short: a socket path has a length limit
        self.socket = os.path.join(self.dir, "tmux.sock")
        self.env = env

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", self.socket, *args], check=True, capture_output=True, text=True,
                              env=self.env).stdout

    def start(self, ws: Path, argv: list[str]) -> None:
        # Textual and the engine's messages go to the terminal (stderr is not redirected).
        self("new-session", "-d", "-s", "run", "-x", "160", "-y", "50",
             f"cd {shlex.quote(str(ws))} && {shlex.join(argv)}; echo EXITED $?; sleep 600")

    def screen(self) -> str:
        return self("capture-pane", "-p", "-J", "-S", "-500", "-t", "run")

    def hang_up(self) -> None:
        """Close the terminal: the pty goes away, the foreground process group gets SIGHUP."""
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True, env=self.env)
        shutil.rmtree(self.dir, ignore_errors=True)


def wait(what: str, predicate, timeout_s: float, show=lambda: ""):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    pytest.fail(f"timed out waiting for {what}\n{show()}")


def events(ws: Path, tag: str = TAG) -> list[dict]:
    return read_events(ws / ".autokernel" / "runs" / tag / "events.jsonl")


def in_progress(ws: Path, n: int, tag: str = TAG) -> bool:
    """Experiment n has a proposal: its candidate is being committed or evaluated."""
    return any(e["type"] == "proposal" and e.get("n") == n for e in events(ws, tag))


def recorded_once(ws: Path, n: int, tag: str = TAG) -> None:
    """Experiment n is in results.tsv and events.jsonl, once, and nothing went wrong on the way."""
    rows = read_rows(ws / ".autokernel" / "runs" / tag / "results.tsv", typed=True)
    evs = events(ws, tag)
    # CI twice saw the engine gone with no row (a stale-pid kill from the judge, see test_zygote_sweep): the
    # run's last events say how far it got.
    tail = "\n".join(" ".join(f"{k}={e[k]}" for k in ("type", "n", "reason", "message", "state", "action")
                               if e.get(k) is not None) for e in evs[-12:])
    assert [r["experiment"] for r in rows].count(n) == 1, f"rows {rows}; the run's last events:\n{tail}"
    assert [e["row"]["experiment"] for e in evs if e["type"] == "result"].count(n) == 1
    assert [e["n"] for e in evs if e["type"] == "verdict"].count(n) == 1
    row = next(r for r in rows if r["experiment"] == n)
    assert row["status"] in ("keep", "discard") and not row["description"].startswith("interrupted"), row
    errors = [e["message"] for e in evs if e["type"] == "error"]
    assert errors == [], errors
    assert evs[-1]["type"] == "session_ended" and evs[-1]["reason"] == "stopped by request"


def clean_env(tmp_path: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AUTOKERNEL_", "ANTHROPIC", "OPENAI", "TMUX"))}
    env.update(TRITON_INTERPRET="1", XDG_CONFIG_HOME=str(tmp_path / "xdg"), PYTHONUNBUFFERED="1", **extra)
    return env


def run_argv(ws: Path, *flags: str) -> list[str]:
    return [sys.executable, "-m", "autokernel_tui", "run", "--headless", "-C", str(ws), "--agent", "tuner",
            "--policy", "auto", *flags]


def test_the_newcomer_path_loses_nothing(tmp_path):
    """Issue 25's walk, as a person types it: the demo, q and stop, the printed hint typed back
    (the demo resumes), a typo, then Ctrl-C under a headless run of the same workspace and `run`
    again: every experiment once in results.tsv and events.jsonl, numbers never reused, nothing
    written into the folder the commands were typed in."""
    import re

    # Deep on purpose (pytest's tmp path): the demo's control socket path would be too long for a
    # Unix socket beside the workspace, as it was for a user with a long XDG_DATA_HOME.
    root = tmp_path / "a-user-with-a-rather-long-home-directory-path"
    root.mkdir()
    home = root / "home"
    home.mkdir()
    cwd = root / "checkout"  # where the user typed the README's commands
    cwd.mkdir()
    env = clean_env(tmp_path, HOME=str(home), XDG_DATA_HOME=str(root / "data"))
    # The README's commands as typed: the installed `autokernel-tui` on PATH (python -m where the
    # package is not installed).
    script = Path(sys.executable).parent / "autokernel-tui"
    env["PATH"] = f"{script.parent}{os.pathsep}{env.get('PATH', '')}"
    exe = ["autokernel-tui"] if script.exists() else [sys.executable, "-m", "autokernel_tui"]
    tmux = Tmux("demo", env)
    ws = None
    try:
        # 1. The demo: the app opens on a workspace of its own, outside the checkout.
        tmux.start(cwd, exe + ["demo"])
        wait("the demo's screen", lambda: shown(tmux, "rmsnorm"), 120, tmux.screen)
        ws = (root / "data" / "autokernel-tui" / "demo").resolve()
        assert (ws / "kernels" / "rmsnorm" / "task.toml").is_file() and list(cwd.iterdir()) == []
        # 2. q asks what to do with the run; s stops it after its experiment and prints how to resume.
        tmux("send-keys", "-t", "run", "q")
        wait("the quit dialog", lambda: "Stop run (s)" in tmux.screen(), 30, tmux.screen)
        tmux("send-keys", "-t", "run", "s")
        screen = wait("the demo to stop", lambda: "EXITED" in (s := tmux.screen()) and s, 300, tmux.screen)
        assert "EXITED 0" in screen, screen
        hint = re.search(r"resume with: (autokernel-tui demo -C \S+)", screen)
        assert hint, screen
        tag = next(p.name for p in (ws / ".autokernel" / "runs").iterdir())
        first = check_consistent(ws, tag, final=True, base_ref="HEAD")
        tmux.hang_up()

        # 3. The hint, typed back verbatim, reopens the same run.
        tmux = Tmux("hint", env)
        tmux.start(cwd, exe + shlex.split(hint.group(1))[1:])
        wait("the resumed demo", lambda: shown(tmux, "rmsnorm"), 120, tmux.screen)
        tmux("send-keys", "-t", "run", "q")
        wait("the quit dialog", lambda: "Stop run (s)" in tmux.screen(), 30, tmux.screen)
        tmux("send-keys", "-t", "run", "s")
        screen = wait("the demo to stop again", lambda: "EXITED" in (s := tmux.screen()) and s, 300, tmux.screen)
        assert "EXITED 0" in screen and hint.group(1) in screen, screen
        assert [p.name for p in (ws / ".autokernel" / "runs").iterdir()] == [tag]  # the same run, resumed
        second = check_consistent(ws, tag, final=True, base_ref="HEAD")
        assert second[:len(first)] == first
        tmux.hang_up()

        # 4. A typo names the command it meant and makes nothing.
        typo = subprocess.run(exe + ["stauts"], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
        assert typo.returncode != 0 and "did you mean `autokernel-tui status`" in typo.stderr + typo.stdout
        assert list(cwd.iterdir()) == []

        # 5. Ctrl-C under a headless run of the demo's workspace: the experiment under way is recorded.
        done = len(second)
        env = dict(env, AUTOKERNEL_HARNESS_QUICK="1")  # as the demo's own runs check (a headless run reads it)
        tmux = Tmux("ctrlc", env)
        tmux.start(cwd, run_argv(ws))
        wait(f"experiment {done + 1} in progress", lambda: in_progress(ws, done + 1, tag), 300, tmux.screen)
        tmux("send-keys", "-t", "run", "C-c")
        screen = wait("the run to exit", lambda: "EXITED" in (s := tmux.screen()) and s, 480, tmux.screen)
        assert "SIGINT: stopping after the current experiment" in screen, screen
        assert "EXITED 0" in screen, screen
        assert "free space" not in screen and "Broken pipe" not in screen, screen
        recorded_once(ws, done + 1, tag)  # in both results.tsv and events.jsonl: nothing lost
        check_consistent(ws, tag, final=True, base_ref="HEAD")
        tmux.hang_up()

        # 6. `run` again resumes the same run and numbers on.
        tmux = Tmux("resume", env)
        tmux.start(cwd, run_argv(ws, "--max-experiments", str(done + 2)))
        screen = wait("the resumed run to finish", lambda: "EXITED" in (s := tmux.screen()) and s, 480, tmux.screen)
        assert f"run {tag} on branch autokernel/{tag} (resumed)" in screen, screen
        assert f"finished: experiment budget reached ({done + 2})" in screen and "EXITED 0" in screen, screen
        rows = check_consistent(ws, tag, final=True, base_ref="HEAD")
        assert [r["experiment"] for r in rows] == list(range(1, done + 3))
        started = [e["n"] for e in events(ws, tag) if e["type"] == "experiment_started"]
        assert sorted(set(started)) == started  # no number reused
        assert list(cwd.iterdir()) == []
    finally:
        tmux.hang_up()
        if ws is not None:
            _stop_engine(ws)


def shown(tmux: Tmux, text: str) -> bool:
    """``text`` is on the screen; a command that exited instead fails the test at once, with its screen."""
    screen = tmux.screen()
    if "EXITED" in screen:
        pytest.fail(f"the command exited:\n{screen}")
    return text in screen


def test_closing_the_terminal_stops_after_the_current_experiment(tmp_path):
    from autokernel_tui.ledger.workspace import init_workspace

    ws = init_workspace(tmp_path / "ws", tasks=["rmsnorm"])
    # The tuner with the fast fake harness (a few seconds per evaluation): only the git side matters here.
    env = clean_env(tmp_path, PYTHONPATH=str(HERE), AUTOKERNEL_HARNESS_FACTORY="enginefakes:make_harness",
                    AUTOKERNEL_TEST_HARNESS_DELAY="3")
    tmux = Tmux("hangup", env)
    try:
        tmux.start(ws, run_argv(ws, "--tag", TAG))
        wait("experiment 1 in progress", lambda: in_progress(ws, 1), 120, tmux.screen)
        pid = live_pid(ws)
        assert pid
        tmux.hang_up()
        # Not paused forever with nobody to resume it, not left running unseen: it stops, cleanly.
        wait("the engine to stop after its experiment", lambda: live_pid(ws) is None, 120)
        recorded_once(ws, 1)
        check_consistent(ws, TAG, final=True, base_ref="HEAD")
        resumed = subprocess.run(run_argv(ws, "--max-experiments", "2"), env=env, capture_output=True, text=True,
                                 timeout=120, stdin=subprocess.DEVNULL)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert "(resumed)" in resumed.stdout
        assert [r["experiment"] for r in check_consistent(ws, TAG, final=True, base_ref="HEAD")] == [1, 2]
    finally:
        tmux.hang_up()
        _stop_engine(ws)


def _stop_engine(ws: Path) -> None:
    """Whatever engine a failed test left behind: SIGTERM (stops after its experiment), then SIGKILL."""
    import signal

    pid = live_pid(ws)
    if not pid:
        return
    for sig, grace in ((signal.SIGTERM, 60), (signal.SIGKILL, 5)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.time() + grace
        while live_pid(ws) == pid and time.time() < deadline:
            time.sleep(0.5)
        if live_pid(ws) != pid:
            return
