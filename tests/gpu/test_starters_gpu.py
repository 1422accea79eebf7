"""Every starter at its FULL default shapes, every declared dtype, on CUDA: the same
checks as tests/kernels (float64 reference, NaN-poisoned outputs, adversarial
inputs, eager baseline within its own tolerance). Run on the GPU machine:

    AUTOKERNEL_TEST_CUDA=1 python -m pytest -m gpu tests/gpu/test_starters_gpu.py -q
"""

from pathlib import Path

import pytest

from benchmarks import starters_check as sc  # noqa: E402

from autokernel_tui.tasks.spec import find_tasks  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TASKS = find_tasks(REPO / "kernels")


def _cases():
    for spec in TASKS:
        ref = sc.load_module(spec.path / "reference.py", "gpu")
        for dtype in spec.dtypes:
            for shape in spec.shapes:
                yield pytest.param(spec.path, dtype, shape, None, id=f"{spec.name}-{dtype}-{shape.name}")
            for adv in getattr(ref, "ADVERSARIAL", {}):
                for shape in sc.adversarial_shapes(spec.shapes):
                    yield pytest.param(spec.path, dtype, shape, adv, id=f"{spec.name}-{dtype}-{shape.name}+{adv}")


@pytest.mark.gpu
@pytest.mark.parametrize("task_dir,dtype,shape,adversarial", list(_cases()))
def test_starter_on_gpu(task_dir, dtype, shape, adversarial):
    import torch

    row = sc.check_case(task_dir, dtype, shape, "cuda", seed=0, adversarial=adversarial, tag="gpu")
    torch.cuda.empty_cache()
    assert row["kernel"]["passed"], f"kernel: {row['kernel']['why']}"
    assert row["baseline"]["passed"], f"eager baseline fails its own tolerance: {row['baseline']['why']}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("dims", [{"B": 2, "H": 8, "KVH": 2, "S": 1000, "D": 128}, {"B": 2, "H": 4, "KVH": 4, "S": 512, "D": 64}],
                         ids=["gqa-d128-odd", "mha-d64"])
def test_attention_saved_tensors_on_gpu(dtype, dims):
    # What flash_attention_bwd is given: the reference's saved_for_backward through torch's FlashAttention
    # forward on the GPU against the float32 way, and the forward starter's kernel_fn_saved (what a model that
    # trains keeps) against both
    import torch

    ref = sc.load_module(REPO / "kernels" / "flash_attention" / "reference.py", "gpu-saved")
    ker = sc.load_module(REPO / "kernels" / "flash_attention" / "kernel.py", "gpu-saved-kernel")
    q, k, v = ref.make_inputs(dims, getattr(torch, dtype), "cuda", 0)
    o, lse = ref.saved_for_backward(q, k, v)
    o32, lse32 = ref.saved_for_backward(q.cpu().float(), k.cpu().float(), v.cpu().float())
    assert o.dtype == q.dtype and o.is_contiguous() and lse.dtype == torch.float32 and lse.shape == q.shape[:3]
    torch.testing.assert_close(lse.cpu(), lse32, atol=1e-2, rtol=0)
    torch.testing.assert_close(o.float().cpu(), o32, atol=2e-2, rtol=0)
    ko, (_, klse) = ker.kernel_fn_saved(q, k, v)
    torch.testing.assert_close(klse, lse, atol=1e-2, rtol=0)
    torch.testing.assert_close(ko.float(), o.float(), atol=2e-2, rtol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("task", ["rmsnorm_bwd", "layernorm_bwd", "add_rmsnorm_bwd"])
def test_norm_backwards_read_wide_rows_from_their_boundaries_on_gpu(task, dtype):
    # The split path's aligned kernels (WIDE_ALIGN = 1) on CUDA at a 50257-wide row: the same gradients as the
    # element-wise kernels (WIDE_ALIGN = 0) within the task's tolerance, and bit for bit the same when NaN lies
    # past the last row's end (its last vector reaches there)
    import torch

    from autokernel_tui.tasks.spec import load_spec

    task_dir = REPO / "kernels" / task
    ref = sc.load_reference(task_dir, "gpu-wide")
    aligned = sc.load_module(task_dir / "kernel.py", "gpu-wide-aligned")
    plain = sc.load_module(task_dir / "kernel.py", "gpu-wide-plain")
    plain.WIDE_ALIGN = 0
    assert aligned.WIDE_ALIGN == 1
    inputs = sc.build_inputs(ref, {"M": 67, "N": 50257}, dtype, "cuda", 0)
    want = plain.kernel_fn(*inputs)
    got = aligned.kernel_fn(*inputs)
    tol = load_spec(task_dir).tolerances[dtype]
    for a, b in zip(got, want):
        torch.testing.assert_close(a.float(), b.float(), atol=tol.atol, rtol=tol.rtol)

    def nan_tailed(t):
        buf = torch.full((t.numel() + 64,), float("nan"), dtype=t.dtype, device=t.device)
        buf[:t.numel()].copy_(t.reshape(-1))
        return buf[:t.numel()].view(t.shape)
    tailed = tuple(nan_tailed(t) if isinstance(t, torch.Tensor) and t.dim() == 2 else t for t in inputs)
    for a, b in zip(aligned.kernel_fn(*tailed), got):
        assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("dims", [{"M": 1024, "N": 768, "K": 768, "epilogue": "bias"},
                                  {"M": 8192, "N": 2304, "K": 768, "epilogue": "bias"},
                                  {"M": 8192, "N": 50257, "K": 768}], ids=["tiny", "big", "small-odd-n"])
def test_matmul_warp_specialized_tiers_on_gpu_and_in_a_cuda_graph(dims):
    # Every tier with warp specialization on (the kernel makes its descriptors on the device, their scratch
    # from torch's allocator): the task's checks at GPT-2's shapes with B as a Linear's weight.t() (and its
    # bias, as GPT-2's Linears but not its LM head have one), then the
    # same call captured in a CUDA graph (the scratch then comes from the graph's pool) and replayed on new
    # inputs: the replay's product is the product of the new inputs.
    import torch

    from autokernel_tui.tasks.spec import load_spec

    task_dir = REPO / "kernels" / "matmul"
    spec = load_spec(task_dir)
    ker = sc.load_module(task_dir / "kernel.py", "gpu-ws")
    ker.WARP_SPECIALIZE = ker.SMALL_WARP_SPECIALIZE = ker.TINY_WARP_SPECIALIZE = 1
    ker.NUM_WARPS = ker.SMALL_NUM_WARPS = ker.TINY_NUM_WARPS = 4  # two consumer groups of 64 rows at 128-row tiles
    ref = sc.load_reference(task_dir, "gpu-ws")
    tol = spec.tolerances["bfloat16"]
    inputs = sc.build_inputs(ref, dims, "bfloat16", "cuda", 0, "weight_layout")
    a, b, *bias = inputs
    plan = ker._plan(a, b, bias[0] if bias else None, "none", ker._knobs())
    assert plan.meta["WS"] is True and plan.meta["HAS_BIAS"] is bool(bias)
    row = sc.check_call(ker.kernel_fn, ref, inputs, tol)
    assert row["passed"], row["why"]
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        out = ker.kernel_fn(*inputs)
    a.copy_(torch.randn_like(a))
    graph.replay()
    torch.cuda.synchronize()
    want = a.float() @ b.float() + (bias[0].float() if bias else 0)
    torch.testing.assert_close(out.float(), want, atol=tol.atol * 4, rtol=tol.rtol)
    torch.cuda.empty_cache()
