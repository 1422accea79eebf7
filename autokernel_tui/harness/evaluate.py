"""The evaluation stages, run inside the worker (torch + triton + stdlib only).

static -> smoke -> shapes -> stability -> determinism -> timing, stopping at the
first failure. Every trial gets fresh input contents derived from a per-worker
secret base and a per-evaluation secret seed; outputs are compared with a float64
reference; every candidate call in a correctness stage runs under the guards.
"""

from __future__ import annotations

import hashlib
import importlib
import math
import random
import secrets
import time
from pathlib import Path
from typing import Any, Callable

import torch

from autokernel_tui.harness import guards, roofline, stats
from autokernel_tui.harness.baselines import BaselineCache
from autokernel_tui.harness.correctness import (Errors, as_tuple, check_inputs_unchanged, check_structure,
                                                compare, meta_of, precise_reference, snapshot_inputs, bitwise_equal)
from autokernel_tui.harness.errors import Verdict
from autokernel_tui.harness.loading import load_module, unload
from autokernel_tui.harness.report import Report, ShapeResult, Summary
from autokernel_tui.harness.static_check import check_source
from autokernel_tui.harness.timing import CPU_REPS, L2Flusher, Samples, time_cpu_interleaved, time_gpu_interleaved
from autokernel_tui.tasks.spec import REFERENCE_FILE, Shape, TaskSpec, load_spec, owned_file_hashes

CPU_DEVICE_NAME = "CPU (Triton interpreter)"
COMPARE_CPU_REPS = 8
BASE_CACHE_BYTES = {"cuda": 24 << 30, "cpu": 512 << 20}


def one_line(text: str, limit: int = 240) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    if not lines:
        return ""
    line = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return line if len(line) <= limit else line[: limit - 3] + "..."


def candidate_error(exc: BaseException, where: str, stage: str) -> Verdict:
    """Classify an exception raised by candidate code."""
    msg = one_line(f"{type(exc).__name__}: {exc}")
    if isinstance(exc, (SystemExit, KeyboardInterrupt)):
        return Verdict("CRASH", stage, f"{where}: candidate tried to exit the worker ({type(exc).__name__})")
    text = str(exc)
    if "CUDA error" in text or "illegal memory access" in text or type(exc).__name__ == "AcceleratorError":
        return Verdict("CRASH", stage, f"{where}: {msg} (CUDA context poisoned; worker restarted)", restart=True)
    if isinstance(exc, torch.OutOfMemoryError):
        return Verdict("FAIL", stage, f"{where}: out of GPU memory: {msg}")
    return Verdict("FAIL", stage, f"{where}: kernel_fn raised {msg}")


def perturb(inputs: tuple, gen: torch.Generator) -> tuple:
    """Fresh contents for a trial: each float element scaled by its own random factor
    in [0.5, 1.5) (zeros, signs, infinities and row structure survive), integer
    tensors permuted. Every element changes, so no pointer, id, version or
    fingerprint cache can replay an old output."""
    out = []
    for t in inputs:
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel():
            r = torch.rand(t.shape, generator=gen, device=t.device, dtype=torch.float32)
            out.append((t.float() * r.add_(0.5)).to(t.dtype))
        elif isinstance(t, torch.Tensor) and t.numel() > 1 and t.dtype != torch.bool:
            perm = torch.randperm(t.numel(), generator=gen, device=t.device)
            out.append(t.reshape(-1)[perm].reshape(t.shape))
        else:
            out.append(t)
    return tuple(out)


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


class WorkerState:
    """Everything the warm worker keeps between evaluations."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.cuda = device == "cuda"
        self.device_name = torch.cuda.get_device_name() if self.cuda else CPU_DEVICE_NAME
        self.timing_meaningful = self.cuda
        self.launches = guards.LaunchCounter()
        self.launches.install()
        self.base_seed = secrets.randbits(62)
        self._base: dict[tuple, tuple] = {}
        self._refs: dict[str, Any] = {}
        self.baselines = BaselineCache(self.device_name, torch.__version__, persist=self.cuda)
        self.measured = roofline.load_measured(self.device_name, torch.__version__) if self.cuda else None
        self.flusher = L2Flusher(torch.device("cuda")) if self.cuda else None
        # Lazy imports that patch torch (dynamo wraps torch.manual_seed) happen now,
        # before the snapshot, so they are not mistaken for a candidate's tampering.
        importlib.import_module("torch._dynamo")
        with guards.OpRecorder():
            torch.empty(1).add_(1)
        self.snapshot = guards.IdentitySnapshot()

    def ceilings(self) -> roofline.Ceilings | None:
        """None on the CPU interpreter (no roofline there) unless ceilings were measured."""
        if not self.cuda and not self.measured:
            return None
        return roofline.ceilings_for(self.device_name, self.measured)

    def info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"name": self.device_name, "timing_meaningful": self.timing_meaningful,
                                "device": self.device, "torch": torch.__version__}
        import triton
        info["triton"] = triton.__version__
        if self.cuda:
            props = torch.cuda.get_device_properties(0)
            info.update(memory_gb=round(props.total_memory / 2**30, 1), sms=props.multi_processor_count,
                        capability=f"{props.major}.{props.minor}")
            ceil = roofline.ceilings_for(self.device_name, self.measured)
            info.update(bandwidth_gbps=ceil.bandwidth_gbps, tflops=ceil.tflops, ceilings_source=ceil.source)
        return info

    # Task pieces ----------------------------------------------------------------
    def reference(self, task_dir: Path) -> tuple[Any, str]:
        digest = hashlib.sha256("".join(sorted(owned_file_hashes(task_dir).values())).encode()).hexdigest()
        if digest not in self._refs:
            self._refs[digest] = load_module(task_dir / REFERENCE_FILE, "reference")
        return self._refs[digest], digest

    def base_inputs(self, ref: Any, digest: str, shape: Shape, dtype: str) -> tuple:
        key = (digest, shape.name, dtype)
        if key not in self._base:
            seed = (self.base_seed ^ int(hashlib.sha256(repr(key).encode()).hexdigest()[:15], 16)) % (2**62)
            inputs = ref.make_inputs(dict(shape.dims), _dtype(dtype), self.device, seed)
            self._base[key] = tuple(inputs)
            self._evict()
        return self._base[key]

    def _evict(self) -> None:
        def size(inputs):
            return sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))
        while len(self._base) > 1 and sum(size(v) for v in self._base.values()) > BASE_CACHE_BYTES[self.device]:
            self._base.pop(next(iter(self._base)))

    def generator(self, seed: int) -> torch.Generator:
        return torch.Generator(device=self.device).manual_seed(seed)


class Evaluation:
    """One evaluation of one kernel.py (or one comparison of two)."""

    def __init__(self, st: WorkerState, task_dir: Path, quick: bool) -> None:
        self.st = st
        self.task_dir = task_dir
        self.spec: TaskSpec = load_spec(task_dir)
        self.quick = quick
        self.rng = random.Random(secrets.randbits(62))  # the per-evaluation secret
        self.ref, self.digest = st.reference(task_dir)
        dtypes = self.spec.dtypes[:1] if quick else self.spec.dtypes
        self.configs = [(s, d) for s in self.spec.shapes_for(st.device) for d in dtypes]
        self.first_call_s: dict[tuple, float] = {}
        self.compile_s = 0.0

    # Loading ----------------------------------------------------------------------
    def load_candidate(self, path: Path) -> Callable:
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise Verdict("FAIL", "static", f"cannot read kernel.py: {exc}") from None
        violations = check_source(source, str(path))
        if violations:
            v = violations[0]
            status = "FAIL" if v.rule in ("syntax", "kernel_fn") else "REJECTED"
            more = f" (+{len(violations) - 1} more)" if len(violations) > 1 else ""
            raise Verdict(status, "static", f"{v}{more}")
        guards.watch_candidate_code(path)
        threads = guards.live_threads()
        try:
            module = load_module(path, "kernel")
        except BaseException as exc:  # noqa: BLE001 - candidate code: anything can come out
            raise Verdict("FAIL", "static", f"import failed: {one_line(f'{type(exc).__name__}: {exc}')}") from None
        self._after_candidate_code("static", "importing kernel.py", threads)
        fn = getattr(module, "kernel_fn", None)
        if not callable(fn):
            unload(module)
            raise Verdict("FAIL", "static", "kernel.py has no callable kernel_fn")
        self.modules = getattr(self, "modules", []) + [module]
        return fn

    def unload(self) -> None:
        for module in getattr(self, "modules", []):
            unload(module)

    def _after_candidate_code(self, stage: str, where: str, threads_before: int) -> None:
        changed = self.st.snapshot.changed()
        if changed or not self.st.launches.hooks_intact():
            name = changed[0] if changed else "the Triton launch hook"
            raise Verdict("REJECTED", stage, f"{where}: replaced {name} (patching timers or the harness)",
                          restart=True)
        if guards.live_threads() > threads_before:
            raise Verdict("REJECTED", stage, f"{where}: started a thread (work the timer would miss)",
                          restart=True)

    # Guarded calls -------------------------------------------------------------------
    def fresh_inputs(self, shape: Shape, dtype: str) -> tuple:
        base = self.st.base_inputs(self.ref, self.digest, shape, dtype)
        return perturb(base, self.st.generator(self.rng.randrange(2**62)))

    def expected_meta(self, inputs: tuple) -> list:
        outs = as_tuple(self.ref.reference(*inputs))
        meta = meta_of(outs)
        for o in outs:  # nothing the candidate could read back out of the allocator
            if isinstance(o, torch.Tensor):
                guards.poison_(o)
        return meta

    def guarded_call(self, fn: Callable, inputs: tuple, expected: list, where: str, stage: str) -> tuple:
        before = snapshot_inputs(inputs)
        launches = self.st.launches.count
        guards.watch_candidate_code(fn)
        threads = guards.live_threads()
        recorder = guards.OpRecorder(poison=True)
        t0 = time.perf_counter()
        try:
            with recorder:
                out = fn(*inputs)
            if self.st.cuda:
                torch.cuda.synchronize()
        except BaseException as exc:  # noqa: BLE001
            raise candidate_error(exc, where, stage) from None
        elapsed = time.perf_counter() - t0
        self._after_candidate_code(stage, where, threads)
        self._check_ops(recorder, where, stage)
        if self.st.launches.count == launches:
            raise Verdict("REJECTED", stage, f"{where}: kernel_fn launched no Triton kernel")
        outs = as_tuple(out)
        check_structure(outs, expected, inputs, where, stage)
        check_inputs_unchanged(before, inputs, where, stage)
        return outs, elapsed

    def _check_ops(self, recorder: guards.OpRecorder, where: str, stage: str) -> None:
        bad = recorder.forbidden()
        if bad:
            named = [op for op in bad if op in self.spec.forbidden_ops]
            op = (named or bad)[0]
            why = "the task's own PyTorch op" if named else "a PyTorch compute op"
            raise Verdict("REJECTED", stage, f"{where}: kernel_fn calls {op} ({why}): the work must be done in Triton")

    def check_against_reference(self, outs: tuple, inputs: tuple, dtype: str) -> list[Errors]:
        tol = self.spec.tolerances[dtype]
        refs = precise_reference(self.ref, inputs)
        return [compare(o, r, tol.atol, tol.rtol, tol.max_rel_l2) for o, r in zip(outs, refs)]

    def run_checked(self, fn: Callable, shape: Shape, dtype: str, stage: str, transform: tuple | None = None,
                    inputs: tuple | None = None) -> tuple[tuple, tuple, list[Errors]]:
        where = f"{shape.name} {dtype}" + (f" '{transform[0]}'" if transform else "")
        if inputs is None:
            inputs = self.fresh_inputs(shape, dtype)
            if transform:
                gen = torch.Generator().manual_seed(self.rng.randrange(2**62))
                inputs = tuple(transform[1](inputs, gen))
        expected = self.expected_meta(inputs)
        outs, elapsed = self.guarded_call(fn, inputs, expected, where, stage)
        key = (shape.name, dtype)
        if key not in self.first_call_s:
            self.first_call_s[key] = elapsed
        else:  # first call minus a warm call: Triton's JIT compile, reported on its own line
            self.compile_s += max(0.0, self.first_call_s.pop(key) - elapsed)
            self.first_call_s[key] = -1.0
        errors = self.check_against_reference(outs, inputs, dtype)
        for i, err in enumerate(errors):
            if not err.ok:
                raise Verdict("FAIL", stage, f"{where}: output {i} wrong: {err.detail}")
        return inputs, outs, errors

    # Stages ------------------------------------------------------------------------
    def stage_smoke(self, fn: Callable) -> None:
        shape, dtype = self.configs[0]
        self.run_checked(fn, shape, dtype, "smoke")

    def stage_shapes(self, fn: Callable, report: Report) -> None:
        for shape, dtype in self.configs:
            inputs, _, errors = self.run_checked(fn, shape, dtype, "shapes")
            # Replay check: new contents in the same tensors, with the same address, id and
            # _version (written through .data), so a cache keyed on any of them is stale.
            fresh = self.fresh_inputs(shape, dtype)
            for t, new in zip(inputs, fresh):
                if isinstance(t, torch.Tensor):
                    t.data.copy_(new)
            try:
                _, _, errors2 = self.run_checked(fn, shape, dtype, "shapes", inputs=inputs)
            except Verdict as v:
                if (v.status == "FAIL" and "wrong" in v.reason) or "no Triton kernel" in v.reason:
                    raise Verdict("REJECTED", "shapes", f"{shape.name} {dtype}: stale output after the inputs "
                                  "changed in place (same address, id and version): caching or replaying "
                                  "outputs across calls") from None
                raise
            report.shapes.append(ShapeResult(
                shape=shape.name, dims=dict(shape.dims), dtype=dtype, passed=True,
                max_abs_err=max(e.max_abs_err for e in errors + errors2),
                rel_l2_err=max(e.rel_l2_err for e in errors + errors2)))

    def stage_stability(self, fn: Callable) -> None:
        transforms = getattr(self.ref, "ADVERSARIAL", {}) or {}
        shape = self.spec.shapes_for(self.st.device)[0]
        for dtype in dict.fromkeys(d for _, d in self.configs):
            for name, transform in transforms.items():
                self.run_checked(fn, shape, dtype, "stability", transform=(name, transform))

    def stage_determinism(self, fn: Callable) -> None:
        shape = self.spec.shapes_for(self.st.device)[0]
        for dtype in dict.fromkeys(d for _, d in self.configs):
            inputs, outs, _ = self.run_checked(fn, shape, dtype, "determinism")
            first = [o.clone() for o in outs]
            _, outs2, _ = self.run_checked(fn, shape, dtype, "determinism", inputs=inputs)
            for i, (a, b) in enumerate(zip(first, outs2)):
                if not bitwise_equal(a, b):
                    diff = float((a.double() - b.double()).abs().nan_to_num(math.inf).max())
                    raise Verdict("FAIL", "determinism", f"{shape.name} {dtype}: output {i} differs bitwise "
                                  f"between two runs on the same inputs (max diff {diff:.3g})")

    # Timing ---------------------------------------------------------------------------
    def time_fns(self, fns: list[Callable], shape: Shape, dtype: str, check: bool,
                 cpu_reps: int = CPU_REPS) -> list[Samples]:
        base = self.st.base_inputs(self.ref, self.digest, shape, dtype)
        gen = self.st.generator(self.rng.randrange(2**62))

        def make() -> tuple:
            return perturb(base, gen)

        # No poisoning here: NaN-filled allocations would tell a candidate which rep is watched.
        spy = (lambda: guards.OpRecorder(poison=False)) if check else None
        launches = self.st.launches.count
        threads = guards.live_threads()
        try:
            if self.st.cuda:
                check_rep = self.rng.randrange(2, 10) if check else None
                samples = time_gpu_interleaved(fns, make, self.st.flusher, None, check_rep=check_rep, spy=spy)
            else:
                check_rep = self.rng.randrange(cpu_reps) if check else None
                samples = time_cpu_interleaved(fns, make, cpu_reps, check_rep=check_rep, spy=spy)
        except BaseException as exc:  # noqa: BLE001
            raise candidate_error(exc, f"{shape.name} {dtype} (timing)", "timing") from None
        if check:
            where = f"{shape.name} {dtype} (timed run)"
            self._after_candidate_code("timing", where, threads)
            n_calls = sum(len(s.times_us) + 1 for s in samples)
            if self.st.launches.count - launches < n_calls:
                raise Verdict("REJECTED", "timing", f"{where}: some timed calls launched no Triton kernel")
            for s in samples:
                inputs, out, recorder = s.checked
                self._check_ops(recorder, where, "timing")
                check_structure(as_tuple(out), self.expected_meta(inputs), inputs, where, "timing")
                errors = self.check_against_reference(as_tuple(out), inputs, dtype)
                if not all(e.ok for e in errors):
                    raise Verdict("REJECTED", "timing", f"{shape.name} {dtype}: the output of a timed run is "
                                  "wrong (the kernel behaves differently when timed, or replays outputs)")
                s.checked = None
        return samples

    def baseline(self, shape: Shape, dtype: str) -> dict[str, Any]:
        key = BaselineCache.key(self.digest, shape.name + ":" + shape.label(), dtype)
        cached = self.st.baselines.get(key)
        if cached is not None:
            return cached
        eager = self.time_fns([self.ref.reference], shape, dtype, check=False)[0]
        value: dict[str, Any] = {"eager_us": eager.median, "compile_us": None, "compile_note": "not on CPU"}
        if self.st.cuda:
            value.update(self._time_compiled(shape, dtype))
        self.st.baselines.put(key, value)
        return value

    def _time_compiled(self, shape: Shape, dtype: str) -> dict[str, Any]:
        """torch.compile of the reference, a fresh function per shape x dtype, with dynamo's
        limits raised and its counters checked so a silent eager fallback is caught."""
        import torch._dynamo
        from torch._dynamo.utils import counters
        cfg = torch._dynamo.config
        for name in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                     "accumulated_recompile_limit"):
            if hasattr(cfg, name):
                setattr(cfg, name, max(int(getattr(cfg, name)), 4096))
        ref = self.ref.reference

        def reference_for_compile(*args):
            return ref(*args)

        compiled = torch.compile(reference_for_compile, dynamic=False)
        before = counters["stats"]["unique_graphs"]
        try:
            compiled(*self.fresh_inputs(shape, dtype))
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - a reference dynamo cannot compile: report, don't fail
            return {"compile_us": None, "compile_note": one_line(f"torch.compile failed: {exc}")}
        if counters["stats"]["unique_graphs"] <= before:
            return {"compile_us": None, "compile_note": "torch.compile fell back to eager (no graph compiled)"}
        samples = self.time_fns([compiled], shape, dtype, check=False)[0]
        return {"compile_us": samples.median, "compile_note": "compiled"}

    def stage_timing(self, fn: Callable, report: Report) -> None:
        ceil = self.st.ceilings()
        by_key = {(r.shape, r.dtype): r for r in report.shapes}
        for shape, dtype in self.configs:
            row = by_key[(shape.name, dtype)]
            base = self.baseline(shape, dtype)
            samples = self.time_fns([fn], shape, dtype, check=True)[0]
            p20, med, p80 = samples.pcts()
            row.median_us, row.p20_us, row.p80_us = med, p20, p80
            row.baseline_us, row.compile_ref_us = base["eager_us"], base.get("compile_us")
            row.speedup_vs_baseline = base["eager_us"] / med
            row.speedup_vs_compile = row.compile_ref_us / med if row.compile_ref_us else None
            n_bytes = float(self.ref.bytes_moved(dict(shape.dims), _dtype(dtype)))
            n_flops = float(self.ref.flops(dict(shape.dims)))
            row.gbps = n_bytes / (med * 1e3) if n_bytes else None
            row.tflops = n_flops / (med * 1e6) if n_flops else None
            if ceil is not None:
                pct_floor, reject_floor = roofline.roofline_floor(ceil, n_bytes, n_flops, dtype)
                if reject_floor is not None and med < reject_floor:
                    raise Verdict("REJECTED", "timing", f"{shape.name} {dtype}: median {med:.2f} us is below the "
                                  f"hardware floor {reject_floor:.2f} us ({n_bytes / 1e6:.1f} MB, "
                                  f"{n_flops / 1e9:.2f} GFLOP): impossible, the work is not being done")
                row.roofline_pct = roofline.pct_of_roofline(pct_floor, med)
        report.summary = summarize(report.shapes)

    def compare(self, candidate_path: Path, incumbent_path: Path) -> dict[str, Any]:
        return compare_run(self, candidate_path, incumbent_path)

    # The whole evaluation ----------------------------------------------------------------
    def run(self, kernel_path: Path) -> tuple[Report, bool]:
        report = Report(status="PASS", task=self.spec.name, device=self.st.device_name,
                        timing_meaningful=self.st.timing_meaningful)
        restart = False
        if self.st.cuda:
            torch.cuda.reset_peak_memory_stats()
        try:
            fn = self.load_candidate(kernel_path)
            for stage, action in (("smoke", lambda: self.stage_smoke(fn)),
                                  ("shapes", lambda: self.stage_shapes(fn, report)),
                                  ("stability", lambda: self.stage_stability(fn)),
                                  ("determinism", lambda: self.stage_determinism(fn)),
                                  ("timing", lambda: self.stage_timing(fn, report))):
                report.stage = stage
                action()
        except Verdict as v:
            report.status, report.stage, report.reason, restart = v.status, v.stage, v.reason, v.restart
            for row in report.shapes:
                row.passed = row.passed and v.stage not in ("shapes",)
            report.summary = None if report.status != "PASS" else report.summary
        finally:
            self.unload()
        report.compile_s = round(self.compile_s, 4)
        if self.st.cuda:
            report.peak_vram_mib = torch.cuda.max_memory_allocated() / 2**20
        return report, restart


def compare_run(ev: "Evaluation", candidate_path: Path, incumbent_path: Path) -> dict[str, Any]:
    """Time candidate and incumbent interleaved on the same fresh inputs, per shape x dtype.

    Both are loaded under the static rules, the candidate gets a guarded smoke check,
    and a secret rep of each is checked for correctness. Returns raw samples; the
    runner computes the bootstrap CI.
    """
    try:
        cand = ev.load_candidate(candidate_path)
        inc = ev.load_candidate(incumbent_path)
        ev.stage_smoke(cand)
        rows = []
        for shape, dtype in ev.configs:
            s_cand, s_inc = ev.time_fns([cand, inc], shape, dtype, check=True, cpu_reps=COMPARE_CPU_REPS)
            rows.append({"shape": shape.name, "dtype": dtype, "candidate_us": s_cand.times_us,
                         "incumbent_us": s_inc.times_us})
    finally:
        ev.unload()
    method = ("CUDA events, L2 flushed, interleaved, fresh inputs per rep" if ev.st.cuda
              else "CPU wall clock under the Triton interpreter (not meaningful)")
    return {"rows": rows, "method": method, "timing_meaningful": ev.st.timing_meaningful}


def summarize(rows: list[ShapeResult]) -> Summary | None:
    timed = [r for r in rows if r.median_us]
    if not timed:
        return None

    def gm(values):
        vals = [v for v in values if v]
        return stats.geomean(vals) if len(vals) == len(timed) else None

    worst = min(timed, key=lambda r: r.speedup_vs_baseline or math.inf)
    return Summary(
        latency_us=stats.geomean([r.median_us for r in timed]),
        speedup_vs_baseline=gm(r.speedup_vs_baseline for r in timed),
        speedup_vs_compile=gm(r.speedup_vs_compile for r in timed),
        roofline_pct=gm(r.roofline_pct for r in timed),
        worst_shape=f"{worst.shape} {worst.dtype}",
        worst_speedup=worst.speedup_vs_baseline,
        gbps=gm(r.gbps for r in timed),
        tflops=gm(r.tflops for r in timed),
    )
