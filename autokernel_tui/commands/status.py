"""`autokernel-tui status [DIR] [--json]`: the state of the run in a workspace.

Asks the live engine over the control socket when there is one; otherwise
reads the newest run from disk (results.tsv), so it works after a crash too.
"""

from __future__ import annotations

import argparse

from autokernel_tui.commands import common


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_workspace_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


def main(args: argparse.Namespace) -> int:
    import json
    from collections import Counter

    from autokernel_tui.engine.client import SocketClient, socket_path
    from autokernel_tui.engine.lock import live_pid
    from autokernel_tui.errors import WorkspaceError
    from autokernel_tui.ledger import paths
    from autokernel_tui.ledger.history import load_runs

    ws = common.workspace_of(args)
    pid = live_pid(ws)
    # Every command suggested here works as typed, from any folder.
    resume = common.command_line("autokernel-tui", "run", "--headless", "-C", ws)
    out: dict = {"workspace": str(ws), "live": False}
    if pid and socket_path(ws).exists():
        client = SocketClient(ws, timeout_s=5)
        try:
            snap = client.snapshot()
        finally:
            client.close()
        out.update(live=True, pid=pid, **{k: snap.get(k) for k in
                                          ("run", "state", "policy", "experiment", "task", "best", "tokens",
                                           "cost_usd", "pending", "experiments")})
    if not out["live"] and not paths.is_workspace(ws):
        raise WorkspaceError(f"{ws} is not a workspace; create one with `{paths.init_hint(ws)}` "
                             "(or try `autokernel-tui demo`)")
    runs = load_runs(ws)
    if not runs and not out["live"]:
        raise WorkspaceError(f"{ws}: no run yet (start one with `{resume}`)")
    if runs:
        run = next((r for r in runs if r.tag == out.get("run")), runs[-1])
        out.setdefault("run", run.tag)
        out["finished"] = bool(run.meta.get("finished"))
        out["statuses"] = dict(Counter(e.status for e in run.experiments))
        out["recent"] = [e.row() for e in run.experiments[-5:]]
        if not out["live"]:
            out["state"] = "finished" if out["finished"] else f"stopped (resume with `{resume}`)"
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    print(f"workspace {ws}")
    print(f"run {out.get('run')}: {out.get('state')}" + (f" (engine pid {pid})" if out["live"] else ""))
    if out["live"]:
        print(f"policy {out['policy']}; task {out.get('task') or '-'}; experiment {out.get('experiment') or '-'}; "
              f"tokens {out.get('tokens', 0)}; cost ${out.get('cost_usd', 0):.2f}")
        if out.get("pending"):
            print(f"awaiting approval: experiment {out['pending']['n']} ({out['pending']['task']})")
    if out.get("statuses"):
        print("experiments: " + ", ".join(f"{k} {v}" for k, v in sorted(out["statuses"].items())))
    for r in out.get("recent", []):
        sp = r.get("speedup_vs_incumbent")
        print(f"  exp {r['experiment']:>3} {r['task']:<14} {r['status']:<8} "
              f"{(f'{sp:.3f}x' if sp else '-'):>8}  {r['description']}")
    return 0
