"""flash_attention checks the generic starter tests cannot express: every tile
configuration the tuner may pick stays correct (blocks wider than the query
tile, several query blocks, sequence ends inside a block), the shared-memory
guard, and clear errors for unsupported shapes."""

import re
import shutil
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
from benchmarks import starters_check as sc  # noqa: E402

from autokernel_tui.tasks.spec import Shape  # noqa: E402

TASK = REPO / "kernels" / "flash_attention"


def with_knobs(tmp_path: Path, **knobs) -> Path:
    """A copy of the task whose kernel.py has the given knob values, as the tuner writes them. Unless a test
    names SMALL_HEAD_DIM, it is 0: every head dim then takes the main knobs the test sets."""
    dst = tmp_path / "flash_attention"
    shutil.copytree(TASK, dst)
    src = (dst / "kernel.py").read_text()
    knobs.setdefault("SMALL_HEAD_DIM", 0)
    for name, value in knobs.items():
        src, n = re.subn(rf"^{name} = \d+", f"{name} = {value}", src, flags=re.M)
        assert n == 1, name
    (dst / "kernel.py").write_text(src)
    return dst


@pytest.mark.parametrize("block_m,block_n,dim,seq,tma", [
    (64, 32, 64, 150, 1),    # several query blocks, several unmasked key blocks
    (64, 32, 64, 150, 0),    # the same through pointer loads
    (64, 128, 64, 150, 1),   # key block wider than the query block
    (128, 128, 128, 131, 0),  # one key past a block boundary
    (128, 64, 128, 131, 1),  # TMA reads past this head's end: the next head's rows, masked
])
def test_tile_configurations_stay_correct(tmp_path, block_m, block_n, dim, seq, tma):
    task = with_knobs(tmp_path, BLOCK_M=block_m, BLOCK_N=block_n, NUM_STAGES=4, USE_TMA=tma)
    shape = Shape("knobs", {"B": 2, "H": 4, "KVH": 2, "S": seq, "D": dim})
    row = sc.check_case(task, "float16", shape, "cpu", tag=f"fa{block_m}x{block_n}x{dim}t{tma}")
    assert row["kernel"]["passed"], row["kernel"]["why"]


@pytest.mark.parametrize("head_group,tma", [(1, 1), (3, 1), (3, 0), (32, 0)])
def test_every_launch_order_covers_every_block(tmp_path, head_group, tma):
    # B*H = 8 (batch, head) pairs x 3 query blocks: groups of 3 leave a partial last group,
    # 32 is wider than the grid. A block the schedule skipped stays NaN-poisoned and fails.
    task = with_knobs(tmp_path, BLOCK_M=64, BLOCK_N=32, HEAD_GROUP=head_group, USE_TMA=tma)
    shape = Shape("order", {"B": 2, "H": 4, "KVH": 2, "S": 150, "D": 64})
    row = sc.check_case(task, "float16", shape, "cpu", tag=f"fa-order{head_group}t{tma}")
    assert row["kernel"]["passed"], row["kernel"]["why"]


def test_causality_later_keys_never_leak():
    # Changing keys/values after position p must not change any output row <= p.
    ker = sc.load_module(TASK / "kernel.py", "fa-causal")
    ref = sc.load_module(TASK / "reference.py", "fa-causal")
    q, k, v = ref.make_inputs({"B": 1, "H": 2, "KVH": 1, "S": 70, "D": 64}, torch.float16, "cpu", 3)
    p = 41
    k2, v2 = k.clone(), v.clone()
    k2[:, :, p + 1:] = -k2[:, :, p + 1:] * 4
    v2[:, :, p + 1:] = 7.0
    a, b = ker.kernel_fn(q, k, v), ker.kernel_fn(q, k2, v2)
    assert torch.equal(a[:, :, : p + 1], b[:, :, : p + 1])
    assert not torch.equal(a[:, :, p + 1:], b[:, :, p + 1:])


def test_pipeline_depth_is_lowered_to_fit_shared_memory():
    ker = sc.load_module(TASK / "kernel.py", "fa-smem")
    stages = ker._stages_that_fit(4, 128, 128, 128, 2)
    assert 1 <= stages < 4
    assert (128 + 2 * stages * 128) * 128 * 2 <= 227 * 1024 - 16 * 1024  # with room for scratch
    assert ker._stages_that_fit(4, 128, 128, 64, 2) == 4  # head dim 64 fits all four stages


def test_small_heads_take_their_own_tiles():
    # GPT-2's 64-dim heads take the SMALL_HEAD_* knobs, LLaMA's 128-dim ones the main knobs; 0 turns it off.
    ker = sc.load_module(TASK / "kernel.py", "fa-tiers")
    small = (ker.SMALL_HEAD_BLOCK_M, ker.SMALL_HEAD_BLOCK_N, ker.SMALL_HEAD_NUM_WARPS, ker.SMALL_HEAD_NUM_STAGES,
             ker.SMALL_HEAD_MAX_REGS)
    main = (ker.BLOCK_M, ker.BLOCK_N, ker.NUM_WARPS, ker.NUM_STAGES, ker.MAX_REGS)
    assert ker.SMALL_HEAD_DIM == 64
    assert ker._tiles(64) == ker._tiles(32) == small and ker._tiles(128) == main


@pytest.mark.parametrize("block_m,block_n,tma", [(64, 128, 1), (128, 32, 0), (64, 64, 1)])
def test_small_head_tiles_stay_correct(tmp_path, block_m, block_n, tma):
    # The SMALL_HEAD_* tiles at a 64-dim head, several query blocks and a sequence end inside a block
    task = with_knobs(tmp_path, SMALL_HEAD_DIM=64, SMALL_HEAD_BLOCK_M=block_m, SMALL_HEAD_BLOCK_N=block_n,
                      SMALL_HEAD_NUM_STAGES=3, USE_TMA=tma, BLOCK_M=16, BLOCK_N=16)  # main tiles unused here
    shape = Shape("small-head", {"B": 2, "H": 4, "KVH": 2, "S": 150, "D": 64})
    row = sc.check_case(task, "bfloat16", shape, "cpu", tag=f"fa-small{block_m}x{block_n}t{tma}")
    assert row["kernel"]["passed"], row["kernel"]["why"]


@pytest.mark.parametrize("q_shape,kv_shape,message", [
    ((1, 6, 16, 64), (1, 4, 16, 64), "KVH"),
    ((1, 4, 16, 96), (1, 4, 16, 96), "head dim 96"),
])
def test_unsupported_shapes_are_refused(q_shape, kv_shape, message):
    ker = sc.load_module(TASK / "kernel.py", "fa-shapes")
    q = torch.zeros(q_shape, dtype=torch.float16)
    k = torch.zeros(kv_shape, dtype=torch.float16)
    with pytest.raises(ValueError, match=message):
        ker.kernel_fn(q, k, k)


@pytest.mark.parametrize("dtype,tma", [(torch.float16, 1), (torch.bfloat16, 0), (torch.float32, 1)])
def test_the_saved_variant_returns_the_output_and_the_backwards_logsumexp(tmp_path, dtype, tma):
    # kernel_fn_saved: what a training forward keeps for flash_attention_bwd (o, lse), in one pass: the
    # same output as kernel_fn, and the logsumexp the reference's saved_for_backward computes
    ker = sc.load_module(with_knobs(tmp_path, USE_TMA=tma, BLOCK_M=32, BLOCK_N=16) / "kernel.py", f"fa-saved-{tma}")
    ref = sc.load_module(TASK / "reference.py", "fa-saved-ref")
    q, k, v = ref.make_inputs({"B": 2, "H": 4, "KVH": 2, "S": 45, "D": 64}, dtype, "cpu", 3)
    o, (saved_o, lse) = ker.kernel_fn_saved(q, k, v)
    assert saved_o is o and torch.equal(o, ker.kernel_fn(q, k, v))
    want_o, want_lse = ref.saved_for_backward(q, k, v)
    assert lse.dtype == torch.float32 and lse.shape == (2, 4, 45)
    torch.testing.assert_close(lse, want_lse, atol=2e-2 if dtype != torch.float32 else 1e-4, rtol=0)
    torch.testing.assert_close(o.float(), want_o.float(), atol=3e-2, rtol=0)
