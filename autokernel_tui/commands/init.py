"""`autokernel-tui init [DIR] --task NAME ... | --from-profile FILE [--top N]`.

With ``--from-profile`` it says which of the profile's ranked op families (and recorded calls) it
made no task for, and why (``init-skipped.json``: no starter and nothing recorded to generate
from, a dtype, no fitting shape, under the share threshold, beyond ``--top``), so ``--top 5``
making 4 tasks is never a surprise. ``--from-kernelbench FILE...``: a task per problem file.
"""

from __future__ import annotations

import argparse

from autokernel_tui.commands import common


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workspace_arguments(parser)
    parser.add_argument("--task", action="append", default=[], metavar="NAME",
                        help="copy this starter task (repeat for several); --list shows them")
    parser.add_argument("--from-profile", metavar="FILE", help="create tasks from a profile written by `profile`")
    parser.add_argument("--from-kernelbench", nargs="+", metavar="FILE", default=None,
                        help="one task per KernelBench problem file (Model, get_inputs, get_init_inputs)")
    parser.add_argument("--top", type=int, default=5, help="with --from-profile: how many top ops (default 5)")
    parser.add_argument("--calls", type=int, default=3,
                        help="with --from-profile: generated tasks per op family, its costliest distinct calls "
                             "(default 3; a conv net's layers are each a call of their own)")
    parser.add_argument("--min-share", type=float, default=None, metavar="PCT",
                        help="with --from-profile: the share of the time (percent) under which an op family gets "
                             "no generated task (default 1; a starter's family gets its task at any share)")
    parser.add_argument("--nested", action="store_true",
                        help="create the workspace as a repository of its own even inside another git checkout")
    parser.add_argument("--list", action="store_true", help="list the starter tasks and exit")


def main(args: argparse.Namespace) -> int:
    import contextlib
    from pathlib import Path

    from autokernel_tui.ledger.workspace import init_workspace
    from autokernel_tui.tasks.spec import list_starters

    if args.list:
        print("\n".join(list_starters()))
        return 0
    from autokernel_tui.profiling.extract import skipped_lines
    from autokernel_tui.progress import Progress

    target = Path(args.workspace or args.dir or ".").resolve()
    # Generated tasks' starters are compiles (minutes for a big profile): said as they end, on stderr.
    generating = bool(args.from_profile or args.from_kernelbench)
    with Progress(f"init {target.name}") if generating else contextlib.nullcontext() as progress:
        path = init_workspace(target, tasks=args.task, from_profile=args.from_profile, top=args.top,
                              nested=args.nested, from_kernelbench=args.from_kernelbench, calls=args.calls,
                              min_share=None if args.min_share is None else args.min_share / 100, progress=progress)
    print(f"workspace ready: {path}")
    print(f"tasks: {', '.join(_task_names(path))}")
    for line in skipped_lines(path):  # never a silent skip: what got no task, and why
        print(line)
    for line in _no_starter_lines(path) if generating else []:  # a generated task whose kernel.py only raises
        print(line)
    print(f"next: {common.command_line('autokernel-tui', 'run', '--headless', '-C', path)}   "
          f"(or `{common.command_line('autokernel-tui', '-C', path)}` for the app)")
    return 0


def _no_starter_lines(workspace) -> list[str]:
    from autokernel_tui.profiling.generate import no_starter_reason

    missing = [(name, no_starter_reason(workspace / "kernels" / name / "kernel.py")) for name in _task_names(workspace)]
    missing = [(name, why) for name, why in missing if why]
    if not missing:
        return []
    return [f"no starter kernel for {len(missing)} generated task(s) (kernel.py raises until an agent writes one):"] \
        + [f"  {name}: {why}" for name, why in missing]


def _task_names(workspace) -> list[str]:
    kernels = workspace / "kernels"
    return sorted(p.name for p in kernels.iterdir() if (p / "task.toml").is_file()) if kernels.is_dir() else []
