"""KernelBench level 1 and 2 as tasks: how many get a starter, and (on a GPU) how many PASS and how fast.

Issue 19's bar: for at least 95% of the problems, ``init --from-kernelbench`` gives a task whose
starter PASSes the harness at the problem's shapes, with a geomean starter time within 5% of
torch.compile. KernelBench's files are read from a checkout (fetch the repository; nothing of it is
committed here)::

    # the starters only (the CPU: Inductor's code is captured, not run at these shapes)
    AUTOKERNEL_STARTER_VERIFY=0 python benchmarks/kernelbench_coverage.py --kb KernelBench/KernelBench \\
        --levels 1,2 --json kb_cpu.json
    # on a GPU: every task also goes through the harness (quick), beside eager and torch.compile
    python benchmarks/kernelbench_coverage.py --kb KernelBench/KernelBench --levels 1,2 --bench --json kb.json

Each problem becomes a task folder in one workspace (``kernelbench.write_task``, what ``init
--from-kernelbench`` runs); its starter is made in a process of its own with a time limit
(``--starter-timeout``). Prints one line per problem, then the misses grouped by reason and the
totals last. Needs torch + triton (the harness too with ``--bench``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: the repository's packages before any installed copy
    sys.path.insert(0, str(ROOT))


def _args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kb", required=True, help="KernelBench's problem folder (holding level1/, level2/)")
    p.add_argument("--levels", default="1,2")
    p.add_argument("--limit", type=int, default=0, help="the first N problems of each level (0: all)")
    p.add_argument("--only", default="",
                   help="comma-separated problem numbers to run, in every level (1,23,40) or in one (1:50,2:12)")
    p.add_argument("--bench", action="store_true", help="run each task through the harness (needs a GPU)")
    p.add_argument("--starter-timeout", type=float, default=300.0, help="seconds per starter")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--json", default="", help="write every row here")
    p.add_argument("--resume", default="", metavar="JSON",
                   help="rows of an earlier run (its --json, e.g. one a device call's time limit cut short): "
                        "problems there are kept as they are and not made or timed again")
    p.add_argument("--workspace", default="", help="kernels folder to fill (default: a temporary one)")
    p.add_argument("--check-under", type=float, default=0.0, metavar="GFLOP",
                   help="without a GPU: run each starter whose problem has fewer GFLOPs than this against its "
                        "reference in the Triton interpreter (a process each, --check-timeout seconds)")
    p.add_argument("--check-timeout", type=float, default=300.0)
    p.add_argument("--jobs", type=int, default=1,
                   help="make this many tasks (starters: torch.compile each) at once, in processes of their own; "
                        "the harness still times one task at a time")
    return p.parse_args()


def _number(path: Path) -> int:
    m = re.match(r"(\d+)_", path.name)
    return int(m.group(1)) if m else 10**6


def _wanted(only: str) -> set[tuple[str, int]]:
    """--only's entries as (level, number) pairs; a bare number stands for every level ("*")."""
    pairs = set()
    for item in filter(None, (x.strip() for x in only.split(","))):
        level, _, number = item.rpartition(":")
        pairs.add((level or "*", int(number)))
    return pairs


def _problems(kb: Path, levels: list[str], limit: int, only: set[tuple[str, int]]) -> list[tuple[str, Path]]:
    out = []
    for level in levels:
        files = sorted((kb / f"level{level}").glob("*.py"), key=_number)
        files = [f for f in files if not only or {("*", _number(f)), (level, _number(f))} & only]
        out += [(level, f) for f in (files[:limit] if limit else files)]
    return out


def _earlier_rows(path: str) -> dict[tuple[int, str], dict]:
    """An earlier run's rows by (level, problem file); none without a path."""
    if not path:
        return {}
    try:
        rows = json.loads(Path(path).read_text())
        return {(int(r["level"]), str(r["problem"])): r for r in rows}
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise SystemExit(f"--resume {path}: not the rows of an earlier run ({type(exc).__name__}: {exc})") from None


def _starter_reason(task: Path) -> str | None:
    """None when kernel.py is a starter; else why not (from the placeholder it raises with)."""
    from autokernel_tui.profiling.generate import has_no_starter

    if not has_no_starter(task / "kernel.py"):
        return None
    text = (task / "kernel.py").read_text(encoding="utf-8")
    m = re.search(r'no starter kernel \((.*)\)"\)', text)
    return m.group(1) if m else "no starter"


def _bench(harness, task: Path) -> dict:
    report = harness.evaluate(task, quick=True)
    row = {"status": report.status, "why": report.reason}
    shapes = [s for s in report.shapes if s.median_us]
    if shapes:
        s = shapes[0]
        row.update(kernel_us=s.median_us, eager_us=s.baseline_us, compile_us=s.compile_ref_us)
    return row


CHECK = """
import os, sys
os.environ["TRITON_INTERPRET"] = "1"
import importlib.util, torch
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
ref = load(sys.argv[1] + "/reference.py", "kb_reference")
ker = load(sys.argv[1] + "/kernel.py", "kb_kernel")
inputs = ref.make_inputs({"CALL": 1}, torch.float32, "cpu", 0)
want, got = ref.reference(*inputs), ker.kernel_fn(*inputs)
wants = want if isinstance(want, (tuple, list)) else (want,)
gots = got if isinstance(got, (tuple, list)) else (got,)
worst = 0.0
for w, g in zip(wants, gots):
    assert w.shape == g.shape, (w.shape, g.shape)
    worst = max(worst, float((g.double() - w.double()).norm() / w.double().norm().clamp_min(1e-30)))
print(worst)
"""


def _check_on_cpu(task: Path, timeout_s: float) -> dict:
    """The starter against its reference at the problem's shapes, in the interpreter: rel L2 error."""
    import subprocess

    try:
        out = subprocess.run([sys.executable, "-c", CHECK, str(task)], capture_output=True, text=True,
                             timeout=timeout_s, env={**os.environ, "PYTHONPATH": str(ROOT)})
    except subprocess.TimeoutExpired:
        return {"check": f"not finished in {timeout_s:.0f} s"}
    if out.returncode != 0:
        return {"check": "error: " + (out.stderr.strip().splitlines() or ["?"])[-1][:200]}
    err = float(out.stdout.strip().splitlines()[-1])
    return {"check": "match" if err < 1e-3 else "MISMATCH", "rel_l2": err}


def _gflop(task: Path) -> float:
    m = re.search(r"^FLOPS = (\d+)", (task / "reference.py").read_text(encoding="utf-8"), re.M)
    return int(m.group(1)) / 1e9 if m else float("inf")


def _reason_class(reason: str) -> str:
    """A short name for a miss's reason, to group them."""
    r = reason.lower()
    for key, name in (("extern kernel", "library call the template does not write"),
                      ("took over", "starter timed out"), ("turned off", "starters off"),
                      ("meta device", "forward does not run on the meta device"),
                      ("out of gpu memory", "out of GPU memory"), ("out of memory", "out of GPU memory"),
                      ("not a triton one", "Inductor made a C++ kernel"), ("does not match", "starter wrong"),
                      ("libdevice", "libdevice function without an interpreter stand-in")):
        if key in r:
            return name
    return reason.split(":")[0][:80]


def _make(f: Path, kernels: Path, dtype: str) -> dict:
    """One problem's task folder and starter (in a pool process when --jobs > 1): the row so far."""
    from autokernel_tui.errors import AutokernelError
    from autokernel_tui.profiling import kernelbench

    t0 = time.perf_counter()
    try:
        task = kernelbench.write_task(f, kernels, dtype)
    except AutokernelError as exc:
        row = dict(task=None, starter=False, reason=f"no task: {exc}")
    else:
        reason = _starter_reason(task)
        row = dict(task=task.name, starter=reason is None, reason=reason)
    row["make_seconds"] = round(time.perf_counter() - t0, 1)
    return row


def main() -> int:
    args = _args()
    os.environ.setdefault("AUTOKERNEL_STARTER_TIMEOUT_S", str(args.starter_timeout))
    only = _wanted(args.only)
    problems = _problems(Path(args.kb), [x.strip() for x in args.levels.split(",") if x.strip()], args.limit, only)
    done = _earlier_rows(args.resume)
    rows = [done[(int(level), f.name)] for level, f in problems if (int(level), f.name) in done]
    problems = [(level, f) for level, f in problems if (int(level), f.name) not in done]
    if done:
        print(f"{len(rows)} problems kept from {args.resume}; {len(problems)} to go", flush=True)
    kernels = Path(args.workspace or tempfile.mkdtemp(prefix="kb-")) / "kernels"
    kernels.mkdir(parents=True, exist_ok=True)
    made = {}
    if args.jobs > 1:
        # every starter made first, several at once (their autotuning shares the GPU), and only then
        # timed, one task at a time, on a quiet GPU
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        t0 = time.perf_counter()
        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {f: pool.submit(_make, f, kernels, args.dtype) for _, f in problems}
            made = {f: fut.result() for f, fut in futures.items()}
        for f, row in made.items():  # out of GPU memory beside the others: made again, alone
            if "out of memory" in (row.get("reason") or "").lower() and row.get("task"):
                shutil.rmtree(kernels / row["task"], ignore_errors=True)
                made[f] = {**_make(f, kernels, args.dtype), "made_alone": True}
        print(f"{len(made)} tasks made, {args.jobs} at a time, in {time.perf_counter() - t0:.0f} s", flush=True)
    harness = None
    if args.bench:  # one harness for every problem: its judge stays warm between tasks
        from autokernel_tui.harness.runner import Harness
        harness = Harness(device="cuda").__enter__()
    for level, f in problems:
        t0 = time.perf_counter()
        row = {"level": int(level), "problem": f.name}
        row.update(made[f] if f in made else _make(f, kernels, args.dtype))
        if row["task"] is not None:
            task, reason = kernels / row["task"], row["reason"]
            if args.bench and reason is None:
                row.update(_bench(harness, task))
            elif args.check_under and reason is None:
                gflop = _gflop(task)
                row["gflop"] = gflop
                if gflop < args.check_under:
                    row.update(_check_on_cpu(task, args.check_timeout))
        row["seconds"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        status = row.get("status") or ("starter" if row["starter"] else "MISS")
        timing = (f"  {row['kernel_us']:.1f} us vs compile {row['compile_us']:.1f} us"
                  if row.get("kernel_us") and row.get("compile_us") else "")
        check = f"  cpu check: {row['check']}" if row.get("check") else ""
        print(f"L{level} {f.name[:52]:<52} {status:<8}{timing}{check}  {row['seconds']:.0f} s"
              + (f"  ({row['reason'][:90]})" if row.get("reason") else ""), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
    if harness is not None:
        harness.close()
    print()
    misses = [r for r in rows if not r["starter"] or (args.bench and r.get("status") != "PASS")]
    for reason, n in Counter(_reason_class(r.get("reason") or r.get("why") or r.get("status", ""))
                             for r in misses).most_common():
        print(f"miss x{n}: {reason}")
    for level in sorted({r["level"] for r in rows}):
        mine = [r for r in rows if r["level"] == level]
        made = sum(r["starter"] for r in mine)
        line = f"level {level}: {made}/{len(mine)} problems have a starter ({100 * made / max(1, len(mine)):.0f}%)"
        checked = [r for r in mine if r.get("check")]
        if checked:
            line += (f"; checked on the CPU: {sum(r['check'] == 'match' for r in checked)}/{len(checked)} match "
                     f"(the rest: {', '.join(sorted({r['check'] for r in checked if r['check'] != 'match'})) or 'none'})")
        if args.bench:
            passed = [r for r in mine if r.get("status") == "PASS"]
            ratios = [r["kernel_us"] / r["compile_us"] for r in passed if r.get("kernel_us") and r.get("compile_us")]
            line += f"; {len(passed)} PASS ({100 * len(passed) / max(1, len(mine)):.0f}%)"
            if ratios:
                geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
                line += f"; geomean starter time / torch.compile {geo:.3f} over {len(ratios)}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
