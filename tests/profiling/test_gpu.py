"""On a GPU (python -m pytest -m gpu tests/profiling): real kernels, real names, counted once."""

import pytest
import torch

pytestmark = pytest.mark.gpu


def test_gpt2_profile_on_the_gpu_counts_kernels_once_and_leaves_little_in_other():
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from autokernel_tui.profiling.amdahl import rank
    from autokernel_tui.profiling.capture import aggregate, collect, profile_bundle
    from autokernel_tui.profiling.zoo import load_model

    bundle = load_model("gpt2", batch=2, seq=256, dtype="bfloat16", device="cuda", train=True, layers=2)
    prof = rank(profile_bundle(bundle, steps=2))
    assert prof["time_kind"] == "cuda" and prof["timing_meaningful"]
    assert sum(f["share"] for f in prof["families"]) == pytest.approx(1.0)
    fams = {f["family"]: f for f in prof["families"]}
    assert {"matmul", "layernorm", "gelu", "flash_attention", "cross_entropy"} <= set(fams)
    assert fams.get("other", {"share": 0})["share"] < 0.05, fams.get("other")
    assert fams["layernorm"]["shapes"][0]["dims"] == {"M": 512, "N": 768}
    # Every kernel reached its launching op (torch 2.11 has no linked_correlation_id), so
    # every starter family has shapes and a roofline floor.
    for f in fams.values():
        if f["task"]:
            assert f["floor_known"] and 0 < f["floor_us"] <= f["time_us"], f
    assert not any(k["name"].startswith("autokernel::") for k in prof["kernels"])  # label ranges are not kernels
    # Independent count: every device event's duration, summed once.
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as p:
        bundle.step()
        torch.cuda.synchronize()
    events = p.events()
    cpu_names = {e.name for e in events if e.device_type == DeviceType.CPU}
    device_total = sum(e.time_range.elapsed_us() for e in events if e.device_type == DeviceType.CUDA
                       and e.name not in cpu_names and not getattr(e, "is_user_annotation", False))
    counted = sum(r["time_us"] for r in aggregate(collect(events, "cuda", "bfloat16"), steps=1))
    assert counted == pytest.approx(device_total, rel=1e-9)


def test_verify_rmsnorm_swiglu_in_llama_on_the_gpu():
    from autokernel_tui.profiling.verify import kernel_paths, verify
    from autokernel_tui.tasks.spec import starters_dir

    r = verify("llama", kernel_paths(starters_dir(), ["rmsnorm", "swiglu", "rotary", "flash_attention"]),
               batch=1, seq=1024, dtype="bfloat16", device="cuda", layers=1, iters=10)
    assert r["correct"], r
    fam = {f["family"]: f for f in r["families"]}
    for name in ("rmsnorm", "swiglu", "rotary", "flash_attention"):
        assert fam[name]["after_us"] > 0, f"no {name} kernel time seen after patching: {fam[name]}"
    assert r["measured_speedup"] > 0 and r["predicted_speedup"] > 0
    # Per-family times are kernels only: a label range around the projections once made
    # swiglu look 9x slower than torch's silu * up.
    assert fam["swiglu"]["kernel_speedup"] > 0.5, fam["swiglu"]
