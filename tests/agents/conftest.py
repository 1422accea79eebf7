"""Fixtures for the agent tests: a real starter task and a small synthetic one."""

from __future__ import annotations

from pathlib import Path

import pytest

from autokernel_tui.agents.base import AgentContext
from autokernel_tui.agents.knobs import rewrite
from autokernel_tui.config import AgentSettings
from autokernel_tui.tasks.spec import load_spec, starters_dir

SECRET = "sk-ant-test-SECRET-0123456789"

SYNTH_TOML = """
name = "synth"
family = "synth"
description = "a synthetic task for the tuner tests"
bound = "memory"
baseline = "torch.add"
dtypes = ["float32"]
[tolerance.float32]
atol = 1e-5
rtol = 1e-5
max_rel_l2 = 1e-6
[knobs]
{knobs}
[[shapes]]
name = "s"
M = 4
[[test_shapes]]
name = "t"
M = 4
"""


def with_knob(source: str, name: str, value: int) -> str:
    """The source with one knob set to value (whatever it was), by the tuner's own rewrite; the change is checked."""
    out = rewrite(source, {name: value})
    assert out != source, f"{name} is already {value}"
    return out


@pytest.fixture
def rmsnorm():
    return load_spec(starters_dir() / "rmsnorm")


@pytest.fixture
def rmsnorm_ctx(rmsnorm):
    return AgentContext(task=rmsnorm, incumbent_source=rmsnorm.kernel_path.read_text(), experiment=1)


@pytest.fixture
def fast_settings():
    """Retries back off in milliseconds so tests stay fast."""
    return AgentSettings(retry_base_s=0.001, retry_max_s=0.01, max_retries=3)


def make_task(tmp_path: Path, kernel: str, knobs: str = ""):
    d = tmp_path / "synth"
    d.mkdir(exist_ok=True)
    (d / "task.toml").write_text(SYNTH_TOML.format(knobs=knobs))
    (d / "reference.py").write_text("def reference(x):\n    return x\n")
    (d / "kernel.py").write_text(kernel)
    return load_spec(d)
