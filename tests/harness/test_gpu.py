"""On a CUDA GPU (python -m pytest -m gpu tests/harness/test_gpu.py): real timing, the
torch.compile baseline really compiled, roofline at most 100%, speed within budget."""

from __future__ import annotations

import pytest

from autokernel_tui.harness.runner import Harness
from autokernel_tui.tasks.spec import starters_dir

from .conftest import GOOD

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu_harness():
    h = Harness(timeout_s=600, device="cuda")
    yield h
    h.close()


def test_rmsnorm_full_evaluation_on_the_gpu(gpu_harness):
    task = starters_dir() / "rmsnorm"
    gpu_harness.evaluate(task)  # cold: baselines, compile of the reference, JIT
    report = gpu_harness.evaluate(task)
    assert report.status == "PASS", report.reason
    assert report.timing_meaningful and report.summary is not None
    for row in report.shapes:
        assert row.median_us > 0 and row.p20_us <= row.median_us <= row.p80_us
        assert row.compile_ref_us is not None, f"{row.shape} {row.dtype}: torch.compile baseline fell back"
        assert 0 < row.roofline_pct <= 100
        # Issue 21: what a model pays besides the device time, and a baseline taken in the same window.
        assert row.host_us > 0 and row.baseline_host_us > 0 and row.as_called_us > 0
        assert row.baseline_as_called_us > 0 and row.baseline_note.startswith("in window")
    assert report.wall_s - report.compile_s < 3.0 * 2  # the benchmark holds the 3 s target; allow CI noise


def test_aa_comparison_is_not_a_keep(gpu_harness):
    task = starters_dir() / "rmsnorm"
    source = (task / "kernel.py").read_text()
    cmp = gpu_harness.compare(task, source, source)
    assert cmp.status == "PASS" and cmp.ci_low < 1.01 < cmp.ci_high * 1.05, (cmp.status, cmp.reason, cmp.speedup,
                                                                          cmp.ci_low, cmp.ci_high, cmp.cross_check)


def test_exploits_are_still_caught_with_compiled_triton(gpu_harness, tmp_path):
    from .conftest import PREFIX, make_tiny_task
    task = make_tiny_task(tmp_path / "rmsnorm")
    no_launch = PREFIX + "\ndef kernel_fn(x, weight, eps):\n    return torch.zeros_like(x)\n"
    op = PREFIX + "\ndef kernel_fn(x, weight, eps):\n    return launch(x, weight, eps, torch.empty_like(x)).mul(1.0)\n"
    unwritten = PREFIX + ("\ndef kernel_fn(x, weight, eps):\n    launch(x, weight, eps, torch.empty_like(x))\n"
                          "    return torch.empty_like(x)\n")
    assert gpu_harness.evaluate(task, kernel_source=GOOD, quick=True).status == "PASS"
    assert "no Triton kernel" in gpu_harness.evaluate(task, kernel_source=no_launch, quick=True).reason
    assert "aten::mul" in gpu_harness.evaluate(task, kernel_source=op, quick=True).reason
    assert gpu_harness.evaluate(task, kernel_source=unwritten, quick=True).status == "FAIL"


@pytest.mark.parametrize("sandbox", ["bwrap", "landlock"])
def test_cuda_outputs_reach_the_judge_under_either_sandbox(sandbox, tmp_path):
    # bwrap: by torch's CUDA IPC handle (its reference count in the sandbox's own /dev/shm); Landlock
    # alone: the host's /dev/shm stays closed, so by the driver's own handle (cuda_ipc), which writes nothing.
    from autokernel_tui.harness.sandbox import bwrap, landlock
    why_not = bwrap.probe() if sandbox == "bwrap" else None
    if why_not is not None:
        pytest.skip(f"no bwrap here: {why_not}")
    if sandbox == "landlock" and landlock.abi_version() < 1:
        pytest.skip("Landlock is not available on this kernel")
    from .conftest import make_tiny_task
    task = make_tiny_task(tmp_path / "rmsnorm")
    with Harness(timeout_s=600, device="cuda", sandbox=sandbox) as h:
        report = h.evaluate(task, kernel_source=GOOD, quick=True)
    assert report.status == "PASS", report.reason


_EXPORTER = """
import json, sys, torch
from autokernel_tui.harness.worker import cuda_ipc
big = torch.arange(4096, device="cuda", dtype=torch.float32).to(torch.bfloat16)
view = big[100:1100].view(40, 25)[:, ::2]  # an offset, a stride, inside a larger storage
torch.cuda.synchronize()
print(json.dumps(cuda_ipc.export(view)), flush=True)
sys.stdin.readline()  # held until the judge side has copied it
"""


def test_driver_ipc_hands_a_strided_view_across_processes_and_refuses_reaching_outside():
    import json
    import subprocess
    import sys

    import torch
    from autokernel_tui.harness.worker import cuda_ipc
    child = subprocess.Popen([sys.executable, "-c", _EXPORTER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        desc = json.loads(child.stdout.readline())
        got = cuda_ipc.receive(desc, torch.bfloat16)
        want = torch.arange(4096, device="cuda", dtype=torch.float32).to(torch.bfloat16)[100:1100].view(40, 25)[:, ::2]
        assert got.shape == want.shape and torch.equal(got, want)
        with pytest.raises(cuda_ipc.CudaIpcError, match="outside the"):
            cuda_ipc.receive({**desc, "storage_at": desc["storage_at"] + (1 << 40)}, torch.bfloat16)
        again = cuda_ipc.receive(desc, torch.bfloat16)  # unmapped after each copy: the handle opens again
        assert torch.equal(again, want)
    finally:
        child.communicate("done\n", timeout=60)


def test_fused_fingerprints_pass_an_honest_kernel_and_catch_a_wrong_timed_run(monkeypatch, tmp_path):
    # AUTOKERNEL_HARNESS_FINGERPRINT=kernel (harness/worker/fingerprint_kernels.py; the default, set here so
    # the test says which way it tests): the starter PASSes at full shapes, wrong timed reps are caught.
    from .conftest import PREFIX, make_tiny_task
    monkeypatch.setenv("AUTOKERNEL_HARNESS_FINGERPRINT", "kernel")
    # Right only where fresh memory is NaN (the correctness stages poison it): wrong on every timed rep
    # however many calls the stages make (run 18: a call count tuned on the CPU's shapes was caught as a
    # FAIL at a GPU shape's correctness stage instead).
    wrong_when_timed = PREFIX + '''
import math


def kernel_fn(x, weight, eps):
    probe = torch.empty_like(x)
    watched = math.isnan(float(probe[0, 0]))
    return launch(x, weight, eps if watched else 1e9, probe)
'''
    with Harness(timeout_s=600, device="cuda") as h:
        h.evaluate(starters_dir() / "rmsnorm")  # cold
        report = h.evaluate(starters_dir() / "rmsnorm")
        caught = h.evaluate(make_tiny_task(tmp_path / "rmsnorm", tiny_on_gpu=True), kernel_source=wrong_when_timed,
                            quick=True)
    print("kernel-way split:", {k: v for k, v in (report.time_split or {}).items() if "fingerprint" in k or k == "total"})
    assert report.status == "PASS", report.reason
    assert caught.status == "REJECTED" and "timed run is wrong" in caught.reason, (caught.status, caught.reason)


def test_fresh_inputs_by_the_fused_kernel_pass_an_honest_kernel_and_fail_a_stale_one(monkeypatch, tmp_path):
    # AUTOKERNEL_HARNESS_FRESH=kernel (harness/worker/fresh_kernels.py; the default, set here so the test says
    # which way it tests): judge and contestant build every rep's inputs alike, so the starter PASSes at full
    # shapes; a kernel that keeps computing on the first inputs it saw is wrong on the next ones.
    import torch

    from autokernel_tui.harness.worker import fresh_kernels

    from .conftest import PREFIX, make_tiny_task
    monkeypatch.setenv("AUTOKERNEL_HARNESS_FRESH", "kernel")
    x = torch.ones(1 << 20, device="cuda", dtype=torch.bfloat16)
    factors = fresh_kernels.scaled(x, 5).float()
    assert 0.49 < factors.min().item() and factors.max().item() < 1.51 and 0.27 < factors.std().item() < 0.31
    stale = PREFIX + '''
FIRST = {}


def kernel_fn(x, weight, eps):
    kept = FIRST.setdefault(tuple(x.shape), x.clone())
    return launch(kept, weight, eps, torch.empty_like(x))
'''
    with Harness(timeout_s=600, device="cuda") as h:
        h.evaluate(starters_dir() / "rmsnorm")  # cold
        report = h.evaluate(starters_dir() / "rmsnorm")
        caught = h.evaluate(make_tiny_task(tmp_path / "rmsnorm", tiny_on_gpu=True), kernel_source=stale, quick=True)
    print("fresh-kernel split:", report.time_split)
    assert report.status == "PASS", report.reason
    assert caught.status in ("FAIL", "REJECTED"), (caught.status, caught.reason)


@pytest.mark.parametrize("task", ["rmsnorm", "softmax", "layernorm", "cross_entropy", "flash_attention"])
def test_the_compiled_float64_reference_agrees_with_eager_on_the_card(task, monkeypatch):
    # harness/worker/precise.py with Inductor: each starter's reference compiled in float64 agrees with
    # eager's at two shapes (the second a dynamic recompile), so the judge keeps using it.
    import torch

    from autokernel_tui.harness.worker.correctness import precise_reference
    from autokernel_tui.harness.worker.inputs import InputBuilder
    from autokernel_tui.harness.worker.reference import load_reference
    from autokernel_tui.harness.worker.precise import PreciseReference
    from autokernel_tui.tasks.spec import load_spec

    monkeypatch.setenv("AUTOKERNEL_HARNESS_PRECISE", "compiled")
    task_dir = starters_dir() / task
    ref, spec = load_reference(task_dir), load_spec(task_dir)
    builder = InputBuilder(ref, "cuda", 1 << 30)
    precise = PreciseReference(ref, "cuda")
    for shape in spec.shapes_for("cuda")[:2]:
        inputs = builder.build({"dims": dict(shape.dims), "dtype": spec.dtypes[0], "base_seed": 3,
                                "steps": [["perturb", 4]]})
        got = precise(inputs)
        want = precise_reference(ref, inputs)
        assert precise.compiled, precise.note
        for g, w in zip(got, want):
            assert g.dtype == torch.float64 and torch.allclose(g, w, rtol=1e-9, atol=1e-12, equal_nan=True)
