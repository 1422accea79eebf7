"""A GPU-like run made by the real engine on the CPU, in about a second.

The engine (``engine.loop.Engine``), its git ledger, results.tsv, events.jsonl and
reports are all real; only the two backends are doubles:

* ``H200Harness`` answers like the harness on an NVIDIA H200: real ``Report`` /
  ``ShapeResult`` / ``Summary`` / ``Comparison`` dataclasses, ``timing_meaningful``
  True, ``roofline_pct`` in PERCENT computed from each shape's bytes and the H200's
  4.8 TB/s (the starting kernel: 10.47% at gpt2-small, 83.2% at llama7b-layer).
  It reads the candidate's knob values (``agents.knobs``) to know which kernel it
  was given, so the numbers follow from the source, as they would on the GPU.
* ``ScriptedTuner`` proposes the knob changes of ``SCRIPT`` in turn.

Under the threshold policy (1.05) the first four experiments decide themselves
(keep, discard, fail, keep) and the fifth, 1.03x faster, waits for a human: the
run stops there, ``awaiting_approval``, with everything on disk.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from autokernel_tui.agents.base import AgentEvent, NothingToPropose, Proposal
from autokernel_tui.agents.knobs import parse_knobs, rewrite
from autokernel_tui.config import Settings
from autokernel_tui.engine.loop import Engine
from autokernel_tui.harness.report import Comparison, Report, ShapeResult, Summary

H200_BANDWIDTH_BPS = 4.8e12  # the spec table's H200 HBM3e bandwidth
TAG = "h200-night"
# (name, M, N) as in kernels/rmsnorm/task.toml; bf16
SHAPES = (("gpt2-small", 8192, 768), ("llama7b-layer", 4096, 4096))
EAGER_US = (16.3, 25.0)  # F.rms_norm, the baseline
COMPILE_US = (14.1, 17.2)  # torch.compile of the reference
# (ROW_BLOCK_ELEMS, NUM_WARPS) -> median us per shape, or a failure reason
MEASURED: dict[tuple[int, int], tuple[float, float] | str] = {
    (2048, 4): (50.08, 16.81),  # the starter: 10.47% and 83.2% of roofline
    (2048, 8): (41.2, 16.5),
    (1024, 8): (52.3, 17.4),
    (32768, 8): "max_abs_err 0.41 > atol 0.03 at gpt2-small (bfloat16): rows past the block unmasked",
    (4096, 8): (30.9, 16.2),
    (4096, 16): (29.6, 15.9),
}
# (description, hypothesis, knob changes): what the scripted agent proposes, in order
SCRIPT = (
    ("NUM_WARPS 4 -> 8", "more warps per row hide the load latency of the short gpt2 rows", {"NUM_WARPS": 8}),
    ("ROW_BLOCK_ELEMS 2048 -> 1024", "smaller blocks, more programs in flight", {"ROW_BLOCK_ELEMS": 1024}),
    ("ROW_BLOCK_ELEMS 1024 -> 32768", "one block per row group, fewer launches", {"ROW_BLOCK_ELEMS": 32768}),
    ("ROW_BLOCK_ELEMS 2048 -> 4096", "two rows per program at N=768 halve the per-program overhead",
     {"ROW_BLOCK_ELEMS": 4096}),
    ("NUM_WARPS 8 -> 16", "with 4096-element blocks, 16 warps keep 16-byte vectors per thread",
     {"NUM_WARPS": 16}),
)


def _bytes(m: int, n: int) -> int:
    return 2 * m * n * 2 + n * 2  # bf16: x in, y out, the weight once


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _state(source: str) -> tuple[int, int]:
    knobs = parse_knobs(source)
    return knobs["ROW_BLOCK_ELEMS"].value, knobs["NUM_WARPS"].value


class H200Harness:
    """The harness's contract (docs/ARCHITECTURE.md, "Harness"), answered as on an H200."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def device_info(self) -> dict:
        return {"name": "NVIDIA H200", "timing_meaningful": True, "bandwidth_gbps": H200_BANDWIDTH_BPS / 1e9}

    def _medians(self, source: str) -> tuple[float, float] | str:
        return MEASURED[_state(source)]

    def evaluate(self, task_dir, kernel_source=None, quick=False, owned_hashes=None) -> Report:
        self.calls.append("evaluate")
        source = kernel_source if kernel_source is not None else (Path(task_dir) / "kernel.py").read_text()
        measured = self._medians(source)
        if isinstance(measured, str):
            shapes = [ShapeResult(shape=name, dims={"M": m, "N": n}, dtype="bfloat16", passed=(i > 0),
                                  max_abs_err=0.41 if i == 0 else 0.004, rel_l2_err=0.09 if i == 0 else 0.001)
                      for i, (name, m, n) in enumerate(SHAPES)]
            return Report(status="FAIL", reason=measured, stage="shapes", task=Path(task_dir).name,
                          device="NVIDIA H200", timing_meaningful=True, shapes=shapes, compile_s=1.9, wall_s=2.6)
        shapes = []
        for (name, m, n), median, eager, compiled in zip(SHAPES, measured, EAGER_US, COMPILE_US):
            nbytes = _bytes(m, n)
            floor_us = nbytes / H200_BANDWIDTH_BPS * 1e6
            shapes.append(ShapeResult(
                shape=name, dims={"M": m, "N": n}, dtype="bfloat16", passed=True, max_abs_err=0.0078,
                rel_l2_err=0.0021, median_us=median, p20_us=round(median * 0.993, 2), p80_us=round(median * 1.008, 2),
                baseline_us=eager, compile_ref_us=compiled, speedup_vs_baseline=round(eager / median, 4),
                speedup_vs_compile=round(compiled / median, 4), gbps=round(nbytes / (median * 1e3), 1),
                tflops=round(6 * m * n / (median * 1e6), 3), roofline_pct=round(min(100.0, 100 * floor_us / median), 2)))
        worst = min(shapes, key=lambda s: s.speedup_vs_baseline)
        summary = Summary(latency_us=round(_geomean([s.median_us for s in shapes]), 2),
                          speedup_vs_baseline=round(_geomean([s.speedup_vs_baseline for s in shapes]), 4),
                          speedup_vs_compile=round(_geomean([s.speedup_vs_compile for s in shapes]), 4),
                          roofline_pct=round(_geomean([s.roofline_pct for s in shapes]), 2),
                          worst_shape=worst.shape, worst_speedup=worst.speedup_vs_baseline,
                          gbps=round(_geomean([s.gbps for s in shapes]), 1),
                          tflops=round(_geomean([s.tflops for s in shapes]), 3))
        return Report(status="PASS", stage="timing", task=Path(task_dir).name, device="NVIDIA H200",
                      timing_meaningful=True, shapes=shapes, summary=summary, compile_s=1.9, wall_s=4.1,
                      peak_vram_mib=386.0)

    def compare(self, task_dir, candidate_source, incumbent_source) -> Comparison:
        self.calls.append("compare")
        cand, inc = self._medians(candidate_source), self._medians(incumbent_source)
        per_shape = [{"shape": name, "dtype": "bfloat16", "candidate_us": c, "incumbent_us": i,
                      "speedup": round(i / c, 4)} for (name, _, _), c, i in zip(SHAPES, cand, inc)]
        speedup = round(_geomean([p["speedup"] for p in per_shape]), 4)
        low, high = round(speedup * 0.988, 4), round(speedup * 1.012, 4)
        return Comparison(speedup=speedup, ci_low=low, ci_high=high, faster=low > 1.01, n_samples=40,
                          method="paired bootstrap of medians", per_shape=per_shape)

    def close(self) -> None:
        pass


class ScriptedTuner:
    """Proposes SCRIPT's knob changes, one per experiment, each on the incumbent kernel.py."""

    name = "tuner"

    def __init__(self) -> None:
        self.contexts = []

    def propose(self, ctx, emit) -> Proposal:
        self.contexts.append(ctx)
        if ctx.experiment > len(SCRIPT):
            raise NothingToPropose("script done")
        description, hypothesis, changes = SCRIPT[ctx.experiment - 1]
        emit(AgentEvent("thinking", f"The incumbent reaches {_pct_text(ctx.incumbent_report)}. "))
        emit(AgentEvent("text", f"Try {description}: {hypothesis}."))
        return Proposal(source=rewrite(ctx.incumbent_source, changes), description=description,
                        hypothesis=hypothesis, tokens_in=1200, tokens_out=300, cost_usd=0.0,
                        agent="tuner")

    def close(self) -> None:
        pass


def _pct_text(report: dict | None) -> str:
    summary = (report or {}).get("summary") or {}
    pct = summary.get("roofline_pct")
    return "an unmeasured share of roofline" if pct is None else f"{pct:.1f}% of roofline (geomean)"


def settings() -> Settings:
    s = Settings()
    s.run.parallel = 1  # one experiment at a time: the scripted story below (auto would be 4 on a GPU)
    s.run.policy = "threshold"
    s.run.threshold = 1.05
    s.run.approval_timeout_s = 3600.0
    return s


def start_run(workspace: Path) -> Engine:
    """The real engine on ``workspace`` (from ``init_workspace``), run until the fifth experiment
    awaits approval. The caller stops it: ``stop_run(engine)``."""
    engine = Engine(workspace, settings(), tag=TAG, new=True, tasks=["rmsnorm"], agent=ScriptedTuner(),
                    harness=H200Harness())
    engine.start()
    deadline = time.time() + 60
    while engine.snapshot()["pending"] is None:
        if time.time() > deadline or engine.state == "stopped":
            stop_run(engine)
            raise AssertionError(f"the GPU-like run did not reach its approval (state {engine.state})")
        time.sleep(0.02)
    return engine


def stop_run(engine: Engine) -> None:
    engine.command("stop")
    engine.join(30)
    engine.close()


def make_gpu_like_run(root: Path) -> tuple[Path, Engine]:
    from autokernel_tui.ledger.workspace import init_workspace

    workspace = init_workspace(root, tasks=["rmsnorm"])
    return workspace, start_run(workspace)

