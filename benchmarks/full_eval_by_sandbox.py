"""The rmsnorm starter's full evaluation (cold, then warm) and A/A comparisons under each sandbox mode.

Run 15 (H100, Landlock alone) saw `test_rmsnorm_full_evaluation_on_the_gpu` fail with its reason cut off:
this prints each warm evaluation's status, reason, wall and compile seconds and time split per mode, so a
failure (or a slow transfer of outputs as files under Landlock alone) shows with its cause.

    python benchmarks/full_eval_by_sandbox.py [--task rmsnorm] [--modes bwrap,landlock,off] [--aa N] [--json F]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autokernel_tui.harness.runner import Harness  # noqa: E402
from autokernel_tui.tasks.spec import starters_dir  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="rmsnorm")
    ap.add_argument("--modes", default="bwrap,landlock,off")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--aa", type=int, default=0, help="and this many A/A comparisons of the starter per mode")
    ap.add_argument("--json")
    args = ap.parse_args()
    task = starters_dir() / args.task
    rows = []
    for mode in args.modes.split(","):
        row = {"mode": mode}
        try:
            with Harness(timeout_s=600, device=args.device, sandbox=mode) as h:
                t0 = time.perf_counter()
                cold = h.evaluate(task)
                row["cold_s"] = time.perf_counter() - t0
                row["cold_status"], row["cold_reason"] = cold.status, cold.reason
                warm = h.evaluate(task)
                row.update(status=warm.status, reason=warm.reason, wall_s=warm.wall_s, compile_s=warm.compile_s,
                           split=warm.time_split, confinement=h.device_info().get("sandbox", ""))
                source = (task / "kernel.py").read_text()
                row["aa"] = []
                for _ in range(args.aa):  # the same source on both sides: never a keep, never a verdict
                    cmp = h.compare(task, source, source)
                    row["aa"].append({"status": cmp.status, "reason": cmp.reason, "speedup": cmp.speedup,
                                      "ci": [cmp.ci_low, cmp.ci_high], "faster": cmp.faster,
                                      "cross_check": cmp.cross_check})
        except Exception as exc:  # one mode's failure must not hide the others'
            row.update(status="ERROR", reason=f"{type(exc).__name__}: {exc}")
        rows.append(row)
        print(json.dumps(row, default=str), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    print(f"\n{'mode':9} {'cold':>8} {'status':7} {'wall s':>7} {'compile s':>9}  reason")
    for r in rows:
        print(f"{r['mode']:9} {r.get('cold_s', 0):8.1f} {r['status']:7} {r.get('wall_s', 0):7.2f} "
              f"{r.get('compile_s', 0):9.2f}  {(r.get('reason') or '')[:160]}")
        for a in r.get("aa", []):
            print(f"  A/A {a['status']:8} {a['speedup']:.4f}x [{a['ci'][0]:.4f}, {a['ci'][1]:.4f}] "
                  f"{'KEEP ' if a['faster'] else ''}{a['reason'][:300]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
