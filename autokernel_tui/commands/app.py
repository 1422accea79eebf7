"""``autokernel-tui [tui] [DIR]``: the app on a workspace, doing the obvious thing (the default command).

Live engine here -> attach. A run to resume or none yet -> run in-process.
The last run finished -> review. A folder with no workspace -> the first-run screen,
which offers to create one there. A folder that does not exist is an error: the app
never creates a folder it was given (``autokernel-tui stauts`` must not make ``./stauts``).
"""

from __future__ import annotations

import argparse

from autokernel_tui.commands import common


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workspace_arguments(parser)
    common.add_run_arguments(parser)


def explicit_run(args: argparse.Namespace) -> bool:
    """Came through `autokernel-tui run` (without --headless): start or resume a run, never review."""
    return hasattr(args, "headless")


def main(args: argparse.Namespace) -> int:
    from autokernel_tui.errors import WorkspaceError
    from autokernel_tui.ledger import paths
    from autokernel_tui.tui import engine_link, keys, launch, workspace_files

    workspace = common.workspace_of(args)
    if not workspace.is_dir():
        what = "is not a folder" if workspace.exists() else "does not exist"
        raise WorkspaceError(f"{workspace} {what}; to create a workspace there: `{paths.init_hint(workspace)}` "
                             "(or make the folder first and run autokernel-tui in it)")
    settings = common.load_run_settings(args, workspace)
    keys.keymap(settings.keys)  # a typo in [keys] is a one-line error before the screen opens
    if not paths.is_workspace(workspace):
        if not first_run(workspace, settings):
            return 0
    if workspace_files.engine_is_live(workspace):
        return launch.run_live(workspace, settings, engine_link.attach(workspace), attached=True)
    if not explicit_run(args) and engine_link.last_run_finished(workspace):
        return launch.run_review(workspace, settings)
    client = engine_link.start_in_process(workspace, settings, **common.engine_kwargs(args, settings))
    handed_on = common.run_argv(args)
    return launch.run_live(workspace, settings, client, attached=False, headless_args=handed_on,
                           resume_command=common.command_line("autokernel-tui", "-C", workspace, *handed_on))


def first_run(workspace, settings) -> bool:
    """Offer to create a workspace; True once one exists."""
    from autokernel_tui.ledger.workspace import init_workspace
    from autokernel_tui.tasks.spec import list_starters
    from autokernel_tui.tui.app import FIRST_RUN, AutokernelApp
    from autokernel_tui.tui.environment import agent_label

    info = {"starters": list_starters(), "agent": agent_label(settings.agent)}
    tasks = AutokernelApp(workspace, mode=FIRST_RUN, user_keys=settings.keys, first_run_info=info).run()
    if not tasks:
        return False
    if isinstance(tasks, dict):
        return tasks_from_model(workspace, tasks["profile"])
    init_workspace(workspace, tasks=list(tasks))
    return True


def tasks_from_model(workspace, model: str, top: int = 5) -> bool:
    """``profile MODEL`` then ``init --from-profile``, each in a process of its own (this one shows the
    app and never loads torch), their output on the terminal; True once the workspace exists."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from autokernel_tui.ledger import paths

    with tempfile.TemporaryDirectory(prefix="autokernel-profile-") as tmp:
        profile = Path(tmp) / "profile.json"
        steps = [["profile", model, "--json", str(profile)],
                 ["init", str(workspace), "--from-profile", str(profile), "--top", str(top)]]
        for argv in steps:
            print(f"$ autokernel-tui {' '.join(argv)}", file=sys.stderr, flush=True)
            done = subprocess.run([sys.executable, "-m", "autokernel_tui", *argv], stdin=subprocess.DEVNULL)
            if done.returncode != 0:
                print(f"autokernel-tui: `autokernel-tui {argv[0]}` failed (exit {done.returncode}); nothing "
                      "was started. Fix the model or pick starters: run autokernel-tui here again.",
                      file=sys.stderr)
                return False
    return paths.is_workspace(workspace)
