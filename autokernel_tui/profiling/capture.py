"""Run a model under torch.profiler and count each piece of device work exactly once.

On a GPU only device kernels (and memcpy/memset) are counted, each kernel event once; a
kernel is attributed to the CPU op that launched it (the profiler's correlation id) and,
through that op's ancestry, to the op family and the "anchor" op whose input shapes
give the task dimensions. Aten rows are never summed (that double counts).

On the CPU there are no kernels: each aten op's *self* CPU time (its children excluded)
is the unit instead, labelled ``time_kind = "cpu"`` — a stand-in so the whole path
works on a laptop, not a measurement of anything a GPU would do.

Output: a profile dict (see docs/ARCHITECTURE.md, "Profile dict"); ``amdahl.rank`` adds
the ranked families.
"""

from __future__ import annotations

import functools
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

from autokernel_tui.profiling import classify as cls

PROFILE_VERSION = 1
TORCH_DTYPES = {"float": "float32", "c10::BFloat16": "bfloat16", "c10::Half": "float16", "double": "float64",
                "long int": "int64", "int": "int32", "bool": "bool", "c10::Float8_e4m3fn": "float8_e4m3fn"}


@dataclass
class OpCall:
    """One op call: the kernels (or CPU self time) of one anchor op instance."""

    family: str
    op: str  # the anchor op's name (an aten op, an autograd node or a label)
    shapes: list  # the anchor's input shapes
    dtype: str  # the anchor's floating-point dtype
    dims: dict  # starter-task dimensions when the family has them, else {}
    kernels: dict = field(default_factory=dict)  # kernel name -> [time_us, count]
    backward: bool = False


def _chain(evt) -> list:
    """The event and its ancestors, outermost first."""
    out = []
    while evt is not None:
        out.append(evt)
        evt = evt.cpu_parent
    return out[::-1]


@functools.lru_cache(maxsize=None)
def _is_causal_at(op: str) -> int | None:
    """Where an SDPA call (the public op, or a backend's forward or backward) takes is_causal, from its schema."""
    if op == "aten::scaled_dot_product_attention":
        return 5
    if not op.startswith("aten::_scaled_dot_product_"):
        return None
    import torch

    try:
        schema = getattr(torch.ops.aten, op.removeprefix("aten::")).default._schema
    except (AttributeError, RuntimeError):
        return None
    return next((i for i, a in enumerate(schema.arguments) if a.name == "is_causal" and not a.kwarg_only), None)


def _causal(chain) -> bool | None:
    """Whether the attention in ``chain`` is causal (None: not recorded). A backward's chain holds only the
    backend's backward call, which takes is_causal too: a bidirectional attention's backward is not the
    causal starter's (a ViT's trained on it would be the wrong op)."""
    for e in chain:
        at = _is_causal_at(e.name)
        if at is None:
            continue
        vals = list(getattr(e, "concrete_inputs", None) or [])
        if len(vals) > at and isinstance(vals[at], bool):
            return vals[at]
    return None


def _prod(xs) -> int:
    n = 1
    for x in xs:
        n *= int(x)
    return n


def dims_for(family: str, op: str, shapes: list, concrete: list | None = None) -> dict:
    """Starter-task dimensions from an aten op's input shapes (labels carry their own)."""
    s = [list(x) if isinstance(x, (list, tuple)) else [] for x in shapes]

    def rows_cols(x):
        return {"M": _prod(x[:-1]), "N": x[-1]} if len(x) >= 2 else {}

    if family in cls.MATMUL_FAMILIES:
        if op in ("aten::mm", "aten::matmul") and len(s) >= 2 and len(s[0]) >= 2 and len(s[1]) == 2:
            return {"M": _prod(s[0][:-1]), "N": s[1][1], "K": s[0][-1]}
        # addmm and a linear with a bias add the bias: the matmul starter has none, so these get no
        # starter dims (they become generated tasks that keep the bias).
        if op == "aten::linear" and len(s) >= 2 and len(s[0]) >= 2 and len(s[1]) == 2 and not (len(s) > 2 and s[2]):
            return {"M": _prod(s[0][:-1]), "N": s[1][0], "K": s[0][-1]}
        return {}
    if family in ("flash_attention", "attention_bidirectional") and len(s) >= 2 and len(s[0]) == 4 and len(s[1]) == 4:
        b, h, sq, d = s[0]
        return {"B": b, "H": h, "KVH": s[1][1], "S": sq, "D": d}
    if family == "layernorm" and s and s[0]:
        # Rows of the product of the normalized dims: normalized_shape is the weight's shape (the
        # profiler records no int lists). Without a weight the starter (affine) does not fit.
        ns = s[2] if op in ("aten::layer_norm", "aten::native_layer_norm") and len(s) > 3 and s[2] and s[3] else None
        if not ns or len(ns) > len(s[0]) or list(s[0][len(s[0]) - len(ns):]) != list(ns):
            return {}
        n = _prod(ns)
        return {"M": _prod(s[0]) // n, "N": n} if len(s[0]) > len(ns) else {}
    if family in ("rmsnorm", "softmax", "swiglu") and s and s[0]:
        return rows_cols(s[0])
    if family == "gelu" and s and s[0]:
        # torch records no string arguments: the variant is unknown here, "none" is F.gelu's default.
        return {**rows_cols(s[0]), "approximate": "none"}
    if family == "cross_entropy" and s and len(s[0]) == 2:
        return {"M": s[0][0], "V": s[0][1]}
    return {}


FLOAT_DTYPES = ("bfloat16", "float16", "float32", "float64", "float8_e4m3fn")


def _dtype_names(evt) -> list:
    return [TORCH_DTYPES.get(d, d) for d in (getattr(evt, "input_dtypes", None) or [])]


def _subtree(evt):
    stack = [evt]
    while stack:
        e = stack.pop(0)
        yield e
        stack[:0] = list(e.cpu_children)


def _float_dtype(evt, default: str) -> str:
    """The first floating-point input dtype in the op or the ops it ran."""
    for e in _subtree(evt):
        for d in _dtype_names(e):
            if d in FLOAT_DTYPES:
                return d
    return default


def _anchor(chain, anchor_idx):
    """The op whose inputs describe the work: the deciding op, or for an autograd node the
    innermost op of the same family below it (the aten::mm inside MmBackward0)."""
    if anchor_idx is None:
        return chain[-1] if chain else None
    e = chain[anchor_idx]
    if e.name.startswith("autograd::"):
        fam = cls.op_family(e.name)
        for inner in reversed(chain[anchor_idx + 1:]):
            f = cls.op_family(inner.name)
            if f == fam or (f and fam and fam.startswith(f)):
                return inner
    return e


def _anchor_info(anchor, family, default_dtype):
    """(op name, input shapes, dtype, dims) of an anchor op."""
    if anchor is None:
        return "", [], default_dtype, {}
    dtype = _float_dtype(anchor, default_dtype)
    label = cls.parse_label(anchor.name)
    if label:
        # The label names its dims; the shapes come from the first op inside it.
        inner = anchor.cpu_children[0] if anchor.cpu_children else None
        return anchor.name, list(inner.input_shapes or []) if inner is not None else [], dtype, label[1]
    shapes = list(anchor.input_shapes or [])
    dims = dims_for(family, anchor.name, shapes, list(getattr(anchor, "concrete_inputs", None) or []))
    return anchor.name, shapes, dtype, dims


def _is_annotation(e, cpu_names: set) -> bool:
    """A GPU-timeline copy of a ``record_function`` range (kineto's gpu_user_annotation).

    It spans the kernels launched inside the range, so counting it would count them twice
    (and, for a wrapper around matmuls, charge the matmuls to the wrapper's family)."""
    return bool(getattr(e, "is_user_annotation", False)) or e.name in cpu_names


def _launchers(events, cpu_events) -> Callable:
    """kernel event -> the CPU op that launched it, or None.

    torch >= 2.12 records the launching op's id on the kernel (``linked_correlation_id``);
    older torch (2.11 on the GPU box) only lists each op's kernels as (name, duration) in
    ``op.kernels``, so those are matched back (to the nanosecond), each entry used once."""
    by_id = {}
    by_kernel: dict[tuple, list] = defaultdict(list)
    for e in cpu_events:
        if getattr(e, "linked_correlation_id", 0) == 0:
            by_id.setdefault(e.id, e)
        if not getattr(e, "is_async", False):
            for k in getattr(e, "kernels", None) or []:
                by_kernel[(k.name, round(k.duration, 3))].append(e)

    def launcher(k):
        op = by_id.get(getattr(k, "linked_correlation_id", 0) or None)
        if op is not None:
            return op
        owners = by_kernel.get((k.name, round(k.time_range.end - k.time_range.start, 3)))
        return owners.pop(0) if owners else None

    return launcher


def collect(events, time_kind: str, default_dtype: str, named: dict[str, str] | None = None) -> list[OpCall]:
    """Group device kernels (cuda) or aten self times (cpu) into op calls. ``named``: {kernel name:
    family} of kernels known by name (verify's generated kernels), whatever launched them."""
    calls: dict[Any, OpCall] = {}
    if time_kind == "cuda":
        from torch.autograd import DeviceType

        events = list(events)
        cpu_events = [e for e in events if e.device_type == DeviceType.CPU]
        cpu_names = {e.name for e in cpu_events}
        launcher = _launchers(events, cpu_events)
        units = []
        for e in events:
            if e.device_type != DeviceType.CUDA or _is_annotation(e, cpu_names):
                continue
            op = launcher(e)
            units.append((e.name, e.time_range.elapsed_us(), _chain(op) if op is not None else []))
    else:
        units = [(e.name, e.self_cpu_time_total, _chain(e)) for e in events
                 if e.name.startswith("aten::") and e.self_cpu_time_total > 0]
    for name, time_us, chain in units:
        names = [c.name for c in chain]
        family, anchor_idx = cls.classify_detail(name, names, _causal(chain), named)
        anchor = _anchor(chain, anchor_idx)
        key = (id(anchor) if anchor is not None else ("kernel", name, len(calls)), family)
        call = calls.get(key)
        if call is None:
            op, shapes, dtype, dims = _anchor_info(anchor, family, default_dtype)
            call = calls[key] = OpCall(family, op, shapes, dtype, dims, backward=cls.is_backward(names))
        k = call.kernels.setdefault(name, [0.0, 0])
        k[0] += float(time_us)
        k[1] += 1
    return list(calls.values())


def aggregate(calls: list[OpCall], steps: int) -> list[dict]:
    """Merge identical op calls (same family, op, shapes, dtypes) into per-step rows."""
    rows: dict[tuple, dict] = {}
    for c in calls:
        key = (c.family, c.op, repr(c.shapes), c.dtype, repr(sorted(c.dims.items(), key=str)))
        row = rows.get(key)
        if row is None:
            row = rows[key] = {"family": c.family, "op": c.op, "shapes": c.shapes, "dtype": c.dtype,
                               "dims": c.dims, "backward": c.backward, "calls": 0.0, "time_us": 0.0, "kernels": {}}
        row["calls"] += 1 / steps
        for name, (t, n) in c.kernels.items():
            row["time_us"] += t / steps
            kr = row["kernels"].setdefault(name, {"time_us": 0.0, "count": 0.0})
            kr["time_us"] += t / steps
            kr["count"] += n / steps
    return sorted(rows.values(), key=lambda r: -r["time_us"])


def kernel_table(ops: list[dict]) -> list[dict]:
    """Per kernel name: total time per step and the families it was counted in."""
    table: dict[str, dict] = {}
    for row in ops:
        for name, k in row["kernels"].items():
            t = table.setdefault(name, {"name": name, "time_us": 0.0, "count": 0.0, "families": []})
            t["time_us"] += k["time_us"]
            t["count"] += k["count"]
            if row["family"] not in t["families"]:
                t["families"].append(row["family"])
    return sorted(table.values(), key=lambda t: -t["time_us"])


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def device_name(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return "CPU"


def profile_bundle(bundle, steps: int | None = None, warmup: int = 2, on_step=None,
                   named: dict[str, str] | None = None) -> dict:
    """Profile ``steps`` steps of a model bundle (after ``warmup``) into a profile dict (unranked).

    ``on_step(stage, done, total, seconds)``, for progress: called before the warm-up and after each
    step ("warm-up" or "profiled steps", ``seconds`` that step's wall time), then once with
    "reading the trace" (``seconds`` None)."""
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile

    tick = on_step or (lambda stage, done, total, seconds: None)
    on_gpu = bundle.device.startswith("cuda")
    steps = steps or (5 if on_gpu else 2)
    tick("warm-up", 0, warmup, None)
    for i in range(warmup):
        t0 = time.perf_counter()
        bundle.step()
        _zero_grads(bundle.model)
        _sync(bundle.device)
        tick("warm-up", i + 1, warmup, time.perf_counter() - t0)
    _sync(bundle.device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    wall = []
    with profile(activities=activities, record_shapes=True) as prof:
        for i in range(steps):
            t0 = time.perf_counter()
            bundle.step()
            _zero_grads(bundle.model)
            _sync(bundle.device)
            wall.append((time.perf_counter() - t0) * 1e6)
            tick("profiled steps", i + 1, steps, wall[-1] / 1e6)
    tick("reading the trace", None, None, None)
    time_kind = "cuda" if on_gpu else "cpu"
    events = prof.events()
    attach_dtypes(prof, events)
    calls = collect(events, time_kind, bundle.dtype, named)
    ops = aggregate(calls, steps)
    total = sum(r["time_us"] for r in ops)
    if total <= 0:
        from autokernel_tui.profiling.zoo import ModelError

        raise ModelError("the profiler recorded no device time: did the model run any op?")
    try:  # what to replay, beside the timing (profiling/replay.py): one more forward pass
        from autokernel_tui.profiling.replay import record_bundle

        replay = record_bundle(bundle)
    except Exception as exc:  # the timing profile stands without it; extraction says why tasks are missing
        replay = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    return {
        "replay": replay,
        "version": PROFILE_VERSION,
        "model": bundle.name,
        "model_args": {"batch": bundle.batch, "seq": bundle.seq, "dtype": bundle.dtype, "train": bundle.train,
                       **({"layers": bundle.meta["layers"]} if "layers" in bundle.meta else {})},
        "device": device_name(bundle.device),
        "time_kind": time_kind,
        "timing_meaningful": on_gpu,
        "steps": steps,
        "total_us": total,
        "wall_us": statistics.median(wall),
        "ops": ops,
        "kernels": kernel_table(ops),
    }


def attach_dtypes(prof, events) -> int:
    """Give ops their input dtypes where torch (< 2.12) keeps them on the kineto events only.

    Returns how many events got them; without this every op falls back to the model's dtype."""
    from torch.autograd import DeviceType

    missing = [e for e in events if e.device_type == DeviceType.CPU and getattr(e, "input_dtypes", None) is None]
    if not missing:
        return 0
    try:
        table = {(k.correlation_id(), k.name()): list(k.dtypes()) for k in prof.profiler.kineto_results.events()
                 if k.device_type() == DeviceType.CPU}
    except (AttributeError, RuntimeError):  # an older or newer profiler shape: keep the fallback
        return 0
    n = 0
    for e in missing:
        dtypes = table.get((e.id, e.name))
        if dtypes:
            e.input_dtypes = dtypes
            n += 1
    return n


def _zero_grads(model) -> None:
    for p in model.parameters():
        p.grad = None
