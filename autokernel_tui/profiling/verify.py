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
import json
import re
import statistics

from pathlib import Path

from autokernel_tui.errors import AutokernelError
from autokernel_tui.tasks import spec as taskspec

# Relative L2 error allowed against the original when the model's own noise is smaller.
ERROR_FLOOR = {"float32": 1e-4, "bfloat16": 2e-2, "float16": 5e-3}
NOISE_FACTOR = 3.0
# How a model can be run, with and without the kernels: (kernels in?, torch.compile mode or None).
# "+kernels" under compile calls each kernel as a torch custom op inside Inductor's graph; the
# "cudagraphs" modes are torch.compile(mode="reduce-overhead"), whose CUDA graphs take the host's
# launch cost away. The unpatched rows are what a user gets without us.
MODES: dict[str, tuple[bool, str | None]] = {
    "eager": (False, None), "eager+kernels": (True, None),
    "compile": (False, "default"), "compile+kernels": (True, "default"),
    "cudagraphs": (False, "reduce-overhead"), "cudagraphs+kernels": (True, "reduce-overhead"),
}
GPU_MODES = tuple(MODES)


def without_kernels(mode: str) -> str:
    """The mode of the same compile setting without the kernels ("cudagraphs+kernels" -> "cudagraphs")."""
    return next(n for n, (kernels, setting) in MODES.items() if not kernels and setting == MODES[mode][1])
CPU_MODES: tuple[str, ...] = ()  # compiling on the CPU takes minutes, and its times mean nothing


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


def _time(models: list, inputs, iters: int, warmup: int, device: str,
          on_forward=None, failures: dict[int, BaseException] | None = None) -> list[list[float]]:
    """Per model, ``iters`` forward times in microseconds, interleaved so drift hits all alike.
    ``on_forward(i, seconds)`` is called after each forward pass of model ``i`` (progress). With
    ``failures`` given, a model whose forward raises is recorded there (index -> exception) and left out
    of the rest, its times as far as they got; without it, the exception ends the timing."""
    import time

    import torch

    cuda = device.startswith("cuda")
    tick = on_forward or (lambda i, seconds: None)
    times: list[list[float]] = [[] for _ in models]

    def one(i: int, m, timed: bool) -> None:
        if cuda:
            # Each forward is a step of its own to CUDA graph trees: models compiled with
            # "reduce-overhead" run interleaved here, and without the mark a run of one was taken for a
            # continuation of the other's (run 18, H100: ViT's cudagraphs modes failed an assertion in
            # cudagraph_trees.dealloc_current_path_weakrefs).
            torch.compiler.cudagraph_mark_step_begin()
        t_call = time.perf_counter()
        if cuda and timed:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            _forward(m, inputs)
            end.record()
            end.synchronize()
            times[i].append(start.elapsed_time(end) * 1e3)
        else:
            _forward(m, inputs)
            if timed:
                times[i].append((time.perf_counter() - t_call) * 1e6)
        tick(i, time.perf_counter() - t_call)

    def each(timed: bool) -> None:
        for i, m in enumerate(models):
            if failures is not None and i in failures:
                continue
            try:
                one(i, m, timed)
            except Exception as exc:  # noqa: BLE001 - with ``failures`` given, one mode's failure is its finding
                if failures is None:
                    raise
                failures[i] = exc

    for _ in range(warmup):
        each(False)
    if cuda:
        torch.cuda.synchronize()
    for _ in range(iters):
        each(True)
    return times


def _stats(xs: list[float]) -> dict:
    xs = sorted(xs)
    q = lambda f: xs[min(len(xs) - 1, int(f * (len(xs) - 1) + 0.5))]  # noqa: E731
    return {"median_us": statistics.median(xs), "p20_us": q(0.2), "p80_us": q(0.8), "n": len(xs)}


def _family_times(bundle, model, steps: int, on_step=None, named: dict[str, str] | None = None) -> dict:
    from autokernel_tui.profiling.amdahl import rank
    from autokernel_tui.profiling.capture import profile_bundle

    b = copy.copy(bundle)
    b.model, b.train = model, False
    prof = rank(profile_bundle(b, steps=steps, warmup=1, on_step=on_step, named=named))
    return {"total_us": prof["total_us"],
            "families": {f["family"]: {"time_us": f["time_us"], "kernels": [k["name"] for k in f["kernels"][:4]]}
                         for f in prof["families"]}}


def without_placeholders(kernels: dict[str, Path]) -> tuple[dict[str, Path], list[str]]:
    """(the kernels that are kernels, the generated tasks whose kernel.py only raises: no starter yet)."""
    from autokernel_tui.profiling.generate import has_no_starter

    empty = sorted(t for t, p in kernels.items() if has_no_starter(p))
    return {t: p for t, p in kernels.items() if t not in empty}, empty


def split_generated(kernels: dict[str, Path]) -> tuple[dict[str, Path], dict[str, Path]]:
    """(starters: patched by module, generated tasks: patched into the model's traced graph)."""
    from autokernel_tui.profiling.graph_patch import is_generated

    generated = {t: p for t, p in kernels.items() if is_generated(p)}
    return {t: p for t, p in kernels.items() if t not in generated}, generated


def generated_backwards(generated: dict[str, Path]) -> dict[str, tuple[int, ...]]:
    """{task: grad_inputs} for the generated backward tasks (``kind = "backward"``) among ``generated``:
    they go into a training step beside their chain's forward (``graph_patch``), never into inference."""
    out = {}
    for task, path in generated.items():
        folder = Path(path).parent
        if (folder / taskspec.SPEC_FILE).is_file():  # a bare kernel.py beside a reference.py: a forward
            spec = taskspec.load_spec(folder)
            if spec.kind == "backward":
                out[task] = tuple(spec.grad_inputs)
    return out


def profiled_family(task: str, kernel_path: Path) -> str:
    """The family a task's kernel time is profiled under: a starter's name is its patch family; a
    generated task's kernel runs under its task.toml family (``graph_patch`` labels it so)."""
    from autokernel_tui.profiling.graph_patch import is_generated

    if not is_generated(kernel_path):
        return task
    try:
        return taskspec.load_spec(Path(kernel_path).parent).family
    except Exception:  # noqa: BLE001 - a task.toml that does not load: profile it under its name
        return task


def generated_kernel_names(kernels: dict[str, Path]) -> dict[str, str]:
    """{Triton kernel name: the family it is profiled under} for the generated tasks among ``kernels``
    (a Triton kernel's name on the GPU is its function's name)."""
    from autokernel_tui.profiling.graph_patch import is_generated

    out = {}
    for task, path in kernels.items():
        if is_generated(path):
            family = profiled_family(task, path)
            text = Path(path).read_text(encoding="utf-8")
            out.update(dict.fromkeys(re.findall(r"@triton\.jit\s*\n\s*def\s+(\w+)", text), family))
    return out


def _fused(model) -> dict[str, dict[str, int]]:
    """``patch.fused_counts``: which families' modules a fused kernel now does, and how many."""
    from autokernel_tui.profiling.patch import fused_counts

    return fused_counts(model)


# (model, the fusing kernels, input signature) -> (the model, weakly; [(a Linear's name, its taker's name)])
_PAIRS: dict = {}


def _epilogue_pairs(original, m, inputs, fns: dict, skip: set[int]) -> dict:
    """``graph_patch.epilogue_pairs`` of ``original`` as modules of its copy ``m`` (by name), less ``skip``.
    One trace per model, kernel and input signature: ``verify`` patches many copies of one model."""
    import weakref

    import torch

    from autokernel_tui.profiling.graph_patch import epilogue_pairs

    key = (id(original), id(fns.get("matmul")), id(fns.get("linear_cross_entropy")),
           tuple((tuple(x.shape), x.dtype) for x in inputs if isinstance(x, torch.Tensor)))
    held = _PAIRS.get(key)
    if held is None or held[0]() is not original:  # a weak reference: an id is reused once its model is gone
        where = {id(mod): name for name, mod in original.named_modules()}
        names = [(where[lin], where[id(act)]) for lin, act in epilogue_pairs(original, inputs, fns).items()]
        held = _PAIRS[key] = (weakref.ref(original), names)
    mods = dict(m.named_modules())
    return {id(mods[lin]): mods[act] for lin, act in held[1]
            if lin in mods and act in mods and not {id(mods[lin]), id(mods[act])} & skip}


def patched_copy(original, kernels: dict[str, Path], families, inputs, custom_ops: bool = False,
                 backwards: dict | None = None):
    """(a copy of ``original`` with ``kernels`` in, {task: modules or sites replaced}). Starters replace
    modules (``patch.py``); generated tasks replace their recorded chain in the model's traced graph
    (``graph_patch.py``), which then runs as a ``GraphPatched`` module. A module that a generated
    chain runs through is left to the chain (``graph_patch.covered_modules``). The starters are custom ops
    whenever the graph is traced: a plain Triton launch is invisible to the trace.

    ``backwards`` ({family: Backward} of the starters) makes the copy train: each starter with its
    Backward, the generated tasks in the traced training forward, where a forward task and the
    backward task of the same chain make one differentiable site. Without it (inference) the
    generated backward tasks stay out."""
    from autokernel_tui.profiling.graph_patch import covered_modules, patch_graph
    from autokernel_tui.profiling.patch import load_kernels, patch_model, patch_sites

    starters, generated = split_generated(kernels)
    grad_inputs = generated_backwards(generated)
    generated = {t: p for t, p in generated.items()
                 if (backwards is not None or t not in grad_inputs) and (not families or t in families)}
    m = copy.deepcopy(original)
    counts = {}
    if starters:
        # Where a generated chain runs through a starter's module, the chain goes in, not the starter.
        skip = covered_modules(m, inputs, generated, patch_sites(m, families or list(starters))) \
            if generated else set()
        fns = load_kernels(starters)
        # A Linear whose output only a GELU takes (the matmul kernel applies it in its epilogue), or only a
        # loss (an LM head: the linear_cross_entropy kernel does both)
        fused_families = {"matmul", "linear_cross_entropy"}
        fuse = _epilogue_pairs(original, m, inputs, fns, skip) if not families or fused_families & set(families) else {}
        counts = patch_model(m, fns, families, custom_ops=custom_ops or bool(generated),
                             backwards=backwards, skip=skip, fuse=fuse)
    if generated:
        m, sites = patch_graph(m, inputs, generated, custom_ops=custom_ops,
                               labels={t: profiled_family(t, p) for t, p in generated.items()},
                               backwards=None if backwards is None else {t: grad_inputs[t] for t in generated
                                                                         if t in grad_inputs})
        counts.update(sites)
    return m, counts


def verify(model: str, kernels: dict[str, Path], batch=None, seq=None, dtype=None, device="auto", train=False,
           layers=None, iters: int | None = None, warmup: int | None = None, families: list[str] | None = None,
           profile_steps: int | None = None, modes: tuple[str, ...] | None = None, progress=None,
           inspect=None, select: bool = False, loss: bool = False) -> dict:
    """Patch ``kernels`` ({family: kernel.py}) into ``model`` and compare it with the original, in
    each of ``modes`` (default: every mode of ``MODES`` on a GPU, eager with and without on the CPU).
    ``select``: then, in the fastest mode's setting, which kernels to ship (``select_kernels``).
    ``loss``: the forward with its loss and no gradients (an evaluation pass: a language model's
    targets in, its loss out) instead of the forward alone.

    ``progress(stage, done, total, left_s)`` (``autokernel_tui.progress``) hears what runs and an
    estimate of the time left, from the measured cost of one forward pass of each model."""
    import time

    import torch

    from autokernel_tui.progress import Estimate, nothing

    say = progress or nothing
    est = Estimate()

    from autokernel_tui.profiling.pipeline import default_dtype
    from autokernel_tui.profiling.zoo import load_model

    if train:
        return verify_training(model, kernels, batch=batch, seq=seq, dtype=dtype, device=device, layers=layers,
                               iters=iters, warmup=warmup, families=families, modes=modes, select=select,
                               progress=progress)
    dtype = default_dtype(dtype, device)
    say("loading the model")
    bundle = load_model(model, batch=batch, seq=seq, dtype=dtype, device=device, train=train, layers=layers,
                        loss=loss)
    gpu = bundle.device.startswith("cuda")
    iters = iters or (30 if gpu else 3)
    warmup = warmup if warmup is not None else (5 if gpu else 1)
    steps = profile_steps or (3 if gpu else 1)
    run_modes = [m for m in (modes or (GPU_MODES if gpu else CPU_MODES))
                 if m in MODES and not (MODES[m][1] == "reduce-overhead" and not gpu)]
    original = bundle.model.eval()
    kernels, no_kernel = without_placeholders(kernels)
    patched, counts = patched_copy(original, kernels, families, bundle.inputs)
    if not any(counts.values()):
        raise VerifyError(f"none of the kernels ({', '.join(sorted(kernels))}) has a patch site in {model}")
    inputs = bundle.inputs
    # The work ahead, in forward passes of each model ("orig", "patched"): their measured cost
    # makes the estimate. Compiling a mode is not counted (it is said while it runs).
    est.plan("orig", 1 + (dtype != "float32") + warmup + iters + 1 + steps)
    est.plan("patched", 1 + warmup + iters + 1 + steps)
    for m in run_modes:
        est.plan("patched" if MODES[m][0] else "orig", max(warmup, 3 if MODES[m][1] == "reduce-overhead" else 1) + iters)
    kinds = ("orig", "patched")

    def timed_forward(m, kind: str, stage: str, done: int, total: int):
        say(stage, done, total, est.left_s())
        t0 = time.perf_counter()
        out = _forward(m, inputs)
        est.did(kind, time.perf_counter() - t0)
        return out

    checks = 3 if dtype != "float32" else 2
    out0 = timed_forward(original, "orig", "checking outputs: the original model", 0, checks)
    try:
        out1 = timed_forward(patched, "patched", "checking outputs: the model with the kernels", 1, checks)
    except Exception as exc:  # a kernel that raises inside the model: one line, where it was
        raise VerifyError(error_line(exc, "the model with the kernels failed: ")
                          + " (" + ", ".join(where(exc, 2)) + ")") from None
    # The model's own precision noise: the original against a float32 copy of itself.
    noise = 0.0
    if dtype != "float32":
        ref32 = copy.deepcopy(original).float()
        say("checking outputs: a float32 copy (the model's own noise)", 2, checks, est.left_s())
        t0 = time.perf_counter()
        out32 = _forward(ref32, tuple(x.float() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                                      for x in inputs))
        est.did("orig", time.perf_counter() - t0)
        noise = rel_l2(out0.float(), out32)
        del ref32
    err = rel_l2(out1.float(), out0.float())
    tol = max(NOISE_FACTOR * noise, ERROR_FLOOR[dtype])
    finite = bool(torch.isfinite(out1).all())
    passed = finite and err <= tol
    n_timed = 2 * (warmup + iters)
    done = [0]

    def on_forward(i: int, seconds: float) -> None:
        est.did(kinds[i], seconds)
        done[0] += 1
        say("timing the model without and with the kernels (forward passes)", done[0], n_timed, est.left_s())

    say("timing the model without and with the kernels (forward passes)", 0, n_timed, est.left_s())
    times = _time([original, patched], inputs, iters, warmup, bundle.device, on_forward)
    before, after = _stats(times[0]), _stats(times[1])

    def profiling(kind: str, which: str):
        def on_step(stage: str, i: int, n: int, seconds: float | None) -> None:
            if seconds is not None:
                est.did(kind, seconds)
            say(f"profiling {which}: {stage}", i, n, est.left_s())
        return on_step

    prof0 = _family_times(bundle, original, steps, profiling("orig", "the original model"))
    prof1 = _family_times(bundle, patched, steps, profiling("patched", "the model with the kernels"),
                          named=generated_kernel_names({t: kernels[t] for t in counts if t in kernels}))
    fam_of = {t: profiled_family(t, kernels[t]) for t in counts if t in kernels}
    patched_fams = sorted({fam_of.get(t, t) for t, n in counts.items() if n})
    per_family = []
    t_before = t_after = 0.0
    for f in patched_fams:
        a = prof0["families"].get(f, {}).get("time_us", 0.0)
        b = prof1["families"].get(f, {}).get("time_us", 0.0)
        t_before += a
        t_after += b
        sites = sum(n for t, n in counts.items() if fam_of.get(t, t) == f)
        per_family.append({"family": f, "modules": sites, "share": a / prof0["total_us"] if prof0["total_us"] else 0,
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
    compared = compare_modes(original, kernels, families, inputs, out0, tol, bundle.device,
                             modes or (GPU_MODES if gpu else CPU_MODES), iters, warmup, say, est, inspect)
    if select and gpu and compared["ship"]:  # on the CPU the times mean nothing to choose by
        idle = idle_tasks(counts, per_family, fam_of)
        compared["selection"] = select_kernels(original, kernels, {t: n for t, n in counts.items() if t not in idle},
                                               inputs, out0, tol, bundle.device, without_kernels(compared["ship"]),
                                               iters, warmup, say)
        compared["selection"]["not_run"] = idle
        compared["ship_reason"] = _selection_reason(compared["selection"]) or compared["ship_reason"]
    return {
        "model": bundle.name, "device": prof_device(bundle.device), "dtype": dtype, "batch": bundle.batch,
        "seq": bundle.seq, "mode": "forward" + (" with its loss (an evaluation pass)" if loss else ""),
        "timing_meaningful": gpu, "timing_method": "CUDA events, interleaved, median" if gpu
        else "perf_counter on the CPU (Triton interpreter): not meaningful",
        "patched": counts, "fused": _fused(patched),
        "unpatched_families": [f for f, n in counts.items() if not n],
        "no_kernel_yet": no_kernel, "left_out": getattr(patched, "left_out", {}), "correct": passed, "finite": finite, "rel_l2_vs_original": err, "tolerance": tol,
        "model_noise_rel_l2": noise,
        "before": before, "after": after,
        "measured_speedup": before["median_us"] / after["median_us"] if after["median_us"] > 0 else None,
        "predicted_speedup": predicted, "prediction_gap": gap, "families": per_family,
        "kernels": {f: str(p) for f, p in kernels.items()},
        **compared,
    }


def compare_modes(original, kernels: dict[str, Path], families, inputs, reference_out, tol: float, device: str,
                  modes: tuple[str, ...], iters: int, warmup: int, progress=None, estimate=None,
                  inspect=None) -> dict:
    """The model in each mode, with and without the kernels: outputs checked against eager, times
    interleaved (so drift falls on all alike), and which one to ship. ``inspect(name, model, inputs)``, when
    given, is called on each mode's built model after its timing and its answer kept under
    ``modes[name]["inspect"]`` (benchmarks use it for a per-kernel profile of each mode)."""
    from autokernel_tui.progress import Estimate, nothing

    say = progress or nothing
    est = estimate or Estimate()

    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise VerifyError(f"unknown mode(s) {', '.join(unknown)}; modes: {', '.join(MODES)}")
    cuda = device.startswith("cuda")
    built, results = {}, {}
    for k, name in enumerate(modes):
        with_kernels, compile_mode = MODES[name]
        if compile_mode == "reduce-overhead" and not cuda:
            results[name] = {"skipped": "CUDA graphs need a GPU"}
            continue
        left = est.left_s()
        say(f"mode {name}: " + ("compiling and warming up" if compile_mode else "warming up"), k, len(modes),
            None if left is None else left)
        kind = "patched" if with_kernels else "orig"
        m, result = _build_mode(original, kernels if with_kernels else {}, families, compile_mode, inputs,
                                reference_out, tol, warmup, est, kind)
        results[name] = result
        if m is not None:
            built[name] = m
    names = list(built)
    kinds = ["patched" if MODES[n][0] else "orig" for n in names]
    done = [0]

    def on_forward(i: int, seconds: float) -> None:
        est.did(kinds[i], seconds)
        done[0] += 1
        say("timing every mode (forward passes)", done[0], len(names) * iters, est.left_s())

    failures: dict[int, BaseException] = {}
    times = _time([built[n] for n in names], inputs, iters, 0, device, on_forward, failures) if names else []
    for i, exc in failures.items():  # it ran when built and checked, then failed among the others
        results[names[i]].update(correct=False, where=where(exc), error=error_line(exc, "while timing: "))
    names = [n for i, n in enumerate(names) if i not in failures]
    times = [t for i, t in enumerate(times) if i not in failures]
    for n, t in zip(names, times):
        results[n].update(_stats(t))
        if inspect is not None:
            results[n]["inspect"] = inspect(n, built[n], inputs)
    base = {k: results.get(k, {}).get("median_us") for k in ("eager", "compile", "cudagraphs")}
    for n in names:
        med = results[n]["median_us"]
        for ref_name, ref_us in base.items():
            if ref_us and med:
                results[n][f"speedup_vs_{ref_name}"] = ref_us / med
    timed = [n for n in names if results[n].get("correct") and results[n].get("median_us")]
    best = min(timed, key=lambda n: results[n]["median_us"]) if timed else None
    return {"modes": results, "ship": best, "ship_reason": _ship_reason(best, results)}


def _build_mode(original, kernels: dict, families, compile_mode: str | None, inputs, reference_out, tol: float,
                warmup: int, est=None, kind: str = "patched"):
    """A copy of ``original`` with ``kernels`` patched in (none: the model as it is), compiled in
    ``compile_mode`` (None: eager), warmed up and its outputs checked: (model or None, result)."""
    import time

    import torch

    try:
        m = patched_copy(original, kernels, families, inputs, custom_ops=compile_mode is not None)[0] \
            if kernels else copy.deepcopy(original)
    except AutokernelError as exc:  # a generated kernel the model cannot take: this mode's finding
        return None, {"error": str(exc).splitlines()[0][:300], "where": []}
    if compile_mode is not None:
        allow_recompiles()
        m = torch.compile(m, mode=compile_mode, dynamic=False)
    try:
        out = None
        for w in range(max(warmup, 3 if compile_mode == "reduce-overhead" else 1)):  # compiles, records graphs
            t0 = time.perf_counter()
            out = _forward(m, inputs)
            if est is None:
                continue
            if w or compile_mode is None:  # the first call of a compiled mode is mostly compilation
                est.did(kind, time.perf_counter() - t0)
            else:
                est.todo[kind] = max(0.0, est.todo.get(kind, 0.0) - 1)
        out = out.float().clone()
    except Exception as exc:  # a mode that does not run is a finding, not a crash of verify
        return None, {"error": error_line(exc), "where": where(exc)}
    err = rel_l2(out, reference_out.float())
    finite = bool(torch.isfinite(out).all())
    return m, {"correct": finite and err <= tol, "rel_l2_vs_eager": err}


# Every compiled copy of the model (each mode, each kernel alone in selection) is a new compilation of
# the same forward functions; past torch's recompile limit (8) Dynamo quietly runs them eagerly, which
# made later copies' times meaningless (H200: a "0.84x" swiglu that was the model run uncompiled).
RECOMPILE_LIMIT = 64


def allow_recompiles() -> None:
    import torch._dynamo

    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):  # the name since torch 2.6, and before
        if hasattr(cfg, name):
            setattr(cfg, name, max(getattr(cfg, name), RECOMPILE_LIMIT))


# A family stays in the shipped set when the mode with it alone beats the mode without kernels by
# more than this (medians of interleaved forwards); the kept set is then timed as a whole, and ships
# only if it beats the mode without kernels.
SELECT_MIN_GAIN = 0.002


def idle_tasks(counts: dict[str, int], per_family: list[dict], fam_of: dict[str, str]) -> list[str]:
    """The patched tasks whose family ran no kernel in the profile before or after (GPT-2's loss module in
    an inference pass, which returns the logits): timed alone they measure only noise, which a 0.5%
    bar can keep (run 28 shipped cross_entropy for GPT-2's inference). The selection leaves them out."""
    idle = {f["family"] for f in per_family if f["before_us"] == 0 and f["after_us"] == 0}
    return sorted(t for t, n in counts.items() if n and fam_of.get(t, t) in idle)


def select_kernels(original, kernels: dict[str, Path], patched: dict[str, int], inputs, reference_out, tol: float,
                   device: str, mode: str, iters: int, warmup: int, progress=None) -> dict:
    """Which kernels to ship in ``mode`` (a mode without kernels: "eager", "compile" or "cudagraphs"),
    for the model's forward pass (``choose`` says how)."""
    compile_mode = MODES[mode][1]

    def build(fs: list[str]):
        return _build_mode(original, {f: kernels[f] for f in fs}, fs or None, compile_mode, inputs, reference_out,
                           tol, warmup)

    def time_models(models: list) -> list[list[float]]:
        failures: dict[int, BaseException] = {}
        times = _time(models, inputs, iters, 0, device, failures=failures)
        return [[] if i in failures else t for i, t in enumerate(times)]  # no times: it failed while timed

    return choose([f for f, n in patched.items() if n and f in kernels], build, time_models, mode, progress)


def choose(fams: list[str], build, time_models, mode: str, progress=None) -> dict:
    """The kernels to ship in ``mode``: ``build(families)`` makes the model in that mode with those
    kernels (none: the mode as it is) as (model or None, {"correct": ...}); ``time_models(models)``
    times them interleaved (an empty list: that model failed while timed).

    A kernel that is faster alone can still lose inside a model: a compiled graph fuses the op it
    replaces into its neighbours, and an eager model pays each launch's host cost. So each family is
    timed in the model alone (interleaved with the mode without kernels), the families that gain more
    than ``SELECT_MIN_GAIN`` are kept, and the kept set is timed against the mode without kernels and
    with all of them: the fastest correct one ships."""
    from autokernel_tui.progress import nothing

    say = progress or nothing
    base, _ = build([])
    if base is None:
        return {"mode": mode, "error": f"{mode} does not run without kernels"}
    alone: dict[str, dict] = {}
    for i, f in enumerate(fams):
        say(f"choosing kernels in {mode}: {f} alone", i, len(fams) + 1, None)
        m, res = build([f])
        if m is not None:
            t_base, t_f = time_models([base, m])
            if not t_base:
                return {"mode": mode, "error": f"{mode} without kernels failed while timed beside {f}"}
            if t_f:
                res.update(_stats(t_f), base_median_us=_stats(t_base)["median_us"])
                res["speedup"] = res["base_median_us"] / res["median_us"]
            else:
                res.update(correct=False, error="failed while timed beside the mode without kernels")
        alone[f] = res
        del m
    chosen = [f for f in fams if alone[f].get("correct") and alone[f].get("speedup", 0) > 1 + SELECT_MIN_GAIN]
    say(f"choosing kernels in {mode}: the chosen set together", len(fams), len(fams) + 1, None)
    sets = {"none": []}
    if chosen:
        sets["chosen"] = chosen
    if set(chosen) != set(fams):
        sets["all"] = fams
    built, results = {"none": base}, {"none": {"correct": True, "families": []}}
    for name, fs in sets.items():
        if name == "none":
            continue
        m, res = build(fs)
        results[name] = {**res, "families": fs}
        if m is not None:
            built[name] = m
    names = list(built)
    for n, t in zip(names, time_models([built[n] for n in names])):
        if t:
            results[n].update(_stats(t))
        else:
            results[n].update(correct=False, error="failed while timed beside the other sets")
    names = [n for n in names if "median_us" in results[n]]
    if "none" not in names:
        return {"mode": mode, "error": f"{mode} without kernels failed while timed beside the sets"}
    ok = [n for n in names if results[n].get("correct")]
    best = min(ok, key=lambda n: results[n]["median_us"])
    base_us = results["none"]["median_us"]
    for n in names:
        results[n]["speedup"] = base_us / results[n]["median_us"]
        predicted = predict_set(base_us, [alone[f] for f in results[n]["families"]])
        if predicted is not None and n != "none":
            results[n]["predicted_speedup"] = predicted
            results[n]["prediction_error_pct"] = 100.0 * (results[n]["speedup"] / predicted - 1.0)
    return {"mode": mode, "alone": alone, "sets": results, "ship_families": results[best]["families"],
            "ship_speedup": results[best]["speedup"], "min_gain": SELECT_MIN_GAIN}


def predict_set(base_us: float, alone: list[dict]) -> float | None:
    """The speedup a set of kernels should give in a mode, from each one timed alone in that mode:
    the time each saved beside its own interleaved base, summed (Amdahl: the savings add, the kernels
    replacing different ops), over the set's base. In a compiled or graph-captured mode the host's
    launch cost is gone, so what each kernel saves alone is what it saves in the set; a miss says the
    kernels interact (fusion lost around them, memory, clocks)."""
    if not base_us or not alone or not all(a.get("median_us") and a.get("base_median_us") for a in alone):
        return None
    predicted_us = base_us - sum(a["base_median_us"] - a["median_us"] for a in alone)
    return base_us / predicted_us if predicted_us > 0 else None


COMPILE_CALL = {"compile": "torch.compile(model)", "cudagraphs": 'torch.compile(model, mode="reduce-overhead")'}


def ship_how(r: dict) -> str | None:
    """How to ship what verify chose: the export command for the chosen kernels, and the calls that
    put them in the model in the chosen mode. None when no kernel is worth shipping."""
    sel = r.get("selection") or {}
    if "ship_families" in sel:
        fams, mode = sel["ship_families"], sel["mode"]
    elif r.get("ship") and r["ship"].endswith("+kernels"):
        fams, mode = [f for f, n in r.get("patched", {}).items() if n], r["ship"].removesuffix("+kernels")
    else:
        return None
    if not fams:
        return None
    compiled = COMPILE_CALL.get(mode)
    use = "my_kernels.patch(model" + (", custom_ops=True)" if compiled else ")")
    from autokernel_tui.profiling.graph_patch import is_generated

    paths = r.get("kernels", {})
    if any(f in paths and is_generated(paths[f]) for f in fams):  # generated tasks go into the traced graph
        use = "model, _ = my_kernels.patch_graph(model, example_inputs" + (", custom_ops=True)" if compiled else ")")
    return (f"to ship it: autokernel-tui export my_kernels --tasks {','.join(fams)}; then "
            f"import my_kernels; {use}" + (f"; model = {compiled}" if compiled else ""))


def _selection_reason(sel: dict) -> str | None:
    """The ship line after selection: the mode, the kernels in it, and what each left-out one measured."""
    if "error" in sel:
        return None
    mode, fams = sel["mode"], sel["ship_families"]
    shipped = next(r for r in sel["sets"].values() if r.get("families") == fams)
    us = shipped["median_us"]
    out = [f"{mode}" + (f"+kernels with {', '.join(fams)}" if fams else " without kernels") +
           f": {us / 1e3:.3f} ms, {sel['ship_speedup']:.3f}x {mode} without them" +
           (f" (predicted {shipped['predicted_speedup']:.3f}x from each kernel alone, "
            f"{shipped['prediction_error_pct']:+.1f}%)" if shipped.get("predicted_speedup") else "")]
    left = [f"{f} {_alone(a)}" for f, a in sel["alone"].items() if f not in fams]
    if left:
        out.append("left out: " + ", ".join(left))
    if sel.get("not_run"):
        out.append("not run by this pass, so not shipped: " + ", ".join(sel["not_run"]))
    if "all" in sel["sets"]:
        every = sel["sets"]["all"]
        out.append(f"all kernels: {_alone(every).replace(' alone', '')}" +
                   (f" (predicted {every['predicted_speedup']:.3f}x)" if every.get("predicted_speedup") else ""))
    return "; ".join(out)


def _alone(a: dict) -> str:
    """One selection entry: its speedup when it ran and matched, else why not."""
    if a.get("correct") and "speedup" in a:
        return f"{a['speedup']:.3f}x alone"
    return a.get("error") or "wrong outputs"


def error_line(exc: BaseException, prefix: str = "") -> str:
    """``prefix`` and "Type: message" on one line of at most 300 characters: how verify reports a failure."""
    return f"{prefix}{type(exc).__name__}: {exc}".splitlines()[0][:300]


def where(exc: BaseException, frames: int = 4) -> list[str]:
    """The last frames an exception went through, "file:line in function" (an empty AssertionError
    from deep inside torch says nothing without them)."""
    import traceback

    return [f"{Path(f.filename).name}:{f.lineno} in {f.name}"
            for f in traceback.extract_tb(exc.__traceback__)[-frames:]]


def _ship_reason(best: str | None, results: dict) -> str:
    if best is None:
        return "no mode both ran and matched the original"
    without = best.replace("+kernels", "")
    line = f"{best}: the fastest mode whose outputs match ({results[best]['median_us'] / 1e3:.3f} ms)"
    if best.endswith("+kernels") and results.get(without, {}).get("median_us"):
        line += f", {results[without]['median_us'] / results[best]['median_us']:.3f}x {without} without the kernels"
    elif not best.endswith("+kernels"):
        line += "; the kernels do not make this model faster in any mode measured"
    return line


def prof_device(device: str) -> str:
    from autokernel_tui.profiling.capture import device_name

    return device_name(device)


def _left_out_lines(r: dict) -> list[str]:
    """What verify could not put in, and why: generated tasks with no kernel yet, and chains a kernel
    cannot stand in for (``graph_patch.writes_outside``)."""
    lines = []
    if r.get("no_kernel_yet"):
        lines.append("left out (generated tasks with no starter kernel yet): " + ", ".join(r["no_kernel_yet"]))
    reasons: dict[str, list[str]] = {}
    for task, why in (r.get("left_out") or {}).items():
        reasons.setdefault(why, []).append(task)
    lines += [f"left as the model runs them ({why}): {', '.join(sorted(tasks))}" for why, tasks in reasons.items()]
    return lines


def _site_word(r: dict, task: str) -> str:
    """A starter replaces modules; a generated task's kernel replaces a recorded chain in the graph."""
    from autokernel_tui.profiling.graph_patch import is_generated

    path = r.get("kernels", {}).get(task)
    return "graph sites" if path and is_generated(path) else "modules"


def _patched_words(r: dict, task: str, n: int, backward: str | None = None) -> str:
    """``gelu (12 modules, 12 of them done by the matmul kernel)``, and ``; backward: ...`` where given."""
    into = "".join(f", {k} of them done by the {kernel} kernel" for kernel, k in r.get("fused", {}).get(task, {}).items())
    return f"{task} ({n} {_site_word(r, task)}{into}" + (f"; backward: {backward})" if backward else ")")


def format_result(r: dict) -> str:
    def x(v):
        return f"{v:.3f}x" if isinstance(v, (int, float)) else "n/a"

    lines = [f"verify {r['model']} on {r['device']}: {r['dtype']}, batch {r['batch']} x seq {r['seq']}, {r['mode']}",
             "patched: " + ", ".join(_patched_words(r, f, n) for f, n in r["patched"].items() if n)]
    if r["unpatched_families"]:
        lines.append("no patch site in this model (or only inside another kernel's) for: "
                     + ", ".join(r["unpatched_families"]))
    lines += _left_out_lines(r)
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
    if r.get("modes"):
        lines.append("modes (each beside eager, torch.compile and CUDA graphs of the unpatched model):")
        for name, m in r["modes"].items():
            if "skipped" in m or "error" in m:
                lines.append(f"  {name:<19} {m.get('skipped') or 'failed: ' + m['error']}")
                continue
            check = "PASS" if m.get("correct") else "FAIL"
            vs = "  ".join(f"{x(m.get(f'speedup_vs_{b}'))} vs {b}" for b in ("eager", "compile", "cudagraphs")
                           if m.get(f"speedup_vs_{b}") is not None)
            lines.append(f"  {name:<19} {m['median_us'] / 1e3:8.3f} ms  outputs {check}  {vs}")
        sel = r.get("selection")
        if sel and "alone" in sel:
            lines.append(f"kernels chosen in {sel['mode']} (each alone in the model, beside {sel['mode']} "
                         f"without kernels; kept above {100 * sel['min_gain']:.1f}%):")
            for f, a in sel["alone"].items():
                state = "kept" if f in sel["ship_families"] else "left out"
                lines.append(f"  {f:<19} {_alone(a).replace(' alone', ''):<10} {state}")
        lines.append(f"ship: {r['ship_reason']}")
        how = ship_how(r)
        if how:
            lines.append(how)
    if not r["timing_meaningful"]:
        lines.append("CPU: kernels ran in the Triton interpreter; the check is real, the timings are not.")
    return "\n".join(lines)





def backward_plans(kernels: dict[str, Path]) -> dict[str, dict]:
    """{family: plan} for ``patch.load_backwards``: a backward task's kernel where one lies beside a
    forward kernel (``<task>_bwd/`` with ``kind = "backward"``, its grad_inputs and whether it takes what
    the forward saved), and the forward task's reference.py (autograd through it where there is no
    backward kernel)."""
    out = {}
    for family, path in kernels.items():
        path = Path(path)
        bwd_dir = path.parent.parent / f"{path.parent.name}_bwd"
        plan = {"kernel": None, "positions": (), "saved": False, "reference": None}
        if (bwd_dir / taskspec.SPEC_FILE).is_file():
            spec = taskspec.load_spec(bwd_dir)
            if spec.kind == "backward":
                plan.update(kernel=bwd_dir / taskspec.KERNEL_FILE, positions=spec.grad_inputs, saved=bool(spec.saved))
        if (path.parent / "reference.py").is_file():
            plan["reference"] = path.parent / "reference.py"
        if plan["kernel"] or plan["reference"]:
            out[family] = plan
    return out


def backward_kernels(kernels: dict[str, Path]) -> dict:
    """{family: Backward} for the forward kernels in ``kernels`` (``backward_plans``, loaded)."""
    from autokernel_tui.profiling.patch import load_backwards

    return load_backwards(backward_plans(kernels))


def _train_step(model, inputs, seed: int):
    """One training step's loss and gradients (the same dropout masks for every model: ``seed``)."""
    import torch

    from autokernel_tui.profiling.zoo import scalar_loss

    for p in model.parameters():
        p.grad = None
    torch.manual_seed(seed)
    loss = scalar_loss(model(*inputs))
    loss.backward()
    return loss.detach().float(), [None if p.grad is None else p.grad.detach().float().clone()
                                   for p in model.parameters()]


def verify_training(model: str, kernels: dict[str, Path], batch=None, seq=None, dtype=None, device="auto",
                    layers=None, iters: int | None = None, warmup: int | None = None,
                    families: list[str] | None = None, modes: tuple[str, ...] | None = None,
                    select: bool = False, progress=None) -> dict:
    """Training steps of the model with and without the kernels, from the same weights and batch:
    the loss and every parameter's gradient checked (against the model's own precision noise), and
    the step (forward + backward) timed in each of ``modes`` (default: every mode of ``MODES`` on a
    GPU, eager with and without the kernels on the CPU); compiled with the kernels, each kernel is a
    custom op with its backward registered, so the compiled graph trains through it. ``progress`` hears
    each stage by name (a compiled mode's first steps compile a forward and a backward graph: minutes)."""
    import torch

    from autokernel_tui.progress import nothing
    from autokernel_tui.profiling.pipeline import default_dtype
    from autokernel_tui.profiling.zoo import load_model

    say = progress or nothing
    dtype = default_dtype(dtype, device)
    say("loading the model")
    bundle = load_model(model, batch=batch, seq=seq, dtype=dtype, device=device, train=True, layers=layers)
    gpu = bundle.device.startswith("cuda")
    iters = iters or (20 if gpu else 2)
    warmup = warmup if warmup is not None else (3 if gpu else 1)
    original = bundle.model.train()
    kernels, no_kernel = without_placeholders(kernels)
    starters, generated = split_generated(kernels)
    backwards = backward_kernels(starters)
    patched, counts = patched_copy(original, kernels, families, bundle.inputs, backwards=backwards)
    if not any(counts.values()):
        raise VerifyError(f"none of the kernels ({', '.join(sorted(kernels))}) has a patch site in {model}")
    names = [n for n, _ in original.named_parameters()]
    say("checking the loss and every gradient against the model's own (eager) step")
    loss0, grads0 = _train_step(original, bundle.inputs, 0)
    loss1, grads1 = _train_step(patched, bundle.inputs, 0)
    noise_loss, noise_grads = 0.0, [0.0] * len(names)
    if dtype != "float32":  # the model's own noise: the same step in float32
        ref32 = copy.deepcopy(original).float()
        inputs32 = tuple(x.float() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in bundle.inputs)
        loss32, grads32 = _train_step(ref32, inputs32, 0)
        noise_loss = rel_l2(loss0.reshape(1), loss32.reshape(1))
        noise_grads = [rel_l2(a, b) if a is not None and b is not None else 0.0 for a, b in zip(grads0, grads32)]
        del ref32
    floor = ERROR_FLOOR[dtype]
    check = _StepCheck(names, loss0, grads0, noise_loss, noise_grads, floor)
    params, loss_err, loss_tol, loss_ok = check(loss1, grads1)
    buffers = _buffers_after_step(original, patched, floor)
    loss_ok = loss_ok and all(b["ok"] for b in buffers)
    models, results = {"eager": original, "eager+kernels": patched}, {}

    def build(fs: list[str], compile_mode: str | None):
        return _build_train_mode(original, {f: kernels[f] for f in fs}, fs or None, backwards, compile_mode,
                                 bundle.inputs, check)

    wanted_modes = list(modes or (GPU_MODES if gpu else ("eager", "eager+kernels")))
    for k, name in enumerate(wanted_modes):
        if name not in MODES:
            raise VerifyError(f"unknown mode {name}; modes: {', '.join(MODES)}")
        with_kernels, compile_mode = MODES[name]
        if compile_mode is None:
            continue
        if compile_mode == "reduce-overhead" and not gpu:
            results[name] = {"skipped": "CUDA graphs need a GPU"}
            continue
        wanted = [f for f in kernels if families is None or f in families]
        say(f"mode {name}: compiling the training step and checking its gradients", k, len(wanted_modes))
        m, results[name] = build(wanted if with_kernels else [], compile_mode)
        if m is not None:
            models[name] = m
    say(f"timing {len(models)} modes' training steps, interleaved ({iters} each)")
    times = _time_steps(list(models.values()), bundle.inputs, iters, warmup, bundle.device)
    stats = {name: _stats(t) for name, t in zip(models, times)}
    prediction = _training_prediction(bundle, original, patched, stats["eager"]["median_us"],
                                      stats["eager+kernels"]["median_us"], 3 if gpu else 1)
    results["eager"] = {"correct": True}
    results["eager+kernels"] = {"correct": loss_ok and all(p["ok"] for p in params)}
    for name, st in stats.items():
        for ref in ("eager", "compile", "cudagraphs"):
            if ref in stats and st["median_us"]:
                st[f"speedup_vs_{ref}"] = stats[ref]["median_us"] / st["median_us"]
    for name, st in stats.items():  # after the speedups: each mode's entry holds them too
        results[name].update(st)
    timed = [n for n in stats if results[n].get("correct")]
    best = min(timed, key=lambda n: stats[n]["median_us"]) if timed else None
    selection, reason = None, _ship_reason(best, results)
    if select and gpu and best:  # on the CPU the times mean nothing to choose by
        compile_mode = MODES[best][1]
        selection = choose([f for f, n in counts.items() if n], lambda fs: build(fs, compile_mode),
                           lambda ms: _time_steps(ms, bundle.inputs, iters, 0, bundle.device),
                           without_kernels(best), progress)
        reason = _selection_reason(selection) or reason
    return {
        "model": bundle.name, "device": prof_device(bundle.device), "dtype": dtype, "batch": bundle.batch,
        "seq": bundle.seq, "mode": "training step (forward + backward)", "timing_meaningful": gpu,
        "patched": counts, "fused": _fused(patched),
        "unpatched_families": [f for f, n in counts.items() if not n],
        "kernels": {f: str(p) for f, p in kernels.items()},
        "backward": {**{f: ("its own backward kernel" if b.kernel is not None else "autograd through the reference")
                        for f, b in backwards.items() if counts.get(f)},
                     **_generated_backward_words(generated, counts)},
        "no_kernel_yet": no_kernel, "left_out": getattr(patched, "left_out", {}),
        "correct": loss_ok and all(p["ok"] for p in params), "loss": [float(loss0), float(loss1)],
        "buffers": buffers,
        "loss_rel_err": loss_err, "loss_tolerance": loss_tol, "gradients": params,
        "worst_gradient": max(params, key=_badness),
        "steps": stats, "modes": results, "ship": best, "ship_reason": reason, "selection": selection,
        "prediction": prediction,
        "timing_method": "CUDA events, interleaved, median" if gpu else "perf_counter on the CPU: not meaningful",
    }


def _generated_backward_words(generated: dict[str, Path], counts: dict[str, int]) -> dict[str, str]:
    """{generated task patched: how its sites are differentiated}, for the report."""
    from autokernel_tui.profiling.graph_patch import pair_chains

    words = {}
    for fwd, bwd, _ in pair_chains(generated, generated_backwards(generated)):
        if fwd and counts.get(fwd):
            words[fwd] = f"its chain's backward kernel ({bwd})" if bwd else \
                "autograd through the recorded chain (its forward computed again)"
        if bwd and counts.get(bwd):
            words[bwd] = f"its kernel, after {fwd}" if fwd else "its kernel, after the recorded chain's forward"
    return words


def _build_train_mode(original, kernels: dict, families, backwards: dict, compile_mode: str | None, inputs,
                      check: "_StepCheck"):
    """A copy of ``original`` that trains with ``kernels`` (each with its Backward; none: the model as it
    is), compiled in ``compile_mode`` (None: eager), warmed up, its step checked: (model or None, result)."""
    import torch

    if kernels and split_generated(kernels)[1]:
        try:
            m, _ = patched_copy(original, kernels, families, inputs, custom_ops=compile_mode is not None,
                                backwards=backwards)
        except Exception as exc:  # a generated kernel this mode cannot take: its finding
            return None, {"error": error_line(exc), "where": where(exc)}
    elif kernels:
        m, _ = patched_copy(original, kernels, families, inputs, custom_ops=compile_mode is not None,
                            backwards=backwards)
    else:
        m = copy.deepcopy(original)
    if compile_mode is not None:
        allow_recompiles()
        m = torch.compile(m, mode=compile_mode, dynamic=False)
    try:
        for _ in range(3 if compile_mode == "reduce-overhead" else 1):  # compiles, records graphs
            loss, grads = _train_step(m, inputs, 0)
    except Exception as exc:  # a mode that does not train is a finding, not a crash of verify
        return None, {"error": error_line(exc), "where": where(exc)}
    params, _, _, loss_ok = check(loss, grads)
    return m, {"correct": loss_ok and all(p["ok"] for p in params),
               "worst_gradient": max(params, key=_badness)["name"] if params else None}


def _buffers_after_step(original, patched, floor: float) -> list[dict]:
    """Every buffer after one step with the kernels against after the model's own step from the same
    state (a batch norm's running statistics and step count): a kernel that left one behind changes
    every later evaluation, and no gradient shows it. Floating-point ones within ``floor`` (rel L2),
    the rest equal."""
    from autokernel_tui.profiling.graph_patch import GraphPatched

    import torch

    model = patched.original if isinstance(patched, GraphPatched) else patched
    out = []
    for (name, a), b in zip(original.named_buffers(), model.buffers()):
        if a.is_floating_point():
            err = rel_l2(b.float(), a.float())
            out.append({"name": name, "rel_l2": err, "ok": err <= floor})
        else:
            same = a.shape == b.shape and bool(torch.equal(a, b))
            out.append({"name": name, "rel_l2": 0.0 if same else 1.0, "ok": same})
    return out


def _badness(p: dict) -> float:
    return p["rel_l2"] / p["tolerance"] if p["tolerance"] else float("inf")


class _StepCheck:
    """A training step's loss and every parameter's gradient against eager's, each within the model's
    own precision noise (``NOISE_FACTOR`` times the float32 step's difference) or ``floor``."""

    def __init__(self, names, loss0, grads0, noise_loss: float, noise_grads: list[float], floor: float):
        self.names, self.loss0, self.grads0 = names, loss0, grads0
        self.noise_loss, self.noise_grads, self.floor = noise_loss, noise_grads, floor

    def __call__(self, loss, grads) -> tuple[list[dict], float, float, bool]:
        import torch

        params = []
        for name, a, b, noise in zip(self.names, self.grads0, grads, self.noise_grads):
            if a is None and b is None:
                continue
            if a is None or b is None:
                params.append({"name": name, "rel_l2": float("inf"), "tolerance": 0.0, "ok": False,
                               "why": "a gradient on one side only"})
                continue
            err, tol = rel_l2(b, a), max(NOISE_FACTOR * noise, self.floor)
            params.append({"name": name, "rel_l2": err, "tolerance": tol,
                           "ok": bool(torch.isfinite(b).all()) and err <= tol})
        loss_err = rel_l2(loss.reshape(1), self.loss0.reshape(1))
        loss_tol = max(NOISE_FACTOR * self.noise_loss, self.floor)
        return params, loss_err, loss_tol, bool(torch.isfinite(loss)) and loss_err <= loss_tol


def _training_prediction(bundle, original, patched, before_us: float, after_us: float, steps: int) -> dict:
    """What the kernels alone would make of the training step, and what the measurement adds.

    Predicted = measured step before - the step's device kernel time before + after (profiled,
    forward and backward, every kernel once): it assumes the time outside kernels (Python, autograd,
    launches the GPU waits on) does not change. The miss is exactly the change in that time."""
    from autokernel_tui.profiling.amdahl import rank
    from autokernel_tui.profiling.capture import profile_bundle

    kernel_us = []
    for model in (original, patched):
        b = copy.copy(bundle)
        b.model, b.train = model, True
        kernel_us.append(rank(profile_bundle(b, steps=steps, warmup=1))["total_us"])
    predicted_after = before_us - kernel_us[0] + kernel_us[1]
    return {"kernel_us": kernel_us, "predicted_after_us": predicted_after,
            "predicted_speedup": before_us / predicted_after if predicted_after > 0 else None,
            "measured_speedup": before_us / after_us if after_us > 0 else None,
            "outside_kernels_us": [before_us - kernel_us[0], after_us - kernel_us[1]]}


def _time_steps(models: list, inputs, iters: int, warmup: int, device: str) -> list[list[float]]:
    """Per model, ``iters`` training-step times in microseconds, interleaved."""
    import time

    import torch

    cuda = device.startswith("cuda")
    for _ in range(warmup):
        for m in models:
            _train_step(m, inputs, 0)
    times: list[list[float]] = [[] for _ in models]
    for _ in range(iters):
        for i, m in enumerate(models):
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            _train_step(m, inputs, 0)
            if cuda:
                torch.cuda.synchronize()
            times[i].append((time.perf_counter() - t0) * 1e6)
    return times


def format_training(r: dict) -> str:
    def x(v):
        return f"{v:.3f}x" if isinstance(v, (int, float)) else "n/a"

    lines = [f"verify --train {r['model']} on {r['device']}: {r['dtype']}, batch {r['batch']} x seq {r['seq']}, "
             f"{r['mode']}",
             "patched: " + ", ".join(_patched_words(r, f, n, r["backward"].get(f, "none"))
                                     for f, n in r["patched"].items() if n)]
    lines += _left_out_lines(r)
    verdict = "PASS" if r["correct"] else "FAIL"
    w = r["worst_gradient"]
    bad = [b["name"] for b in r.get("buffers", []) if not b["ok"]]
    buffers = (f"; buffers after the step: {len(r['buffers']) - len(bad)} of {len(r['buffers'])} as the model's"
               + (f" (off: {', '.join(bad)})" if bad else "")) if r.get("buffers") else ""
    lines.append(f"training step: {verdict}: loss {r['loss'][0]:.5g} -> {r['loss'][1]:.5g} (rel {r['loss_rel_err']:.1e}, "
                 f"tolerance {r['loss_tolerance']:.1e}); {sum(p['ok'] for p in r['gradients'])} of "
                 f"{len(r['gradients'])} parameter gradients within tolerance, worst {w['name']} rel L2 "
                 f"{w['rel_l2']:.1e} (tolerance {w['tolerance']:.1e}){buffers}")
    for name, st in r["steps"].items():
        vs = "  ".join(f"{x(st.get(f'speedup_vs_{b}'))} vs {b}" for b in ("eager", "compile", "cudagraphs")
                       if b in r["steps"])
        check = "" if r.get("modes", {}).get(name, {}).get("correct", True) else "  gradients FAIL"
        lines.append(f"  {name:<19} {st['median_us'] / 1e3:8.3f} ms per step  {vs}{check}")
    for name, m in r.get("modes", {}).items():
        if "skipped" in m or "error" in m:
            lines.append(f"  {name:<19} {m.get('skipped') or 'failed: ' + m['error']}")
    p = r.get("prediction")
    if p:
        k0, k1 = p["kernel_us"]
        o0, o1 = p["outside_kernels_us"]
        lines.append(f"end to end (eager): measured {x(p['measured_speedup'])}, predicted {x(p['predicted_speedup'])} "
                     f"from the step's kernel time {k0 / 1e3:.3f} -> {k1 / 1e3:.3f} ms; the miss is time outside "
                     f"kernels (Python, autograd, launches), {o0 / 1e3:.3f} -> {o1 / 1e3:.3f} ms "
                     f"({(o1 - o0) / 1e3:+.3f} ms)")
    if r.get("ship_reason"):
        lines.append(f"ship: {r['ship_reason']}")
        how = ship_how(r)
        if how:
            lines.append(how)
    if not r["timing_meaningful"]:
        lines.append("CPU: kernels ran in the Triton interpreter; the check is real, the timings are not.")
    return "\n".join(lines)
