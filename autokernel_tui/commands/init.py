"""`autokernel-tui init [DIR] --task NAME ... | --from-profile FILE [--top N]`.

With ``--from-profile`` it says which of the profile's top-ranked op families it made no task
for, and why (no starter task for the op, a dtype the starter does not support, no shape that
fits the starter), so ``--top 5`` making 4 tasks is never a surprise.
"""

from __future__ import annotations

import argparse

from autokernel_tui.commands import common


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workspace_arguments(parser)
    parser.add_argument("--task", action="append", default=[], metavar="NAME",
                        help="copy this starter task (repeat for several); --list shows them")
    parser.add_argument("--from-profile", metavar="FILE", help="create tasks from a profile written by `profile`")
    parser.add_argument("--top", type=int, default=5, help="with --from-profile: how many top ops (default 5)")
    parser.add_argument("--nested", action="store_true",
                        help="create the workspace as a repository of its own even inside another git checkout")
    parser.add_argument("--list", action="store_true", help="list the starter tasks and exit")


def main(args: argparse.Namespace) -> int:
    from pathlib import Path

    from autokernel_tui.ledger.workspace import init_workspace
    from autokernel_tui.tasks.spec import list_starters

    if args.list:
        print("\n".join(list_starters()))
        return 0
    skipped: list[dict] = []
    target = Path(args.workspace or args.dir or ".").resolve()
    before = _task_names(target)
    path = init_workspace(target, tasks=args.task, from_profile=args.from_profile,
                          top=args.top, nested=args.nested, skipped=skipped)
    tasks = _task_names(path)
    print(f"workspace ready: {path}")
    print(f"tasks: {', '.join(tasks)}")
    if args.from_profile:
        made = len(set(tasks) - set(before) - set(args.task))
        if skipped:
            print(f"from the profile: {made} task{'s' * (made != 1)} of the top {args.top} asked for; "
                  "op families passed over:")
            for item in skipped:
                print(f"  skipped {item['family']} (rank {item['rank']}): {item['reason']}")
        elif made < args.top:
            print(f"from the profile: {made} task{'s' * (made != 1)} of the top {args.top} asked for "
                  "(the profile ranks no more op families)")
    print(f"next: {common.command_line('autokernel-tui', 'run', '--headless', '-C', path)}   "
          f"(or `{common.command_line('autokernel-tui', '-C', path)}` for the app)")
    return 0


def _task_names(workspace) -> list[str]:
    kernels = workspace / "kernels"
    return sorted(p.name for p in kernels.iterdir() if (p / "task.toml").is_file()) if kernels.is_dir() else []
