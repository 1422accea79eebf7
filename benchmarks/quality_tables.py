"""Markdown tables from kernel_quality.py's JSON, as pasted into docs/benchmarks.md.

    python3 benchmarks/quality_tables.py benchmarks/results/h200-run6/run6k/kernel_quality.json
    python3 benchmarks/quality_tables.py RUN.json --shapes --tasks matmul,softmax --dtypes bfloat16
    python3 benchmarks/quality_tables.py OLDER.json NEWER.json   # NEWER's tasks replace OLDER's
    python3 benchmarks/quality_tables.py RUN.json --targets      # every target's value, met or not
    python3 benchmarks/quality_tables.py NEW.json --against OLD.json  # each median against OLD's, per path
    python3 benchmarks/quality_tables.py 54becbf:benchmarks/results/h200-run5/run5b/kernel_quality.json
                                         # COMMIT:PATH: a run kept only in git history (git show)

Summary: one row per task and dtype (geomean over the task's shapes). --shapes: one
row per shape with every path's median latency and % of roofline, and the rate of
the faster of starter and tuned (GB/s for memory-bound tasks, TFLOP/s for compute-bound).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: the repository's packages before any installed copy
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PATHS = ("starter", "tuned", "eager", "compile", "copy")  # copy: the same bytes, memory-bound tasks
REPO = Path(__file__).resolve().parents[1]


def read_run(arg: str) -> dict:
    """One kernel_quality.py JSON under today's keys: a file, or ``COMMIT:PATH`` for a run whose raw
    results live only in the repository's history (docs/benchmarks.md cites them that way)."""
    path = Path(arg)
    if not path.exists() and re.match(r"^[0-9a-fA-F]{7,40}:.", arg):
        proc = subprocess.run(["git", "show", arg], cwd=REPO, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{arg}: not in this repository's history ({proc.stderr.strip()})")
        return upgrade(json.loads(proc.stdout))
    return upgrade(json.loads(path.read_text()))


def _x(v) -> str:
    return f"{v:.2f}x" if isinstance(v, (int, float)) else "—"


def summary(data: dict, tasks: set[str], dtypes: set[str]) -> list[str]:
    lines = ["| task | dtype | % roofline | vs eager | vs compile | vs same-size copy | same-size copy % (≥128 MB / 16–128 MB) "
             "| worst shape (% roofline) | targets missed |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for s in data["summary_by_dtype"]:
        if (tasks and s["task"] not in tasks) or (dtypes and s["dtype"] not in dtypes):
            continue
        missed = "; ".join(s.get("targets_missed") or []) or "none"
        lines.append(f"| {s['task']} | {s['dtype']} | {s['geomean_roofline_pct']:.1f} | "
                     f"{_x(s['geomean_speedup_vs_eager'])} | {_x(s['geomean_speedup_vs_compile'])} | "
                     f"{_x(s.get('geomean_vs_same_size_copy'))} | {_copy_cell(s)} | "
                     f"{s['worst_shape']} ({s['worst_roofline_pct']:.1f}) | {missed} |")
    return lines


def _copy_cell(s: dict) -> str:
    big, mid = s.get("same_size_copy_pct_ge_128mb"), s.get("same_size_copy_pct_16_128mb")
    if big is None and mid is None:
        return "—"
    return " / ".join("—" if v is None else f"{v:.1f}" for v in (big, mid))


def shapes(data: dict, tasks: set[str], dtypes: set[str]) -> list[str]:
    lines = ["| task | dtype | shape | MB | " + " | ".join(f"{p} µs (%)" for p in PATHS) + " | best rate | best vs eager | vs compile |",
             "| --- | --- | --- | ---: | " + " | ".join("---:" for _ in PATHS) + " | ---: | ---: | ---: |"]
    for r in data["rows"]:
        if (tasks and r["task"] not in tasks) or (dtypes and r["dtype"] not in dtypes):
            continue
        t = r["times"]
        cells = [f"{t[p]['median_us']:.1f} ({t[p]['roofline_pct']:.0f})" if p in t else "—" for p in PATHS]
        ours = min((t[p]["median_us"] for p in ("starter", "tuned") if p in t), default=None)
        rate = "—" if ours is None else (f"{r['flops'] / ours / 1e6:.0f} TF/s" if r["bound"] == "compute"
                                         else f"{r['bytes'] / ours / 1e3:.0f} GB/s")
        vs_c = t["compile"]["median_us"] / ours if ours and "compile" in t else None
        vs_e = t["eager"]["median_us"] / ours if ours and "eager" in t else None
        lines.append(f"| {r['task']} | {r['dtype']} | {r['shape']} | {r['bytes'] / 1e6:.0f} | " + " | ".join(cells)
                     + f" | {rate} | {_x(vs_e)} | {_x(vs_c)} |")
    return lines


def target_values(data: dict, tasks: set[str], dtypes: set[str]) -> list[str]:
    """Every target of issue 8 per task and dtype with its measured value, met or not (the summary
    names only the misses)."""
    from benchmarks import kernel_quality as kq

    lines = ["| task | dtype | target | value | goal | status |", "| --- | --- | --- | ---: | ---: | --- |"]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in data["rows"]:
        if (not tasks or r["task"] in tasks) and (not dtypes or r["dtype"] in dtypes):
            groups.setdefault((r["task"], r["dtype"]), []).append(r)
    for (task, dtype), rows in groups.items():
        for t in kq.targets(task, rows[0]["bound"], rows):
            lines.append(f"| {task} | {dtype} | {t['target']} | {t['shown']} | {t['goal']:g} | {t['status']} |")
    return lines


def against(new: dict, old: dict, tasks: set[str], dtypes: set[str], tolerance: float = 0.03) -> list[str]:
    """How many of each path's medians lie within ``tolerance`` of an older run's at the same task, dtype
    and shape, and the rows that do not (a re-measurement: the same code should land within noise)."""
    def key(r):
        return r["task"], r["dtype"], r["shape"]
    before = {key(r): r for r in old["rows"]}
    lines = [f"| path | within {tolerance:.0%} | the others (this run / the older) |", "| --- | --- | --- |"]
    for path in PATHS:
        inside, outside = 0, []
        for r in new["rows"]:
            o = before.get(key(r))
            if (tasks and r["task"] not in tasks) or (dtypes and r["dtype"] not in dtypes) or o is None:
                continue
            a, b = (o["times"].get(path) or {}).get("median_us"), (r["times"].get(path) or {}).get("median_us")
            if not a or not b:
                continue
            if abs(b / a - 1) <= tolerance:
                inside += 1
            else:
                why = (r["times"][path] or {}).get("caution")  # kernel_quality.py's own doubt, when it had one
                outside.append(f"{r['task']} {r['dtype']} {r['shape']} {b / a:.2f}x" + (f" ({why})" if why else ""))
        if inside or outside:
            lines.append(f"| {path} | {inside} of {inside + len(outside)} | {', '.join(outside) or '-'} |")
    return lines


def upgrade(data):
    """A kernel_quality.py JSON written before issue 24 under today's keys: its ``pct_roofline``
    (``_raw``, ``geomean_``, ``worst_``) was percent already; only the name changed to ``roofline_pct``."""
    if isinstance(data, dict):
        return {k.replace("pct_roofline", "roofline_pct"): upgrade(v) for k, v in data.items()}
    if isinstance(data, list):
        return [upgrade(v) for v in data]
    return data


def merged(runs: list[dict]) -> dict:
    """One table from several runs: each task's rows and summaries come from the last run that has it."""
    out = {"rows": [], "summary_by_dtype": []}
    for run in runs:
        tasks = {r["task"] for r in run["rows"]}
        for key in out:
            out[key] = [r for r in out[key] if r["task"] not in tasks] + list(run[key])
    order = {t: i for i, t in enumerate(sorted({r["task"] for r in out["rows"]}))}
    for key in out:
        out[key].sort(key=lambda r: order[r["task"]])  # stable: dtype and shape order within a task kept
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", nargs="+",
                    help="kernel_quality.py JSON (a file, or COMMIT:PATH from git history); with several, a task "
                         "measured in a later one replaces its rows")
    view = ap.add_mutually_exclusive_group()
    view.add_argument("--shapes", action="store_true", help="one row per shape instead of the summary")
    view.add_argument("--targets", action="store_true", help="every target's value per task and dtype, met or not")
    view.add_argument("--against", metavar="OLDER", default=None,
                      help="each path's medians against an older run (a file or COMMIT:PATH): how many within 3%%")
    ap.add_argument("--tasks", default="")
    ap.add_argument("--dtypes", default="")
    args = ap.parse_args(argv)
    data = merged([read_run(p) for p in args.json])
    tasks = {t for t in args.tasks.split(",") if t}
    dtypes = {d for d in args.dtypes.split(",") if d}
    if args.against:
        print("\n".join(against(data, read_run(args.against), tasks, dtypes)))
        return 0
    view = shapes if args.shapes else target_values if args.targets else summary
    print("\n".join(view(data, tasks, dtypes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
