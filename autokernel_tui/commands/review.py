"""``autokernel-tui review [DIR]``: every experiment of every run, its diff, report and reasoning."""

from __future__ import annotations

import argparse

from autokernel_tui.commands import common


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workspace_arguments(parser)


def main(args: argparse.Namespace) -> int:
    from autokernel_tui.errors import WorkspaceError
    from autokernel_tui.ledger import paths
    from autokernel_tui.tui import engine_link, keys, launch, workspace_files

    workspace = common.workspace_of(args)
    if not paths.is_workspace(workspace):
        raise WorkspaceError(f"{workspace} is not a workspace (create one with `{paths.init_hint(workspace)}`, "
                             "or try `autokernel-tui demo`)")
    settings = common.load_run_settings(args, workspace)
    keys.keymap(settings.keys)
    # With a live engine, reverts go through it; otherwise through the engine's offline revert.
    client = engine_link.attach(workspace) if workspace_files.engine_is_live(workspace) else None
    return launch.run_review(workspace, settings, client)
