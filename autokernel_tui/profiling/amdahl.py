"""Amdahl ranking: what would speeding up each op family buy end to end?

For each family: its share ``p`` of device time, its headroom ``s`` = current time /
roofline floor at the model's own shapes (the floor is max(bytes / bandwidth,
flops / peak) per op call), and the end-to-end speedup if it reached that floor,
``1 / ((1 - p) + p / s)``. Families are ranked by that gain, not by raw time: a
family at 40% of the time already at its roofline buys nothing. In a training step a forward
family is ranked by the gain of itself and its ``_backward`` together (``with_backward``): one
fused kernel, or a forward and backward starter pair, replaces both.
"""

from __future__ import annotations

import math

from autokernel_tui.profiling.classify import MATMUL_FAMILIES, starter_task

BYTES = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "int64": 8, "int32": 4,
         "bool": 1}

# A nominal CPU so the arithmetic runs on a laptop; its floors mean nothing.
CPU_PEAKS = (20e9, {"bfloat16": 200e9, "float16": 200e9, "float32": 200e9}, "nominal CPU (not meaningful)")
UNKNOWN_GPU = (3.0e12, {"bfloat16": 700e12, "float16": 700e12, "float32": 50e12}, "unknown GPU: assumed rates")


def device_peaks(device: str) -> tuple[float, dict, str]:
    """(bytes/s, {dtype: FLOP/s}, where the numbers come from) for a device name.

    The harness's roofline table: its measured ceilings for this GPU when a bench run
    cached them, else the datasheet.
    """
    if device.upper().startswith("CPU"):
        return CPU_PEAKS
    from autokernel_tui.harness import roofline

    measured = None
    try:
        import torch

        measured = roofline.load_measured(device, torch.__version__)
    except ImportError:  # pragma: no cover - torch is always there when profiling
        pass
    ceil = roofline.ceilings_for(device, measured)
    if not ceil.bandwidth_gbps:
        return UNKNOWN_GPU
    flops = {k: v * 1e12 for k, v in ceil.tflops.items()}
    return ceil.bandwidth_gbps * 1e9, flops, f"harness roofline: {ceil.device} ({ceil.source})"


def amdahl(p: float, s: float) -> float:
    """End-to-end speedup when a fraction ``p`` of the time gets ``s`` times faster."""
    if s <= 0 or not math.isfinite(s):
        return 1.0 / (1.0 - p) if p < 1 else math.inf
    return 1.0 / ((1.0 - p) + p / s)


def _numel(shape) -> int:
    n = 1
    for d in shape or []:
        n *= int(d)
    return n


def op_cost(row: dict) -> tuple[float, float]:
    """(FLOPs, fewest bytes moved) of one call of an op row, from its dims or input shapes."""
    size = BYTES.get(row.get("dtype", ""), 2)
    d, fam = row.get("dims") or {}, row["family"]
    if fam in MATMUL_FAMILIES and {"M", "N", "K"} <= d.keys():
        m, n, k = d["M"], d["N"], d["K"]
        return 2.0 * m * n * k, float((m * k + k * n + m * n) * size)
    if fam in ("flash_attention", "attention_bidirectional") and {"B", "H", "KVH", "S", "D"} <= d.keys():
        b, h, kvh, s, dd = d["B"], d["H"], d["KVH"], d["S"], d["D"]
        causal = 0.5 if fam == "flash_attention" else 1.0
        return 4.0 * b * h * s * s * dd * causal, float((2 * b * h * s * dd + 2 * b * kvh * s * dd) * size)
    if fam == "rotary" and {"B", "S", "H", "D"} <= d.keys():
        n = d["B"] * d["S"] * d["H"] * d["D"]
        return 3.0 * n, float(2 * n * size + d["S"] * d["D"] * 4)
    if fam == "cross_entropy" and {"M", "V"} <= d.keys():
        return 4.0 * d["M"] * d["V"], float(d["M"] * d["V"] * size + d["M"] * 8)
    if {"M", "N"} <= d.keys():
        mn = d["M"] * d["N"]
        reads = 2 if fam == "swiglu" else 1
        return 5.0 * mn, float((reads + 1) * mn * size)
    if fam == "overhead":  # views and allocations: no bytes move
        return 0.0, 0.0
    shapes = [s for s in row.get("shapes") or [] if isinstance(s, (list, tuple)) and s]
    if fam == "embedding" and row.get("op") == "aten::embedding" and len(shapes) >= 2:
        rows = _numel(shapes[1])  # gathers one table row per index, writes it once
        return 0.0, float(2 * rows * shapes[0][-1] * size)
    # Unknown layout: read every input once and write something as large as the largest.
    if fam in MATMUL_FAMILIES and len(shapes) >= 2:
        a, b = shapes[-2], shapes[-1]
        if len(a) == 3 and len(b) == 3:  # bmm / baddbmm
            bb, m, k, n = a[0], a[1], a[2], b[2]
            return 2.0 * bb * m * n * k, float(bb * (m * k + k * n + m * n) * size)
    elems = [_numel(s) for s in shapes]
    return 0.0, float((sum(elems) + (max(elems) if elems else 0)) * size)


def floor_us(row: dict, peaks: tuple[float, dict, str]) -> float:
    bw, flops, _ = peaks
    f, b = op_cost(row)
    peak = flops.get(row.get("dtype", ""), flops.get("float32"))
    return max(f / peak if peak else 0.0, b / bw) * 1e6


def rank(profile: dict) -> dict:
    """Add ``families`` (ranked by end-to-end gain) and ``roofline`` to a captured profile."""
    peaks = device_peaks(profile["device"])
    total = profile["total_us"]
    fams: dict[str, dict] = {}
    for row in profile["ops"]:
        row["floor_us"] = floor_us(row, peaks) * row["calls"]
        f = fams.setdefault(row["family"], {"family": row["family"], "task": starter_task(row["family"]),
                                            "time_us": 0.0, "floor_us": 0.0, "calls": 0.0, "kernels": {},
                                            "shapes": []})
        f["time_us"] += row["time_us"]
        f["floor_us"] += row["floor_us"]
        f["calls"] += row["calls"]
        for name, k in row["kernels"].items():
            f["kernels"][name] = f["kernels"].get(name, 0.0) + k["time_us"]
        if row.get("dims"):
            f["shapes"].append({"dims": row["dims"], "dtype": row.get("dtype", ""), "time_us": row["time_us"],
                                "op": row["op"]})
    out = []
    for f in fams.values():
        p = f["time_us"] / total if total else 0.0
        s = max(1.0, f["time_us"] / f["floor_us"]) if f["floor_us"] > 0 else 1.0
        f.update(share=p, headroom=s, gain=amdahl(p, s), floor_known=f["floor_us"] > 0)
        f["kernels"] = [{"name": n, "time_us": t} for n, t in sorted(f["kernels"].items(), key=lambda kv: -kv[1])]
        f["shapes"] = _merge_shapes(f["shapes"])
        out.append(f)
    _with_backward(out)
    out.sort(key=lambda f: (-f.get("with_backward", f)["gain"], -f["time_us"]))
    for i, f in enumerate(out, 1):
        f["rank"] = i
    profile["families"] = out
    profile["roofline"] = {"bandwidth_Bps": peaks[0], "flops": peaks[1], "source": peaks[2]}
    return profile


def _with_backward(families: list[dict]) -> None:
    """A training step's forward family and its ``<family>_backward`` counted together, as one fused
    forward+backward kernel (or the pair of starters) would replace both: ``with_backward`` on the
    forward's row (share, time, floor, headroom and the gain if both reached their floors), which
    ranks it. The backward keeps its own row too."""
    by_name = {f["family"]: f for f in families}
    for f in families:
        b = by_name.get(f"{f['family']}_backward")
        if b is None or f["family"].endswith("_backward"):
            continue
        p, t, floor = f["share"] + b["share"], f["time_us"] + b["time_us"], f["floor_us"] + b["floor_us"]
        s = max(1.0, t / floor) if floor > 0 else 1.0
        f["with_backward"] = {"share": p, "time_us": t, "floor_us": floor, "headroom": s, "gain": amdahl(p, s)}


def _merge_shapes(shapes: list[dict]) -> list[dict]:
    merged: dict[tuple, dict] = {}
    for s in shapes:
        key = (tuple(sorted(s["dims"].items(), key=str)), s["dtype"])
        m = merged.setdefault(key, {"dims": s["dims"], "dtype": s["dtype"], "time_us": 0.0, "op": s["op"]})
        m["time_us"] += s["time_us"]
    return sorted(merged.values(), key=lambda s: -s["time_us"])


def _fmt_us(us: float) -> str:
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.1f} us"


def format_table(profile: dict, limit: int = 20) -> str:
    """The ranked table the CLI prints; every family is there, ``other`` included."""
    kind = "GPU kernel time" if profile["time_kind"] == "cuda" else "CPU self time of aten ops (not GPU time)"
    a = profile["model_args"]
    size = f"batch {a.get('batch')} x seq {a.get('seq')}" if a.get("batch") else "its example inputs"
    lines = [
        f"{profile['model']} on {profile['device']}: {a.get('dtype')}, {size}, "
        f"{'training step' if a.get('train') else 'inference'}",
        f"counted: {kind}, {_fmt_us(profile['total_us'])} per step over {profile['steps']} steps "
        f"(wall {_fmt_us(profile['wall_us'])}); floors from {profile['roofline']['source']}",
    ]
    if not profile.get("timing_meaningful", True):
        lines.append("CPU run: shares are CPU op times and floors are nominal; rank GPU models on a GPU.")
    header = f"{'#':>2}  {'family':<26}{'task':<16}{'share':>7}{'time':>11}{'floor':>11}{'headroom':>9}{'if at floor':>12}"
    lines += ["", header, "-" * len(header)]
    fams = profile["families"]
    for f in fams[:limit]:
        head = f"{f['headroom']:.1f}x" if f["floor_known"] else "?"
        lines.append(f"{f['rank']:>2}  {f['family']:<26}{(f['task'] or '-'):<16}{100 * f['share']:>6.1f}%"
                     f"{_fmt_us(f['time_us']):>11}{_fmt_us(f['floor_us']):>11}{head:>9}{f['gain']:>11.3f}x")
        both = f.get("with_backward")
        if both:
            lines.append(f"    {'+ its backward, together':<40}{100 * both['share']:>6.1f}%{_fmt_us(both['time_us']):>11}"
                         f"{_fmt_us(both['floor_us']):>11}{both['headroom']:>8.1f}x{both['gain']:>11.3f}x")
    if len(fams) > limit:
        rest = fams[limit:]
        lines.append(f"    ... {len(rest)} more families, {100 * sum(f['share'] for f in rest):.1f}% of the time")
    other = next((f for f in fams if f["family"] == "other"), None)
    if other and other["kernels"]:
        names = ", ".join(k["name"][:48] for k in other["kernels"][:5])
        lines.append(f"other ({100 * other['share']:.1f}%): {names}")
    lines.append("'if at floor' = end-to-end speedup if that family alone reached its roofline floor (Amdahl).")
    return "\n".join(lines)
