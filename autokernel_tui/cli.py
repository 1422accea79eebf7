"""Command-line entry point: ``autokernel-tui [COMMAND] ...``.

Each subcommand lives in its own small module exposing ``add_arguments(parser)``
and ``main(args) -> int``. Those modules import nothing heavy at import time, so
``--help`` is instant and the harness-only commands (bench, profile) run on a
box with just torch and triton.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from autokernel_tui import __version__
from autokernel_tui.errors import AutokernelError

# name -> (module, one-line help). Order is the order shown in --help.
COMMANDS: dict[str, tuple[str, str]] = {
    "tui": ("autokernel_tui.tui.cli", "open the app on the workspace here (the default)"),
    "demo": ("autokernel_tui.tui.demo_cli", "create a demo workspace and open the app on it"),
    "init": ("autokernel_tui.engine.init_cli", "create a workspace from starters or a profile"),
    "run": ("autokernel_tui.engine.run_cli", "run the optimization loop (--headless for no UI)"),
    "status": ("autokernel_tui.engine.status_cli", "print the state of the run in a workspace"),
    "attach": ("autokernel_tui.tui.attach_cli", "attach the app to a headless run"),
    "review": ("autokernel_tui.tui.review_cli", "browse every experiment of every run"),
    "serve": ("autokernel_tui.tui.serve_cli", "show the app in a browser (localhost, behind a random token)"),
    "profile": ("autokernel_tui.profiling.cli", "profile a model and rank its ops by Amdahl's law"),
    "bench": ("autokernel_tui.harness.cli", "check and time one task's kernel.py"),
    "verify": ("autokernel_tui.profiling.verify_cli", "put kept kernels into the model and time it end to end"),
    "export": ("autokernel_tui.profiling.export_cli", "write kept kernels as a standalone package"),
    "report": ("autokernel_tui.report.cli", "write a run's morning report (one HTML or Markdown file)"),
}
DEFAULT_COMMAND = "tui"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autokernel-tui",
        description="Profile a PyTorch model, rank its kernels by Amdahl's law, and let an agent "
        "optimize them in Triton while you watch and approve.",
    )
    parser.add_argument("--version", action="version", version=f"autokernel-tui {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            # A command whose module is missing is an unfinished capability; keep the rest usable.
            if exc.name and exc.name.startswith("autokernel_tui"):
                continue
            raise
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    known = set(parser._subparsers._group_actions[0].choices) if parser._subparsers else set()  # type: ignore[union-attr]
    if not argv or (argv[0] not in known and argv[0] not in ("-h", "--help", "--version")):
        argv = [DEFAULT_COMMAND, *argv]
    args = parser.parse_args(argv)
    try:
        return int(args._module.main(args) or 0)
    except AutokernelError as exc:
        print(f"autokernel-tui: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
