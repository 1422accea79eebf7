"""Command-line entry point: ``autokernel-tui [COMMAND] ...``.

Each subcommand lives in its own small module of ``autokernel_tui/commands/`` exposing
``add_arguments(parser)`` and ``main(args) -> int``. Those modules import nothing heavy at
import time, so ``--help`` is instant and the harness-only commands (bench, profile) run on
a box with just torch and triton.

A first word that is not a command opens the app on that folder (the default command).
A word that is no folder here but close to a command's name (``stauts``) is a typo: an
error naming the command, never an app on a new folder of that name.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from autokernel_tui import __version__
from autokernel_tui.errors import AutokernelError

# name -> (module, one-line help). Order is the order shown in --help.
COMMANDS: dict[str, tuple[str, str]] = {
    "tui": ("autokernel_tui.commands.app", "open the app on the workspace here (the default)"),
    "demo": ("autokernel_tui.commands.demo", "create a demo workspace and open the app on it"),
    "init": ("autokernel_tui.commands.init", "create a workspace from starters or a profile"),
    "run": ("autokernel_tui.commands.run", "run the optimization loop (--headless for no UI)"),
    "status": ("autokernel_tui.commands.status", "print the state of the run in a workspace"),
    "attach": ("autokernel_tui.commands.attach", "attach the app to a headless run"),
    "review": ("autokernel_tui.commands.review", "browse every experiment of every run"),
    "serve": ("autokernel_tui.commands.serve", "show the app in a browser (localhost, behind a random token)"),
    "profile": ("autokernel_tui.commands.profile", "profile a model and rank its ops by Amdahl's law"),
    "bench": ("autokernel_tui.commands.bench", "check and time one task's kernel.py"),
    "verify": ("autokernel_tui.commands.verify", "put kept kernels into the model and time it end to end"),
    "export": ("autokernel_tui.commands.export", "write kept kernels as a standalone package"),
    "report": ("autokernel_tui.commands.report", "write a run's morning report (one HTML or Markdown file)"),
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
        typo = mistyped_command(argv[0], known) if argv else None
        if typo:
            print(f"autokernel-tui: error: {typo}", file=sys.stderr)
            return 2
        argv = [DEFAULT_COMMAND, *argv]
    args = parser.parse_args(argv)
    try:
        return int(args._module.main(args) or 0)
    except AutokernelError as exc:
        print(f"autokernel-tui: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def mistyped_command(word: str, commands) -> str | None:
    """The error for a first word that is no folder here but looks like a command's name, else None."""
    import difflib
    import os

    if word.startswith("-") or os.sep in word or os.path.exists(word):
        return None
    close = difflib.get_close_matches(word, sorted(commands), n=2, cutoff=0.6)
    if not close:
        return None
    names = " or ".join(f"`autokernel-tui {c}`" for c in close)
    return f"{word!r} is not a command: did you mean {names}? (and there is no folder {word!r} here to open)"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
