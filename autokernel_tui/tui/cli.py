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
    """Settings with the command line's overrides, read exactly as `run --headless` reads them."""
    from autokernel_tui.config import load_settings
    from autokernel_tui.engine.run_cli import settings_overrides

    return load_settings(workspace, settings_overrides(args))


def engine_options(args: argparse.Namespace, settings) -> dict:
    """Engine keyword arguments (--tag, --new, --task, a module:factory agent), as `run --headless` has them."""
    from autokernel_tui.engine.run_cli import engine_kwargs

    return engine_kwargs(args, settings)


def explicit_run(args: argparse.Namespace) -> bool:
    """Came through `autokernel-tui run` (without --headless): start or resume a run, never review."""
    return hasattr(args, "headless")


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
    if not explicit_run(args) and engine_link.last_run_finished(workspace):
        return launch.run_review(workspace, settings)
    client = engine_link.start_in_process(workspace, settings, **engine_options(args, settings))
    return launch.run_live(workspace, settings, client, attached=False, headless_args=headless_argv(args))


def headless_argv(args: argparse.Namespace) -> list[str]:
    """The `run` flags to hand on when the run continues headless after the app quits."""
    from autokernel_tui.engine.run_cli import ENV_FLAGS

    argv: list[str] = []
    for flag in ENV_FLAGS:
        value = getattr(args, flag[2:].replace("-", "_"), None)
        for item in (value if isinstance(value, list) else [value]):  # --task repeats
            if item is not None:
                argv += [flag, str(item)]
    return argv


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
