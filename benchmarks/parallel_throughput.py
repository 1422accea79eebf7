"""Experiments per hour with K proposals in flight (issue 22): the real engine, ledger and harness.

The agent is the offline tuner made as slow as a language model (``--latency`` seconds before each
proposal, as a Claude call takes tens of seconds); everything else is what a run uses: the engine's
loop, git, results.tsv and the sandboxed harness (on the CPU: the Triton interpreter, quick mode).
For each K it runs ``--experiments`` experiments in a fresh workspace under the auto policy and
reports experiments per hour, the harness's busy fraction (the time spent judging over the wall
time) and the ledger's invariants (one row, one commit, one number each, numbered in order).

    python benchmarks/parallel_throughput.py --latency 5 --experiments 12 --k 1,4 [--json OUT]

Judging is serial (one harness): once proposals arrive faster than one is judged, the harness is the
bottleneck and K stops helping; the busy fraction says when that is.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: the repository's packages before any installed copy
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class SlowTuner:
    """The offline tuner behind a fixed latency (the stand-in for an LLM's answer time)."""

    def __init__(self, latency_s: float) -> None:
        from autokernel_tui.agents.tuner import TunerAgent

        self.tuner, self.latency_s = TunerAgent(), latency_s
        self.name = "tuner"

    def propose(self, ctx, emit):
        time.sleep(self.latency_s)
        return self.tuner.propose(ctx, emit)

    def close(self) -> None:
        self.tuner.close() if hasattr(self.tuner, "close") else None


class TimedHarness:
    """The real harness, with the seconds it spent judging counted (its busy time)."""

    def __init__(self, harness) -> None:
        self.harness, self.busy_s = harness, 0.0

    def __getattr__(self, name):
        attr = getattr(self.harness, name)
        if name not in ("evaluate", "compare"):
            return attr

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                self.busy_s += time.perf_counter() - t0
        return timed


def one_run(k: int, n: int, latency_s: float, tasks: list[str]) -> dict:
    from autokernel_tui.config import Settings
    from autokernel_tui.engine.loop import Engine
    from autokernel_tui.harness.runner import Harness
    from autokernel_tui.ledger.results import read_rows
    from autokernel_tui.ledger.workspace import init_workspace

    with tempfile.TemporaryDirectory(prefix="akt-throughput-") as tmp:
        ws = init_workspace(Path(tmp) / "ws", tasks=tasks)
        settings = Settings()
        settings.run.policy, settings.run.parallel, settings.run.max_experiments = "auto", k, n
        settings.harness.quick = True
        harness = TimedHarness(Harness(timeout_s=300, device="cpu"))
        engine = Engine(ws, settings, tag=f"k{k}", new=True, agent=SlowTuner(latency_s), harness=harness)
        try:
            t0 = time.perf_counter()
            reason = engine.run()
            wall = time.perf_counter() - t0
            rows = read_rows(engine.run_dir / "results.tsv", typed=True)
        finally:
            engine.close()
            harness.harness.close()
    numbers = [r["experiment"] for r in rows]
    return {"k": k, "experiments": len(rows), "wall_s": round(wall, 1), "per_hour": round(3600 * len(rows) / wall),
            "harness_busy": round(harness.busy_s / wall, 3), "ended": reason,
            "numbered_in_order": numbers == list(range(1, len(rows) + 1)),
            "statuses": {s: sum(1 for r in rows if r["status"] == s) for s in sorted({r["status"] for r in rows})}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--latency", type=float, default=5.0, help="seconds the agent takes per proposal")
    ap.add_argument("--experiments", type=int, default=12)
    ap.add_argument("--k", default="1,4", help="comma-separated values of run.parallel")
    ap.add_argument("--tasks", default="rmsnorm,softmax")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    results = []
    for k in [int(x) for x in args.k.split(",")]:
        results.append(one_run(k, args.experiments, args.latency, args.tasks.split(",")))
        r = results[-1]
        print(f"K={r['k']}: {r['experiments']} experiments in {r['wall_s']} s = {r['per_hour']}/h, harness busy "
              f"{r['harness_busy']:.0%}, numbered in order: {r['numbered_in_order']}, {r['statuses']}", flush=True)
    base = results[0]["per_hour"]
    print("\n  K  exp/h   vs K=1  harness busy")
    for r in results:
        print(f"{r['k']:>3} {r['per_hour']:>6} {r['per_hour'] / base:>7.2f}x {r['harness_busy']:>12.0%}")
    if args.json:
        args.json.write_text(json.dumps({"latency_s": args.latency, "runs": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
