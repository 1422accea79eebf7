"""Do cold `bench` runs agree, and do cached baselines hold (issue 21's third bar)?

For each task, the starter is benched N times (default 2), each in a fresh process with a fresh cache
(no Triton cache, no cached baselines: every run pays its JIT and measures eager and torch.compile
anew), through the real CLI (`autokernel-tui bench --json`). Reported per shape x dtype:

  * the kernel's median in each run and the largest difference between runs (the bar: within 3%);
  * the eager baseline as measured for the cache in that run beside the same eager reference re-timed
    in the kernel's window (`baseline_cached_us` vs `baseline_us`; the bar: within 5%; GPU only).

    PYTHONPATH=$PWD python3 benchmarks/bench_agreement.py [--tasks rmsnorm,softmax] [--runs 2] [--json F]
    PYTHONPATH=$PWD python3 benchmarks/bench_agreement.py --smoke     # CPU, interpreter, quick: runs, not numbers
Prints a short table last.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # run as a file: the repository's packages before any installed copy
    sys.path.insert(0, str(ROOT))

from autokernel_tui.tasks.spec import starters_dir  # noqa: E402

RUN_AGREEMENT = 0.03
BASELINE_AGREEMENT = 0.05


def cold_bench(task: Path, work: Path, device: str, quick: bool, timeout_s: float) -> dict:
    """One `bench` of ``task`` in a fresh process with an empty cache; its JSON report."""
    cache, out = work / "cache", work / "report.json"
    cache.mkdir(parents=True)
    env = {**os.environ, "AUTOKERNEL_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "autokernel_tui", "bench", str(task), "--json", str(out), "--device", device]
    proc = subprocess.run(cmd + (["--quick"] if quick else []), env=env, capture_output=True, text=True,
                          timeout=timeout_s)
    if not out.exists():
        raise RuntimeError(f"bench {task.name} wrote no report (exit {proc.returncode}): "
                           + (proc.stderr.strip().splitlines() or ["?"])[-1])
    return json.loads(out.read_text())


def _rel(a: float | None, b: float | None) -> float | None:
    return abs(a - b) / min(a, b) if a and b else None


def agreement(reports: list[dict]) -> list[dict]:
    """Per shape x dtype: each run's median, the largest spread between runs, and each run's cached
    baseline against the in-window one."""
    rows = []
    for first in reports[0].get("shapes", []):
        key = (first["shape"], first["dtype"])
        mine = [next((r for r in rep.get("shapes", []) if (r["shape"], r["dtype"]) == key), None) for rep in reports]
        medians = [r.get("median_us") if r else None for r in mine]
        known = [m for m in medians if m]
        spread = (max(known) - min(known)) / min(known) if len(known) == len(medians) and known else None
        base = [_rel(r.get("baseline_cached_us"), r.get("baseline_us")) if r else None for r in mine]
        base = [b for b in base if b is not None]
        # both figures of each run, so a miss says which way it went (run 17: one 10.5% miss, which unknown)
        pairs = [[r.get("baseline_cached_us"), r.get("baseline_us")] if r else None for r in mine]
        rows.append({"shape": key[0], "dtype": key[1], "medians_us": medians, "run_spread": spread,
                     "baseline_vs_window": max(base) if base else None, "baseline_cached_and_window_us": pairs})
    return rows


def table(results: list[dict], device: str) -> str:
    lines = [f"bench_agreement on {device}: cold runs (fresh process and cache each); bars: runs within "
             f"{RUN_AGREEMENT:.0%}, cached baseline within {BASELINE_AGREEMENT:.0%} of the in-window one",
             f"{'task':<16}{'shape':<20}{'dtype':<10}{'medians us':>24}{'runs apart':>12}{'baseline off':>14}"]
    for res in results:
        if "error" in res:
            lines.append(f"{res['task']:<16}{res['error']}")
            continue
        for r in res["rows"]:
            meds = " / ".join(f"{m:.1f}" if m else "-" for m in r["medians_us"])
            spread = f"{r['run_spread']:.1%}" if r["run_spread"] is not None else "n/a"
            base = f"{r['baseline_vs_window']:.1%}" if r["baseline_vs_window"] is not None else "n/a"
            lines.append(f"{res['task']:<16}{r['shape'][:19]:<20}{r['dtype']:<10}{meds:>24}{spread:>12}{base:>14}")
    spreads = [r["run_spread"] for res in results for r in res.get("rows", []) if r["run_spread"] is not None]
    bases = [r["baseline_vs_window"] for res in results for r in res.get("rows", [])
             if r["baseline_vs_window"] is not None]
    if spreads:
        lines.append(f"runs apart: worst {max(spreads):.1%}; {sum(s <= RUN_AGREEMENT for s in spreads)}/{len(spreads)} "
                     f"within {RUN_AGREEMENT:.0%}")
    if bases:
        lines.append(f"baselines: worst {max(bases):.1%}; {sum(b <= BASELINE_AGREEMENT for b in bases)}/{len(bases)} "
                     f"within {BASELINE_AGREEMENT:.0%}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="rmsnorm,softmax,layernorm", help="comma-separated starter names")
    ap.add_argument("--runs", type=int, default=2, help="cold bench runs per task (at least 2)")
    ap.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per bench run")
    ap.add_argument("--json", type=Path, help="write the rows here")
    ap.add_argument("--smoke", action="store_true", help="CPU, interpreter, quick, one small task")
    args = ap.parse_args(argv)
    if args.runs < 2:
        ap.error("--runs must be at least 2: agreement is between runs")
    device, quick, tasks = args.device, False, [t for t in args.tasks.split(",") if t.strip()]
    if args.smoke:
        device, quick, tasks = "cpu", True, ["rmsnorm"]
    results = []
    work = Path(tempfile.mkdtemp(prefix="bench-agreement-"))

    def save() -> str:  # after every task: a run cut short (run 28: the device call's limit) keeps what it finished
        shown = next((r["device"] for r in results if r.get("device")), device)
        if args.json:
            args.json.write_text(json.dumps({"device": shown, "results": results}, indent=1))
        return shown

    try:
        for name in tasks:
            task = starters_dir() / name
            try:
                reports = [cold_bench(task, work / f"{name}-{i}", device, quick, args.timeout) for i in range(args.runs)]
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                results.append({"task": name, "error": str(exc)[:300]})
                print(f"{name}: {exc}", flush=True)
                save()
                continue
            results.append({"task": name, "statuses": [r.get("status") for r in reports], "rows": agreement(reports),
                            "device": reports[0].get("device", device)})
            print(f"{name}: {len(reports)} cold runs, {', '.join(r.get('status', '?') for r in reports)}", flush=True)
            save()
            print(table(results[-1:], reports[0].get("device", device)), flush=True)  # its rows now, not at the end
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(table(results, save()))
    return 0 if results and all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
