"""Counting right: each unit of work once, attributed to its family with the model's shapes."""

import pytest
import torch
from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import ProfilerActivity, profile

from autokernel_tui.profiling.amdahl import rank
from autokernel_tui.profiling.capture import aggregate, collect, profile_bundle
from autokernel_tui.profiling.zoo import load_model


@pytest.fixture(scope="module")
def llama_train_profile():
    bundle = load_model("llama-tiny", dtype="float32", device="cpu", train=True)
    return rank(profile_bundle(bundle, steps=1, warmup=1))


def test_shares_sum_to_the_whole(llama_train_profile):
    p = llama_train_profile
    assert p["time_kind"] == "cpu" and p["timing_meaningful"] is False
    assert sum(f["share"] for f in p["families"]) == pytest.approx(1.0, abs=1e-9)
    assert sum(f["time_us"] for f in p["families"]) == pytest.approx(p["total_us"], rel=1e-9)
    assert p["total_us"] <= p["wall_us"] * 1.05  # self times cannot exceed the step's wall time


def test_families_and_dims_of_the_llama_block(llama_train_profile):
    fams = {f["family"]: f for f in llama_train_profile["families"]}
    for family in ("matmul", "rmsnorm", "swiglu", "rotary", "flash_attention", "cross_entropy"):
        assert family in fams, family
    assert {"dims": {"M": 32, "N": 64}, "dtype": "float32"}.items() <= fams["rmsnorm"]["shapes"][0].items()
    assert fams["swiglu"]["shapes"][0]["dims"] == {"M": 32, "N": 96}
    assert {s["dims"]["H"] for s in fams["rotary"]["shapes"]} == {4, 2}  # q heads and grouped kv heads
    assert fams["flash_attention"]["shapes"][0]["dims"] == {"B": 2, "H": 4, "KVH": 2, "S": 16, "D": 16}
    assert fams["cross_entropy"]["shapes"][0]["dims"] == {"M": 32, "V": 97}
    mm = {tuple(sorted(s["dims"].items())) for s in fams["matmul"]["shapes"]}
    assert (("K", 64), ("M", 32), ("N", 96)) in mm  # gate/up projection: x[32,64] @ W^T[64,96]
    assert "rmsnorm_backward" in fams or "elementwise" in fams  # backward work is counted, never dropped
    assert any(f.endswith("_backward") for f in fams)


def test_no_double_counting_against_the_profilers_own_self_time():
    bundle = load_model("gpt2-tiny", dtype="float32", device="cpu", train=False)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        bundle.step()
    events = prof.events()
    # Positive self times: under load the profiler's clock can put a child past its parent,
    # leaving the parent a negative self time, which counts no work.
    self_total = sum(max(0.0, e.self_cpu_time_total) for e in events if e.name.startswith("aten::"))
    inclusive_total = sum(e.cpu_time_total for e in events if e.name.startswith("aten::"))
    counted = sum(r["time_us"] for r in aggregate(collect(events, "cpu", "float32"), steps=1))
    assert counted == pytest.approx(self_total, rel=1e-9)
    assert counted < 0.8 * inclusive_total  # summing aten rows would count nested ops twice


def _evt(i, name, start, end, device=DeviceType.CPU, linked=0, shapes=None, dtypes=None):
    return FunctionEvent(id=i, name=name, thread=1, start_us=start, end_us=end, device_type=device,
                         linked_correlation_id=linked, input_shapes=shapes or [], input_dtypes=dtypes or [],
                         concrete_inputs=[])


def _nest(parent, child):
    child.set_cpu_parent(parent)
    parent.append_cpu_child(child)


def test_cuda_kernels_counted_once_with_their_launching_op():
    """A synthetic GPU trace in torch's own event classes: the aten rows span long CPU times,
    only the kernels count, each attributed through the correlation id to its op."""
    linear = _evt(1, "aten::linear", 0, 100, shapes=[[8, 64], [96, 64], [96]], dtypes=["c10::BFloat16"] * 3)
    addmm = _evt(2, "aten::addmm", 10, 90, shapes=[[96], [8, 64], [64, 96], [], []], dtypes=["c10::BFloat16"] * 3)
    launch = _evt(3, "cudaLaunchKernel", 20, 30, linked=2)
    _nest(linear, addmm)
    _nest(addmm, launch)
    gemm = _evt(4, "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", 200, 212.5, DeviceType.CUDA, linked=2)
    ln = _evt(5, "aten::layer_norm", 110, 150, shapes=[[8, 96], [], [96], [96], []], dtypes=["c10::BFloat16"] * 4)
    nln = _evt(6, "aten::native_layer_norm", 112, 148, shapes=[[8, 96], [], [96], [96], []])
    _nest(ln, nln)
    k1 = _evt(7, "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>",
              213, 216, DeviceType.CUDA, linked=6)
    k2 = _evt(8, "Memset (Device)", 216, 217, DeviceType.CUDA, linked=6)
    stray = _evt(9, "void some_vendor::mystery_kernel<int>(int)", 220, 222, DeviceType.CUDA, linked=0)
    # A record_function range's copy on the GPU timeline: spans kernels, is not one.
    annotation = FunctionEvent(id=10, name="autokernel::matmul", thread=7, start_us=199, end_us=213,
                               device_type=DeviceType.CUDA, is_user_annotation=True)
    rows = aggregate(collect([linear, addmm, launch, gemm, ln, nln, k1, k2, stray, annotation], "cuda", "bfloat16"),
                     steps=1)
    by_family = {r["family"]: r for r in rows}
    assert sum(r["time_us"] for r in rows) == pytest.approx(12.5 + 3 + 1 + 2)  # kernels only, once each
    mm = by_family["matmul"]
    assert mm["time_us"] == pytest.approx(12.5) and mm["op"] == "aten::linear"
    # A linear with a bias is not the (bias-less) matmul starter: no starter dims (issue 19).
    assert mm["dims"] == {} and mm["dtype"] == "bfloat16"
    norm = by_family["layernorm"]  # both kernels of one layer_norm call: one op call, 4 us
    assert norm["time_us"] == pytest.approx(4.0) and norm["calls"] == 1 and norm["dims"] == {"M": 8, "N": 96}
    assert by_family["other"]["time_us"] == pytest.approx(2.0)


def test_dtypes_recovered_from_kineto_events_when_torch_leaves_them_off():
    """torch 2.11 (the GPU box) has no FunctionEvent.input_dtypes: they come from the kineto events."""
    from autokernel_tui.profiling.capture import attach_dtypes

    x = torch.randn(8, 16)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        torch.nn.functional.layer_norm(x.bfloat16(), (16,))
    events = prof.events()
    want = {e.id: e.input_dtypes for e in events}
    for e in events:
        e.input_dtypes = None
    assert attach_dtypes(prof, events) > 0
    ln = next(e for e in events if e.name == "aten::layer_norm")
    assert ln.input_dtypes == want[ln.id] and ln.input_dtypes[0] == "c10::BFloat16"
    row = next(r for r in aggregate(collect(events, "cpu", "float32"), steps=1) if r["family"] == "layernorm")
    assert row["dtype"] == "bfloat16"  # not the float32 fallback
