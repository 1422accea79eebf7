"""``autokernel-tui [tui] [DIR]``: the app on a workspace, doing the obvious thing.

Live engine here -> attach. A run to resume or none yet -> run in-process.
The last run finished -> review. No workspace -> the first-run screen.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", nargs="?", default=None, help="workspace folder (default: .)")
    parser.add_argument("-C", dest="workspace", default=None, help="workspace folder (same as DIR)")
    parser.add_argument("--policy", choices=("manual", "auto", "threshold"), default=None,
                        help="approval policy for a run started here")
    parser.add_argument("--agent", choices=("auto", "claude", "openai", "tuner"), default=None,
                        help="which agent proposes kernels (auto: Claude if ANTHROPIC_API_KEY, ...)")


def workspace_of(args: argparse.Namespace):
    from pathlib import Path

    return Path(args.workspace or args.dir or ".").resolve()


def settings_of(args: argparse.Namespace, workspace):
    from autokernel_tui.config import load_settings

    return load_settings(workspace, {"run": {"policy": getattr(args, "policy", None)},
                                     "agent": {"kind": getattr(args, "agent", None)}})


def main(args: argparse.Namespace) -> int:
    from autokernel_tui.tui import engine_link, keys, launch, workspace_files

    workspace = workspace_of(args)
    settings = settings_of(args, workspace)
    keys.keymap(settings.keys)  # a typo in [keys] is a one-line error before the screen opens
    if not workspace_files.is_workspace(workspace):
        if not first_run(workspace, settings):
            return 0
    if workspace_files.engine_is_live(workspace):
        return launch.run_live(workspace, settings, engine_link.attach(workspace), attached=True)
    if engine_link.last_run_finished(workspace):
        return launch.run_review(workspace, settings)
    return launch.run_live(workspace, settings, engine_link.start_in_process(workspace, settings), attached=False)


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
    init_workspace(workspace, tasks=list(tasks))
    return True
