"""Amdahl ranking: by end-to-end gain at the roofline floor, not by raw time."""

import math

import pytest

from autokernel_tui.profiling.amdahl import amdahl, format_table, op_cost, rank


def test_amdahl_formula():
    assert amdahl(0.5, 2.0) == pytest.approx(1 / (0.5 + 0.25))
    assert amdahl(0.3, 1.0) == pytest.approx(1.0)
    assert amdahl(0.0, 100.0) == pytest.approx(1.0)
    assert amdahl(0.25, math.inf) == pytest.approx(1 / 0.75)
    assert amdahl(0.9, 10.0) == pytest.approx(1 / (0.1 + 0.09))


def test_costs_at_the_models_shapes():
    flops, nbytes = op_cost({"family": "matmul", "dtype": "bfloat16", "dims": {"M": 4096, "N": 4096, "K": 4096}})
    assert flops == 2 * 4096 ** 3 and nbytes == 3 * 4096 * 4096 * 2
    flops, nbytes = op_cost({"family": "flash_attention", "dtype": "bfloat16",
                             "dims": {"B": 1, "H": 32, "KVH": 8, "S": 4096, "D": 128}})
    assert flops == 4 * 32 * 4096 * 4096 * 128 * 0.5  # causal: half the scores
    assert nbytes == (2 * 32 + 2 * 8) * 4096 * 128 * 2  # q, out at 32 heads; k, v at 8
    _, nbytes = op_cost({"family": "swiglu", "dtype": "bfloat16", "dims": {"M": 10, "N": 100}})
    assert nbytes == 3 * 10 * 100 * 2
    assert op_cost({"family": "overhead", "dtype": "float32", "shapes": [[1000, 1000]]}) == (0.0, 0.0)


def _profile():
    def row(family, time_us, dims):
        return {"family": family, "op": "x", "shapes": [], "dtype": "bfloat16", "dims": dims, "backward": False,
                "calls": 1.0, "time_us": time_us, "kernels": {f"{family}_kernel": {"time_us": time_us, "count": 1}}}

    ops = [row("matmul", 150.0, {"M": 4096, "N": 4096, "K": 4096}),  # floor 139 us at 989 TFLOP/s: near it
           row("gelu", 60.0, {"M": 4096, "N": 4096, "approximate": "tanh"}),  # floor 14 us at 4.8 TB/s
           row("other", 10.0, {})]
    return {"model": "synthetic", "device": "NVIDIA H200", "time_kind": "cuda", "timing_meaningful": True,
            "steps": 1, "total_us": 220.0, "wall_us": 230.0, "ops": ops, "kernels": [],
            "model_args": {"batch": 1, "seq": 4096, "dtype": "bfloat16", "train": False}}


def test_ranking_is_by_gain_not_time():
    p = rank(_profile())
    fams = {f["family"]: f for f in p["families"]}
    assert [f["family"] for f in p["families"]][:2] == ["gelu", "matmul"]
    assert fams["matmul"]["time_us"] > fams["gelu"]["time_us"]
    assert fams["matmul"]["headroom"] == pytest.approx(150.0 / (2 * 4096 ** 3 / 989e12 * 1e6), rel=1e-6)
    g = fams["gelu"]
    assert g["share"] == pytest.approx(60 / 220)
    assert g["gain"] == pytest.approx(amdahl(60 / 220, 60.0 / g["floor_us"]))
    assert fams["other"]["gain"] == 1.0 and fams["other"]["floor_known"] is False  # unknown work: no promise
    assert [f["rank"] for f in p["families"]] == [1, 2, 3]


def test_table_shows_every_family_including_other():
    text = format_table(rank(_profile()))
    assert "gelu" in text and "matmul" in text and "other" in text and "other_kernel" in text
    assert "GPU kernel time" in text and "harness roofline" in text


def test_a_training_steps_forward_is_ranked_with_its_backward():
    """Issue 20: a forward family and its _backward count together (a fused forward+backward kernel, or
    the two starters, replaces both): a small forward with a big backward outranks a mid-sized op."""
    prof = _profile()
    ops = prof["ops"]
    mid = dict(ops[1], family="softmax", time_us=30.0, kernels={"softmax_kernel": {"time_us": 30.0, "count": 1}})
    small = dict(ops[1], family="cross_entropy", time_us=20.0, dims={"M": 4096, "V": 4096},
                 kernels={"ce_kernel": {"time_us": 20.0, "count": 1}})
    back = dict(small, family="cross_entropy_backward", time_us=25.0, dims={"M": 4096, "N": 4096},
                kernels={"ce_bwd_kernel": {"time_us": 25.0, "count": 1}})
    prof["ops"] = ops + [mid, small, back]
    prof["total_us"] += 75.0
    fams = {f["family"]: f for f in rank(prof)["families"]}
    ce, both = fams["cross_entropy"], fams["cross_entropy"]["with_backward"]
    assert both["share"] == pytest.approx((20 + 25) / prof["total_us"])
    assert both["floor_us"] == pytest.approx(ce["floor_us"] + fams["cross_entropy_backward"]["floor_us"])
    assert both["gain"] == pytest.approx(amdahl(both["share"], 45.0 / both["floor_us"]))
    assert ce["gain"] < fams["softmax"]["gain"] < both["gain"]
    assert ce["rank"] < fams["softmax"]["rank"]  # ranked by the pair's gain
    assert "with_backward" not in fams["softmax"] and "with_backward" not in fams["cross_entropy_backward"]
    assert "+ its backward, together" in format_table(rank(prof))
