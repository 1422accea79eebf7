"""``autokernel-tui demo [DIR]``: a workspace with the rmsnorm and softmax starters, the offline tuner,
manual approval: the whole loop on any machine, no API key, no GPU.

The demo lives in the user's data folder (``$XDG_DATA_HOME/autokernel-tui/demo``, else
``~/.local/share/autokernel-tui/demo``), never in the current folder: run from a project's
checkout, it would leave an untracked folder there, and `autokernel-tui` typed there later would
start a run on that project. ``DIR`` (or ``-C`` / ``--dir``) puts it elsewhere. On the way out the
app names the command that resumes the demo: ``autokernel-tui demo -C <its folder>``.
"""

from __future__ import annotations

import argparse

from autokernel_tui.commands import common

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", nargs="?", default=None, metavar="DIR",
                        help="where the demo workspace lives (default: $XDG_DATA_HOME/autokernel-tui/demo, "
                             "else ~/.local/share/autokernel-tui/demo)")
    parser.add_argument("-C", "--dir", dest="workspace", default=None, metavar="DIR", help="same as DIR")
    common.add_run_arguments(parser)


def default_dir(env=None, home=None):
    """``$XDG_DATA_HOME/autokernel-tui/demo`` (an absolute XDG_DATA_HOME only, as the spec says),
    else ``~/.local/share/autokernel-tui/demo``."""
    import os
    from pathlib import Path

    env = os.environ if env is None else env
    data = env.get("XDG_DATA_HOME") or ""
    base = Path(data) if os.path.isabs(data) else Path(home or Path.home()) / ".local" / "share"
    return base / "autokernel-tui" / "demo"


def main(args: argparse.Namespace) -> int:
    import os
    import sys
    from pathlib import Path

    from autokernel_tui.ledger import paths
    from autokernel_tui.ledger.workspace import init_workspace
    from autokernel_tui.tui import engine_link, keys, launch, workspace_files
    from autokernel_tui.tui.demo import DEMO_TASKS, QUICK_ENV, demo_notes, demo_overrides

    given = args.workspace or args.dir
    workspace = (Path(given).expanduser() if given else default_dir()).resolve()
    if not paths.is_workspace(workspace):
        # A demo is a throwaway repository of its own, even inside a project checkout (a DIR the
        # user chose): committing demo tasks into the user's repository would be worse than nesting one.
        init_workspace(workspace, tasks=list(DEMO_TASKS), nested=True)
        print(f"demo workspace created: {workspace}", file=sys.stderr)
    defaults = demo_overrides()
    if defaults.get("harness", {}).get("quick"):
        # The quick check travels with the run when the app hands it to a headless engine (whose
        # settings come from files, the environment and flags), unless the user said otherwise.
        os.environ.setdefault(QUICK_ENV, "1")
    settings = common.load_run_settings(args, workspace, defaults=defaults)
    keys.keymap(settings.keys)
    resume = common.command_line("autokernel-tui", "demo", "-C", workspace, *common.run_argv(args))
    if workspace_files.engine_is_live(workspace):
        return launch.run_live(workspace, settings, engine_link.attach(workspace), attached=True,
                               resume_command=resume)
    # The demo's own defaults travel with the run when the app hands it to a headless engine.
    handed_on = ["--agent", args.agent or defaults["agent"]["kind"],
                 "--policy", args.policy or defaults["run"]["policy"],
                 *common.run_argv(args, skip=("--agent", "--policy"))]
    client = engine_link.start_in_process(workspace, settings, **common.engine_kwargs(args, settings))
    return launch.run_live(workspace, settings, client, attached=False, headless_args=handed_on,
                           notes=demo_notes(settings, workspace), resume_command=resume)
