"""flash_attention_bwd and cross_entropy_bwd checks the generic starter tests cannot express: tile
configurations that reach every masked/unmasked loop, wider GQA groups, a wrong dK caught,
determinism, and cross-entropy's ignored rows (all of them, some of them; each row whole or in chunks)."""

import re
import shutil
from pathlib import Path

import pytest
import torch

from benchmarks import starters_check as sc

from autokernel_tui.tasks.spec import Shape, load_spec

REPO = Path(__file__).resolve().parents[2]
ATTN = REPO / "kernels" / "flash_attention_bwd"
CE = REPO / "kernels" / "cross_entropy_bwd"


def _copy(tmp_path: Path, task: Path, replace: tuple = (), **knobs) -> Path:
    """A copy of the task whose kernel.py has the given knob values (as the tuner writes them)
    and text replacements."""
    dst = tmp_path / task.name
    shutil.copytree(task, dst, symlinks=False)  # the linked reference.py as a file
    src = (dst / "kernel.py").read_text()
    for name, value in knobs.items():
        src, n = re.subn(rf"^{name} = \d+", f"{name} = {value}", src, flags=re.M)
        assert n == 1, name
    for old, new in replace:
        assert old in src, old
        src = src.replace(old, new)
    (dst / "kernel.py").write_text(src)
    return dst


@pytest.mark.parametrize("knobs,dims", [
    # Several query and key blocks in every kernel; the dK/dV key block wider than its query step.
    (dict(BLOCK_M1=16, BLOCK_N1=32, BLOCK_M2=32, BLOCK_N2=16),
     {"B": 1, "H": 4, "KVH": 1, "S": 70, "D": 64}),
    # The query step wider than the key block (the masked range starts before the key block).
    (dict(BLOCK_M1=32, BLOCK_N1=16, BLOCK_M2=16, BLOCK_N2=32),
     {"B": 2, "H": 2, "KVH": 2, "S": 45, "D": 128}),
])
def test_attention_tile_configurations(tmp_path, knobs, dims):
    task = _copy(tmp_path, ATTN, **knobs)
    row = sc.check_case(task, "float16", Shape("knobs", dims), "cpu", tag=f"fab{dims['S']}")
    assert row["kernel"]["passed"], row["kernel"]["why"]


def test_attention_wrong_dk_is_caught(tmp_path):
    task = _copy(tmp_path, ATTN, replace=[("_to16(dk * sm_scale,", "_to16(dk,")])
    shape = load_spec(task).test_shapes[0]
    row = sc.check_case(task, "float16", shape, "cpu", tag="fab-wrongdk")
    assert not row["kernel"]["passed"] and "output 1" in row["kernel"]["why"]


def test_attention_is_deterministic_and_caches_its_launch():
    ker = sc.load_module(ATTN / "kernel.py", "fab-det")
    ref = sc.load_reference(ATTN, "fab-det")
    inputs = ref.make_inputs({"B": 1, "H": 2, "KVH": 1, "S": 40, "D": 64}, torch.bfloat16, "cpu", 5)
    a, b = ker.kernel_fn(*inputs), ker.kernel_fn(*inputs)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert len(ker._LAUNCH) == 1


def _ce_inputs(m, v, dtype, targets_fn, seed=0):
    ref = sc.load_reference(CE, "ceb")
    logits, targets, grad_out = ref.make_inputs({"M": m, "V": v}, dtype, "cpu", seed)
    return ref, (logits, targets_fn(targets.clone()), grad_out)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_cross_entropy_all_rows_ignored_gives_zeros(dtype):
    ker = sc.load_module(CE / "kernel.py", "ceb")
    ref, inputs = _ce_inputs(5, 300, getattr(torch, dtype), lambda t: torch.full_like(t, -100))
    (d,) = ker.kernel_fn(*inputs)
    assert torch.equal(d, torch.zeros_like(d))  # not NaN: grad_out / 0 is never used
    verdict = sc.check_call(ker.kernel_fn, ref, inputs, load_spec(CE).tolerances[dtype])
    assert verdict["passed"], verdict["why"]


@pytest.mark.parametrize("one_pass_max_v,pass2_reversed", [(0, 0), (0, 1), (32768, 0)],
                         ids=["two-pass", "two-pass-reversed", "one-pass"])
def test_cross_entropy_partly_ignored_rows(tmp_path, one_pass_max_v, pass2_reversed):
    # Several count steps (small COUNT_BLOCK); every other row ignored; each row in chunks (small
    # BLOCK_V, the two-pass way, pass 2 forwards or from the partial last chunk backwards) or held
    # whole (the one-pass way, the default at this width).
    task = _copy(tmp_path, CE, BLOCK_V=1024, COUNT_BLOCK=256, ONE_PASS_MAX_V=one_pass_max_v,
                 PASS2_REVERSED=pass2_reversed)
    ker = sc.load_module(task / "kernel.py", "ceb-part")

    def every_other(t):
        t[::2] = -100
        return t

    ref, inputs = _ce_inputs(300, 2500, torch.float32, every_other)
    (d,) = ker.kernel_fn(*inputs)
    assert torch.equal(d[::2], torch.zeros_like(d[::2]))
    verdict = sc.check_call(ker.kernel_fn, ref, inputs, load_spec(CE).tolerances["float32"])
    assert verdict["passed"], verdict["why"]


def test_cross_entropy_wrong_count_is_caught(tmp_path):
    # Dividing by M instead of the counted rows must fail.
    task = _copy(tmp_path, CE, replace=[("tl.store(SCALE, g / tl.sum(count, axis=0))", "tl.store(SCALE, g / M)")])
    row = sc.check_case(task, "float32", load_spec(task).test_shapes[0], "cpu", tag="ceb-wrong")
    assert not row["kernel"]["passed"]


def test_backward_reference_takes_backward_adversarial():
    from types import SimpleNamespace

    from autokernel_tui.harness.worker.reference import BackwardReference

    fwd_only = SimpleNamespace(ADVERSARIAL={"a": lambda x, g: x, "b": lambda x, g: x})
    both = SimpleNamespace(ADVERSARIAL=fwd_only.ADVERSARIAL, BACKWARD_ADVERSARIAL={"c": lambda x, g: x})
    assert set(BackwardReference(fwd_only, (0,)).ADVERSARIAL) == {"a", "b"}
    assert set(BackwardReference(both, (0,)).ADVERSARIAL) == {"c"}
    # flash_attention_bwd's sink is the soft one: same names as the forward's, another transform.
    attn = sc.load_reference(ATTN, "fab-adv")
    assert set(attn.ADVERSARIAL) == set(attn.module.ADVERSARIAL)
    assert attn.module.BACKWARD_ADVERSARIAL["attention_sink"] is not attn.module.ADVERSARIAL["attention_sink"]
