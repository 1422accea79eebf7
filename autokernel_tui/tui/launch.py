"""Run the app and carry out what the user chose on the way out (stop, headless, detach, hang-up)."""

from __future__ import annotations

import sys
from pathlib import Path

from autokernel_tui.tui import engine_link


def run_live(workspace: Path, settings, client, attached: bool, headless_args: list[str] | tuple = (),
             notes: list[str] | tuple = (), resume_command: str | None = None) -> int:
    """``notes``: said once when the screen opens (the demo says what it runs). An in-process run's
    harness settings are this process's, so the header can say when the harness runs in quick mode.
    ``resume_command``: what the exit hint tells the user to type to resume a stopped run (the
    demo's is ``autokernel-tui demo -C <its folder>``); by default the app on this workspace."""
    from autokernel_tui.tui.app import AutokernelApp
    from autokernel_tui.tui.screens.quit_screen import DETACH, HANGUP, HEADLESS, STOP

    app = AutokernelApp(workspace, client=client, attached=attached, user_keys=settings.keys, notes=list(notes),
                        harness_quick=None if attached else bool(settings.harness.quick))
    try:
        choice = app.run()
    except OSError:  # the terminal went away while drawing: treat it as a hang-up
        choice = HANGUP
    if choice == HANGUP:
        # The SSH session died: keep the night's run going rather than losing it.
        choice = DETACH if attached else HEADLESS
    if choice == STOP:
        _say("stopping: the experiment under way finishes and is recorded first (on the CPU that can take minutes)…")
        engine_link.stop_and_close(client)
        _say(f"run stopped after its current experiment; resume with: {resume_command or _app_on(workspace)}")
    elif choice == HEADLESS:
        _say("handing over: the experiment under way finishes here first, then the run continues headless…")
        engine_link.stop_and_close(client)
        pid = engine_link.spawn_headless(workspace, extra_args=headless_args)
        _say(f"run continues headless (pid {pid}); watch it with: autokernel-tui attach {workspace}")
    elif attached or choice == DETACH:
        client.close()
        _say(f"detached; the run goes on. Attach again with: autokernel-tui attach {workspace}")
    else:  # the app ended without a choice (run finished, or quit with nothing running)
        engine_link.stop_and_close(client)
    return 0


def run_review(workspace: Path, settings, client=None) -> int:
    from autokernel_tui.tui.app import REVIEW, AutokernelApp

    AutokernelApp(workspace, mode=REVIEW, client=client, user_keys=settings.keys).run()
    if client is not None:
        client.close()
    return 0


def _app_on(workspace: Path) -> str:
    import shlex

    return f"autokernel-tui -C {shlex.quote(str(workspace))}"


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr)
    except OSError:  # no terminal left to say it on
        pass
