"""The engine's two backends, the agent and the harness: set-up, plugins, and the typed harness.

``load_object("module:attr")`` loads a plugin (``run --agent module:factory``,
``AUTOKERNEL_HARNESS_FACTORY=module:factory``). ``make_harness`` / ``make_agent``
build the configured ones. ``Evaluator`` is the harness as the engine uses it:
every answer a ``harness.report.Report`` / ``Comparison`` under today's field
names (a plugin harness may still return dicts, or say ``pct_roofline``), and a
harness that raises costs one experiment, never the night.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

from autokernel_tui.config import Settings
from autokernel_tui.errors import WorkspaceError
from autokernel_tui.harness.report import Comparison, Report
from autokernel_tui.ledger.schema import read_comparison, read_report


def load_object(spec: str) -> Any:
    """``package.module:attribute`` -> the attribute (plugin agents and harnesses)."""
    import importlib

    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise WorkspaceError(f"{spec!r}: expected module:attribute")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise WorkspaceError(f"cannot load {spec!r}: {exc}") from None


def make_harness(settings: Settings, env: dict[str, str]) -> Any:
    """The harnesses that judge proposals (issue 22): one warm harness per GPU of ``run.gpus``, a
    few interpreter harnesses on a host without GPUs, or actors of a Ray cluster; always a
    ``HarnessPool``, which judges one call at a time on each member (so timings never share a GPU)."""
    factory = env.get("AUTOKERNEL_HARNESS_FACTORY")
    if factory:  # plugin hook, used by the resume tests to swap in a fast harness
        return load_object(factory)(settings)
    from autokernel_tui.engine.parallel import AUTO_CPU
    from autokernel_tui.harness import pool

    h, rs = settings.harness, settings.run
    kwargs = dict(timeout_s=h.timeout_s, keep_margin=h.keep_margin, confirm_keeps=h.confirm_keeps,
                  sandbox=h.sandbox, measure=h.measure)
    cpu_members = min(rs.parallel if rs.parallel > 0 else AUTO_CPU, h.cpu_workers)
    if rs.backend == "ray":
        return pool.ray_pool(rs.ray_address or None, cpu_members=cpu_members, **kwargs)
    gpus = pool.parse_gpus(rs.gpus)
    if gpus:
        return pool.local_pool(gpus, **kwargs)
    return pool.local_pool(None, cpu_workers=cpu_members, device="auto", **kwargs)


def make_agent(settings: Settings, env: dict[str, str]) -> Any:
    from autokernel_tui.agents.base import make_agent as _make_agent

    return _make_agent(settings.agent, env=env)


def _plain(obj: Any) -> Any:
    """A plugin's answer as plain data (a dict, or a dataclass of another kind)."""
    if obj is None or isinstance(obj, dict):
        return obj
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    return obj


def as_report(obj: Any) -> Report | None:
    return obj if type(obj) is Report else read_report(_plain(obj))


def as_comparison(obj: Any) -> Comparison | None:
    return obj if type(obj) is Comparison else read_comparison(_plain(obj))


class Evaluator:
    """The harness, typed and contained (see the module docstring)."""

    def __init__(self, harness: Any, settings: Settings, on_error: Callable[[str], None]):
        self.harness = harness
        self.quick = settings.harness.quick
        self.on_error = on_error

    def evaluate(self, task_dir: Path, task: str, owned_hashes: dict | None, kernel_source: str | None = None) -> Report:
        """The harness's verdict on ``kernel_source``, else on the task's kernel.py as it is on disk."""
        try:
            report = as_report(self.harness.evaluate(task_dir, kernel_source=kernel_source, quick=self.quick,
                                                     owned_hashes=owned_hashes))
            return report or Report(status="CRASH", reason="the harness returned no report", task=task)
        except Exception as exc:  # a harness failure costs one experiment, never the night
            return Report(status="CRASH", reason=f"harness error: {type(exc).__name__}: {exc}", stage="static",
                          task=task)

    def compare(self, task_dir: Path, candidate: str, incumbent: str) -> Comparison | None:
        try:
            return as_comparison(self.harness.compare(task_dir, candidate, incumbent))
        except Exception as exc:
            self.on_error(f"comparison failed: {type(exc).__name__}: {exc}")
            return None

    def device_info(self) -> dict[str, Any]:
        return self.harness.device_info()
