"""``autokernel-tui review [DIR]``: every experiment of every run, its diff, report and reasoning."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", nargs="?", default=None, help="workspace folder (default: .)")
    parser.add_argument("-C", dest="workspace", default=None, help="workspace folder (same as DIR)")


def main(args: argparse.Namespace) -> int:
    from autokernel_tui.errors import WorkspaceError
    from autokernel_tui.tui import engine_link, keys, launch, workspace_files
    from autokernel_tui.tui.cli import settings_of, workspace_of

    workspace = workspace_of(args)
    if not workspace_files.is_workspace(workspace):
        raise WorkspaceError(f"{workspace} is not a workspace (create one with: autokernel-tui init or autokernel-tui demo)")
    settings = settings_of(args, workspace)
    keys.keymap(settings.keys)
    # With a live engine, reverts go through it; otherwise through the engine's offline revert.
    client = engine_link.attach(workspace) if workspace_files.engine_is_live(workspace) else None
    return launch.run_review(workspace, settings, client)
