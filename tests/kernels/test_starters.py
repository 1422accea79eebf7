"""Every task in kernels/ (all ten starters, whoever wrote them) checked against
its reference under the Triton interpreter, every dtype, every test shape, every
adversarial transform. The checks live in benchmarks/starters_check.py so the
GPU script and tests/gpu run exactly the same ones at full shapes."""

import os
import shutil
from pathlib import Path

import pytest
import torch

from benchmarks import starters_check as sc  # noqa: E402

from autokernel_tui.tasks.spec import find_tasks, load_spec  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TASKS = find_tasks(REPO / "kernels")


def _cases():
    for spec in TASKS:
        for dtype in spec.dtypes:
            for shape in spec.test_shapes:
                yield pytest.param(spec.path, dtype, shape, None, id=f"{spec.name}-{dtype}-{shape.name}")
            ref = sc.load_reference(spec.path, "test")
            for adv in getattr(ref, "ADVERSARIAL", {}):
                for shape in sc.adversarial_shapes(spec.test_shapes):
                    yield pytest.param(spec.path, dtype, shape, adv, id=f"{spec.name}-{dtype}-{shape.name}+{adv}")


def test_all_starters_present():
    names = {s.name for s in TASKS}
    assert {"matmul", "softmax", "layernorm", "rmsnorm", "add_rmsnorm"} <= names


# (task, dtype) whose eager baseline on the CPU is no yardstick for its tolerance, with why: the
# kernel is still checked; only eager's own verdict is not asserted.
CPU_EAGER_WAIVED = {
    (task, dtype): "CPU layer_norm saves the mean in the input dtype and sums dweight/dbias in it "
                   "(dweight rel_l2 7e-2 in bf16 on plain inputs, 0.3 on rows offset by hundreds); CUDA keeps fp32"
    for task in ("layernorm_bwd",) for dtype in ("float16", "bfloat16")
}


@pytest.mark.parametrize("task_dir,dtype,shape,adversarial", list(_cases()))
def test_kernel_matches_reference(task_dir, dtype, shape, adversarial):
    row = sc.check_case(task_dir, dtype, shape, "cpu", seed=0, adversarial=adversarial, tag="test")
    assert row["kernel"]["passed"], f"kernel: {row['kernel']['why']}"
    if (row["task"], dtype) not in CPU_EAGER_WAIVED:
        assert row["baseline"]["passed"], f"eager baseline fails its own tolerance: {row['baseline']['why']}"


@pytest.mark.parametrize("spec", TASKS, ids=[s.name for s in TASKS])
def test_task_is_well_formed(spec):
    spec = load_spec(spec.path)  # parses and validates task.toml
    assert spec.shapes and spec.test_shapes and spec.dtypes
    ref = sc.load_reference(spec.path, "test")
    for fn in ("make_inputs", "reference", "flops", "bytes_moved"):
        assert callable(getattr(ref, fn, None)), f"reference.py lacks {fn}()"
    assert getattr(ref, "ADVERSARIAL", None), "reference.py needs at least one adversarial transform"
    for shape in spec.shapes + spec.test_shapes:
        for dtype in spec.dtypes:
            assert ref.bytes_moved(dict(shape.dims), getattr(torch, dtype)) > 0
        assert ref.flops(dict(shape.dims)) > 0
    # CPU test shapes stay small, and at least one is not a power of two.
    ints = [v for s in spec.test_shapes for v in s.dims.values() if isinstance(v, int)]
    assert any(v & (v - 1) for v in ints), "no non-power-of-two test dimension"


@pytest.mark.parametrize("spec", TASKS, ids=[s.name for s in TASKS])
def test_knobs_are_module_constants(spec):
    ker = sc.load_module(spec.path / "kernel.py", "test")
    assert callable(getattr(ker, "kernel_fn", None))
    for knob, space in spec.knob_space.items():
        assert knob.isupper(), f"knob {knob} must be UPPER_CASE"
        assert hasattr(ker, knob), f"[knobs] lists {knob} but kernel.py does not define it"
        value = getattr(ker, knob)
        assert isinstance(value, int) and not isinstance(value, bool), f"{knob} must be an int"
        assert value in space, f"{knob} = {value} is outside its search space {list(space)}"


# --- the checks themselves must be able to fail -------------------------------------------

def _broken_copy(tmp_path, task, old, new):
    dst = tmp_path / task
    shutil.copytree(REPO / "kernels" / task, dst)
    src = (dst / "kernel.py").read_text()
    assert old in src
    (dst / "kernel.py").write_text(src.replace(old, new))
    return dst


def test_matmul_pointer_path_on_aligned_shapes(tmp_path):
    # USE_TMA = 1 sends aligned 16-bit shapes through TMA; the pointer kernel must hold there too.
    task = _broken_copy(tmp_path, "matmul", "\nUSE_TMA = 1", "\nUSE_TMA = 0")
    shape = next(s for s in load_spec(task).test_shapes if s.name == "tma-aligned")
    for dtype in ("float16", "bfloat16"):
        row = sc.check_case(task, dtype, shape, "cpu", tag="pointer")
        assert row["kernel"]["passed"], row["kernel"]["why"]


def test_matmul_tile_config_per_shape():
    # H200 (132 SMs): shapes whose big tiles leave the last wave poorly filled take the small tiles,
    # and so does an odd N (C stored through pointers: the big tiles' epilogue would spill).
    spec = load_spec(REPO / "kernels" / "matmul")
    ker = sc.load_module(spec.path / "kernel.py", "cfg")
    big = (ker.BLOCK_M, ker.BLOCK_N)
    small = (ker.SMALL_BLOCK_M, ker.SMALL_BLOCK_N)
    assert big != small
    expected = {"square-4096": big, "llama7b-up": big, "llama7b-down": big,
                "gpt2-qkv": big, "gpt2-mlp-up": big, "gpt2-mlp-down": small, "gpt2-lm-head": small, "gpt2-proj-b1": (ker.TINY_BLOCK_M, ker.TINY_BLOCK_N),
                "odd": big}
    got = {s.name: ker.config_16bit(s.dims["M"], s.dims["N"], s.dims["K"], 132)[:2] for s in spec.shapes}
    assert got == expected
    # The CPU test shapes reach every config, so the interpreter and the sm_90 compile check cover them all.
    cpu = {ker.config_16bit(s.dims["M"], s.dims["N"], s.dims["K"], ker._num_sms(torch.device("cpu")))[:2]
           for s in spec.test_shapes}
    assert cpu == {big, small, (ker.TINY_BLOCK_M, ker.TINY_BLOCK_N)}


def test_matmul_tiny_tiles_where_small_ones_leave_sms_idle(tmp_path):
    # A problem whose small tiles busy too few SMs (GPT-2's 1024 x 768 x 768: 48 of 132) takes the tiny
    # tiles, and they compute the same product (the interpreter has 2 "SMs": one small tile of a test
    # shape is under all of them); TINY_MAX_FILL_PCT = 0 turns them off.
    spec = load_spec(REPO / "kernels" / "matmul")
    ker = sc.load_module(spec.path / "kernel.py", "tiny")
    tiny = (ker.TINY_BLOCK_M, ker.TINY_BLOCK_N)
    assert tiny != (ker.SMALL_BLOCK_M, ker.SMALL_BLOCK_N)
    assert ker.config_16bit(1024, 768, 768, 132)[:2] == tiny
    assert ker.config_16bit(3000, 5000, 1000, 132)[:2] == (ker.BLOCK_M, ker.BLOCK_N)
    shapes = [s for s in spec.test_shapes if ker.config_16bit(s.dims["M"], s.dims["N"], s.dims["K"], 2)[:2] == tiny]
    assert shapes, "no test shape reaches the tiny tiles"
    for dtype in ("float16", "bfloat16"):
        row = sc.check_case(spec.path, dtype, shapes[0], "cpu", tag="tiny")
        assert row["kernel"]["passed"], row["kernel"]["why"]
    # The other way of spreading tiny tiles (TINY_PROGRAMS_PER_SM: 0 one program per tile, 1 persistent,
    # one per SM), the same product.
    other = 1 - ker.TINY_PROGRAMS_PER_SM
    flipped = _broken_copy(tmp_path / "flipped", "matmul", f"\nTINY_PROGRAMS_PER_SM = {ker.TINY_PROGRAMS_PER_SM}",
                           f"\nTINY_PROGRAMS_PER_SM = {other}")
    assert sc.load_module(flipped / "kernel.py", "tiny_flipped").config_16bit(1024, 768, 768, 132)[6] == other
    row = sc.check_case(flipped, "bfloat16", shapes[0], "cpu", tag="tiny_flipped")
    assert row["kernel"]["passed"], row["kernel"]["why"]
    off = sc.load_module(_broken_copy(tmp_path, "matmul", "\nTINY_MAX_FILL_PCT = 100", "\nTINY_MAX_FILL_PCT = 0")
                         / "kernel.py", "tiny_off")
    assert off.config_16bit(1024, 768, 768, 132)[:2] == (off.SMALL_BLOCK_M, off.SMALL_BLOCK_N)


def test_matmul_warp_specialization_knobs_unflatten_the_loop_and_keep_the_product(tmp_path):
    # Each tier's WARP_SPECIALIZE knob asks Triton's Hopper pass for a producer warp group; that pass takes
    # an unflattened tile loop, so the plan turns FLATTEN off where it is on. The interpreter runs the
    # same program either way: the product must not change.
    spec = load_spec(REPO / "kernels" / "matmul")
    text = (spec.path / "kernel.py").read_text()
    for knob in ("WARP_SPECIALIZE", "SMALL_WARP_SPECIALIZE", "TINY_WARP_SPECIALIZE"):
        assert f"\n{knob} = 0" in text, f"{knob}: default changed, update this test"
    on = _broken_copy(tmp_path, "matmul", "\nTINY_WARP_SPECIALIZE = 0", "\nTINY_WARP_SPECIALIZE = 1")
    text = (on / "kernel.py").read_text()
    for knob in ("WARP_SPECIALIZE", "SMALL_WARP_SPECIALIZE"):
        text = text.replace(f"\n{knob} = 0", f"\n{knob} = 1")
    (on / "kernel.py").write_text(text)
    ker = sc.load_module(on / "kernel.py", "ws_on")
    a = torch.randn(64, 32, dtype=torch.bfloat16)
    b = torch.randn(32, 48, dtype=torch.bfloat16)
    assert ker.config_16bit(64, 48, 32, 2)[:2] == (ker.TINY_BLOCK_M, ker.TINY_BLOCK_N)
    plan = ker._plan(a, b, None, "none", ker._knobs())
    assert plan.tma and plan.meta["WS"] is True and plan.meta["FLATTEN"] is False
    # Every tier with it on (the kernel makes its descriptors from pointers), B as given and as a Linear's
    # weight.t(): the same product.
    for shape in spec.test_shapes:
        for layout in (None, "weight_layout"):
            row = sc.check_case(on, "bfloat16", shape, "cpu", tag="ws_on", adversarial=layout)
            assert row["kernel"]["passed"], (shape.name, layout, row["kernel"]["why"])


@pytest.mark.parametrize("broken", ["bias", "activation"])
def test_a_matmul_that_drops_its_epilogue_fails_where_one_is_given(tmp_path, broken):
    # GPT-2's Linear shapes carry a bias and its MLP's up projection a GELU (epilogue = "bias",
    # "bias+gelu_tanh"), and the task's bias cases add them at any shape: a kernel that never adds the
    # bias, or never applies the activation, fails both, on the pointer and the TMA paths.
    old, new = {"bias": ("HAS_BIAS=bias is not None", "HAS_BIAS=False"), "activation": ("ACT=act", "ACT=0")}[broken]
    task = _broken_copy(tmp_path, "matmul", old, new)
    spec = load_spec(task)
    needs = {"bias": ("bias", "bias+gelu", "bias+gelu_tanh"), "activation": ("bias+gelu", "bias+gelu_tanh")}[broken]
    for shape in spec.test_shapes:
        row = sc.check_case(task, "bfloat16", shape, "cpu", tag=f"no{broken}")
        assert row["kernel"]["passed"] is (shape.dims.get("epilogue", "none") not in needs), shape.name
    shape = spec.test_shapes[0]
    for case in ("bias", "bias_gelu", "bias_gelu_tanh")[broken == "activation":]:
        row = sc.check_case(task, "bfloat16", shape, "cpu", tag=f"no{broken}", adversarial=case)
        assert not row["kernel"]["passed"], case


def test_unwritten_rows_are_caught(tmp_path):
    # The last row is never stored: the NaN poison must show it.
    task = _broken_copy(tmp_path, "softmax", "mask = (rows < M)[:, None]", "mask = (rows < M - 1)[:, None]")
    shape = next(s for s in load_spec(task).test_shapes if s.name == "short-rows")  # aligned: the rows path
    row = sc.check_case(task, "float32", shape, "cpu", tag="broken1")
    assert not row["kernel"]["passed"] and "non-finite" in row["kernel"]["why"]


def test_accuracy_loss_is_caught(tmp_path):
    # Dropping eps placement / a wrong scale must fail the tolerance, not slip through.
    task = _broken_copy(tmp_path, "rmsnorm", "/ N + eps)", "/ N + 1e-2)")
    row = sc.check_case(task, "float32", load_spec(task).test_shapes[0], "cpu", adversarial="tiny", tag="broken2")
    assert not row["kernel"]["passed"]


def test_tf32_matmul_fails_the_fp32_tolerance():
    # fp32 means fp32: operands rounded to TF32's 10-bit mantissa must not pass.
    spec = load_spec(REPO / "kernels" / "matmul")
    ref = sc.load_module(spec.path / "reference.py", "test")
    a, b = ref.make_inputs({"M": 64, "N": 64, "K": 512}, torch.float32, "cpu", 0)

    def tf32(t):
        bits = t.view(torch.int32)
        return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)

    out = (tf32(a).double() @ tf32(b).double()).float()
    precise = a.double() @ b.double()
    verdict = sc.compare(out, ref.reference(a, b), precise, spec.tolerances["float32"])
    assert not verdict["passed"]


def test_poisoned_allocations_are_the_harness_recorder():
    """sc.poisoned_allocations is guards.OpRecorder(poison=True): fresh allocations NaN (ints: the
    largest value), compute ops named, and nothing left installed afterwards."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    with sc.poisoned_allocations() as recorder:
        assert torch.isnan(torch.empty(4)).all()
        assert torch.isnan(torch.empty_like(torch.ones(2, 2))).all()
        assert (torch.empty(3, dtype=torch.int32) == torch.iinfo(torch.int32).max).all()
        torch.ones(2).sum()
    assert "aten::sum" in recorder.forbidden() and "aten::empty" not in recorder.forbidden()
    assert _get_current_dispatch_mode() is None


def _rmsnorm_case(kernel_fn, dtype="float32"):
    spec = load_spec(REPO / "kernels" / "rmsnorm")
    ref = sc.load_module(spec.path / "reference.py", "test")
    inputs = sc.build_inputs(ref, spec.test_shapes[0].dims, dtype, "cpu", 0)
    return sc.check_call(kernel_fn, ref, inputs, spec.tolerances[dtype]), inputs, ref


def test_check_call_is_the_harness_checker():
    """Each way a kernel_fn can cheat or slip that the harness refuses, check_call refuses too."""
    ker = sc.load_module(REPO / "kernels" / "rmsnorm" / "kernel.py", "test")
    ok, inputs, ref = _rmsnorm_case(ker.kernel_fn)
    assert ok["passed"] and ok["rel_l2_err"] < 1e-6, ok

    def unwritten(x, w, eps):
        out = torch.empty_like(x)
        out[:-1] = ker.kernel_fn(x, w, eps)[:-1]  # the last row never written
        return out

    verdict, _, _ = _rmsnorm_case(unwritten)
    assert not verdict["passed"] and "non-finite where the reference is finite" in verdict["why"]

    verdict, _, _ = _rmsnorm_case(lambda x, w, eps: ref.reference(x, w, eps))
    assert not verdict["passed"] and "a PyTorch compute op" in verdict["why"]

    def in_place(x, w, eps):
        out = ker.kernel_fn(x, w, eps)
        x.data.zero_()
        return out

    verdict, _, _ = _rmsnorm_case(in_place)
    assert not verdict["passed"] and "modified input 0" in verdict["why"]

    verdict, _, _ = _rmsnorm_case(lambda x, w, eps: x)
    assert not verdict["passed"] and "aliases input 0" in verdict["why"]

    verdict, _, _ = _rmsnorm_case(lambda x, w, eps: ker.kernel_fn(x, w, eps).half())
    assert not verdict["passed"] and "lower precision" in verdict["why"]


def test_inputs_are_the_judges():
    """The same recipe through the harness's InputBuilder: make_inputs at the seed, then the task's
    adversarial transform seeded seed + 1."""
    from autokernel_tui.harness.worker.inputs import InputBuilder

    spec = load_spec(REPO / "kernels" / "softmax")
    ref = sc.load_module(spec.path / "reference.py", "test")
    dims = spec.test_shapes[0].dims
    adv = next(iter(ref.ADVERSARIAL))
    ours = sc.build_inputs(ref, dims, "float16", "cpu", 3, adv)
    judge = InputBuilder(ref, "cpu", 1 << 20).build({"dims": dict(dims), "dtype": "float16", "base_seed": 3,
                                                     "steps": [["transform", adv, 4]]})
    assert all(torch.equal(a, b) for a, b in zip(ours, judge))


def test_interpreter_is_on():
    assert os.environ.get("TRITON_INTERPRET") == "1" or torch.cuda.is_available()
