"""The runtime guards, for exploits the static rules already stop (defence in depth):
driven in-process through the worker's own Evaluation code with plain Python callables."""

from __future__ import annotations

import importlib.util
import threading
import time

import pytest
import torch

from autokernel_tui.harness.errors import Verdict
from autokernel_tui.harness.evaluate import Evaluation, WorkerState

from .conftest import GOOD, PREFIX


@pytest.fixture(scope="module")
def state():
    return WorkerState("cpu")


@pytest.fixture()
def ev(state, tiny_task):
    return Evaluation(state, tiny_task, quick=True)


@pytest.fixture(scope="module")
def launch(tmp_path_factory):
    path = tmp_path_factory.mktemp("k") / "good.py"
    path.write_text(GOOD)
    spec = importlib.util.spec_from_file_location("_harness_test_good", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.launch


def _call(ev, fn):
    shape, dtype = ev.configs[0]
    return ev.run_checked(fn, shape, dtype, "smoke")


def test_an_honest_callable_passes(ev, launch):
    _call(ev, lambda x, w, eps: launch(x, w, eps, torch.empty_like(x)))


def test_a_background_thread_is_rejected(ev, launch):
    stop = threading.Event()

    def evil(x, w, eps):
        threading.Thread(target=stop.wait, args=(5,), daemon=True).start()
        return launch(x, w, eps, torch.empty_like(x))

    try:
        with pytest.raises(Verdict) as info:
            _call(ev, evil)
    finally:
        stop.set()
    assert info.value.status == "REJECTED" and "thread" in info.value.reason


# torch.sum is the L2 flush: a candidate that disarmed it would be timed with a warm cache.
@pytest.mark.parametrize("owner, name", [(time, "perf_counter"), (torch.cuda.Event, "elapsed_time"),
                                         (torch.cuda, "synchronize"), (torch, "sum")])
def test_patching_a_timer_at_run_time_is_rejected(ev, launch, owner, name):
    original = getattr(owner, name)

    def evil(x, w, eps):
        setattr(owner, name, lambda *a, **k: 0.0)
        return launch(x, w, eps, torch.empty_like(x))

    try:
        with pytest.raises(Verdict) as info:
            _call(ev, evil)
    finally:
        setattr(owner, name, original)
    assert info.value.status == "REJECTED" and name in info.value.reason and info.value.restart


def test_patching_the_harness_itself_is_rejected(ev, launch):
    from autokernel_tui.harness import correctness
    original = correctness.compare

    def evil(x, w, eps):
        correctness.compare = lambda *a, **k: None
        return launch(x, w, eps, torch.empty_like(x))

    try:
        with pytest.raises(Verdict) as info:
            _call(ev, evil)
    finally:
        correctness.compare = original
    assert info.value.status == "REJECTED" and "correctness.compare" in info.value.reason


def test_a_tensor_subclass_output_is_rejected(ev, launch):
    class Lazy(torch.Tensor):
        pass

    with pytest.raises(Verdict) as info:
        _call(ev, lambda x, w, eps: launch(x, w, eps, torch.empty_like(x)).as_subclass(Lazy))
    assert info.value.status == "REJECTED" and "subclass" in info.value.reason


def test_exiting_the_worker_is_a_crash(ev, launch):
    def evil(x, w, eps):
        raise SystemExit(0)

    with pytest.raises(Verdict) as info:
        _call(ev, evil)
    assert info.value.status == "CRASH"


def test_a_time_below_the_roofline_floor_is_rejected(state, tiny_task, tmp_path):
    kernel = tmp_path / "kernel.py"
    kernel.write_text(GOOD)
    try:
        state.measured = {"bandwidth_gbps": 1e-9}  # a machine this slow makes every real time "impossible"
        report, _ = Evaluation(state, tiny_task, quick=True).run(kernel)
        assert report.status == "REJECTED" and report.stage == "timing"
        assert "below the hardware floor" in report.reason
        state.measured = {"bandwidth_gbps": 1e6}
        report, _ = Evaluation(state, tiny_task, quick=True).run(kernel)
        assert report.status == "PASS", report.reason
        assert all(0 < r.roofline_pct <= 100 for r in report.shapes)
    finally:
        state.measured = None


def test_behaving_differently_when_timed_is_rejected(harness, tiny_task):
    # Honest for the correctness stages' calls, then wrong: caught on a secret timed rep.
    src = PREFIX + '''
CALLS = [0]


def kernel_fn(x, weight, eps):
    CALLS[0] += 1
    return launch(x, weight, eps if CALLS[0] <= 12 else 1e9, torch.empty_like(x))
'''
    report = harness.evaluate(tiny_task, kernel_source=src, quick=True)
    assert report.status == "REJECTED" and report.stage == "timing"
    assert "timed run is wrong" in report.reason


def test_torch_op_only_while_timed_is_rejected(harness, tiny_task):
    src = PREFIX + '''
CALLS = [0]


def kernel_fn(x, weight, eps):
    CALLS[0] += 1
    y = launch(x, weight, eps, torch.empty_like(x))
    return y if CALLS[0] <= 12 else y.mul(1.0)
'''
    report = harness.evaluate(tiny_task, kernel_source=src, quick=True)
    assert report.status == "REJECTED" and report.stage == "timing" and "aten::mul" in report.reason


def test_sniffing_the_poison_to_spot_watched_calls_does_not_help(harness, tiny_task):
    # Honest only when fresh memory is NaN (the correctness stages poison it); the timed
    # reps, watched or not, hand out unpoisoned memory, so the secret checked rep sees the cheat.
    src = PREFIX + '''
import math


def kernel_fn(x, weight, eps):
    probe = torch.empty_like(x)
    watched = math.isnan(float(probe[0, 0]))
    return launch(x, weight, eps if watched else 1e9, probe)
'''
    report = harness.evaluate(tiny_task, kernel_source=src, quick=True)
    assert report.status == "REJECTED" and report.stage == "timing"
