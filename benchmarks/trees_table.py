"""One table from `gpu_session.sh trees`: each tree's warm evaluations side by side, and where the time went.

    python3 benchmarks/trees_table.py /tmp/res/trees            # warm_<tree>_<round>.json from harness_speed.py
    python3 benchmarks/trees_table.py DIR --baseline .mid       # ratios against the tree labelled `.mid`

Each round timed every tree once, interleaved, so a machine that drifts weighs on every tree alike: a tree's
figure is the median of its rounds' medians, each ratio is taken round by round against the baseline tree
(then its median), and the kernel's own latency is shown beside it (a slower card shows there; a slower host
does not). The trees that report a time split (the sandboxed ones) get it part by part, one column each.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

NAME = re.compile(r"^warm_(?P<tree>.+)_(?P<round>\d+)\.json$")


def load(folder: Path) -> dict[str, dict[int, dict]]:
    """{tree: {round: harness_speed's result for its one task}} from the folder's warm_*.json."""
    trees: dict[str, dict[int, dict]] = {}
    for path in sorted(folder.glob("warm_*.json")):
        m = NAME.match(path.name)
        if not m:
            continue
        try:
            results = json.loads(path.read_text()).get("results") or []
        except (OSError, ValueError) as exc:
            print(f"trees_table: {path.name} unreadable ({exc}): left out", file=sys.stderr)
            continue
        if results:
            trees.setdefault(m["tree"], {})[int(m["round"])] = results[0]
    return trees


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def summary(trees: dict[str, dict[int, dict]], baseline: str) -> list[dict]:
    """One row per tree: median warm evaluation over rounds, its ratio to the baseline round by round."""
    rows = []
    base = trees.get(baseline, {})
    for tree, rounds in trees.items():
        walls = {r: res["eval_wall_ex_jit_s"]["median"] for r, res in rounds.items()}
        ratios = [walls[r] / base[r]["eval_wall_ex_jit_s"]["median"] for r in walls if r in base]
        lat = [res.get("summary", {}).get("latency_us") for res in rounds.values()]
        lat = [x for x in lat if isinstance(x, (int, float))]
        rows.append({"tree": tree, "rounds": len(walls), "wall_s": statistics.median(walls.values()),
                     "per_round": [walls[r] for r in sorted(walls)],
                     "ratio": statistics.median(ratios) if ratios else None,
                     "latency_us": statistics.median(lat) if lat else None})
    return rows


def split(trees: dict[str, dict[int, dict]]) -> tuple[list[str], dict[str, dict[str, float]]]:
    """(parts, {tree: {part: median seconds over rounds}}) for the trees that report a split."""
    out: dict[str, dict[str, float]] = {}
    for tree, rounds in trees.items():
        per_part: dict[str, list[float]] = {}
        for res in rounds.values():
            for part, s in (res.get("eval_split_s") or {}).items():
                per_part.setdefault(part, []).append(s)
        if per_part:
            out[tree] = {p: statistics.median(v) for p, v in per_part.items()}
    parts = sorted({p for t in out.values() for p in t}, key=lambda p: (p == "total", -max(
        t.get(p, 0.0) for t in out.values())))
    return parts, out


def render(trees: dict[str, dict[int, dict]], baseline: str) -> str:
    lines = [f"| tree | rounds | warm evaluation s (median of rounds) | each round | x {baseline}, round by round "
             "| kernel us |", "| --- | --- | --- | --- | --- | --- |"]
    for row in summary(trees, baseline):
        lines.append(f"| {row['tree']} | {row['rounds']} | {row['wall_s']:.2f} | "
                     f"{', '.join(f'{w:.2f}' for w in row['per_round'])} | {_fmt(row['ratio'], '.3f')} | "
                     f"{_fmt(row['latency_us'], '.1f')} |")
    parts, by_tree = split(trees)
    if parts:
        names = list(by_tree)
        lines += ["", "| part (s, median of rounds) | " + " | ".join(names) + " |",
                  "| --- |" + " --- |" * len(names)]
        lines += [f"| {p} | " + " | ".join(_fmt(by_tree[t].get(p), ".3f") for t in names) + " |" for p in parts]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path)
    ap.add_argument("--baseline", default=".old", help="the tree the others are divided by (default .old: "
                    "`gpu_session.sh trees` labels a carried folder by its name)")
    args = ap.parse_args(argv)
    trees = load(args.folder)
    if not trees:
        print(f"trees_table: no warm_<tree>_<round>.json in {args.folder}", file=sys.stderr)
        return 1
    print(render(trees, args.baseline))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
