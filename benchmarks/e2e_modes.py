"""End to end, every mode: GPT-2 small and the LLaMA-style model with the starters inside (issue 21).

For each model, ``verify`` in every mode (eager, torch.compile, CUDA graphs through
``mode="reduce-overhead"``; each with and without the kernels, the kernels as torch custom ops
under compile), with every forward starter that has a patch site, and its selection: in the
fastest mode's setting, each kernel timed alone inside the model, the ones that gain kept, the kept
set timed as a whole. For every mode built, a per-kernel profile (torch.profiler, device time per
kernel name, mean over 3 forwards): where the time goes in that mode.

GPU (about 6 minutes on an H200, most of it compiling):
    PYTHONPATH=$PWD python3 benchmarks/e2e_modes.py --json $OUT/e2e_modes.json
CPU smoke run (tiny models, Triton interpreter, eager modes only, numbers meaningless):
    TRITON_INTERPRET=1 python benchmarks/e2e_modes.py --quick
``--loss``: each model's evaluation pass instead (targets in, its loss out, no gradients), where the LM
head and its loss can run as one kernel (linear_cross_entropy).
Prints one table per model last: each mode's median forward time, its speedup over eager and over
torch.compile of the unpatched model, and whether its outputs match.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: the repository's packages before any installed copy
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def kernel_table(model, inputs, steps: int = 3, top: int = 14) -> dict:
    """Device time per kernel name over ``steps`` forwards (mean per forward), the top ones and the total."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from autokernel_tui.profiling.verify import _forward

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    _forward(model, inputs)
    with profile(activities=acts) as prof:
        for _ in range(steps):
            _forward(model, inputs)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    per: dict[str, float] = {}
    for e in prof.events():
        if getattr(e, "device_type", None) is not None and str(e.device_type).endswith("CUDA"):
            if e.name.startswith("autokernel::"):  # the zoo's and the patch's ranges, not kernels
                continue
            per[e.name] = per.get(e.name, 0.0) + e.device_time / steps  # microseconds
    ranked = sorted(per.items(), key=lambda kv: -kv[1])
    return {"total_us": sum(per.values()), "kernels": [{"name": n[:90], "us": us} for n, us in ranked[:top]]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="gpt2,llama")
    p.add_argument("--quick", action="store_true", help="tiny models on the CPU (path only)")
    p.add_argument("--loss", action="store_true",
                   help="each model's evaluation pass (targets in, its loss out, no gradients) instead of the "
                        "forward alone: where an LM head's logits go only to the loss (linear_cross_entropy)")
    p.add_argument("--iters", type=int)
    p.add_argument("--json", metavar="FILE")
    args = p.parse_args()
    import torch

    gpu = torch.cuda.is_available() and not args.quick
    if not gpu:
        os.environ["TRITON_INTERPRET"] = "1"
    from autokernel_tui.profiling.verify import GPU_MODES, kernel_paths, verify, where
    from autokernel_tui.tasks.spec import starters_dir

    shapes = {"gpt2": ("gpt2", 8, 1024, None), "llama": ("llama", 1, 4096, 2)}
    tiny = {"gpt2": ("gpt2-tiny", 2, 16, None), "llama": ("llama-tiny", 2, 16, None)}
    forward = [t for t in kernel_paths(starters_dir()) if not t.endswith("_bwd")]
    sets = {"all": forward}
    out: dict = {"device": torch.cuda.get_device_name() if gpu else "CPU (Triton interpreter)",
                 "torch": torch.__version__, "runs": {}}
    t0 = time.time()
    for key in args.models.split(","):
        zoo, batch, seq, layers = (shapes if gpu else tiny)[key]
        for set_name, tasks in sets.items():
            modes = GPU_MODES if gpu else ("eager", "eager+kernels")
            t1 = time.time()
            try:
                r = verify(zoo, kernel_paths(starters_dir(), tasks), batch=batch, seq=seq, dtype="bfloat16",
                           device="cuda" if gpu else "cpu", layers=layers, iters=args.iters, modes=modes,
                           inspect=lambda name, m, inputs: kernel_table(m, inputs), select=True, loss=args.loss)
            except Exception as exc:  # one failing set must not hide the others
                r = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300], "where": where(exc, 12)}
            r["wall_s"] = time.time() - t1
            run = f"{key}/{set_name}" + ("+loss" if args.loss else "")
            out["runs"][run] = r
            print(f"{run}: {r.get('error') or r.get('ship_reason')} ({r['wall_s']:.0f} s)", flush=True)
            out["wall_s"] = time.time() - t0
            if args.json:  # after every run: a call cut short keeps what it finished
                Path(args.json).write_text(json.dumps(out, indent=1, default=str), encoding="utf-8")
            if gpu:
                torch.cuda.empty_cache()
    summary(out)
    return 0


def summary(out: dict) -> None:
    print(f"=== e2e modes ({out['device']}, torch {out['torch']}, {out['wall_s']:.0f} s) ===")
    for name, r in out["runs"].items():
        if "error" in r:
            print(f"{name}: ERROR {r['error']}\n    " + "\n    ".join(r.get("where", [])))
            continue
        print(f"{name}: {r['model']} {r['dtype']} {r['batch']}x{r['seq']}, patched "
              + ", ".join(f"{f} {n}" for f, n in r["patched"].items() if n))
        for mode, m in r["modes"].items():
            if "median_us" not in m:
                print(f"  {mode:<20} {m.get('error') or m.get('skipped')}  " + " <- ".join(reversed(m.get("where", []))))
                continue
            vs = "  ".join(f"{m[k]:.3f}x vs {k[11:]}" for k in ("speedup_vs_eager", "speedup_vs_compile") if k in m)
            total = m.get("inspect", {}).get("total_us")
            kern = f"  kernels {total / 1e3:.3f} ms" if total else ""
            print(f"  {mode:<20} {m['median_us'] / 1e3:8.3f} ms  {'ok ' if m['correct'] else 'BAD'} {vs}{kern}")
        sel = r.get("selection") or {}
        for f, a in sel.get("alone", {}).items():
            got = f"{a['speedup']:.3f}x" if a.get("correct") and "speedup" in a else a.get("error") or "wrong outputs"
            print(f"    alone in {sel['mode']}: {f:<16} {got}  {'kept' if f in sel['ship_families'] else 'left out'}")
        print(f"  ship: {r['ship_reason']}")
    for name, r in out["runs"].items():
        for mode, m in r.get("modes", {}).items():
            if mode in ("compile", "compile+kernels") and m.get("inspect"):
                print(f"-- {name} {mode}: top kernels (us per forward)")
                for k in m["inspect"]["kernels"][:8]:
                    print(f"     {k['us']:9.1f}  {k['name']}")


if __name__ == "__main__":
    sys.exit(main())
