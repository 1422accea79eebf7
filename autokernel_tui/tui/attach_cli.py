"""``autokernel-tui attach [DIR]``: watch and steer a headless run; detach (d) leaves it going."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", nargs="?", default=None, help="workspace folder (default: .)")
    parser.add_argument("-C", dest="workspace", default=None, help="workspace folder (same as DIR)")


def main(args: argparse.Namespace) -> int:
    from autokernel_tui.tui import engine_link, keys, launch
    from autokernel_tui.tui.cli import settings_of, workspace_of

    workspace = workspace_of(args)
    settings = settings_of(args, workspace)
    keys.keymap(settings.keys)
    return launch.run_live(workspace, settings, engine_link.attach(workspace), attached=True)
