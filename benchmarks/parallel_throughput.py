"""Experiments per hour with K proposals in flight (issue 22): the real engine, ledger and harness pool.

The agent is the offline tuner made as slow as a language model (``--latency`` seconds before each
proposal, as a Claude call takes tens of seconds); everything else is what a run uses: the engine's
loop, git, results.tsv and the harness pool ``run`` builds (``engine.backends.make_harness``: on
the CPU, ``min(K, harness.cpu_workers)`` sandboxed interpreter harnesses, quick mode). For each K it
runs ``--experiments`` experiments in a fresh workspace under the auto policy and reports
experiments per hour, the pool's busy fraction (member-seconds spent judging over wall time x
members) and the ledger's invariants (one row, one commit, one number each, numbered in order).

    python benchmarks/parallel_throughput.py --latency 5 --experiments 12 --k 1,4 [--json OUT]

``--agent claude-fake``: the real Claude agent (the anthropic SDK, streaming) against the fake
Messages server of the tests (``tests/fakes/anthropic_server.py``) on 127.0.0.1, which answers each
request after ``--latency`` seconds with the offline tuner's proposal for that context (issue 22's
H200 case: a fake agent of 30 s latency). ``--agent aa``: the same fake server answering with the
incumbent kernel itself (a comment changed): every keep is a false keep (A/A).

    python benchmarks/parallel_throughput.py --agent claude-fake --latency 30 --k 1,4,8 --experiments 3,8,12

``--fake-judge S --members M``: issue 22's CPU done-when case with the engine tests' scripted agent
and a pool of M fake harnesses whose evaluation takes S seconds of waiting (standing for a GPU's
warm evaluation, which leaves the CPU free); the engine, git and ledger are the real ones.

    python benchmarks/parallel_throughput.py --latency 5 --fake-judge 2 --members 4 --k 1,4
"""

from __future__ import annotations

import argparse
import itertools
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
    """One member of the pool, with the seconds it spent judging counted (its busy time)."""

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


class FakeLLM:
    """The real Claude agent against a fake Messages server that answers after ``latency_s`` seconds.

    What the fake model answers: the offline tuner's proposal for the same context (``aa``: the
    incumbent with one comment changed). Each call gets a server of its own (K calls run at once)."""

    def __init__(self, latency_s: float, aa: bool = False) -> None:
        from autokernel_tui.agents.tuner import TunerAgent

        self.tuner, self.latency_s, self.aa = TunerAgent(), latency_s, aa
        self.name = "claude (fake server)"
        self._numbers = itertools.count(1)  # K threads ask at once: next() hands each its own number

    def _answer(self, ctx) -> dict:
        if self.aa:
            n = next(self._numbers)
            return {"source": f"{ctx.incumbent_source.rstrip()}\n# a/a {n}\n",
                    "description": f"A/A {n}: the incumbent again", "hypothesis": "none: a false keep if kept"}
        p = self.tuner.propose(ctx, lambda ev: None)
        return {"source": p.source, "description": p.description, "hypothesis": "the tuner's next configuration"}

    def propose(self, ctx, emit):
        from autokernel_tui.agents.claude import ClaudeAgent
        from autokernel_tui.config import AgentSettings
        from tests.fakes.anthropic_server import FakeAnthropicServer, message_stream

        answer = self._answer(ctx)
        with FakeAnthropicServer(delay_s=self.latency_s) as server:
            server.queue(message_stream(thinking=["Looking at the incumbent's numbers."], text=["Submitting."],
                                        tool_input=answer))
            return ClaudeAgent(AgentSettings(), api_key="fake-key-not-a-secret", base_url=server.url).propose(ctx, emit)

    def close(self) -> None:
        pass


def fakes():
    """The engine tests' scripted agent and fake harness (tests/engine/enginefakes.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "engine"))
    import enginefakes

    return enginefakes


SCRIPT = [90, 95, 80, 85, 70, 75, 60, 65, 55, 58, 50, 52]


def one_run(k: int, n: int, latency_s: float, tasks: list[str], fake_judge: float | None, members: int,
            agent_kind: str = "tuner", max_wall_s: float = 0.0) -> dict:
    from autokernel_tui.config import Settings
    from autokernel_tui.engine.backends import make_harness
    from autokernel_tui.engine.loop import Engine
    from autokernel_tui.harness.pool import HarnessPool
    from autokernel_tui.ledger.results import read_rows
    from autokernel_tui.ledger.workspace import init_workspace

    with tempfile.TemporaryDirectory(prefix="akt-throughput-") as tmp:
        ws = init_workspace(Path(tmp) / "ws", tasks=tasks)
        settings = Settings()
        settings.run.policy, settings.run.parallel, settings.run.max_experiments = "auto", k, n
        settings.run.max_wall_s = max_wall_s  # a device call's limit: the run ends in time and is reported
        settings.harness.quick, settings.harness.timeout_s = True, 300
        if fake_judge is not None:
            f = fakes()
            agent = f.ScriptedAgent(SCRIPT, delay_s=latency_s) if agent_kind == "tuner" else \
                FakeLLM(latency_s, aa=agent_kind == "aa")
            pool = HarnessPool([f.FakeHarness(delay_s=fake_judge) for _ in range(members)])
        else:
            agent = SlowTuner(latency_s) if agent_kind == "tuner" else FakeLLM(latency_s, aa=agent_kind == "aa")
            settings.harness.cpu_workers = members
            pool = make_harness(settings, {})
        members = [TimedHarness(m) for m in pool.members]  # busy time counted inside each member
        harness = HarnessPool(members)
        engine = Engine(ws, settings, tag=f"k{k}", new=True, agent=agent, harness=harness)
        try:
            t0 = time.perf_counter()
            reason = engine.run()
            wall = time.perf_counter() - t0
            rows = read_rows(engine.run_dir / "results.tsv", typed=True)
        finally:
            engine.close()
    numbers = [r["experiment"] for r in rows]
    size, busy_s = len(members), sum(m.busy_s for m in members)
    return {"k": k, "experiments": len(rows), "wall_s": round(wall, 1), "per_hour": round(3600 * len(rows) / wall),
            "members": size, "harness_busy": round(busy_s / (wall * size), 3), "ended": reason,
            "numbered_in_order": numbers == list(range(1, len(rows) + 1)), "agent": agent_kind,
            "statuses": {s: sum(1 for r in rows if r["status"] == s) for s in sorted({r["status"] for r in rows})}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--latency", type=float, default=5.0, help="seconds the agent takes per proposal")
    ap.add_argument("--experiments", default="12", help="experiments per run, or one count per K (4,8,8)")
    ap.add_argument("--k", default="1,4", help="comma-separated values of run.parallel")
    ap.add_argument("--tasks", default="rmsnorm,softmax")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--fake-judge", type=float, default=None, metavar="S",
                    help="fake harnesses taking S seconds per evaluation, and the scripted agent")
    ap.add_argument("--members", type=int, default=2, help="harnesses in the pool (CPU workers, or fakes)")
    ap.add_argument("--max-wall", type=float, default=0.0, metavar="S",
                    help="end each run after S seconds (the engine's own budget), whatever it reached")
    ap.add_argument("--agent", choices=("tuner", "claude-fake", "aa"), default="tuner",
                    help="the tuner behind --latency; Claude through the SDK against a fake server; A/A")
    args = ap.parse_args(argv)
    results = []
    ks = [int(x) for x in args.k.split(",")]
    counts = [int(x) for x in args.experiments.split(",")]
    counts = counts * len(ks) if len(counts) == 1 else counts
    if len(counts) != len(ks):
        ap.error("--experiments: one count, or one per K")
    for k, n in zip(ks, counts):
        results.append(one_run(k, n, args.latency, args.tasks.split(","), args.fake_judge, args.members, args.agent,
                               args.max_wall))
        r = results[-1]
        print(f"K={r['k']}: {r['experiments']} experiments in {r['wall_s']} s = {r['per_hour']}/h, harness busy "
              f"{r['harness_busy']:.0%} of {r['members']}, numbered in order: {r['numbered_in_order']}, {r['statuses']}", flush=True)
    base = results[0]["per_hour"]
    print("\n  K  exp/h   vs K=1  pool members  pool busy  keeps")
    for r in results:
        print(f"{r['k']:>3} {r['per_hour']:>6} {r['per_hour'] / base:>7.2f}x {r['members']:>13} "
              f"{r['harness_busy']:>10.0%} {r['statuses'].get('keep', 0):>6}"
              + ("  (A/A: every keep is false)" if r["agent"] == "aa" else ""))
    if args.json:
        args.json.write_text(json.dumps({"latency_s": args.latency, "fake_judge_s": args.fake_judge,
                                         "runs": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
