"""``autokernel-tui serve [WS] [--host H] [--port P]``: the app in a browser (textual-serve), on
127.0.0.1 by default, at an address with a random token (printed); requests without it are refused."""

from __future__ import annotations

import argparse

from autokernel_tui.commands import common


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workspace_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1: this machine only; use an SSH tunnel to reach it)")
    parser.add_argument("--port", type=int, default=8765, help="port (default 8765; 0: any free port)")
    parser.add_argument("--policy", choices=common.POLICIES, default=None,
                        help="approval policy for a run a browser session starts")
    parser.add_argument("--agent", choices=("auto", "claude", "openai", "tuner"), default=None,
                        help="agent for a run a browser session starts")


def main(args: argparse.Namespace) -> int:
    import sys

    from autokernel_tui.errors import AutokernelError, WorkspaceError
    from autokernel_tui.ledger import paths

    try:
        from autokernel_tui.tui.serve import TokenServer, app_command, describe
    except ImportError as exc:  # textual-serve is a dependency; say so plainly if it is missing
        raise AutokernelError(f"serve needs textual-serve ({exc}): pip install textual-serve") from None

    workspace = common.workspace_of(args)
    if not paths.is_workspace(workspace):
        raise WorkspaceError(f"{workspace} is not a workspace; create one with `{paths.init_hint(workspace)}` "
                             "(or try `autokernel-tui demo`)")
    if not 0 <= args.port <= 65535:
        raise AutokernelError(f"--port {args.port}: a port is 0 to 65535")
    extra = [flag for name in ("policy", "agent") if getattr(args, name)
             for flag in (f"--{name}", getattr(args, name))]

    def ready(url: str) -> None:
        for line in describe(workspace, args.host, url):
            print(line, flush=True)

    server = TokenServer(app_command(workspace, extra), host=args.host, port=args.port,
                         title=f"autokernel-tui: {workspace.name}", on_ready=ready)
    try:
        server.run()
    except OSError as exc:
        raise AutokernelError(f"cannot serve on {args.host}:{args.port}: {exc.strerror or exc}") from None
    print("serve: stopped", file=sys.stderr)
    return 0
