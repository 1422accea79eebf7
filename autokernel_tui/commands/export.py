"""``autokernel-tui export OUT [WS]``: kept kernels as a standalone package with patch(model)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", metavar="OUT", help="package folder to create; its name is the import name")
    parser.add_argument("workspace", nargs="?", default=".", metavar="WS",
                        help="workspace whose kernels/<task>/kernel.py files (current checkout) are exported")
    parser.add_argument("-C", dest="workspace_flag", metavar="DIR", help="same as WS")
    parser.add_argument("--run", metavar="TAG", help="the run whose kept kernels to use (default: the newest run)")
    parser.add_argument("--kernels", metavar="DIR", help="a kernels folder instead of WS/kernels")
    parser.add_argument("--tasks", help="comma-separated task names (default: all)")


def main(args: argparse.Namespace) -> int:
    from pathlib import Path

    from autokernel_tui.profiling.export import export_package
    from autokernel_tui.profiling.verify import chosen_kernels

    _, where, kernels = chosen_kernels(args)
    print(f"kernels from {where}")
    out = export_package(Path(args.out), kernels, source=where)
    print(f"wrote {out}: {', '.join(sorted(kernels))}")
    print(f"use: import sys; sys.path.insert(0, '{out.resolve().parent}'); import {out.name}; {out.name}.patch(model)")
    return 0
