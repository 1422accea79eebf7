"""The offline tuner under a fixed budget, on the GPU: does it improve each starter?

For each task (default: rmsnorm, softmax, matmul) the tuner runs up to --budget
experiments (and at most --max-seconds of loop time) through the real harness,
the way the engine does: evaluate the candidate (correctness + timing), compare
it with the incumbent (interleaved timing, bootstrap CI), keep it when the lower
CI bound clears the harness's keep margin and does again in a second comparison
with the roles swapped (the harness's confirmation). Candidates whose evaluated latency
is already clearly slower than the incumbent's (> --prescreen) are discarded
without the paired comparison, to spend the budget on promising ones.

Prints, per task: before/after latency per shape, the speedup, the speedup vs
the PyTorch baseline and % of roofline, plus the winning knobs; writes all of it
(every experiment included) as JSON. Needs torch, triton and this package only.

    PYTHONPATH=$PWD python3 benchmarks/tuner_budget.py --json $OUT/tuner_budget.json
    PYTHONPATH=$PWD python3 benchmarks/tuner_budget.py --tasks matmul --budget 30 --max-seconds 150
    python3 benchmarks/tuner_budget.py --smoke      # CPU interpreter, 1 task, 2 experiments
    ... --budget 30 --state $OUT/tuner_state.json    # again with the same state: goes on where it stopped

The search times one dtype per shape (the harness's quick mode) unless --full;
before/after are measured the same way, so they compare like with like.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: the repository's packages before any installed copy
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autokernel_tui.agents.base import AgentContext, AgentEvent, NothingToPropose  # noqa: E402
from autokernel_tui.agents.knobs import parse_knobs  # noqa: E402
from autokernel_tui.agents.tuner import TunerAgent  # noqa: E402
from autokernel_tui.harness.report import Report  # noqa: E402
from autokernel_tui.tasks.spec import load_spec, starters_dir  # noqa: E402

# Baselines (eager + torch.compile) on first use, the first and last evaluations and the final
# comparison: 7-10 s a task on the H200 (run 4c/4d's prepare_and_first_eval_s), so 20 s of each share.
PER_TASK_RESERVE_S = 20.0
DTYPE_PREFIX = {"float32": "FP32_", "float16": "FP16_", "bfloat16": "BF16_"}
STATUS = {"FAIL": "fail", "CRASH": "crash", "TIMEOUT": "timeout", "REJECTED": "rejected"}


def _fmt(value, spec=".1f", unit=""):
    return "-" if value is None else f"{value:{spec}}{unit}"


def task_seconds(left_s: float, open_tasks: int, max_seconds: float, in_turn: bool) -> float:
    """The next task's loop time: an equal share of what is left among the tasks still open (finished ones cost
    nothing), or with ``in_turn`` all that is left, at most ``max_seconds`` either way; PER_TASK_RESERVE_S of
    it kept for the baselines' preparation and the closing measurements."""
    share = left_s / (1 if in_turn else max(1, open_tasks)) - PER_TASK_RESERVE_S
    return max(0.0, min(max_seconds, share))


def finished(state: dict, budget: int) -> bool:
    """Whether an earlier call with this task's ``state`` finished it for ``budget`` experiments: it had
    nothing left to propose, or it used a budget at least as large (a time limit leaves it unfinished)."""
    return bool(state.get("result")) and (state.get("exhausted", False) or len(state.get("history", [])) >= budget)


def tune_task(harness, task_dir: Path, budget: int, max_seconds: float, quick: bool, prescreen: float,
              seed: int, log, result: dict | None = None, progress=lambda: None, state: dict | None = None) -> dict:
    """Up to ``budget`` experiments in at most ``max_seconds`` from the task's start, the first evaluation and
    the closing measurements included: an experiment starts only where it and the closing evaluation and
    comparison (each estimated by the longest experiment so far) still fit. ``result`` is filled as it goes
    (``progress()`` after each experiment), so a run cut short keeps its rows.

    ``state`` (``--state``): what a later call needs to go on where this one stopped (the starter's
    report, every experiment with its kernel.py, the incumbent and its report), kept up to date in place;
    given one with experiments in it, the run resumes there instead of starting over."""
    spec = load_spec(task_dir)
    state = {} if state is None else state
    result = {} if result is None else result
    starter = spec.kernel_path.read_text(encoding="utf-8")
    if state.get("start_source", starter) != starter:
        # The task's starter changed since the state was saved (its format, say: flash_attention_bwd took O and
        # the logsumexp after run 23): its experiments were of another kernel, so it starts over
        log(f"  {spec.name}: the starter changed since the state was saved: starting over")
        state.clear()
    if finished(state, budget):
        result.update(state["result"], resumed_at=len(state.get("history", [])))
        log(f"  {spec.name}: finished in an earlier call ({result.get('stopped')}), {result.get('kept', 0)} kept")
        return result
    state.pop("result", None)  # a larger budget than the one it finished: it goes on
    start_src = state.setdefault("start_source", starter)
    t0 = time.monotonic()
    deadline = t0 + max_seconds
    resumed = bool(state.get("history"))
    before = Report.from_dict(state["before"]) if resumed else harness.evaluate(task_dir, start_src, quick=quick)
    state["before"] = before.to_dict()
    result.update({"task": spec.name, "before": before.to_dict(), "experiments": [], "stopped": "",
                   "prepare_and_first_eval_s": round(time.monotonic() - t0, 1),
                   "resumed_at": len(state.get("history", []))})
    if before.status != "PASS" or before.summary is None:
        result["stopped"] = f"the starter itself did not pass: {before.status} {before.reason}"
        return result
    # Timing one dtype (quick): knobs that only steer another dtype's path cannot show an effect.
    untimed = [d for d in spec.dtypes[1:]] if quick else []
    frozen = tuple(k for k in parse_knobs(start_src) if any(k.startswith(DTYPE_PREFIX[d]) for d in untimed))
    result["frozen_knobs"] = list(frozen)
    tuner = TunerAgent(seed=seed, budget=budget, frozen=frozen)
    inc_src = state.get("incumbent_source", start_src)
    inc_report = Report.from_dict(state["incumbent_report"]) if resumed else before
    history: list[dict] = list(state.get("history", []))
    loop_t0 = time.monotonic()
    # an experiment's estimate before any has run here: the longest before a resume, else the first evaluation
    longest = max((r.get("wall_s") or 0.0 for r in history), default=0.0) or time.monotonic() - t0
    estimated = not resumed  # the first evaluation (cold) stands in until an experiment has run here
    for n in range(len(history) + 1, budget + 1):
        if time.monotonic() + 2 * longest >= deadline:  # this experiment, then the closing measurements
            result["stopped"] = f"time limit ({max_seconds:.0f} s) after {n - 1} experiments"
            break
        ctx = AgentContext(task=spec, incumbent_source=inc_src, incumbent_report=inc_report.to_dict(),
                           history=list(history), experiment=n, workspace=task_dir)
        try:
            prop = tuner.propose(ctx, lambda e: None)
        except NothingToPropose as exc:
            result["stopped"] = str(exc)
            state["exhausted"] = True
            break
        t1 = time.monotonic()
        rep = harness.evaluate(task_dir, prop.source, quick=quick)
        row = {"experiment": n, "description": prop.description, "source": prop.source, "reason": rep.reason,
               "speedup_vs_baseline": None, "speedup_vs_incumbent": None, "ci": None}
        if rep.status != "PASS" or rep.summary is None:
            row["status"] = STATUS.get(rep.status, "fail")
        else:
            row["speedup_vs_baseline"] = rep.summary.speedup_vs_baseline
            rough = inc_report.summary.latency_us / rep.summary.latency_us
            if rough < 1 / prescreen:
                row["status"], row["speedup_vs_incumbent"] = "discard", rough
                row["reason"] = f"pre-screened: {rough:.3f}x of the incumbent's latency"
            else:
                cmp = harness.compare(task_dir, prop.source, inc_src, quick=quick)
                row["speedup_vs_incumbent"], row["ci"] = cmp.speedup, [cmp.ci_low, cmp.ci_high]
                row["status"] = "keep" if cmp.status == "PASS" and cmp.faster else "discard"
                if cmp.status != "PASS":
                    row["reason"] = f"compare: {cmp.status} {cmp.reason}"
                elif cmp.screen:  # called faster once; the row shows the confirming comparison
                    row["screen"] = cmp.screen
                    row["reason"] = "" if cmp.faster else f"not confirmed: {cmp.reason}"
        row["wall_s"] = round(time.monotonic() - t1, 2)
        longest = row["wall_s"] if estimated else max(longest, row["wall_s"])
        estimated = False
        history.append(row)
        if row["status"] == "keep":
            inc_src, inc_report = prop.source, rep
        state.update(history=history, incumbent_source=inc_src, incumbent_report=inc_report.to_dict())
        result["experiments"] = [{k: v for k, v in r.items() if k != "source"} for r in history]
        progress()
        log(f"  {spec.name} exp {n:2d} {row['status']:8s} {prop.description:40s} "
            f"vs inc {_fmt(row['speedup_vs_incumbent'], '.3f', 'x')} "
            f"vs base {_fmt(row['speedup_vs_baseline'], '.3f', 'x')} ({row['wall_s']:.1f} s) {row['reason'][:60]}")
    else:
        result["stopped"] = f"budget of {budget} experiments used"
    after = inc_report if inc_src == start_src else harness.evaluate(task_dir, inc_src, quick=quick)
    if inc_src != start_src and after.status == "PASS":
        final = harness.compare(task_dir, inc_src, start_src, quick=quick, confirm=False)  # a report, not a decision
        result["final_vs_start"] = final.to_dict()
    start_knobs = {k: v.value for k, v in parse_knobs(start_src).items()}
    end_knobs = {k: v.value for k, v in parse_knobs(inc_src).items()}
    result.update(after=after.to_dict(), knobs_start=start_knobs, knobs_end=end_knobs, final_source=inc_src,
                  kept=sum(r["status"] == "keep" for r in history), loop_s=round(time.monotonic() - loop_t0, 1),
                  experiments=[{k: v for k, v in r.items() if k != "source"} for r in history])
    if not result["stopped"].startswith("time limit"):  # a later call with this state skips the task
        state["result"] = {k: v for k, v in result.items() if k != "resumed_at"}
    return result


def table(res: dict) -> str:
    lines = [f"## {res['task']}: {len(res['experiments'])} experiments, {res.get('kept', 0)} kept "
             f"({res['stopped']}; loop {res.get('loop_s', 0)} s)"]
    if "after" not in res:
        return "\n".join(lines)
    before = {(s["shape"], s["dtype"]): s for s in res["before"]["shapes"]}
    lines.append("| shape | dtype | before us | after us | speedup | after vs baseline | % roofline before -> after |")
    lines.append("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for s in res["after"]["shapes"]:
        b = before.get((s["shape"], s["dtype"]), {})
        sp = b.get("median_us") / s["median_us"] if b.get("median_us") and s.get("median_us") else None
        lines.append(f"| {s['shape']} | {s['dtype']} | {_fmt(b.get('median_us'))} | {_fmt(s.get('median_us'))} | "
                     f"{_fmt(sp, '.3f', 'x')} | {_fmt(s.get('speedup_vs_baseline'), '.3f', 'x')} | "
                     f"{_fmt(b.get('roofline_pct'), '.1f')} -> {_fmt(s.get('roofline_pct'), '.1f')} |")
    fin = res.get("final_vs_start")
    if fin:
        lines.append(f"Final vs starter (paired): {fin['speedup']:.3f}x, 95% CI [{fin['ci_low']:.3f}, "
                     f"{fin['ci_high']:.3f}]")
    else:
        lines.append("No configuration beat the starter with confidence: it was already the best found.")
    moved = {k: (v, res["knobs_end"].get(k)) for k, v in res["knobs_start"].items() if res["knobs_end"].get(k) != v}
    lines.append("Winning knobs: " + (", ".join(f"{k} {a} -> {b}" for k, (a, b) in moved.items()) or "unchanged")
                 + " | all: " + ", ".join(f"{k}={v}" for k, v in res["knobs_end"].items()))
    return "\n".join(lines)


def _task_dirs(names: list[str]) -> list[Path]:
    """Each --tasks entry as task folders: a starter's name, a task folder, or a folder of tasks."""
    out = []
    for name in names:
        path = Path(name)
        if (path / "task.toml").is_file():
            out.append(path)
        elif path.is_dir():
            out += sorted(p for p in path.iterdir() if (p / "task.toml").is_file())
        else:
            out.append(starters_dir() / name)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=["rmsnorm", "softmax", "matmul"],
                    help="starter names, or all; or task folders, or a kernels folder (every task in it: "
                         "a workspace's generated tasks)")
    ap.add_argument("--budget", type=int, default=30, help="experiments per task")
    ap.add_argument("--max-seconds", type=float, default=120.0, help="loop time per task (JIT compiles count)")
    ap.add_argument("--full", action="store_true", help="time every dtype, not just the first (slower)")
    ap.add_argument("--prescreen", type=float, default=1.03,
                    help="discard without a paired compare when this much slower than the incumbent")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=120.0, help="harness limit per evaluation")
    ap.add_argument("--total-seconds", type=float, default=540.0,
                    help="wall-clock limit for the whole script; per-task loop time shrinks to fit it")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--in-turn", action="store_true",
                    help="each task in turn gets up to --max-seconds of what is left, rather than an equal share "
                         "(with --state over several calls: tasks finish one after another)")
    ap.add_argument("--state", type=Path, default=None,
                    help="keep what a later call needs to go on here (each experiment's kernel.py included), and "
                         "resume from it when it exists: a budget longer than one device call")
    ap.add_argument("--save-kernels", type=Path, default=None,
                    help="write each task's final kernel.py to DIR/<task>/kernel.py (for kernel_quality --kernel-dir)")
    ap.add_argument("--smoke", action="store_true", help="CPU interpreter, rmsnorm, 2 experiments: the loop works")
    args = ap.parse_args(argv)

    from autokernel_tui.harness.runner import Harness

    if args.tasks == ["all"]:
        args.tasks = [str(starters_dir())]
    device = "auto"
    if args.smoke:
        device, args.tasks, args.budget = "cpu", args.tasks if args.tasks != ap.get_default("tasks") else \
            ["rmsnorm"], min(args.budget, 2)
    log = lambda msg: print(msg, flush=True)  # noqa: E731
    t0 = time.monotonic()
    results = []
    with Harness(timeout_s=args.timeout, device=device) as harness:
        info = harness.device_info()
        log(f"device: {info.get('name')} (timing meaningful: {info.get('timing_meaningful')}); "
            f"budget {args.budget} experiments, {args.max_seconds:.0f} s per task, "
            f"{'all dtypes' if args.full else 'first dtype only'}")
        out = {"device": info, "budget": args.budget, "max_seconds": args.max_seconds, "quick": not args.full,
               "command": " ".join(["benchmarks/tuner_budget.py"] + (argv if argv is not None else sys.argv[1:])),
               "tasks": results}
        task_dirs = _task_dirs(args.tasks)
        states = json.loads(args.state.read_text()) if args.state and args.state.exists() else {}
        for i, task_dir in enumerate(task_dirs):
            name = task_dir.name
            open_tasks = sum(not finished(states.get(d.name, {}), args.budget) for d in task_dirs[i:])
            loop_s = task_seconds(args.total_seconds - (time.monotonic() - t0), open_tasks, args.max_seconds,
                                  args.in_turn)
            results.append({"task": name})

            def progress() -> None:
                out["total_s"] = round(time.monotonic() - t0, 1)
                if args.state:
                    args.state.parent.mkdir(parents=True, exist_ok=True)
                    args.state.write_text(json.dumps(states, default=str))
                if args.json:  # after every experiment, so a run cut short still leaves its rows
                    args.json.parent.mkdir(parents=True, exist_ok=True)
                    args.json.write_text(json.dumps(out, indent=1, default=str))

            tune_task(harness, task_dir, args.budget, loop_s, not args.full, args.prescreen, args.seed, log,
                      results[-1], progress, states.setdefault(name, {}))
            progress()  # the task's closing state (finished or not) for a later call
            if args.save_kernels and "final_source" in results[-1]:
                dest = args.save_kernels / name / "kernel.py"
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(results[-1]["final_source"], encoding="utf-8")
    print()
    for res in results:
        print(table(res))
        print()
    print(f"total {out['total_s']} s")
    return 0 if all("after" in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
