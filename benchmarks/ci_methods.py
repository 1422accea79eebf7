"""Which interval method keeps A/A false keeps low and finds a real 3% change (issue 21), judged on the
raw times a GPU run of benchmarks/harness_speed.py recorded (its JSON's "samples").

The harness calls a candidate faster when the low end of its speedup's 95% interval clears the keep
margin in a confirming comparison with the roles swapped, run after a first comparison that said faster
or was undecided (its median above the margin, its interval's low end not). This script recomputes
that interval from the same raw times with each method below and counts, per method, the A/A
comparisons it would have kept (should be none) and the planted changes it would have found:

  independent   the harness's method: each shape's candidate and incumbent times resampled apart
  paired        a shape's reps resampled as pairs (rep j of both sides: the same inputs, one batch pair)
  paired-batch  pairs resampled within their batch (each batch keeps its weight in every resample)

A confirming comparison ran only where the harness's own method passed the first (before 2026-12-07: only
where it kept it): where another method would pass a first comparison that has no recorded second, it is
counted "unconfirmed", apart. CPU only:

    python3 benchmarks/ci_methods.py benchmarks/results/<run>/speed/speed_after.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: the repository's packages before any installed copy
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autokernel_tui.harness import stats  # noqa: E402

METHODS = ("independent", "paired", "paired-batch")


def interval(rows: list[dict], method: str, seed: int) -> tuple[float, float, float]:
    """(speedup, low, high) of one comparison's rows by ``method`` (the harness seeds with the row count)."""
    pairs = [(r["candidate_us"], r["incumbent_us"]) for r in rows]
    if method == "independent":
        return stats.bootstrap_speedup(pairs, seed=seed)
    batch = [r.get("batch") if method == "paired-batch" else None for r in rows]
    return stats.paired_bootstrap_speedup(pairs, batch, seed=seed)


def verdict(samples: list[dict], first: tuple[float, float, float], method: str, margin: float) -> str:
    """"kept", "not kept" or "unconfirmed" (first passed, no confirming comparison on record); ``first``:
    the first comparison's (speedup, low, high) by ``method``, passed when faster or undecided."""
    if not stats.screen_passed(first[0], first[1], margin):
        return "not kept"
    if len(samples) < 2:
        return "unconfirmed"
    second = interval(samples[1]["rows"], method, len(samples[1]["rows"]))
    return "kept" if second[1] > margin else "not kept"


def tally(comparisons: list[list[dict] | None], margin: float) -> dict[str, dict[str, int]]:
    recorded = [c for c in comparisons if c]
    out = {}
    for method in METHODS:
        counts = {"kept": 0, "not kept": 0, "unconfirmed": 0, "n": len(recorded)}
        widths = []
        for c in recorded:
            first = interval(c[0]["rows"], method, len(c[0]["rows"]))
            counts[verdict(c, first, method, margin)] += 1
            widths.append(first[2] - first[1])
        counts["median_ci_width"] = round(stats.median(widths), 4) if widths else None
        out[method] = counts
    return out


def analyse(data: dict) -> list[dict]:
    rows = []
    for result in data["results"]:
        aa = result.get("aa") or {}
        margin = aa.get("keep_margin", 1.01)
        if aa.get("samples"):
            rows.append({"task": result["task"], "what": "A/A", "tally": tally(aa["samples"], margin)})
        for variant in result.get("variants", []):
            if variant.get("samples"):
                rows.append({"task": result["task"], "what": variant["label"],
                             "tally": tally(variant["samples"], margin)})
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| task | comparisons | method | kept | unconfirmed | median CI width (first) |",
             "| --- | --- | --- | ---: | ---: | ---: |"]
    for r in rows:
        for method, t in r["tally"].items():
            lines.append(f"| {r['task']} | {r['what']} | {method} | {t['kept']}/{t['n']} | {t['unconfirmed']} | "
                         f"{t['median_ci_width']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", help="a harness_speed.py JSON with raw samples")
    args = parser.parse_args(argv)
    rows = analyse(json.loads(Path(args.json).read_text()))
    if not rows:
        print(f"{args.json}: no raw samples (harness_speed.py records them from 2026-12-05 on)", file=sys.stderr)
        return 1
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
