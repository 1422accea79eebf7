"""Test doubles for the engine tests: a scripted agent and a fast fake harness.

Both follow the contracts in docs/ARCHITECTURE.md. The fake harness reads two
marker lines from kernel.py, so a test (or a subprocess engine) controls every
verdict through the source text alone:

    # fake-latency-us: 80      -> the candidate's median latency
    # fake-status: FAIL        -> the harness verdict (default PASS)

Subprocess engines load them via ``--agent enginefakes:make_agent`` and
``AUTOKERNEL_HARNESS_FACTORY=enginefakes:make_harness`` (tests/engine on PYTHONPATH).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from autokernel_tui.agents.base import AgentEvent, AgentUnavailable, Proposal
from autokernel_tui.harness.report import Comparison, Report, Summary

LAT_RE = re.compile(r"^# fake-latency-us: ([0-9.]+)$", re.M)
STATUS_RE = re.compile(r"^# fake-status: ([A-Z]+)$", re.M)
DEFAULT_LATENCY = 100.0


def latency_of(source: str) -> float:
    m = LAT_RE.search(source)
    return float(m.group(1)) if m else DEFAULT_LATENCY


def with_markers(source: str, latency: float, status: str = "PASS") -> str:
    body = STATUS_RE.sub("", LAT_RE.sub("", source)).rstrip("\n")
    return f"{body}\n# fake-latency-us: {latency:g}\n" + (f"# fake-status: {status}\n" if status != "PASS" else "")


class FakeHarness:
    def __init__(self, delay_s: float = 0.0):
        self.delay_s = delay_s
        self.calls: list[str] = []

    def device_info(self) -> dict:
        return {"name": "fake", "timing_meaningful": False}

    def evaluate(self, task_dir, kernel_source=None, quick=False, owned_hashes=None, **options) -> Report:
        source = kernel_source if kernel_source is not None else (Path(task_dir) / "kernel.py").read_text()
        self.calls.append("evaluate")
        time.sleep(self.delay_s)
        status_m = STATUS_RE.search(source)
        status = status_m.group(1) if status_m else "PASS"
        lat = latency_of(source)
        summary = Summary(latency_us=lat, speedup_vs_baseline=DEFAULT_LATENCY / lat, speedup_vs_compile=1.0,
                          roofline_pct=None, worst_shape="s", worst_speedup=1.0, gbps=1.0, tflops=0.1) \
            if status == "PASS" else None
        return Report(status=status, reason="" if status == "PASS" else f"fake {status.lower()}", stage="timing",
                      task=Path(task_dir).name, device="fake", summary=summary)

    def compare(self, task_dir, candidate_source, incumbent_source, **options) -> Comparison:
        self.calls.append("compare")
        sp = latency_of(incumbent_source) / latency_of(candidate_source)
        return Comparison(speedup=sp, ci_low=sp * 0.98, ci_high=sp * 1.02, faster=sp * 0.98 > 1.01, n_samples=20,
                          method="fake")

    def close(self) -> None:
        pass


class ScriptedAgent:
    """Proposes the incumbent with a new fake latency from ``script`` (cycled by experiment number).

    An entry is a latency, or (latency, status), or the string "down" (AgentUnavailable).
    """

    name = "scripted"

    def __init__(self, script, delay_s: float = 0.0):
        self.script = list(script)
        self.delay_s = delay_s
        self.contexts = []

    def propose(self, ctx, emit) -> Proposal:
        self.contexts.append(ctx)
        entry = self.script[(ctx.experiment - 1) % len(self.script)]
        if entry == "down":
            raise AgentUnavailable("scripted outage")
        lat, status = entry if isinstance(entry, tuple) else (entry, "PASS")
        emit(AgentEvent("thinking", f"experiment {ctx.experiment}: try latency {lat}"))
        time.sleep(self.delay_s)
        emit(AgentEvent("text", f"proposing {lat} us"))
        return Proposal(source=with_markers(ctx.incumbent_source, lat, status), description=f"latency {lat:g}us",
                        hypothesis="scripted", tokens_in=10, tokens_out=5, cost_usd=0.01, agent="scripted")

    def close(self) -> None:
        pass


def make_agent(settings, env):
    """Plugin factory for subprocess engines: the script comes from AUTOKERNEL_TEST_SCRIPT (comma list)."""
    items = []
    for part in os.environ.get("AUTOKERNEL_TEST_SCRIPT", "90,95,80").split(","):
        if part == "down":
            items.append(part)
        elif "/" in part:
            lat, status = part.split("/")
            items.append((float(lat), status))
        else:
            items.append(float(part))
    return ScriptedAgent(items, delay_s=float(os.environ.get("AUTOKERNEL_TEST_AGENT_DELAY", "0")))


def make_harness(settings):
    """One fake harness, or a pool of AUTOKERNEL_TEST_HARNESS_MEMBERS of them (as on a host of that
    many GPUs), each taking AUTOKERNEL_TEST_HARNESS_DELAY seconds per evaluation."""
    from autokernel_tui.harness.pool import HarnessPool

    delay = float(os.environ.get("AUTOKERNEL_TEST_HARNESS_DELAY", "0"))
    members = int(os.environ.get("AUTOKERNEL_TEST_HARNESS_MEMBERS", "0"))
    if members:
        return HarnessPool([FakeHarness(delay_s=delay) for _ in range(members)])
    return FakeHarness(delay_s=delay)


def ray_member(delay_s: float = 0.0, **_harness_kwargs):
    """A fake harness built on a Ray worker (``ray_pool(factory="enginefakes:ray_member")``)."""
    return FakeHarness(delay_s=delay_s)
