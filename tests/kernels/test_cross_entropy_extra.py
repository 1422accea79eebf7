"""cross_entropy checks beyond the generic starter tests: rows that start off a
16-byte boundary (the aligned-body split), rows strided wider than the
vocabulary, chunk sizes the tuner may pick, both reductions (per-lane maxima and
a row max per chunk) with masked (-inf) logits, bitwise determinism, and the
all-ignored batch."""

import re
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[2]
from benchmarks import starters_check as sc  # noqa: E402

from autokernel_tui.tasks.spec import Shape, load_spec  # noqa: E402

TASK = REPO / "kernels" / "cross_entropy"
SPEC = load_spec(TASK)


def kernel(**knobs):
    ker = sc.load_module(TASK / "kernel.py", "ce-extra")
    for name, value in knobs.items():
        assert isinstance(getattr(ker, name), int)
        setattr(ker, name, value)
    return ker


def assert_close(out, logits, targets, dtype_name):
    precise = F.cross_entropy(logits.double(), targets)
    tol = SPEC.tolerances[dtype_name]
    verdict = sc.compare(out, F.cross_entropy(logits, targets), precise, tol)
    assert verdict["passed"], verdict["why"]


@pytest.mark.parametrize("lane_max", [1, 0])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_rows_off_the_16_byte_boundary_with_the_max_in_the_head(dtype, lane_max):
    # A storage offset of 1 and an odd vocabulary give every row a different
    # misalignment; the dominant logit sits in the first columns (the unaligned head).
    m, v = 6, 4099
    g = torch.Generator().manual_seed(0)
    flat = torch.randn(m * v + 1, generator=g)
    logits = flat[1:].view(m, v).clone()
    logits[:, 0] += 25.0
    logits[::2, 1] += 30.0
    storage = torch.empty(m * v + 1, dtype=getattr(torch, dtype))
    storage[1:] = logits.flatten().to(storage.dtype)
    logits = storage[1:].view(m, v)
    targets = torch.randint(0, v, (m,), generator=g)
    targets[1] = -100
    assert_close(kernel(LANE_MAX=lane_max, FP32_LANE_MAX=lane_max).kernel_fn(logits, targets), logits, targets, dtype)


@pytest.mark.parametrize("lane_max", [1, 0])
def test_masked_logits_whole_lanes_and_chunks_of_minus_inf(lane_max):
    # Vocabulary masking writes -inf: whole 16-byte lanes, a whole chunk, all but the target,
    # and rows narrower than one chunk (no body, only head and tail), must all stay finite.
    m, v = 5, 2 * 1024 + 37
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(m, v, generator=g)
    logits[0, 8:64] = -float("inf")  # whole lanes
    logits[1, :1024 + 100] = -float("inf")  # the head, a whole chunk and more
    logits[2, :] = -float("inf")
    logits[2, 1500] = 4.0  # one finite logit, the target's
    logits[3, 1024:] = -float("inf")  # the tail and the last chunk
    targets = torch.tensor([3, 2000, 1500, 5, 70])
    ker = kernel(LANE_MAX=lane_max, FP32_LANE_MAX=lane_max, BLOCK_V=1024)
    assert_close(ker.kernel_fn(logits, targets), logits, targets, "float32")
    narrow = logits[:, :300].contiguous()
    assert_close(ker.kernel_fn(narrow, targets % 300), narrow, targets % 300, "float32")


def test_row_stride_wider_than_the_vocabulary():
    g = torch.Generator().manual_seed(1)
    wide = torch.randn(5, 1030, generator=g).to(torch.float16)
    logits = wide[:, :1000]  # a column slice: row stride 1030
    targets = torch.randint(0, 1000, (5,), generator=g)
    assert_close(kernel().kernel_fn(logits, targets), logits, targets, "float16")


@pytest.mark.parametrize("block_v", [1024, 16384])
def test_chunk_sizes_the_tuner_may_pick(tmp_path, block_v):
    dst = tmp_path / "cross_entropy"
    shutil.copytree(TASK, dst)
    src = (dst / "kernel.py").read_text()
    (dst / "kernel.py").write_text(re.sub(r"^BLOCK_V = \d+", f"BLOCK_V = {block_v}", src, flags=re.M))
    shape = Shape("wide", {"M": 3, "V": 50257})
    row = sc.check_case(dst, "bfloat16", shape, "cpu", tag=f"ce{block_v}")
    assert row["kernel"]["passed"], row["kernel"]["why"]


@pytest.mark.parametrize("fused", [1, 0], ids=["last-program-sums", "second-kernel"])
def test_bitwise_deterministic_and_exact_in_both_final_reductions(fused):
    ref = sc.load_module(TASK / "reference.py", "ce-extra")
    logits, targets = ref.make_inputs({"M": 64, "V": 777}, torch.float32, "cpu", 5)
    ker = kernel(FUSED_MEAN=fused, REDUCE_BLOCK=16)  # 64 rows: four steps of the final sum
    first = ker.kernel_fn(logits, targets)
    assert_close(first, logits, targets, "float32")
    for _ in range(3):
        assert torch.equal(ker.kernel_fn(logits, targets), first)


@pytest.mark.parametrize("fused", [1, 0])
def test_every_row_ignored_gives_nan_like_torch(fused):
    logits = torch.randn(4, 300)
    targets = torch.full((4,), -100)
    out = kernel(FUSED_MEAN=fused).kernel_fn(logits, targets)
    assert torch.isnan(F.cross_entropy(logits, targets)) and torch.isnan(out)


def test_shape_mismatch_is_refused():
    with pytest.raises(ValueError, match="targets"):
        kernel().kernel_fn(torch.randn(4, 10), torch.zeros(5, dtype=torch.long))
