"""Edge cases of the backward norm starters (rmsnorm_bwd, layernorm_bwd, add_rmsnorm_bwd) that the
generic starter check misses: dweight summed over many row blocks with a remainder, rows wider than
one block (the split path's column tiles and row groups, the looped path in both pass-2 orders), a
wrong dweight caught on each path, bitwise determinism, the
two gradients of a tuple-returning forward, and the linked reference copied as content."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from benchmarks import starters_check as sc

from autokernel_tui.ledger.workspace import _copy_starters
from autokernel_tui.tasks.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
TASKS = ("rmsnorm_bwd", "layernorm_bwd", "add_rmsnorm_bwd")
_tag = iter(range(1 << 30))


def _kernel(task: str, **knobs):
    """A fresh import of the task's kernel.py (its own plan cache) with knobs overridden."""
    ker = sc.load_module(REPO / "kernels" / task / "kernel.py", f"edge{next(_tag)}")
    for name, value in knobs.items():
        assert hasattr(ker, name), name
        setattr(ker, name, value)
    return ker


def _check(task: str, ker, dims: dict, dtype: str = "float32", adversarial: str | None = None) -> dict:
    ref = sc.load_reference(REPO / "kernels" / task, "edge")
    inputs = sc.build_inputs(ref, dims, dtype, "cpu", 0, adversarial)
    return sc.check_call(ker.kernel_fn, ref, inputs, load_spec(REPO / "kernels" / task).tolerances[dtype])


@pytest.mark.parametrize("stages", [1, 2])
@pytest.mark.parametrize("task", TASKS)
def test_weight_grad_over_many_row_blocks_with_a_remainder(task, stages):
    # 37 rows in blocks of 2 (19 blocks, the last half empty), 3 blocks per program: 7 programs, the
    # last with one block; each program's partial row summed by the column-sum kernel in 2 steps. With
    # ROWS_STAGES = 2 the loop prefetches each next block (on a GPU; the interpreter runs it in order).
    ker = _kernel(task, ROW_BLOCK_ELEMS=128, CPU_SMS=2, PROGRAMS_PER_SM=4, REDUCE_BLOCK_P=4, REDUCE_BLOCK_N=32,
                  ROWS_STAGES=stages)
    assert ker._plan(37, 64, torch.device("cpu"))[:5] == ("rows", 7, 3, 2, 64)
    verdict = _check(task, ker, {"M": 37, "N": 64})
    assert verdict["passed"], verdict["why"]


@pytest.mark.parametrize("reversed_", [0, 1])
@pytest.mark.parametrize("task", TASKS)
def test_rows_wider_than_a_block_take_the_looped_path(task, reversed_):
    # 100-wide rows in chunks of 32 (the last partial); 7 rows, 4 per program: the second program's
    # partial dweight row starts from its first row (3 rows) as the first one's does (4 rows).
    ker = _kernel(task, MAX_FUSED_N=64, LOOP_BLOCK_N=32, CPU_SMS=1, PROGRAMS_PER_SM=2,
                  LOOP_PASS2_REVERSED=reversed_, WIDE_SPLIT=0)
    assert ker._plan(7, 100, torch.device("cpu"))[:3] == ("looped", 2, 4)
    for adversarial in (None, "large"):
        verdict = _check(task, ker, {"M": 7, "N": 100}, adversarial=adversarial)
        assert verdict["passed"], (adversarial, verdict["why"])


@pytest.mark.parametrize("split", [0, 1])
def test_layernorm_wide_paths_hold_rows_far_from_zero(split):
    ker = _kernel("layernorm_bwd", MAX_FUSED_N=64, LOOP_BLOCK_N=32, CPU_SMS=1, PROGRAMS_PER_SM=2, WIDE_SPLIT=split)
    verdict = _check("layernorm_bwd", ker, {"M": 7, "N": 100}, adversarial="offset")
    assert verdict["passed"], verdict["why"]


@pytest.mark.parametrize("task", TASKS)
def test_the_split_path_tiles_columns_and_groups_rows(task):
    # 11 rows of 100 in column tiles of 32 (the last partial), rows 2 at a time: 4 programs wanted over
    # 4 tiles gives one row group of all 11; with 16 wanted, 3 groups of 4 rows (the last of 3, half of
    # its second step masked). dw and db summed over the groups' partial rows.
    for sms, plan in ((2, ("split", 1, 12, 2, 32)), (8, ("split", 3, 4, 2, 32))):
        ker = _kernel(task, MAX_FUSED_N=64, LOOP_BLOCK_N=32, CPU_SMS=sms, PROGRAMS_PER_SM=2,
                      SPLIT_TILE_N=32, SPLIT_TILE_M=2, SPLIT_STAGES=sms // 4 + 1)  # the prefetching loop too
        assert ker._plan(11, 100, torch.device("cpu"))[:5] == plan
        for adversarial in (None, "large"):
            verdict = _check(task, ker, {"M": 11, "N": 100}, adversarial=adversarial)
            assert verdict["passed"], (sms, adversarial, verdict["why"])


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("task", TASKS)
def test_the_split_path_reads_odd_width_rows_from_their_16_byte_boundaries(task, dtype):
    """Rows of an odd width start anywhere: the aligned split path groups them by shift (rows r, r + VEC, ...),
    loads whole vectors and selects the neighbours' elements away, stores dx's shared first and last
    vectors element by element, and keeps a dw partial row per row group and shift class. 37 rows (more than
    two of each class, the last group short) of 97 and of 100 columns; a misaligned view takes the
    element-wise kernels."""
    ker = _kernel(task, MAX_FUSED_N=64, LOOP_BLOCK_N=32, CPU_SMS=4, PROGRAMS_PER_SM=2, SPLIT_TILE_N=32,
                  SPLIT_TILE_M=2)
    aligned, plain = f"_{task}_split_tiles_aligned", f"_{task}_split_tiles"
    launched = []
    for name in (aligned, plain):
        setattr(ker, name, _Spy(getattr(ker, name), name, launched))
    for n in (97, 100):
        assert ker._plan(37, n, torch.device("cpu"))[0] == "split"
        for adversarial in (None, "large"):
            verdict = _check(task, ker, {"M": 37, "N": n}, dtype, adversarial)
            assert verdict["passed"], (n, adversarial, verdict["why"])
    assert set(launched) == {aligned}
    ref = sc.load_reference(REPO / "kernels" / task, "edge")
    inputs = sc.build_inputs(ref, {"M": 37, "N": 100}, dtype, "cpu", 0)
    x = inputs[0]
    rows = [t for t in inputs if isinstance(t, torch.Tensor) and t.dim() == 2] + [torch.empty_like(x)]
    assert ker._vector_width(32, *rows) == 16 // x.element_size()
    assert ker._vector_width(6, *rows) == 1  # a column tile of part of a vector: element by element
    # the rows read (add_rmsnorm_bwd reads the saved h, not x) one element past a 16-byte boundary
    read = 4 if task == "add_rmsnorm_bwd" else 0
    store = torch.empty(37 * 100 + 1, dtype=x.dtype)
    off = store[1:].view(37, 100)
    off.copy_(inputs[read])
    launched.clear()
    got = ker.kernel_fn(*inputs[:read], off, *inputs[read + 1:])
    assert launched == [plain]
    want = ker.kernel_fn(*inputs)
    for a, b in zip(got, want):
        assert torch.allclose(a.float(), b.float(), rtol=1e-2, atol=1e-2)
    # The last row's last vector reaches past the tensor's end: NaN there must not enter any sum.
    tailed = tuple(_nan_tailed(t) if isinstance(t, torch.Tensor) and t.dim() == 2 else t for t in inputs)
    launched.clear()
    got = ker.kernel_fn(*tailed)
    assert launched == [aligned]
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def _nan_tailed(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` at the start of a buffer whose elements past it are NaN."""
    buf = torch.full((t.numel() + 16,), float("nan"), dtype=t.dtype)
    buf[:t.numel()].copy_(t.reshape(-1))
    return buf[:t.numel()].view(t.shape)


class _Spy:
    """A Triton kernel whose launches are recorded by name (``kernel[grid](...)``)."""

    def __init__(self, kernel, name, launched):
        self.kernel, self.name, self.launched = kernel, name, launched

    def __getitem__(self, grid):
        self.launched.append(self.name)
        return self.kernel[grid]

@pytest.mark.parametrize("edits,shape", [
    ([("acc += dy * xhat", "acc += dy * x")], 0),  # rows path
    ([("acc += tl.where(inrow[None, :], dy * x, 0.0) * rstd[:, None]", "acc += tl.where(inrow[None, :], dy * x, 0.0)")],
     -1),  # split path (wide rows, the default), rows loaded from their 16-byte boundaries
    ([("\nWIDE_ALIGN = 1\n", "\nWIDE_ALIGN = 0\n"), ("acc += dy * x * rstd[:, None]", "acc += dy * x")], -1),  # split
    ([("WIDE_SPLIT = 1  #", "WIDE_SPLIT = 0  #"), ("prev + dy * x * rstd", "prev + dy * x")], -1)])  # looped path
def test_a_wrong_weight_grad_is_caught(tmp_path, edits, shape):
    dst = tmp_path / "rmsnorm_bwd"
    shutil.copytree(REPO / "kernels" / "rmsnorm_bwd", dst)  # the linked reference.py copied as content
    src = (dst / "kernel.py").read_text()
    for old, new in edits:
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    (dst / "kernel.py").write_text(src)
    row = sc.check_case(dst, "float32", load_spec(dst).test_shapes[shape], "cpu", tag=f"wrong{next(_tag)}")
    assert not row["kernel"]["passed"] and row["kernel"]["why"].startswith("output 1"), row["kernel"]


@pytest.mark.parametrize("task", TASKS)
def test_gradients_are_bitwise_deterministic(task):
    ker = _kernel(task, ROW_BLOCK_ELEMS=128, CPU_SMS=2)
    ref = sc.load_reference(REPO / "kernels" / task, "edge")
    inputs = sc.build_inputs(ref, {"M": 37, "N": 64}, "bfloat16", "cpu", 0)
    a, b = ker.kernel_fn(*inputs), ker.kernel_fn(*inputs)
    assert all(torch.equal(x.view(torch.int16), y.view(torch.int16)) for x, y in zip(a, b))


def test_add_rmsnorm_takes_a_gradient_per_output():
    """(out, new_residual): the inputs end with grad_out and grad_new_residual, after h = x + residual (what
    the forward saved); an adversarial transform keeps both gradients and computes h again from the moved
    inputs; autograd and the timed backward see both gradients."""
    ref = sc.load_reference(REPO / "kernels" / "add_rmsnorm_bwd", "edge")
    inputs = sc.build_inputs(ref, {"M": 5, "N": 48}, "float32", "cpu", 0)
    assert len(inputs) == 7 and inputs[3] == ref.module.EPS
    assert torch.equal(inputs[4], inputs[0] + inputs[1])
    fwd, grads = ref.split(inputs)
    assert len(fwd) == 4 and len(grads) == 2 and not torch.equal(grads[0], grads[1])
    moved = ref.ADVERSARIAL["large"](inputs, torch.Generator().manual_seed(1))
    assert moved[5] is inputs[5] and moved[6] is inputs[6] and not torch.equal(moved[0], inputs[0])
    assert torch.equal(moved[4], moved[0] + moved[1])
    dx, dr, dw = ref.reference_precise(*inputs)
    assert torch.equal(dx, dr)
    # grad_new_residual flows straight into both input gradients
    x, r, w, eps, h, gy, gh = inputs
    base = ref.reference_precise(x, r, w, eps, h, gy, torch.zeros_like(gh))
    assert torch.allclose(dx - base[0], gh.double()) and torch.equal(dw, base[2])
    prepare, run = ref.backward_only()
    timed = run(*prepare(inputs))
    assert all(torch.allclose(t.double(), p, atol=1e-5) for t, p in zip(timed, (dx, dr, dw)))


def test_add_rmsnorm_bwd_reads_the_saved_h_not_x_and_residual():
    """The kernel takes h from what the forward saved: x and residual are never read (one tensor where two
    were), so the same h with any x and residual gives the same gradients, bit for bit."""
    ref = sc.load_reference(REPO / "kernels" / "add_rmsnorm_bwd", "edge")
    ker = _kernel("add_rmsnorm_bwd")
    x, r, w, eps, h, gy, gh = sc.build_inputs(ref, {"M": 37, "N": 64}, "float32", "cpu", 0)
    got = ker.kernel_fn(x, r, w, eps, h, gy, gh)
    nan = torch.full_like(x, float("nan"))
    again = ker.kernel_fn(nan, nan, w, eps, h, gy, gh)
    assert all(torch.equal(a, b) for a, b in zip(got, again))


def test_a_workspace_gets_the_linked_reference_as_a_file(tmp_path):
    (dest,) = _copy_starters(["layernorm_bwd"], tmp_path)
    ref = dest / "reference.py"
    assert (REPO / "kernels" / "layernorm_bwd" / "reference.py").is_symlink() and not ref.is_symlink()
    assert ref.read_bytes() == (REPO / "kernels" / "layernorm" / "reference.py").read_bytes()


def test_the_rows_pipeline_depth_fits_shared_memory():
    # Run 24 (H100): add_rmsnorm_bwd's fp32 rows of 5120 (8192 padded) ran out of shared memory at 3 stages;
    # Triton keeps stages - 1 copies of each prefetched tile, so the depth is capped by what fits.
    for task, loads in (("rmsnorm_bwd", 2), ("layernorm_bwd", 2), ("add_rmsnorm_bwd", 3)):
        ker = _kernel(task, ROWS_STAGES=3)
        assert ker._rows_stages(1, 8192, 2) == 3  # 16-bit 8192-wide rows: two copies fit
        copy = 8192 * 4 * loads
        assert ker._rows_stages(1, 8192, 4) == min(3, 1 + ker._ROWS_SMEM_BYTES // copy)
        assert (ker._rows_stages(1, 8192, 4) - 1) * copy <= ker._ROWS_SMEM_BYTES
        assert ker._rows_stages(64, 16384, 4) == 1  # nothing fits twice: no prefetch
    # add_rmsnorm_bwd's three tiles (h, grad_y, grad_h; x and residual were two before h was saved): at
    # 8192 fp32 two copies of the three fit in the 200 KB
    assert _kernel("add_rmsnorm_bwd", ROWS_STAGES=3)._rows_stages(1, 8192, 4) == 3
