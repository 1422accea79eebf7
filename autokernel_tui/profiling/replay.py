"""Faithful capture: every aten call of one forward step, exactly as dispatched, to replay it later.

The timing trace (``capture.py``) says *where the time goes*; it cannot say *what to replay*:
torch.profiler records input shapes and a few concrete scalars of the op it happened to be
inside (``aten::layer_norm``, not its ``normalized_shape`` list; ``aten::linear``, not the
``addmm`` that ran), and a kernel's arguments never. This module runs one more forward pass
under a ``torch.utils._python_dispatch.TorchDispatchMode`` and records, per call:

* the exact aten overload (``aten.native_group_norm.default``), below autograd and below every
  CompositeImplicit decomposition, i.e. the op a kernel has to match;
* every argument: tensors as metadata (shape, stride, dtype, storage offset; integer tensors
  with their value range, boolean tensors with their true fraction), scalars, int lists
  (``normalized_shape``, ``groups``, ``dim``, ``eps``, padding, ...), dtypes and devices;
* the data flow: which call produced each tensor and which calls consumed it, so the
  chains Inductor would fuse (a root op and the pointwise/view ops that use only its
  single-consumer output, e.g. ``addmm -> mul -> leaky_relu``) come out as units.

Why a dispatch mode and not the FX graph of ``torch.compile``/``torch.export``: it is one
eager step (cheap: no compilation, seconds on a big model), it sees the overloads and
arguments that really ran on this device (the CPU and CUDA paths of SDPA differ), it works
for any model that runs eagerly (no graph breaks, no export restrictions on data-dependent
control flow or Python side effects), and it needs no GPU. What it lacks (Inductor's own
fusion decisions) the chain rule below approximates; Inductor's generated code, where a
starter needs it, is ``profiling/inductor_starter``'s job.

Only metadata is kept: no tensor data, so the record is small JSON that travels inside the
profile (``profile["replay"]``). Ops that draw random numbers or need a generator are marked
``replayable = False`` with the reason.
"""

from __future__ import annotations

import math
from typing import Any

REPLAY_VERSION = 1

# Pointwise ops (aten packet names) that may extend a chain: one output element per input element.
POINTWISE = {
    "add", "sub", "mul", "div", "neg", "exp", "exp2", "log", "log1p", "tanh", "sigmoid", "pow", "rsqrt", "sqrt",
    "erf", "where", "masked_fill", "relu", "leaky_relu", "hardtanh", "elu", "selu", "celu", "gelu", "silu", "mish",
    "softplus", "hardswish", "hardsigmoid", "clamp", "clamp_min", "clamp_max", "abs", "sin", "cos", "reciprocal",
    "rsub", "minimum", "maximum", "ne", "eq", "lt", "gt", "le", "ge", "logical_not", "logical_and", "logical_or",
    "bitwise_not", "_to_copy", "sign", "floor", "ceil", "round", "trunc", "frac", "remainder", "fmod", "lerp",
    "addcmul", "addcdiv", "sgn", "square", "expm1", "log2", "log10", "logit", "threshold", "prelu", "_prelu_kernel",
    "hardshrink", "softshrink", "tanhshrink", "logsigmoid", "glu", "copy", "clone", "fill", "zeros_like",
    "ones_like", "full_like", "triu", "tril", "alias",
}
# Metadata-only ops: no kernel; they may sit inside a chain (a view between a matmul and its epilogue).
VIEWS = {
    "view", "reshape", "_reshape_alias", "_unsafe_view", "transpose", "t", "as_strided", "detach", "slice",
    "narrow", "split", "chunk", "squeeze", "unsqueeze", "permute", "select", "expand", "unbind",
    "split_with_sizes", "flatten", "unflatten", "view_as", "expand_as", "lift_fresh", "alias", "contiguous",
    "numpy_T", "mT", "movedim", "_unsafe_split",
}
# Ops whose output depends on a random draw: replaying them cannot match the model.
RANDOM = {"native_dropout", "dropout", "bernoulli", "rand", "randn", "randint", "rand_like", "randn_like",
          "randint_like", "normal", "uniform", "multinomial", "randperm", "exponential", "geometric"}
# Ops that make a tensor from nothing (constants): no kernel worth a task; replayed inside a chain.
CREATION = {"scalar_tensor", "full", "zeros", "ones", "empty", "empty_like", "empty_strided", "arange", "lift_fresh_copy",
            "new_empty", "new_zeros", "new_ones", "new_full", "_local_scalar_dense"}
MAX_EXACT_BOOL = 1 << 16  # boolean tensors up to this many elements are stored exactly (masks)


def packet(op_name: str) -> str:
    """``aten.native_layer_norm.default`` -> ``native_layer_norm``; ``aten::mm`` -> ``mm``."""
    name = op_name.replace("aten::", "aten.")
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def is_pointwise(op_name: str) -> bool:
    p = packet(op_name)
    return p in POINTWISE or (p.endswith("_") and p[:-1] in POINTWISE)


def is_view(op_name: str) -> bool:
    """Views and constant makers: no kernel of their own."""
    return packet(op_name) in VIEWS or packet(op_name) in CREATION


def _scalar(v: Any) -> Any:
    """JSON-able form of a non-tensor argument; ``None`` for what cannot be encoded."""
    import torch

    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else {"float": repr(v)}
    if isinstance(v, torch.dtype):
        return {"dtype": str(v).replace("torch.", "")}
    if isinstance(v, torch.device):
        return {"device": v.type}
    if isinstance(v, torch.layout):
        return {"layout": str(v).replace("torch.", "")}
    if isinstance(v, torch.memory_format):
        return {"memory_format": str(v).replace("torch.", "")}
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return {"unsupported": "symbolic"}
    if isinstance(v, torch.Generator):
        return {"unsupported": "generator"}
    return {"unsupported": type(v).__name__}


class Recorder:
    """Builds the record: ``tensors`` (metadata, producer, consumers) and ``ops`` (overload, args)."""

    def __init__(self) -> None:
        from torch.utils.weak import WeakIdKeyDictionary

        self.ids = WeakIdKeyDictionary()  # live tensor -> its current tensor id
        self.tensors: list[dict] = []
        self.ops: list[dict] = []

    def _meta(self, t) -> dict:
        import torch

        m = {"shape": list(t.shape), "stride": list(t.stride()), "dtype": str(t.dtype).replace("torch.", ""),
             "offset": int(t.storage_offset()), "device": t.device.type, "producer": None, "consumers": [],
             "param": isinstance(t, torch.nn.Parameter)}
        if t.numel() and not t.is_floating_point() and not t.is_complex() and t.device.type != "meta":
            if t.dtype == torch.bool:
                m["true_frac"] = float(t.float().mean())
                if t.numel() <= MAX_EXACT_BOOL:
                    m["values"] = t.flatten().int().tolist()
            else:
                m["min"], m["max"] = int(t.min()), int(t.max())
        elif t.numel() and t.is_floating_point() and t.device.type != "meta" and not m["param"]:
            neg = torch.isneginf(t)
            if bool(neg.any()):  # an additive mask: where the -inf sit matters, the rest is often 0
                m["neg_inf_frac"] = float(neg.float().mean())
                m["finite_zero"] = bool((t[~neg] == 0).all())
                if t.numel() <= MAX_EXACT_BOOL:
                    m["neg_inf"] = neg.flatten().int().tolist()
        return m

    def tensor_id(self, t, fresh: bool = False) -> int:
        tid = None if fresh else self.ids.get(t)
        if tid is None:
            tid = len(self.tensors)
            self.tensors.append(self._meta(t))
            self.ids[t] = tid
        return tid

    def encode(self, v: Any, op_index: int) -> Any:
        import torch

        if isinstance(v, torch.Tensor):
            tid = self.tensor_id(v)
            self.tensors[tid]["consumers"].append(op_index)
            return {"tensor": tid}
        if isinstance(v, (list, tuple)):
            return [self.encode(x, op_index) for x in v]
        return _scalar(v)

    def record(self, func, args, kwargs, out) -> None:
        import torch

        i = len(self.ops)
        name = str(func.name()) if hasattr(func, "name") else str(func)  # "aten::mm" (schema name)
        overload = f"{func.namespace}.{func.__name__}" if hasattr(func, "namespace") else str(func)
        entry = {"op": overload, "args": self.encode(list(args), i),
                 "kwargs": {k: self.encode(v, i) for k, v in kwargs.items()}, "outputs": []}
        why = None
        if packet(overload) in RANDOM or packet(overload).rstrip("_") in RANDOM:
            why = f"{name} draws random numbers: a replay cannot match the model's output"
        if "unsupported" in repr(entry["args"]) + repr(entry["kwargs"]):
            why = why or f"{name} takes an argument that cannot be recorded (generator or symbolic size)"
        mutated = name.endswith("_") or func._schema.is_mutable if hasattr(func, "_schema") else False
        outs = out if isinstance(out, (tuple, list)) else (out,)
        from_param = is_view(overload) and any(self.tensors[t]["param"] for t in op_inputs(entry))
        for o in outs:
            if isinstance(o, torch.Tensor):
                # An in-place op's output is its input object: it gets a new id (a new value).
                tid = self.tensor_id(o, fresh=self.ids.get(o) is not None)
                self.tensors[tid]["producer"] = i
                self.tensors[tid]["param"] = self.tensors[tid]["param"] or from_param  # a view of a weight
                entry["outputs"].append(tid)
            else:
                entry["outputs"].append(None)
        entry["replayable"] = why is None
        if why:
            entry["why"] = why
        entry["mutates"] = bool(mutated)
        self.ops.append(entry)


def record_forward(model, inputs: tuple, known: tuple = ()) -> dict:
    """Run ``model(*inputs)`` once under no_grad in a dispatch mode; the replay record (JSON-able).
    ``known``: tensors whose ids the record lists as ``known`` (None for one no op read)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    rec = Recorder()

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            try:
                rec.record(func, args, kwargs, out)
            except Exception as exc:  # never break the model's step: say so in the record
                rec.ops.append({"op": str(func), "args": [], "kwargs": {}, "outputs": [], "replayable": False,
                                "why": f"could not record: {type(exc).__name__}: {exc}"[:200], "mutates": False})
            return out

    with torch.no_grad(), Mode():
        out = model(*inputs)
    finals = [rec.ids.get(o) for o in (out if isinstance(out, (tuple, list)) else (out,))
              if isinstance(o, torch.Tensor)]
    return {"version": REPLAY_VERSION, "tensors": rec.tensors, "ops": rec.ops,
            "model_outputs": [f for f in finals if f is not None], "units": build_units(rec.tensors, rec.ops),
            **({"known": [rec.ids.get(t) if isinstance(t, torch.Tensor) else None for t in known]} if known else {})}


def tensor_args(v: Any) -> list[int]:
    """Tensor ids in a recorded argument (nested lists too), each time it appears."""
    if isinstance(v, dict):
        return [v["tensor"]] if "tensor" in v else []
    if isinstance(v, list):
        return [t for x in v for t in tensor_args(x)]
    return []


def op_inputs(op: dict) -> list[int]:
    """Tensor ids an op reads, in argument order, each once."""
    seen: list[int] = []
    for t in tensor_args(op["args"]) + tensor_args(list(op["kwargs"].values())):
        if t not in seen:
            seen.append(t)
    return seen


def build_units(tensors: list[dict], ops: list[dict]) -> list[dict]:
    """Group calls into replay units: a root op and the pointwise/view ops that read only its
    single-consumer results (the chain Inductor would fuse into one kernel or an epilogue).

    Unit: ``ops`` (call indices, in order), ``inputs`` (tensor ids read from outside, in first-use
    order), ``outputs`` (tensor ids the rest of the model (or the caller) uses), ``root`` (the first
    call's overload) and ``kind``: "compute" (a non-pointwise root), "pointwise" or "view" (views
    only: no kernel)."""
    unit_of: dict[int, int] = {}  # op index -> unit index
    units: list[dict] = []
    for i, op in enumerate(ops):
        joined = None
        if is_pointwise(op["op"]) or is_view(op["op"]):
            for t in op_inputs(op):
                p = tensors[t]["producer"]
                if p is None or p not in unit_of:
                    continue
                u = units[unit_of[p]]
                # The producer's result feeds only this op, and the unit's last op made it.
                if tensors[t]["consumers"] == [i] and u["ops"][-1] == p and op.get("replayable", True):
                    joined = unit_of[p]
                    break
        if joined is None:
            units.append({"ops": [i]})
            joined = len(units) - 1
        else:
            units[joined]["ops"].append(i)
        unit_of[i] = joined
    out = []
    for u in units:
        members = set(u["ops"])
        made = {t for i in u["ops"] for t in ops[i]["outputs"] if t is not None}
        inputs: list[int] = []
        for i in u["ops"]:
            for t in op_inputs(ops[i]):
                if t not in made and t not in inputs:
                    inputs.append(t)
        outputs = [t for i in u["ops"] for t in ops[i]["outputs"]
                   if t is not None and any(c not in members for c in tensors[t]["consumers"])]
        last = ops[u["ops"][-1]]["outputs"]
        if not outputs and last and last[0] is not None:
            outputs = [last[0]]
        ops_names = [ops[i]["op"] for i in u["ops"]]
        kinds = ["view" if is_view(n) else "pointwise" if is_pointwise(n) else "compute" for n in ops_names]
        kind = "compute" if kinds[0] == "compute" else "pointwise" if "pointwise" in kinds else "view"
        why = next((ops[i]["why"] for i in u["ops"] if not ops[i].get("replayable", True)), None)
        out.append({"ops": u["ops"], "inputs": inputs, "outputs": outputs, "root": ops_names[0], "kind": kind,
                    "replayable": why is None, **({"why": why} if why else {})})
    return out


def record_bundle(bundle) -> dict:
    """The replay record of one forward step of a model bundle (``zoo.ModelBundle``)."""
    return record_forward(bundle.model, bundle.inputs)
