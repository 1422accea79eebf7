"""``autokernel-tui attach [DIR]``: watch and steer a headless run; detach (d) leaves it going.

It takes no run flags: the run it joins was started with its own."""

from __future__ import annotations

import argparse

from autokernel_tui.commands import common


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workspace_arguments(parser)


def main(args: argparse.Namespace) -> int:
    from autokernel_tui.tui import engine_link, keys, launch

    workspace = common.workspace_of(args)
    settings = common.load_run_settings(args, workspace)
    keys.keymap(settings.keys)
    return launch.run_live(workspace, settings, engine_link.attach(workspace), attached=True)
