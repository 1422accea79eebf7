"""The row kernels of the norm and softmax starters (rows, resident, looped paths)
under the Triton interpreter, in the layouts their alignment tricks depend on.

The resident path loads each row from the 16-byte boundary at or before its start
and stores the partial first and last vectors element by element; the looped path
takes an alignment head, then whole chunks. Both assume x and the outputs share a
row stride and start 16-byte aligned, and must fall back (and still match the
reference) when they do not. RESIDENT_PART_KB is shrunk here so that rows of a few
thousand elements take every arrangement of parts the GPU shapes take.
"""

from pathlib import Path

import pytest
import torch

from benchmarks import starters_check as sc  # noqa: E402

from autokernel_tui.tasks.spec import load_spec  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TASKS = {"rmsnorm": "_rmsnorm", "layernorm": "_layernorm", "add_rmsnorm": "_add_rmsnorm", "softmax": "_softmax"}
LOOPED = {"rmsnorm": "_rmsnorm_looped", "layernorm": "_layernorm_looped", "add_rmsnorm": "_add_rmsnorm_looped",
          "softmax": "_softmax_online_vec"}


def _misaligned(x: torch.Tensor) -> torch.Tensor:
    """The same values, contiguous, starting one element past a 16-byte boundary."""
    buf = torch.empty(x.numel() + 1, dtype=x.dtype)
    out = buf[1:].view(x.shape)
    out.copy_(x)
    assert out.data_ptr() % 16 != 0
    return out


def _row_strided(x: torch.Tensor) -> torch.Tensor:
    """The same values, each row padded by 3 elements (a view: row stride != width)."""
    buf = torch.empty(x.shape[0], x.shape[1] + 3, dtype=x.dtype)
    out = buf[:, : x.shape[1]]
    out.copy_(x)
    return out


def _contiguous(x: torch.Tensor) -> torch.Tensor:
    return x


class Spy:
    """Stands in for a Triton kernel: records which one launched and with what, then runs it."""

    def __init__(self, kernel, name, calls):
        self.kernel, self.name, self.calls = kernel, name, calls

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.calls.append((self.name, kwargs))
            return self.kernel[grid](*args, **kwargs)
        return launch


def _spied(ker, task, monkeypatch):
    """Spies on the task's launched kernels (not the helpers they call)."""
    calls = []
    for name in (f"{TASKS[task]}_rows", f"{TASKS[task]}_rows_chunked", f"{TASKS[task]}_resident", LOOPED[task],
                 "_softmax_online"):
        if hasattr(ker, name):
            monkeypatch.setattr(ker, name, Spy(getattr(ker, name), name, calls))
    return calls


def _check(task, dtype, m, n, layout, monkeypatch, **knobs):
    """Run kernel_fn on an [m, n] input in the given layout; return the kernels it launched."""
    spec = load_spec(REPO / "kernels" / task)
    ref = sc.load_module(spec.path / "reference.py", "align")
    ker = sc.load_module(spec.path / "kernel.py", "align")
    for name, value in knobs.items():
        monkeypatch.setattr(ker, name, value)
    calls = _spied(ker, task, monkeypatch)
    inputs = ref.make_inputs({"M": m, "N": n}, getattr(torch, dtype), "cpu", 7)
    odd = (layout(inputs[0]),) + tuple(inputs[1:])
    with sc.poisoned_allocations():  # an element the kernel never writes stays NaN
        out = ker.kernel_fn(*odd)
    verdict = sc.compare(out, ref.reference(*inputs), sc.precise_reference(ref, inputs), spec.tolerances[dtype])
    assert verdict["passed"], verdict["why"]
    return calls


# Widths (fp16, parts of 1 KB = 512 elements): a tail alone, one vector or less, parts and a tail,
# exactly four parts, and 1001 (every row a different shift).
@pytest.mark.parametrize("n", [3, 8, 37, 1001, 2001, 2041])
@pytest.mark.parametrize("layout", [_contiguous, _misaligned, _row_strided],
                         ids=["contiguous", "misaligned-base", "row-strided"])
@pytest.mark.parametrize("task", sorted(TASKS))
def test_resident_rows_in_every_layout_match_the_reference(task, layout, n, monkeypatch):
    calls = _check(task, "float16", 9, n, layout, monkeypatch, RESIDENT_PART_KB=1, MAX_FUSED_N=0)
    (name, kwargs), *_ = calls
    if task == "add_rmsnorm" and layout is not _contiguous:
        assert name == LOOPED[task]  # its four tensors cannot share one stride here: the looped path
        return
    assert name == f"{TASKS[task]}_resident"
    parts, tail, vec = kwargs["PARTS"], kwargs["TAIL"], kwargs["VEC"]
    assert vec == (8 if layout is _contiguous else 1)
    slack = vec - 1 if n % vec else 0  # rows of a stride that is not whole vectors start anywhere
    assert parts * kwargs["PART"] + tail >= n + slack and 0 <= parts <= 4 and tail <= kwargs["PART"]
    assert kwargs["SHIFTED"] == bool(slack)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("task", sorted(TASKS))
def test_resident_rows_in_other_dtypes(task, dtype, monkeypatch):
    calls = _check(task, dtype, 11, 1001, _contiguous, monkeypatch, RESIDENT_PART_KB=1)
    assert calls[0][0] == f"{TASKS[task]}_resident" and calls[0][1]["PARTS"] >= 1


@pytest.mark.parametrize("layout", [_contiguous, _misaligned, _row_strided],
                         ids=["contiguous", "misaligned-base", "row-strided"])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("task", sorted(TASKS))
def test_looped_rows_in_every_layout_match_the_reference(task, dtype, layout, monkeypatch):
    calls = _check(task, dtype, 3, 20011, layout, monkeypatch, RESIDENT_MAX_KB=0)
    looped = LOOPED[task] if not (task == "softmax" and layout is not _contiguous) else "_softmax_online"
    assert calls[0][0] == looped


@pytest.mark.parametrize("layout", [_contiguous, _row_strided], ids=["contiguous", "row-strided"])
@pytest.mark.parametrize("task", sorted(TASKS))
def test_looped_rows_with_a_forward_second_pass(task, layout, monkeypatch):
    """LOOP_PASS2_REVERSED is a tuner knob: the forward walk must stay exact too (row-strided
    softmax takes the plain online kernel, with its partial last chunk)."""
    calls = _check(task, "float16", 3, 20011, layout, monkeypatch, RESIDENT_MAX_KB=0, LOOP_PASS2_REVERSED=0)
    assert calls[0][1]["REVERSED"] == 0


@pytest.mark.parametrize("task", sorted(TASKS))
def test_paths_by_width(task, monkeypatch):
    """Aligned short rows take the rows path, odd widths the resident one, the widest loop."""
    ker = sc.load_module(REPO / "kernels" / task / "kernel.py", "align")
    monkeypatch.setattr(ker, "RESIDENT_MAX_KB", 128)
    monkeypatch.setattr(ker, "RESIDENT_PART_KB", 32)
    x = torch.empty(4, 768, dtype=torch.bfloat16)
    assert ker._rows_aligned(768, x, torch.empty_like(x))
    assert not ker._rows_aligned(1000, torch.empty(4, 1000, dtype=torch.bfloat16))
    assert ker._resident_layout(50257, 8, 50257, 2) == (16384, 3, 2048, 32)  # 51200 elements held
    assert ker._resident_layout(32000, 8, 32000, 2)[:3] == (16384, 1, 16384)  # aligned: no slack
    assert ker._resident_layout(50257, 4, 50257, 4) is None  # 201 KB of fp32: looped
    assert ker._resident_layout(65536, 8, 65536, 2) == (16384, 4, 0, 32)  # exactly 128 KB: four parts
    assert ker._resident_layout(65529, 8, 65529, 2) == (16384, 4, 0, 32)  # the same with its shift slack
    assert ker._resident_layout(65537, 8, 65537, 2) is None  # one element more: looped


def test_the_vector_width_follows_the_layout():
    ker = sc.load_module(REPO / "kernels" / "rmsnorm" / "kernel.py", "align")
    x = torch.empty(4, 20011, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    assert ker._vector_width(x, y) == 8
    assert ker._vector_width(x.float(), y.float()) == 4
    assert ker._vector_width(_misaligned(x), y) == 1
    assert ker._vector_width(_row_strided(x), y) == 1


def test_softmax_online_sends_only_unaligned_widths_to_the_vector_kernel(monkeypatch):
    # Widths Triton proves 16-byte aligned already get vector loads from the plain online
    # kernel, which measured faster there (H200: 148 vs 188 us at 4096x32000).
    ker = sc.load_module(REPO / "kernels" / "softmax" / "kernel.py", "align")
    monkeypatch.setattr(ker, "RESIDENT_MAX_KB", 0)
    calls = []

    class Recorder:
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            return lambda *args, **kwargs: calls.append((self.name, kwargs.get("VEC")))

    monkeypatch.setattr(ker, "_softmax_online", Recorder("plain"))
    monkeypatch.setattr(ker, "_softmax_online_vec", Recorder("vec"))
    for n in (16400, 20011):
        ker.kernel_fn(torch.zeros(2, n, dtype=torch.float16))
    ker.kernel_fn(_misaligned(torch.zeros(2, 20011, dtype=torch.float16)))
    assert calls == [("plain", None), ("vec", 8), ("plain", None)]


@pytest.mark.parametrize("lane_max", [1, 0])
@pytest.mark.parametrize("n", [16400, 20011], ids=["aligned-online", "vector-online"])
def test_softmax_online_with_masked_lanes_chunks_and_heads(n, lane_max, monkeypatch):
    """Attention-style masking writes -inf: whole 16-byte lanes, a whole chunk, a row's head, and all
    of a row but one entry; both pass-1 reductions (LANE_MAX) must keep those out of the sums."""
    ker = sc.load_module(REPO / "kernels" / "softmax" / "kernel.py", "align")
    for name, value in {"RESIDENT_MAX_KB": 0, "LANE_MAX": lane_max, "LOOP_BLOCK_N": 2048, "VEC_LOOP_BLOCK_N": 2048}.items():
        monkeypatch.setattr(ker, name, value)
    g = torch.Generator().manual_seed(11)
    x = torch.randn(4, n, generator=g) * 4
    x[0, 8:200] = -float("inf")
    x[1, :4096 + 5] = -float("inf")  # the head and two whole chunks
    x[2, :] = -float("inf")
    x[2, n - 3] = 1.0
    x[3, 2048:4096] = -float("inf")
    x = x.to(torch.float16)
    with sc.poisoned_allocations():
        out = ker.kernel_fn(x)
    torch.testing.assert_close(out.float(), torch.softmax(x.float(), dim=-1), atol=2e-3, rtol=1e-2)


@pytest.mark.parametrize("n,m", [(768, 9), (256 * 48, 3)], ids=["3-chunks", "48-chunks"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_rmsnorm_chunked_rows_match_the_reference(n, m, dtype, monkeypatch):
    """ROWS_CHUNK_N walks aligned rows in chunks, twice: rows past the program's last (m not a
    multiple of its rows) must come out exact too."""
    calls = _check("rmsnorm", dtype, m, n, _contiguous, monkeypatch, ROWS_CHUNK_N=256, ROW_BLOCK_ELEMS=2048)
    (name, kwargs), = calls
    assert name == "_rmsnorm_rows_chunked" and kwargs["CHUNK_N"] == 256


@pytest.mark.parametrize("n,chunk", [(768, 1024), (4096 + 16, 256)], ids=["chunk-wider", "not-tiled"])
def test_rmsnorm_rows_held_whole_unless_chunks_tile_them(n, chunk, monkeypatch):
    calls = _check("rmsnorm", "float16", 4, n, _contiguous, monkeypatch, ROWS_CHUNK_N=chunk)
    assert calls[0][0] == "_rmsnorm_rows"


@pytest.mark.parametrize("int32", [1, 0])
@pytest.mark.parametrize("task", ["rmsnorm", "layernorm"])
def test_rows_path_with_32_bit_offsets_or_64(task, int32, monkeypatch):
    """ROWS_INT32 is a tuner knob of the rows path: exact either way; the 32-bit offsets are taken
    only when they fit (9 rows, one past the last program's, masked)."""
    calls = _check(task, "bfloat16", 9, 768, _contiguous, monkeypatch, ROWS_INT32=int32, ROW_BLOCK_ELEMS=2048)
    (name, kwargs), = calls
    assert name == f"_{task}_rows" and kwargs["INT32"] is bool(int32)


@pytest.mark.parametrize("task", ["rmsnorm", "layernorm"])
def test_32_bit_offsets_only_where_they_fit(task):
    ker = sc.load_module(REPO / "kernels" / task / "kernel.py", "align")

    class Rows:  # only the row stride counts (a view's offsets, not its storage)
        def __init__(self, stride):
            self._stride = stride

        def stride(self, dim):
            return self._stride

    assert ker._offsets_fit_int32(4, 768, Rows(768), Rows(768))
    assert not ker._offsets_fit_int32(4, 768, Rows(768), Rows(2**30))  # 3 * 2^30: past 2^31
    assert ker._offsets_fit_int32(2**21, 768, Rows(1024))  # largest offset (2^21 - 1) * 1024 + 1023 = 2^31 - 1
    assert not ker._offsets_fit_int32(2**21 + 1, 768, Rows(1024))
