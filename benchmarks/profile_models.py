"""Profile GPT-2 small and the LLaMA-style model, verify the starters inside them, export, reproduce.

GPU (about 5 minutes on an H200):

    python benchmarks/profile_models.py --out "$OUT"

CPU smoke run of the same path (tiny models, Triton interpreter, numbers meaningless):

    TRITON_INTERPRET=1 python benchmarks/profile_models.py --quick --out /tmp/pm

Writes ``profile_models.json`` (everything), ``profile-<model>-<mode>.json`` (one ranked
profile each, usable with ``autokernel-tui init --from-profile``) and prints the ranked
tables, then the verify and reproduction summary last.
Needs torch + triton only (no textual, anthropic or gitpython).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: the repository's packages before any installed copy
    sys.path.insert(0, str(ROOT))


def _args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "profile_models_out"),
                   help="results folder (default: $OUT, else ./profile_models_out)")
    p.add_argument("--quick", action="store_true", help="tiny models on the CPU: exercises the path, not the GPU")
    p.add_argument("--iters", type=int, default=None, help="timed iterations per verify")
    return p.parse_args()


def main() -> int:
    args = _args()
    import torch

    gpu = torch.cuda.is_available() and not args.quick
    if not gpu:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported by any kernel file
    from autokernel_tui.profiling.amdahl import format_table
    from autokernel_tui.profiling.pipeline import run_profile
    from autokernel_tui.profiling.export import export_package
    from autokernel_tui.profiling.verify import format_result, kernel_paths, verify
    from autokernel_tui.tasks.spec import starters_dir

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = "cuda" if gpu else "cpu"
    dtype = "bfloat16"
    models = {  # name -> (zoo name, batch, seq, layers)
        "gpt2": ("gpt2" if gpu else "gpt2-tiny", 8 if gpu else 2, 1024 if gpu else 16, None),
        "llama": ("llama" if gpu else "llama-tiny", 1 if gpu else 2, 4096 if gpu else 16, 2),
    }
    results: dict = {"device": torch.cuda.get_device_name() if gpu else "CPU (Triton interpreter)",
                     "torch": torch.__version__, "profiles": {}, "verify": {}, "reproduce": None}
    t_start = time.time()

    # 1. Ranked profiles: inference and one training step of each model.
    for key, (zoo, batch, seq, layers) in models.items():
        for train in (False, True):
            mode = "train" if train else "infer"
            prof = run_profile(zoo, batch=batch, seq=seq, dtype=dtype, train=train, layers=layers, device=device,
                               steps=5 if gpu else 1)
            path = out / f"profile-{key}-{mode}.json"
            path.write_text(json.dumps(prof, indent=1))
            print(format_table(prof, limit=14), "\n", flush=True)
            results["profiles"][f"{key}-{mode}"] = {
                "file": path.name, "time_kind": prof["time_kind"], "total_us": prof["total_us"], "wall_us": prof["wall_us"],
                "families": [{k: f[k] for k in ("rank", "family", "task", "share", "time_us", "floor_us", "headroom",
                                                "gain", "floor_known")} for f in prof["families"]],
                "other_kernels": next((f["kernels"][:10] for f in prof["families"] if f["family"] == "other"), []),
            }
            torch.cuda.empty_cache() if gpu else None

    # 2. verify: the starters swapped in, measured end to end vs predicted.
    starters = starters_dir()
    sets = {"starters-no-matmul": [t for t in kernel_paths(starters) if t not in ("matmul", "add_rmsnorm")],
            "matmul-only": ["matmul"]}
    for key, (zoo, batch, seq, layers) in models.items():
        for set_name, tasks in sets.items():
            try:
                r = verify(zoo, kernel_paths(starters, tasks), batch=batch, seq=seq, dtype=dtype, device=device,
                           layers=layers, iters=args.iters or (30 if gpu else 1), warmup=5 if gpu else 0)
            except Exception as exc:  # one failing set must not hide the others' numbers
                r = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
                print(f"verify {key} {set_name}: {r['error']}", flush=True)
            else:
                print(format_result(r), "\n", flush=True)
            results["verify"][f"{key}/{set_name}"] = r
            torch.cuda.empty_cache() if gpu else None

    # 3. Export the non-matmul starters and patch a fresh LLaMA in a fresh process with the package alone.
    pkg = out / "pkg" / "autokernel_kernels"
    if pkg.exists():
        import shutil

        shutil.rmtree(pkg)
    export_package(pkg, kernel_paths(starters, sets["starters-no-matmul"]), source=str(starters))
    zoo, batch, seq, layers = models["llama"]
    results["reproduce"] = _reproduce(pkg, zoo, batch, seq, layers, dtype, device, args.iters or (30 if gpu else 1))
    results["wall_s"] = time.time() - t_start
    (out / "profile_models.json").write_text(json.dumps(results, indent=1, default=str))
    (out / "profile_models.md").write_text(_markdown(results, " ".join(sys.argv[1:])))
    _summary(results)
    return 0


def _reproduce(pkg: Path, zoo, batch, seq, layers, dtype, device, iters) -> dict:
    """A fresh interpreter: build the model, time it, ``patch`` it with the exported package, time again.

    Timed as ``verify`` times a model (``profiling.verify._time``: the whole forward as called, CUDA
    events, median), so the reproduction's numbers compare with verify's."""
    script = textwrap.dedent(f"""
        import json, sys, torch
        sys.path.insert(0, {str(ROOT)!r})            # the zoo model only; the kernels come from the package
        from autokernel_tui.profiling.zoo import load_model
        from autokernel_tui.profiling.verify import _stats, _time
        b = load_model({zoo!r}, batch={batch}, seq={seq}, dtype={dtype!r}, device={device!r}, layers={layers!r})
        sys.path.insert(0, {str(pkg.parent)!r})
        import {pkg.name} as pkg
        def run():
            with torch.no_grad():
                return b.model(*b.inputs)
        def timed():
            return _stats(_time([b.model], b.inputs, {iters}, 3, {device!r})[0])["median_us"]
        ref = run().float(); before = timed()
        counts = pkg.patch(b.model)
        got = run().float(); after = timed()
        err = ((got - ref).norm() / ref.norm()).item()
        print(json.dumps({{"patched": counts, "rel_l2": err, "before_us": before, "after_us": after,
                          "speedup": before / after}}))
    """)
    env = dict(os.environ)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=560, env=env)
    if res.returncode != 0:
        return {"error": res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"exit {res.returncode}"}
    return json.loads(res.stdout.strip().splitlines()[-1])


def _markdown(results: dict, argv: str) -> str:
    """A section for docs/benchmarks.md: the command, the ranked tables, verify and reproduction."""
    lines = ["## Profiles, Amdahl ranking and end-to-end verify", "",
             f"`python benchmarks/profile_models.py {argv}` on {results['device']}, torch {results['torch']} "
             f"({results['wall_s']:.0f} s). Ranked by the end-to-end speedup if the family reached its roofline "
             "floor (Amdahl), not by time. Raw: `profile_models.json`.", ""]
    for name, p in results["profiles"].items():
        kind = "GPU kernel time" if p["time_kind"] == "cuda" else "CPU op time (not meaningful)"
        lines += [f"### {name}: {p['total_us'] / 1e3:.2f} ms of {kind} per step "
                  f"(wall {p['wall_us'] / 1e3:.2f} ms)", "",
                  "| # | family | task | share | time (us) | floor (us) | headroom | if at floor |",
                  "|---|---|---|---|---|---|---|---|"]
        for f in p["families"][:10]:
            lines.append(f"| {f['rank']} | {f['family']} | {f['task'] or '-'} | {100 * f['share']:.1f}% | "
                         f"{f['time_us']:.0f} | {f['floor_us']:.0f} | {f['headroom']:.2f}x | {f['gain']:.3f}x |")
        lines.append("")
    lines += ["### verify: starters inside the model (bf16 forward, CUDA events, median of 30)", "",
              "predicted = measured before - patched families' kernel time before + after (profiled); "
              "the miss is the change in time outside kernels and in the other families' kernels.", "",
              "| model / kernels | outputs | rel L2 (tolerance) | before (ms) | after (ms) | measured | predicted |",
              "|---|---|---|---|---|---|---|"]
    for name, r in results["verify"].items():
        if "error" in r:
            lines.append(f"| {name} | ERROR: {r['error']} | | | | | |")
            continue
        pred = f"{r['predicted_speedup']:.3f}x" if r["predicted_speedup"] else "n/a"
        lines.append(f"| {name} | {'PASS' if r['correct'] else 'FAIL'} | {r['rel_l2_vs_original']:.1e} "
                     f"({r['tolerance']:.0e}) | {r['before']['median_us'] / 1e3:.3f} | "
                     f"{r['after']['median_us'] / 1e3:.3f} | {r['measured_speedup']:.3f}x | {pred}{_miss(r)} |")
    rep = results["reproduce"] or {}
    lines += ["", "Exported package patched into a fresh LLaMA in a fresh process: " +
              (f"ERROR {rep['error']}" if "error" in rep else
               f"patched {rep['patched']}, rel L2 {rep['rel_l2']:.1e}, {rep['before_us'] / 1e3:.3f} ms -> "
               f"{rep['after_us'] / 1e3:.3f} ms = {rep['speedup']:.3f}x"), ""]
    return "\n".join(lines)


def _miss(r: dict) -> str:
    """Why measured and predicted differ: the change in time outside kernels and in other kernels."""
    g = r.get("prediction_gap")
    if not g:
        return ""
    d_out = (g["outside_kernels_us"][1] - g["outside_kernels_us"][0]) / 1e3
    d_other = (g["other_kernels_us"][1] - g["other_kernels_us"][0]) / 1e3
    return f"  (miss: outside kernels {d_out:+.3f} ms, other kernels {d_other:+.3f} ms)"


def _summary(results: dict) -> None:
    print(f"=== summary ({results['device']}, torch {results['torch']}, {results['wall_s']:.0f} s) ===")
    for name, p in results["profiles"].items():
        top = ", ".join(f"{f['family']} {100 * f['share']:.0f}%->{f['gain']:.2f}x" for f in p["families"][:4])
        print(f"profile {name:<12} {p['total_us'] / 1e3:8.2f} ms/step  top by gain: {top}")
        unknown = [f["family"] for f in p["families"] if f["task"] and not f.get("floor_known", True)]
        if unknown:
            print(f"        {name}: NO ROOFLINE FLOOR (no shapes reached) for {', '.join(unknown)}")
    for name, r in results["verify"].items():
        if "error" in r:
            print(f"verify  {name:<30} ERROR {r['error']}")
            continue
        ok = "PASS" if r["correct"] else "FAIL"
        print(f"verify  {name:<30} {ok} relL2 {r['rel_l2_vs_original']:.1e}  measured "
              f"{r['measured_speedup']:.3f}x  predicted {r['predicted_speedup'] or float('nan'):.3f}x{_miss(r)}")
    rep = results["reproduce"] or {}
    if "error" in rep:
        print(f"reproduce (exported package, fresh process): ERROR {rep['error']}")
    else:
        print(f"reproduce (exported package, fresh process): patched {rep['patched']}, relL2 {rep['rel_l2']:.1e}, "
              f"{rep['before_us'] / 1e3:.3f} ms -> {rep['after_us'] / 1e3:.3f} ms = {rep['speedup']:.3f}x")


if __name__ == "__main__":
    sys.exit(main())
