"""A GPU-shaped trace through capture and the Amdahl ranking, as torch 2.11 records it.

The kernel names and per-call times are trimmed from a real H200 run of the LLaMA-style
model (54becbf:benchmarks/results/h200-run1/profile-llama-infer.json, in git history). That run showed two
faults this file pins down: torch 2.11's events carry no ``linked_correlation_id``, so no
kernel found its launching op (no shapes, every roofline floor 0, every gain 1.000x); and
the GPU-timeline copies of our ``record_function`` labels were counted as kernels (twice
the time, and a wrapper's label charged the matmuls inside it to its family).
"""

import pytest
from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent

from autokernel_tui.profiling.amdahl import format_table, rank
from autokernel_tui.profiling.capture import aggregate, collect

BF16 = "c10::BFloat16"
NVJET_QKVO = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"
NVJET_MLP = "nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_TNN"
NVJET_HEAD = "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_TNT"
CUDNN_SDPA = ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_"
              "cga1x1x1_kernel0_0")
SILU = ("void at::native::vectorized_elementwise_kernel<8, at::native::(anonymous namespace)::silu_kernel("
        "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#6}::operator()() const::"
        "{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >")
MUL_BF16 = ("void at::native::vectorized_elementwise_kernel<8, at::native::BinaryFunctor<c10::BFloat16, "
            "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >")
MUL_F32 = ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::"
           "BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >")
LAYER_NORM = ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, true>"
              "(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, "
              "c10::BFloat16*)")
ADD_BF16 = ("void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>, "
            "std::array<char*, 3ul> >")
REPEAT = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
          "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}>")

SWIGLU = "autokernel::swiglu[M=4096,N=11008]"
RMSNORM = "autokernel::rmsnorm[M=4096,N=4096]"
ATTN = "autokernel::flash_attention[B=1,H=32,KVH=8,S=4096,D=128]"
ROTARY = "autokernel::rotary[B=1,S=4096,H=32,D=128]"

# (ops from the outermost label/op down to the launching op as (name, input shapes),
#  [(kernel, us per call)]) for one layer's worth of the LLaMA-7B-dims forward, bf16, S=4096.
TRACE = [
    ([(RMSNORM, []), ("aten::rms_norm", [[1, 4096, 4096], [], [4096], []]),
      ("aten::_fused_rms_norm", [[1, 4096, 4096], [], [4096], []])], [(LAYER_NORM, 21.3)]),
    ([("aten::linear", [[1, 4096, 4096], [4096, 4096]]), ("aten::mm", [[4096, 4096], [4096, 4096]])],
     [(NVJET_QKVO, 176.8)]),
    ([(ROTARY, []), ("aten::mul", [[1, 4096, 32, 64], [1, 4096, 1, 64]])], [(MUL_F32, 17.6), (MUL_F32, 17.6)]),
    ([(ATTN, []), ("aten::repeat_interleave", [[1, 8, 4096, 128], []])], [(REPEAT, 43.8)]),
    ([(ATTN, []), ("aten::scaled_dot_product_attention", [[1, 32, 4096, 128]] * 3),
      ("aten::_scaled_dot_product_cudnn_attention", [[1, 32, 4096, 128]] * 3)], [(CUDNN_SDPA, 259.2)]),
    ([("aten::add", [[1, 4096, 4096], [1, 4096, 4096], []])], [(ADD_BF16, 22.8)]),
    ([("aten::linear", [[1, 4096, 4096], [11008, 4096]]), ("aten::mm", [[4096, 4096], [4096, 11008]])],
     [(NVJET_MLP, 478.5)]),
    ([(SWIGLU, []), ("aten::silu", [[1, 4096, 11008]])], [(SILU, 46.6)]),
    ([(SWIGLU, []), ("aten::mul", [[1, 4096, 11008], [1, 4096, 11008]])], [(MUL_BF16, 63.3)]),
    ([("aten::linear", [[1, 4096, 4096], [32000, 4096]]), ("aten::mm", [[4096, 4096], [4096, 32000]])],
     [(NVJET_HEAD, 1365.7)]),
]
KERNEL_US = sum(us for _, kernels in TRACE for _, us in kernels)


def _trace_events():
    """torch 2.11-style events: kernels name no launching op; each op lists its kernels
    (name, duration), and every label also appears on the GPU timeline over its kernels."""
    events, ids, t, gpu_t = [], iter(range(1, 10_000)), 0.0, 10_000.0
    open_labels: dict[str, FunctionEvent] = {}
    for ops, kernels in TRACE:
        parent = None
        for depth, (name, shapes) in enumerate(ops):
            if depth == 0 and name in open_labels:  # consecutive entries share one label range
                parent = open_labels[name]
                continue
            e = FunctionEvent(id=next(ids), name=name, thread=1, start_us=t, end_us=t + 50,
                              input_shapes=shapes, concrete_inputs=[])
            t += 1
            if parent is not None:
                e.set_cpu_parent(parent)
                parent.append_cpu_child(e)
            events.append(e)
            parent = e
            if depth == 0 and name.startswith("autokernel::"):
                open_labels = {name: e}
        if not ops[0][0].startswith("autokernel::"):
            open_labels = {}
        start = gpu_t
        for kname, us in kernels:
            events.append(FunctionEvent(id=next(ids), name=kname, thread=7, start_us=gpu_t, end_us=gpu_t + us,
                                        device_type=DeviceType.CUDA))
            parent.append_kernel(kname, 0, us)
            gpu_t += us
        if ops[0][0].startswith("autokernel::"):  # the label's GPU-timeline copy spans its kernels
            events.append(FunctionEvent(id=next(ids), name=ops[0][0], thread=7, start_us=start, end_us=gpu_t,
                                        device_type=DeviceType.CUDA, is_user_annotation=True))
        t += 60
    return events


@pytest.fixture(scope="module")
def ranked():
    ops = aggregate(collect(_trace_events(), "cuda", "bfloat16"), steps=1)
    total = sum(r["time_us"] for r in ops)
    profile = {"model": "llama", "model_args": {"batch": 1, "seq": 4096, "dtype": "bfloat16", "train": False},
               "device": "NVIDIA H200", "time_kind": "cuda", "timing_meaningful": True, "steps": 1,
               "total_us": total, "wall_us": total, "ops": ops}
    return rank(profile)


def test_kernels_reach_their_ops_without_linked_ids_and_labels_are_not_kernels(ranked):
    assert ranked["total_us"] == pytest.approx(KERNEL_US)  # each kernel once, no label ranges
    fams = {f["family"]: f for f in ranked["families"]}
    assert fams["swiglu"]["time_us"] == pytest.approx(46.6 + 63.3)  # silu and the product, nothing else
    assert fams["rmsnorm"]["time_us"] == pytest.approx(21.3) and "layernorm" not in fams
    assert fams["flash_attention"]["time_us"] == pytest.approx(259.2 + 43.8)
    assert fams["matmul"]["time_us"] == pytest.approx(176.8 + 478.5 + 1365.7)
    assert fams["elementwise"]["time_us"] == pytest.approx(22.8)
    mm = {tuple(sorted(s["dims"].items())) for s in fams["matmul"]["shapes"]}
    assert mm == {(("K", 4096), ("M", 4096), ("N", n)) for n in (4096, 11008, 32000)}
    assert fams["swiglu"]["shapes"][0]["dims"] == {"M": 4096, "N": 11008}
    assert all(not k["name"].startswith("autokernel::") for f in ranked["families"] for k in f["kernels"])


def test_gpu_floors_are_real_and_the_ranking_is_by_gain(ranked):
    fams = ranked["families"]
    assert ranked["roofline"]["source"].startswith("harness roofline")
    for f in fams:
        assert f["floor_known"] and 0 < f["floor_us"] <= f["time_us"], f["family"]
        assert f["gain"] > 1.0, f["family"]
    gains = [f["gain"] for f in fams]
    assert gains == sorted(gains, reverse=True)
    by = {f["family"]: f for f in fams}
    # The rmsnorm floor at the model's shape: read and write 4096 x 4096 bf16 once.
    bw = ranked["roofline"]["bandwidth_Bps"]
    assert by["rmsnorm"]["floor_us"] == pytest.approx((2 * 4096 * 4096 * 2 + 4096 * 2) / bw * 1e6, rel=0.05)
    # Ranked by gain, not time: the residual adds take longer than rmsnorm but sit at their floor.
    assert by["elementwise"]["time_us"] > by["rmsnorm"]["time_us"]
    assert by["rmsnorm"]["rank"] < by["elementwise"]["rank"]
    table = format_table(ranked)
    assert " ?" not in table and "1.000x" not in table
