"""End-to-end verification: the kept kernels inside the real model.

1. Build the model twice from one seed; patch one copy (``patch.patch_model``).
2. Check the patched outputs against the original within the model's own precision noise
   (the original's distance from a float32 copy of itself), or a floor per dtype.
3. Time both, interleaved, median of N after warm-up (CUDA events on a GPU).
4. Profile both: each patched family's kernel time before and after gives the Amdahl
   prediction ``T / (T - sum t_f + sum t'_f)`` with ``T`` the *measured* time before (the
   basis of the measured speedup), shown beside it with what the prediction cannot see:
   the change in time outside kernels and in the other families' kernels.
"""

from __future__ import annotations

import copy
import statistics

from pathlib import Path

from autokernel_tui.errors import AutokernelError
from autokernel_tui.tasks import spec as taskspec

# Relative L2 error allowed against the original when the model's own noise is smaller.
ERROR_FLOOR = {"float32": 1e-4, "bfloat16": 2e-2, "float16": 5e-3}
NOISE_FACTOR = 3.0


class VerifyError(AutokernelError):
    """Verification cannot run as asked."""


def kernel_paths(kernels_dir: Path, tasks: list[str] | None = None) -> dict[str, Path]:
    """{task name: kernel.py} for the task folders under ``kernels_dir`` (a workspace's kernels/).

    Keyed by task name: the starter names are the patch families (flash_attention's
    task.toml family is the broader "attention")."""
    kernels_dir = Path(kernels_dir)
    specs = taskspec.find_tasks(kernels_dir) if kernels_dir.is_dir() else []
    if tasks:
        missing = sorted(set(tasks) - {s.name for s in specs})
        if missing:
            raise VerifyError(f"no task {', '.join(missing)} under {kernels_dir}")
        specs = [s for s in specs if s.name in tasks]
    if not specs:
        raise VerifyError(f"no task folders under {kernels_dir}")
    return {s.name: s.kernel_path for s in specs}


def _git(ws: Path, *args: str) -> str | None:
    import subprocess

    try:
        out = subprocess.run(["git", "-C", str(ws), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def kept_kernels_dir(ws: Path, run: str | None = None) -> tuple[Path, str]:
    """Where a workspace's kept kernels are: the tip of a run branch (``--run TAG``, else the
    newest ``autokernel/*`` branch; discarded experiments are reset, so the tip holds what was
    kept), else the workspace's own ``kernels/``. Returns (kernels folder, what it is)."""
    import tempfile

    ws = Path(ws)
    refs = _git(ws, "for-each-ref", "--sort=-committerdate", "--format=%(refname:short)", "refs/heads/autokernel/")
    branches = [r.strip() for r in (refs or "").splitlines() if r.strip()]
    if run:
        if f"autokernel/{run}" not in branches:
            raise VerifyError(f"no run {run!r} in {ws} (runs: {', '.join(b.split('/', 1)[1] for b in branches) or 'none'})")
        branch = f"autokernel/{run}"
    elif branches:
        branch = branches[0]
    else:
        return ws / "kernels", f"{ws / 'kernels'} (no run branch yet: the workspace's checkout)"
    sha = (_git(ws, "rev-parse", branch) or "").strip()
    listing = _git(ws, "ls-tree", "-r", "--name-only", branch, "kernels/") or ""
    dest = Path(tempfile.mkdtemp(prefix="autokernel-kept-")) / "kernels"
    for path in listing.splitlines():
        parts = path.split("/")
        if len(parts) != 3 or parts[2] not in (taskspec.SPEC_FILE, taskspec.REFERENCE_FILE, taskspec.KERNEL_FILE):
            continue
        text = _git(ws, "show", f"{sha}:{path}")
        if text is not None:
            (dest / parts[1]).mkdir(parents=True, exist_ok=True)
            (dest / parts[1] / parts[2]).write_text(text, encoding="utf-8")
    return dest, f"run {branch.split('/', 1)[1]} ({branch} at {sha[:10]})"



def chosen_kernels(args) -> tuple[Path, str, dict[str, Path]]:
    """The kernels a verify/export command line names: --kernels DIR, else the workspace's kept
    kernels (--run TAG), filtered by --tasks. Returns (folder, what it is, {task: kernel.py})."""
    ws = Path(args.workspace_flag or args.workspace)
    if args.kernels:
        kdir, where = Path(args.kernels), str(args.kernels)
    else:
        kdir, where = kept_kernels_dir(ws, args.run)
    tasks = [t.strip() for t in args.tasks.split(",")] if args.tasks else None
    return kdir, where, kernel_paths(kdir, tasks)

def model_args_from_tasks(kernels_dir: Path) -> dict:
    """The model a workspace was extracted from (its tasks' [profile] tables), or {}."""
    for s in taskspec.find_tasks(kernels_dir) if Path(kernels_dir).is_dir() else []:
        p = s.profile
        if p.get("model"):
            return {"model": p["model"], "batch": p.get("batch") or None, "seq": p.get("seq") or None,
                    "dtype": p.get("dtype"), "layers": p.get("layers")}
    return {}


def _tensor(out):
    import torch

    if hasattr(out, "logits"):
        out = out.logits
    if isinstance(out, (tuple, list)):
        out = next(o for o in out if isinstance(o, torch.Tensor))
    return out


def rel_l2(a, b) -> float:
    a, b = a.double(), b.double()
    denom = b.norm().item()
    return (a - b).norm().item() / (denom if denom > 0 else 1.0)


def _forward(model, inputs):
    import torch

    with torch.no_grad():
        return _tensor(model(*inputs))


def _time(models: list, inputs, iters: int, warmup: int, device: str) -> list[list[float]]:
    """Per model, ``iters`` forward times in microseconds, interleaved so drift hits all alike."""
    import time

    import torch

    cuda = device.startswith("cuda")
    for _ in range(warmup):
        for m in models:
            _forward(m, inputs)
    if cuda:
        torch.cuda.synchronize()
    times: list[list[float]] = [[] for _ in models]
    for _ in range(iters):
        for i, m in enumerate(models):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                _forward(m, inputs)
                end.record()
                end.synchronize()
                times[i].append(start.elapsed_time(end) * 1e3)
            else:
                t0 = time.perf_counter()
                _forward(m, inputs)
                times[i].append((time.perf_counter() - t0) * 1e6)
    return times


def _stats(xs: list[float]) -> dict:
    xs = sorted(xs)
    q = lambda f: xs[min(len(xs) - 1, int(f * (len(xs) - 1) + 0.5))]  # noqa: E731
    return {"median_us": statistics.median(xs), "p20_us": q(0.2), "p80_us": q(0.8), "n": len(xs)}


def _family_times(bundle, model, steps: int) -> dict:
    from autokernel_tui.profiling.amdahl import rank
    from autokernel_tui.profiling.capture import profile_bundle

    b = copy.copy(bundle)
    b.model, b.train = model, False
    prof = rank(profile_bundle(b, steps=steps, warmup=1))
    return {"total_us": prof["total_us"],
            "families": {f["family"]: {"time_us": f["time_us"], "kernels": [k["name"] for k in f["kernels"][:4]]}
                         for f in prof["families"]}}


def verify(model: str, kernels: dict[str, Path], batch=None, seq=None, dtype=None, device="auto", train=False,
           layers=None, iters: int | None = None, warmup: int | None = None, families: list[str] | None = None,
           profile_steps: int | None = None) -> dict:
    """Patch ``kernels`` ({family: kernel.py}) into ``model`` and compare it with the original."""
    import torch

    from autokernel_tui.profiling.pipeline import default_dtype
    from autokernel_tui.profiling.patch import load_kernels, patch_model
    from autokernel_tui.profiling.zoo import load_model

    dtype = default_dtype(dtype, device)
    bundle = load_model(model, batch=batch, seq=seq, dtype=dtype, device=device, train=train, layers=layers)
    gpu = bundle.device.startswith("cuda")
    iters = iters or (30 if gpu else 3)
    warmup = warmup if warmup is not None else (5 if gpu else 1)
    original = bundle.model.eval()
    patched = copy.deepcopy(original)
    counts = patch_model(patched, load_kernels(kernels), families)
    if not any(counts.values()):
        raise VerifyError(f"none of the kernels ({', '.join(sorted(kernels))}) has a patch site in {model}")
    inputs = bundle.inputs
    out0, out1 = _forward(original, inputs), _forward(patched, inputs)
    # The model's own precision noise: the original against a float32 copy of itself.
    noise = 0.0
    if dtype != "float32":
        ref32 = copy.deepcopy(original).float()
        out32 = _forward(ref32, tuple(x.float() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                                      for x in inputs))
        noise = rel_l2(out0.float(), out32)
        del ref32
    err = rel_l2(out1.float(), out0.float())
    tol = max(NOISE_FACTOR * noise, ERROR_FLOOR[dtype])
    finite = bool(torch.isfinite(out1).all())
    passed = finite and err <= tol
    times = _time([original, patched], inputs, iters, warmup, bundle.device)
    before, after = _stats(times[0]), _stats(times[1])
    steps = profile_steps or (3 if gpu else 1)
    prof0, prof1 = _family_times(bundle, original, steps), _family_times(bundle, patched, steps)
    patched_fams = [f for f, n in counts.items() if n]
    per_family = []
    t_before = t_after = 0.0
    for f in patched_fams:
        a = prof0["families"].get(f, {}).get("time_us", 0.0)
        b = prof1["families"].get(f, {}).get("time_us", 0.0)
        t_before += a
        t_after += b
        per_family.append({"family": f, "modules": counts[f], "share": a / prof0["total_us"] if prof0["total_us"] else 0,
                           "before_us": a, "after_us": b, "kernel_speedup": a / b if b > 0 else None,
                           "kernels_after": prof1["families"].get(f, {}).get("kernels", [])})
    # Same basis as the measurement: the measured forward time before, minus the patched
    # families' profiled kernel time, plus their kernel time after. What it cannot see is
    # time outside kernels (launch gaps, Python) and other families' kernels changing.
    m0, m1 = before["median_us"], after["median_us"]
    predicted_after = m0 - t_before + t_after
    predicted = m0 / predicted_after if predicted_after > 0 else None
    gap = {"kernel_us": [prof0["total_us"], prof1["total_us"]],
           "outside_kernels_us": [m0 - prof0["total_us"], m1 - prof1["total_us"]],
           "other_kernels_us": [prof0["total_us"] - t_before, prof1["total_us"] - t_after],
           "predicted_after_us": predicted_after}
    return {
        "model": bundle.name, "device": prof_device(bundle.device), "dtype": dtype, "batch": bundle.batch,
        "seq": bundle.seq, "mode": "forward" + (" with loss" if train else ""),
        "timing_meaningful": gpu, "timing_method": "CUDA events, interleaved, median" if gpu
        else "perf_counter on the CPU (Triton interpreter): not meaningful",
        "patched": counts, "unpatched_families": [f for f, n in counts.items() if not n],
        "correct": passed, "finite": finite, "rel_l2_vs_original": err, "tolerance": tol,
        "model_noise_rel_l2": noise,
        "before": before, "after": after,
        "measured_speedup": before["median_us"] / after["median_us"] if after["median_us"] > 0 else None,
        "predicted_speedup": predicted, "prediction_gap": gap, "families": per_family,
        "kernels": {f: str(p) for f, p in kernels.items()},
    }


def prof_device(device: str) -> str:
    from autokernel_tui.profiling.capture import device_name

    return device_name(device)


def format_result(r: dict) -> str:
    def x(v):
        return f"{v:.3f}x" if isinstance(v, (int, float)) else "n/a"

    lines = [f"verify {r['model']} on {r['device']}: {r['dtype']}, batch {r['batch']} x seq {r['seq']}, {r['mode']}",
             "patched: " + ", ".join(f"{f} ({n} modules)" for f, n in r["patched"].items() if n)]
    if r["unpatched_families"]:
        lines.append("no patch site in this model for: " + ", ".join(r["unpatched_families"]))
    verdict = "PASS" if r["correct"] else "FAIL"
    lines.append(f"outputs: {verdict}: rel L2 {r['rel_l2_vs_original']:.2e} vs original (tolerance {r['tolerance']:.1e}; "
                 f"the model's own {r['dtype']} noise {r['model_noise_rel_l2']:.1e})" + ("" if r["finite"] else ", NON-FINITE"))
    b, a = r["before"], r["after"]
    lines.append(f"time: {b['median_us'] / 1e3:.3f} ms -> {a['median_us'] / 1e3:.3f} ms "
                 f"(median of {b['n']}, p20-p80 {a['p20_us'] / 1e3:.3f}-{a['p80_us'] / 1e3:.3f} ms; {r['timing_method']})")
    lines.append(f"end to end: measured {x(r['measured_speedup'])}, predicted {x(r['predicted_speedup'])} "
                 "(measured time before - patched families' profiled kernel time before + after)")
    g = r.get("prediction_gap")
    if g:
        d_out = g["outside_kernels_us"][1] - g["outside_kernels_us"][0]
        d_other = g["other_kernels_us"][1] - g["other_kernels_us"][0]
        lines.append(f"  measured - predicted after: {(a['median_us'] - g['predicted_after_us']) / 1e3:+.3f} ms = "
                     f"time outside kernels (launch gaps, Python) {d_out / 1e3:+.3f} ms + other families' kernels "
                     f"{d_other / 1e3:+.3f} ms")
    for f in r["families"]:
        if f["before_us"] == 0 and f["after_us"] == 0:
            lines.append(f"  {f['family']:<16} patched but not run in this mode")
            continue
        lines.append(f"  {f['family']:<16} share {100 * f['share']:5.1f}%  {f['before_us']:10.1f} us -> "
                     f"{f['after_us']:10.1f} us  kernel {x(f['kernel_speedup'])}")
    if not r["timing_meaningful"]:
        lines.append("CPU: kernels ran in the Triton interpreter; the check is real, the timings are not.")
    return "\n".join(lines)



