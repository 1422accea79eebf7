"""`autokernel-tui init [DIR] --task NAME ... | --from-profile FILE [--top N]`."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", nargs="?", default=None, help="workspace folder (default: .)")
    parser.add_argument("-C", dest="workspace", default=None, help="workspace folder (same as DIR)")
    parser.add_argument("--task", action="append", default=[], metavar="NAME",
                        help="copy this starter task (repeat for several); --list shows them")
    parser.add_argument("--from-profile", metavar="FILE", help="create tasks from a profile written by `profile`")
    parser.add_argument("--from-kernelbench", nargs="+", metavar="FILE", default=None,
                        help="one task per KernelBench problem file (Model, get_inputs, get_init_inputs)")
    parser.add_argument("--top", type=int, default=5, help="with --from-profile: how many top ops (default 5)")
    parser.add_argument("--nested", action="store_true",
                        help="create the workspace as a repository of its own even inside another git checkout")
    parser.add_argument("--list", action="store_true", help="list the starter tasks and exit")


def main(args: argparse.Namespace) -> int:
    from autokernel_tui.ledger.workspace import init_workspace
    from autokernel_tui.tasks.spec import list_starters

    if args.list:
        print("\n".join(list_starters()))
        return 0
    path = init_workspace(args.workspace or args.directory or ".", tasks=args.task,
                          from_profile=args.from_profile, top=args.top, nested=args.nested,
                          from_kernelbench=args.from_kernelbench)
    tasks = sorted(p.name for p in (path / "kernels").iterdir() if (p / "task.toml").is_file())
    print(f"workspace ready: {path}")
    print(f"tasks: {', '.join(tasks)}")
    from autokernel_tui.tasks.extract import skipped_lines

    for line in skipped_lines(path):  # never a silent skip: what got no task, and why
        print(line)
    print(f"next: autokernel-tui run --headless -C {path}   (or `autokernel-tui` for the app)")
    return 0
