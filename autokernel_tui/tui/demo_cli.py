"""``autokernel-tui demo [DIR]``: a workspace with the rmsnorm and softmax starters, the offline tuner,
manual approval: the whole loop on any machine, no API key, no GPU."""

from __future__ import annotations

import argparse

DEFAULT_DIR = "autokernel-demo"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", nargs="?", default=DEFAULT_DIR, help=f"where to create it (default: ./{DEFAULT_DIR})")


def main(args: argparse.Namespace) -> int:
    from pathlib import Path

    from autokernel_tui.config import load_settings
    from autokernel_tui.ledger.workspace import init_workspace
    from autokernel_tui.tui import engine_link, keys, launch, workspace_files

    workspace = Path(args.dir).resolve()
    if not workspace_files.is_workspace(workspace):
        # A demo is a throwaway repository of its own, even inside a project checkout: committing
        # demo tasks into the user's repository would be worse than nesting one.
        init_workspace(workspace, tasks=["rmsnorm", "softmax"], nested=True)
    settings = load_settings(workspace, {"run": {"policy": "manual"}, "agent": {"kind": "tuner"}})
    keys.keymap(settings.keys)
    if workspace_files.engine_is_live(workspace):
        return launch.run_live(workspace, settings, engine_link.attach(workspace), attached=True)
    return launch.run_live(workspace, settings, engine_link.start_in_process(workspace, settings), attached=False)
