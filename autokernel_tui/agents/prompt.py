"""What the language-model agents are told: shared by the Claude and OpenAI-compatible backends.

The context is split so the stable part can be cached: ``system_text`` (role,
rules, playbook) and ``task_text`` (the task spec) do not change across a
task's experiments; ``experiment_text`` (incumbent, its numbers, the history
digest) changes every time and comes last.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from autokernel_tui.agents.base import MAX_SOURCE_BYTES, AgentContext
from autokernel_tui.agents.memory import digest

TOOL_NAME = "submit_kernel"
MAX_REFERENCE_CHARS = 12_000
TOOL_DESCRIPTION = (
    "Submit the complete new kernel.py for this experiment. Call it exactly once, "
    "after your reasoning, with the whole file (not a diff).")
TOOL_SCHEMA = {
    "type": "object",
    "properties": {
        "source": {"type": "string", "description": "the complete new kernel.py"},
        "description": {"type": "string",
                        "description": "one line, imperative, what changed (becomes the commit subject)"},
        "hypothesis": {"type": "string", "description": "why this should be faster, in one to three sentences"},
    },
    "required": ["source", "description", "hypothesis"],
}

ROLE = f"""You are a GPU kernel engineer optimizing one Triton kernel, one experiment at a time.

Each turn you receive the current best kernel.py (the incumbent), its measured numbers
per shape and % of roofline, and a digest of earlier experiments. Propose ONE focused
change that you expect to make the kernel faster on the shapes given while staying
correct, then call the `{TOOL_NAME}` tool with the complete new kernel.py, a one-line
description and your hypothesis.

Rules:
- You edit only kernel.py; it must define kernel_fn with the same signature and outputs
  as the reference, allocate its outputs, and launch at least one Triton kernel.
- Module-level UPPER_CASE int constants are tuning knobs; keep them one per line.
- No PyTorch compute ops inside kernel_fn, no fallbacks, no caching across calls.
- kernel.py must stay under {MAX_SOURCE_BYTES // 1024} KB. Imports: only torch, triton, math, typing,
  functools, itertools, dataclasses, operator, collections, enum. From torch use only allocation
  (torch.empty*, zeros*, full*, arange), dtypes and metadata; no torch.nn/ops/linalg, no streams, events,
  synchronize, data_ptr, .tolist()/.numpy(), and no eval/exec/open/getattr/setattr/type/id/globals.
- Do not repeat an idea the history says was tried; learn from the failure reasons.
- Prefer a change you can explain with the roofline over a random tweak.
"""


@lru_cache(maxsize=1)
def playbook() -> str:
    return (Path(__file__).with_name("playbook.md")).read_text(encoding="utf-8")


def system_text() -> str:
    return ROLE + "\n" + playbook()


def task_text(ctx: AgentContext) -> str:
    t = ctx.task
    lines = [f"# Task: {t.name} (family {t.family})", t.description,
             f"Bound: {t.bound}-bound. Baseline being beaten: {t.baseline}.",
             f"Dtypes checked: {', '.join(t.dtypes)}."]
    for dtype, tol in t.tolerances.items():
        lines.append(f"Tolerance {dtype}: atol {tol.atol:g}, rtol {tol.rtol:g}, max relative L2 {tol.max_rel_l2:g}")
    lines.append("Timed shapes (GPU): " + "; ".join(f"{s.name} {s.dims}" for s in t.shapes))
    lines.append("Correctness-only shapes (CPU interpreter): " + "; ".join(f"{s.name} {s.dims}" for s in t.test_shapes))
    if t.forbidden_ops:
        lines.append("Forbidden ops (rejected): " + ", ".join(t.forbidden_ops))
    if t.knob_space:
        lines.append("Knob search space: " + "; ".join(f"{k} in {list(v)}" for k, v in t.knob_space.items()))
    reference = _reference_source(t)
    if reference:
        lines += ["", "## reference.py (harness-owned: the inputs, the baseline, the adversarial inputs)",
                  "```python", reference.rstrip("\n"), "```"]
    return "\n".join(lines)


def _reference_source(task) -> str:
    if task.path is None:
        return ""
    try:
        text = (task.path / "reference.py").read_text(encoding="utf-8")
    except OSError:
        return ""
    return text if len(text) <= MAX_REFERENCE_CHARS else text[:MAX_REFERENCE_CHARS] + "\n# ... (truncated)"


def _report_text(report: dict | None) -> str:
    if not report:
        return "The incumbent has not been measured yet."
    lines = [f"Harness verdict: {report.get('status')} on {report.get('device', '?')}"
             + ("" if report.get("timing_meaningful", True) else " (timings NOT meaningful: CPU interpreter)")]
    if report.get("reason"):
        lines.append(f"Reason: {report['reason']}")
    summary = report.get("summary") or {}
    if summary:
        lines.append("Summary: " + ", ".join(f"{k} {summary[k]}" for k in (
            "latency_us", "speedup_vs_baseline", "speedup_vs_compile", "roofline_pct", "worst_shape", "worst_speedup")
            if summary.get(k) is not None))
    for s in report.get("shapes") or []:
        keys = ("dtype", "passed", "median_us", "baseline_us", "speedup_vs_baseline", "roofline_pct", "gbps", "tflops",
                "max_abs_err")
        lines.append(f"- {s.get('shape')} {s.get('dims', '')}: " + ", ".join(
            f"{k} {s[k]}" for k in keys if s.get(k) is not None))
    return "\n".join(lines)


def experiment_text(ctx: AgentContext, memory_chars: int) -> str:
    parts = [f"# Experiment {ctx.experiment}",
             "## Incumbent kernel.py", "```python", ctx.incumbent_source.rstrip("\n"), "```",
             "## Incumbent measurements", _report_text(ctx.incumbent_report),
             "## History", digest(ctx.history, memory_chars)]
    if ctx.in_flight:
        parts += ["## Other proposals for this kernel in flight now (do not duplicate them)"]
        parts += [f"- {p.get('description') or '(still being written)'}" for p in ctx.in_flight]
    if ctx.profile:
        parts += ["## Profile of the model", json.dumps(ctx.profile, default=str)[:1500]]
    parts.append(f"Think about where the time goes, then call {TOOL_NAME} with the complete new kernel.py.")
    return "\n".join(parts)


REPAIR_NO_TOOL = (f"You did not call {TOOL_NAME}. Call it now with the complete kernel.py, "
                  "a one-line description and a hypothesis.")


def repair_text(error: str) -> str:
    return f"The submission was rejected: {error}. Fix it and call {TOOL_NAME} again with the complete kernel.py."
