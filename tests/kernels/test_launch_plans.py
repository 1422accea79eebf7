"""Launch plans of the ten forward starters (issue 21: host cost per call).

Every forward starter decides its launch (path, grid, constexprs, warps, strides) once per
input signature and keeps it in a module-level ``_PLANS`` dict, built by ``_plan``: a second
call on the same signature builds nothing, a new shape builds one plan, and the plan follows
the knobs, both in a freshly loaded module (the tuner) and when a knob is set in place
(knob_sweep.py, the tests), which ``_knobs()`` notices. Tiny shapes: the interpreter runs them.
"""

import itertools
from pathlib import Path

import pytest
import torch

from benchmarks import starters_check as sc  # noqa: E402

from autokernel_tui.tasks.spec import load_spec  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
_tag = itertools.count()

# task -> (dtype, a tiny shape, another tiny shape, a knob that changes that shape's plan and its new value)
CASES = {
    "gelu": ("float32", {"M": 3, "N": 100, "approximate": "tanh"}, {"M": 5, "N": 100, "approximate": "tanh"},
             ("BLOCK_SIZE", 128)),
    "swiglu": ("float32", {"M": 3, "N": 100}, {"M": 5, "N": 100}, ("BLOCK_SIZE", 128)),
    "rotary": ("float32", {"B": 1, "S": 5, "H": 3, "D": 16}, {"B": 1, "S": 7, "H": 3, "D": 16}, ("BLOCK_H", 2)),
    "cross_entropy": ("float32", {"M": 3, "V": 100}, {"M": 5, "V": 100}, ("BLOCK_V", 1024)),
    "linear_cross_entropy": ("float32", {"M": 3, "V": 100, "K": 16}, {"M": 5, "V": 100, "K": 16}, ("FP32_BLOCK_V", 32)),
    "softmax": ("float16", {"M": 4, "N": 64}, {"M": 6, "N": 64}, ("NUM_WARPS", 2)),
    "layernorm": ("float16", {"M": 4, "N": 64}, {"M": 6, "N": 64}, ("NUM_WARPS", 2)),
    "rmsnorm": ("float16", {"M": 4, "N": 64}, {"M": 6, "N": 64}, ("NUM_WARPS", 2)),
    "add_rmsnorm": ("float16", {"M": 4, "N": 64}, {"M": 6, "N": 64}, ("NUM_WARPS", 2)),
    "matmul": ("float16", {"M": 8, "N": 16, "K": 16}, {"M": 24, "N": 16, "K": 16}, ("GROUP_M", 4)),
    "flash_attention": ("float16", {"B": 1, "H": 2, "KVH": 1, "S": 9, "D": 16},
                        {"B": 1, "H": 2, "KVH": 1, "S": 13, "D": 16}, ("SMALL_HEAD_BLOCK_M", 128)),
}


def _fresh(task: str):
    """A freshly loaded kernel module (its own _PLANS) and the reference."""
    n = next(_tag)
    return (sc.load_module(REPO / "kernels" / task / "kernel.py", f"plans{n}"),
            sc.load_module(REPO / "kernels" / task / "reference.py", f"plans{n}"))


def _inputs(ref, dims, dtype):
    return ref.make_inputs(dict(dims), getattr(torch, dtype), "cpu", 0)


def _counted(ker, monkeypatch) -> list:
    """Count the plans ker builds."""
    built, plan = [], ker._plan

    def counting(*args):
        built.append(args)
        return plan(*args)

    monkeypatch.setattr(ker, "_plan", counting)
    return built


def _signature(p) -> tuple:
    """A plan without its bound launchers (closures compare by identity)."""
    return tuple(v for k, v in p._asdict().items() if k not in ("launch", "reduce", "made_under"))


def test_every_forward_starter_is_covered():
    names = {p.name for p in (REPO / "kernels").iterdir() if (p / "task.toml").exists()}
    assert {n for n in names if not n.endswith("_bwd")} == set(CASES)


@pytest.mark.parametrize("task", sorted(CASES))
def test_one_plan_per_signature(task, monkeypatch):
    ker, ref = _fresh(task)
    dtype, dims, other, _ = CASES[task]
    built = _counted(ker, monkeypatch)
    inputs = _inputs(ref, dims, dtype)
    first = ker.kernel_fn(*inputs)
    assert len(ker._PLANS) == 1 and len(built) == 1
    second = ker.kernel_fn(*inputs)
    assert len(ker._PLANS) == 1 and len(built) == 1, "the second call on the same inputs built a plan"
    for a, b in zip(first if isinstance(first, tuple) else (first,), second if isinstance(second, tuple) else (second,)):
        assert torch.equal(a, b)
    ker.kernel_fn(*_inputs(ref, dims, dtype))  # new tensors, same signature
    assert len(ker._PLANS) == 1 and len(built) == 1
    ker.kernel_fn(*_inputs(ref, other, dtype))
    assert len(ker._PLANS) == 2 and len(built) == 2, "a new shape must add exactly one plan"


@pytest.mark.parametrize("task", sorted(CASES))
def test_a_changed_knob_changes_the_plan(task, monkeypatch):
    dtype, dims, _, (knob, value) = CASES[task]
    ker, ref = _fresh(task)
    inputs = _inputs(ref, dims, dtype)
    ker.kernel_fn(*inputs)
    (default,) = ker._PLANS.values()
    assert getattr(ker, knob) != value
    # A freshly loaded module with the knob rewritten (as the tuner does) plans differently.
    tuned, _ = _fresh(task)
    monkeypatch.setattr(tuned, knob, value)
    tuned.kernel_fn(*inputs)
    (changed,) = tuned._PLANS.values()
    assert _signature(changed) != _signature(default)
    # The same module with the knob set in place (knob_sweep.py) replans, and back again.
    built = _counted(ker, monkeypatch)
    monkeypatch.setattr(ker, knob, value)
    ker.kernel_fn(*inputs)
    assert len(built) == 1 and len(ker._PLANS) == 1
    assert _signature(next(iter(ker._PLANS.values()))) == _signature(changed)


@pytest.mark.parametrize("task", sorted(CASES))
def test_every_knob_is_part_of_the_plan_state(task):
    """A knob missing from _knobs() would leave plans stale when set in place."""
    ker, _ = _fresh(task)
    for knob, space in load_spec(REPO / "kernels" / task).knob_space.items():
        before = ker._knobs()
        old = getattr(ker, knob)
        setattr(ker, knob, next(v for v in space if v != old) if len(space) > 1 else old + 1)
        assert ker._knobs() != before, f"{task}: {knob} is not in _knobs()"
        setattr(ker, knob, old)
