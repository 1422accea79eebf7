"""Generated tasks: any recorded op or chain (``profiling/replay.py``) as a harness task folder.

A generated task replays what the model ran, not an approximation of it:

* ``reference.py`` embeds the unit as JSON (``UNIT``: the aten overloads in order, every argument,
  the tensor metadata) and calls each ``torch.ops.aten.<op>.<overload>`` with the recorded
  arguments; ``reference(*inputs)`` takes the unit's outside tensors in first-use order and
  returns the tensors the rest of the model used. Non-tensor arguments (eps, groups, dims, ...)
  are constants of the task, baked in, not inputs: the model's call is one fixed problem.
* ``make_inputs`` builds each tensor with the recorded shape, strides and dtype (floating
  tensors in the task's dtype when they were in the model's), with realistic values: weights
  scaled by 1/sqrt(fan-in), 1-D parameters positive around 0.5-1, activations N(0,1), integer
  tensors uniform in the recorded [min, max] (embedding indices stay below the table's rows),
  boolean masks and additive -inf masks exactly as recorded (small) or at the recorded density.
* ``flops``/``bytes_moved``: bytes = every outside input once + every output once (the fusion
  floor); FLOPs by op class (``op_flops``): 2*M*N*K (+M*N with a bias) for matmuls, 2*out*Cin/g*kernel
  for convolutions, 4*B*H*Sq*Sk*D for attention, 8 per element for norms, 5 for softmax, 1 per
  output element for pointwise/gather ops. Estimates, said so in the description.
* tolerances per dtype from its rounding unit and the chain's depth (``tolerances``).
* ``forbidden_ops``: every aten op of the unit (views excepted).
* ``kernel.py``: the starter comes from ``profiling/inductor_starter`` (Inductor's Triton for the
  chain). When that module is not installed the file says so and raises: there is no
  hand-written generic kernel here, and a placeholder that pretended to be one would be a lie.

``shapes``: one, ``CALL = 1``: the recorded call at the model's shapes (CPU tests use it too: the
models profiled on a CPU are small). Nothing here imports torch at module level.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Callable

from autokernel_tui.profiling import classify as cls
from autokernel_tui.profiling.replay import is_pointwise, is_view, packet, tensor_args

GENERATED_MARK = "generated"  # task.toml: generated = true
ITEMSIZE = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2, "int64": 8, "int32": 4, "int16": 2,
            "int8": 1, "uint8": 1, "bool": 1}
EPS = {"float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}
EXTRA_FAMILY = {
    **dict.fromkeys(["native_group_norm", "group_norm"], "group_norm"),
    **dict.fromkeys(["convolution", "_convolution", "conv1d", "conv2d", "conv3d", "mkldnn_convolution",
                     "cudnn_convolution", "convolution_overrideable", "conv_transpose2d", "_slow_conv2d_forward",
                     "slow_conv3d_forward"], "conv"),
    **dict.fromkeys(["native_batch_norm", "_native_batch_norm_legit_no_training", "_native_batch_norm_legit",
                     "batch_norm", "cudnn_batch_norm", "instance_norm"], "batch_norm"),
    **dict.fromkeys(["max_pool2d_with_indices", "avg_pool2d", "adaptive_avg_pool2d", "_adaptive_avg_pool2d",
                     "max_pool2d", "max_pool3d_with_indices", "avg_pool3d"], "pooling"),
}


def op_family(overload: str) -> str:
    """Family of one recorded overload, in the profile's vocabulary (``classify``)."""
    p = packet(overload)
    if p in EXTRA_FAMILY:
        return EXTRA_FAMILY[p]
    fam = cls.op_family(f"aten::{p}") or cls.op_family(f"aten::{p.rstrip('_')}")
    if fam == "attention":
        return "attention"
    if fam:
        return fam
    if is_pointwise(overload):
        return "elementwise"
    if is_view(overload):
        return "overhead"
    return cls.OTHER


def unit_family(record: dict, unit: dict) -> str:
    """A unit's family: its first op with a kernel (a view-rooted chain is pointwise)."""
    for i in unit["ops"]:
        name = record["ops"][i]["op"]
        if not is_view(name):
            fam = op_family(name)
            if fam == "attention":
                return "flash_attention" if _causal(record["ops"][i]) else "attention_bidirectional"
            return fam
    return "overhead"


def _causal(op: dict) -> bool:
    args, kw = op["args"], op["kwargs"]
    if "is_causal" in kw:
        return bool(kw["is_causal"])
    return len(args) > 5 and args[5] is True if packet(op["op"]) == "scaled_dot_product_attention" else \
        len(args) > 4 and args[4] is True


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _shape(record: dict, arg) -> list:
    return record["tensors"][arg["tensor"]]["shape"] if isinstance(arg, dict) and "tensor" in arg else []


def op_flops(record: dict, op: dict) -> float:
    """FLOPs of one recorded call, by op class (an estimate; see the module docstring)."""
    p, a = packet(op["op"]), op["args"]
    outs = [record["tensors"][t]["shape"] for t in op["outputs"] if t is not None]
    out_n = _numel(outs[0]) if outs else 0
    if p in ("mm", "addmm", "matmul"):
        x, w = (_shape(record, a[1]), _shape(record, a[2])) if p == "addmm" else (_shape(record, a[0]),
                                                                                  _shape(record, a[1]))
        k = x[-1] if x else 0
        return 2.0 * out_n * k + (out_n if p == "addmm" else 0)
    if p in ("bmm", "baddbmm"):
        x = _shape(record, a[1] if p == "baddbmm" else a[0])
        return 2.0 * out_n * (x[-1] if x else 0)
    if op_family(op["op"]) == "conv":
        w = _shape(record, a[1])
        groups = a[8] if len(a) > 8 and isinstance(a[8], int) else 1
        return 2.0 * out_n * (_numel(w[1:]) if w else 1) * (1 if groups else 1)
    if op_family(op["op"]) == "attention":
        q, k = _shape(record, a[0]), _shape(record, a[1])
        if len(q) >= 2 and len(k) >= 2:
            return 4.0 * _numel(q[:-1]) * k[-2] * q[-1]
    if op_family(op["op"]) in ("layernorm", "rmsnorm", "group_norm", "batch_norm"):
        return 8.0 * out_n
    if op_family(op["op"]) in ("softmax", "cross_entropy"):
        return 5.0 * out_n
    if op_family(op["op"]) == "reduction":
        ins = [_shape(record, x) for x in a if isinstance(x, dict)]
        return float(_numel(ins[0])) if ins else float(out_n)
    return 0.0 if is_view(op["op"]) else float(out_n)


def unit_cost(record: dict, unit: dict, dtype: str) -> tuple[float, float]:
    """(FLOPs, fewest bytes: outside inputs once + outputs once) of one unit."""
    t = record["tensors"]

    def nbytes(tid):
        m = t[tid]
        size = ITEMSIZE.get(m["dtype"], 4)
        if m["dtype"] in ("float32", "float16", "bfloat16") and m["dtype"] == record.get("dtype", m["dtype"]):
            size = ITEMSIZE[dtype]
        return _numel(m["shape"]) * size
    # A broadcast input (stride 0) is read once per distinct element.
    b = sum(nbytes(i) // max(1, _numel([s for s, st in zip(t[i]["shape"], t[i]["stride"]) if st == 0 and s > 1]))
            for i in unit["inputs"]) + sum(nbytes(o) for o in unit["outputs"])
    f = sum(op_flops(record, record["ops"][i]) for i in unit["ops"])
    return f, float(b)


def reduction_depth(record: dict, unit: dict) -> int:
    """The longest sum inside the unit (K of a matmul, Cin*kh*kw of a conv, a norm's row)."""
    depth = 1
    for i in unit["ops"]:
        op = record["ops"][i]
        a, fam = op["args"], op_family(op["op"])
        if fam in ("matmul", "conv") and len(a) >= 2:
            w = _shape(record, a[1]) if fam == "conv" else _shape(record, a[-2] if packet(op["op"]) in (
                "addmm", "baddbmm") else a[0])
            depth = max(depth, _numel(w[1:]) if fam == "conv" else (w[-1] if w else 1))
        elif fam in ("attention", "attention_bidirectional", "flash_attention"):
            q, k = _shape(record, a[0]), _shape(record, a[1])
            depth = max(depth, (q[-1] if q else 1) + (k[-2] if len(k) > 1 else 1))
        elif fam in ("layernorm", "rmsnorm", "group_norm", "batch_norm", "softmax", "reduction", "cross_entropy"):
            ins = _shape(record, a[0]) if a else []
            outs = [record["tensors"][o]["shape"] for o in op["outputs"] if o is not None]
            depth = max(depth, _numel(ins) // max(1, min((_numel(s) for s in outs), default=1)) or 1,
                        ins[-1] if ins else 1)
    return depth


def tolerances(dtype: str, depth: int, n_ops: int) -> dict:
    """atol/rtol/max_rel_l2 from the dtype's rounding unit, the longest sum and the chain length.

    Eager's error vs float64 grows as ~eps*sqrt(depth) per reduction and ~eps per rounding op; the
    limits are 16x that (atol/rtol on the worst element) and 2x (relative L2), with floors that keep
    the hand-written starters' scale (fp32 1e-4, fp16 1e-2, bf16 3e-2)."""
    eps = EPS[dtype]
    growth = math.sqrt(max(1, depth)) + n_ops
    floor = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 3e-2}[dtype]
    elem = max(floor, 16 * eps * growth)
    if dtype == "float32" and depth > 1:  # a GPU fp32 conv/matmul may run TF32 (10-bit mantissa) in eager
        elem = max(elem, 16 * 2.0 ** -10 * math.sqrt(depth) / 8)
    l2 = max(floor / 10, 2 * eps * growth) if not (dtype == "float32" and depth > 1) else max(1e-5, 2 ** -10)
    return {"atol": float(f"{elem:.3g}"), "rtol": float(f"{elem:.3g}"), "max_rel_l2": float(f"{l2:.3g}")}


def signature(record: dict, unit: dict) -> str:
    """Same ops, same arguments, same input metadata: the same task."""
    t = record["tensors"]
    ops = [(record["ops"][i]["op"], _strip(record["ops"][i]["args"]), _strip(record["ops"][i]["kwargs"]))
           for i in unit["ops"]]
    ins = [(t[i]["shape"], t[i]["stride"], t[i]["dtype"]) for i in unit["inputs"]]
    return json.dumps([ops, ins], sort_keys=True)


def _strip(v):
    """Arguments without tensor ids (they differ between identical calls)."""
    if isinstance(v, dict):
        return "T" if "tensor" in v else {k: _strip(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_strip(x) for x in v]
    return v


def unit_spec(record: dict, unit: dict, model_dtype: str) -> dict:
    """The self-contained JSON a generated reference.py replays."""
    tids = set(unit["inputs"]) | set(unit["outputs"])
    for i in unit["ops"]:
        tids |= {o for o in record["ops"][i]["outputs"] if o is not None}
    keep = ("shape", "stride", "dtype", "param", "min", "max", "true_frac", "values", "neg_inf", "neg_inf_frac",
            "finite_zero")
    return {"model_dtype": model_dtype,
            "ops": [{k: record["ops"][i][k] for k in ("op", "args", "kwargs", "outputs", "mutates")}
                    for i in unit["ops"]],
            "inputs": unit["inputs"], "outputs": unit["outputs"],
            "tensors": {str(t): {k: v for k, v in record["tensors"][t].items() if k in keep} for t in sorted(tids)}}


def _dtype_of_unit(record: dict, unit: dict, default: str) -> str:
    for t in list(unit["inputs"]) + list(unit["outputs"]):
        d = record["tensors"][t]["dtype"]
        if d in ("float32", "float16", "bfloat16", "float64"):
            return d
    return default


def task_name(family: str, record: dict, unit: dict, n: int, backward: bool = False) -> str:
    ops = [packet(record["ops"][i]["op"]).strip("_") for i in unit["ops"] if not is_view(record["ops"][i]["op"])]
    body = "_".join(dict.fromkeys(ops))[:40] or family
    return re.sub(r"[^a-z0-9_]+", "_", f"gen_{body}{'_bwd' if backward else ''}_{n}".lower())


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


REFERENCE_TEMPLATE = '''"""Generated by autokernel-tui (profiling/generate.py): replays {what} recorded from {model}.

Harness-owned. UNIT holds the recorded aten calls, their arguments and tensor metadata;
reference(*inputs) calls each overload with them; inputs are the unit's outside tensors in
first-use order. Counts: {counts}
"""

import json

import torch

UNIT = json.loads(r\'\'\'{unit_json}\'\'\')
FLOPS = {flops}
BYTES = {bytes_}  # at the model's dtype ({model_dtype}); bytes_moved scales its float tensors
FLOAT_ELEMS = {float_elems}
OTHER_BYTES = {other_bytes}
_FLOATS = ("float32", "float16", "bfloat16", "float64")


def _dtype(name, dtype):
    if name in _FLOATS and name == UNIT["model_dtype"]:
        return dtype
    return getattr(torch, name)


INPUT_OFFSET = 16  # elements: every input starts this far into its storage


def _tensor(meta, dtype, device, g):
    shape, stride = meta["shape"], meta["stride"]
    want = _dtype(meta["dtype"], dtype)
    n = 1
    for s in shape:
        n *= s
    if want == torch.bool:
        if "values" in meta:
            vals = torch.tensor(meta["values"], dtype=torch.bool).reshape(shape)
        else:
            vals = torch.rand(shape, generator=g) < meta.get("true_frac", 0.5)
    elif not want.is_floating_point:
        lo, hi = meta.get("min", 0), meta.get("max", 0)
        vals = torch.randint(lo, hi + 1, shape, generator=g, dtype=torch.int64).to(want)
    else:
        if meta.get("param") and len(shape) >= 2:
            fan = max(1, n // max(shape))
            vals = torch.randn(shape, generator=g) / fan ** 0.5
        elif meta.get("param"):
            vals = 0.5 + 0.5 * torch.rand(shape, generator=g)
        else:
            vals = torch.randn(shape, generator=g)
        if "neg_inf_frac" in meta:
            if "neg_inf" in meta:
                neg = torch.tensor(meta["neg_inf"], dtype=torch.bool).reshape(shape)
            else:
                neg = torch.rand(shape, generator=g) < meta["neg_inf_frac"]
                if neg.dim():
                    neg[..., 0] = False  # every row keeps one finite entry
            if meta.get("finite_zero"):
                vals = torch.zeros(shape)
            vals = vals.masked_fill(neg, float("-inf"))
        vals = vals.to(want)
    vals = vals.to(device)
    if n == 0:
        return vals
    if any(st == 0 and s > 1 for s, st in zip(shape, stride)):  # a broadcast input: expand a compact one
        base = [1 if st == 0 else s for s, st in zip(shape, stride)]
        return vals[tuple(slice(0, b) for b in base)].contiguous().expand(shape)
    # In the recorded layout, a little way into a buffer of its own, as a model's views are (GPT-2's q, k
    # and v are slices of one projection): a kernel that counts a view's offset from its storage's start
    # reads the wrong elements here too, not only in the model.
    span = 1 + sum((s - 1) * st for s, st in zip(shape, stride))
    try:
        out = torch.empty(INPUT_OFFSET + span, dtype=want, device=device).as_strided(shape, stride, INPUT_OFFSET)
        out.copy_(vals)
        return out
    except RuntimeError:
        return vals


def make_inputs(shape: dict, dtype: torch.dtype, device: str, seed: int) -> tuple:
    g = torch.Generator().manual_seed(seed)
    return tuple(_tensor(UNIT["tensors"][str(t)], dtype, device, g) for t in UNIT["inputs"])


def _arg(v, env, dtype, device):
    if isinstance(v, list):
        return [_arg(x, env, dtype, device) for x in v]
    if isinstance(v, dict):
        if "tensor" in v:
            return env[v["tensor"]]
        if "dtype" in v:
            return _dtype(v["dtype"], dtype)
        if "device" in v:
            return device
        if "float" in v:
            return float(v["float"])
        if "layout" in v:
            return getattr(torch, v["layout"])
        if "memory_format" in v:
            return getattr(torch, v["memory_format"])
    return v


# Ops that write into their arguments without a trailing-underscore twin, and their functional form: a
# batch norm in training updates its running statistics in place (the same outputs first, then the
# new statistics, which no one reads here).
_FUNCTIONAL = {{"native_batch_norm": "_native_batch_norm_legit_functional",
               "_native_batch_norm_legit": "_native_batch_norm_legit_functional"}}


def _fn(name, mutates):
    _, pkt, overload = name.split(".")
    if mutates and pkt.endswith("_") and hasattr(torch.ops.aten, pkt[:-1]):
        pkt = pkt[:-1]  # the functional form: a reference never writes into its inputs
    if overload == "default" and pkt in _FUNCTIONAL:
        pkt = _FUNCTIONAL[pkt]
    return getattr(getattr(torch.ops.aten, pkt), overload)


# SDPA's library calls: cuDNN's, FlashAttention's and the memory-efficient kernel have no float64 form (on
# an H100 a float64 cuDNN call gave a wrong element: run 26), so the float64 reference takes their output
# from SDPA's math, laid out as the call returned it; their other outputs (log-sum-exp, seeds) it does not make.
# So does a replay under sdpa_kernel(SDPBackend.MATH) (every library backend off): Inductor then writes the
# attention out (a starter for it, and for its backward, where the library call had none).
_ATTENTION = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
              "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention")


def _math_only():
    b = torch.backends.cuda
    return not (b.flash_sdp_enabled() or b.mem_efficient_sdp_enabled() or b.cudnn_sdp_enabled())


def _attention_math(op, args, kwargs):
    a = {{s.name: v for s, v in zip(_fn(op["op"], False)._schema.arguments, args)}}
    a.update(kwargs)
    q, k = a["query"], a["key"]
    out = torch.ops.aten._scaled_dot_product_attention_math(
        q, k, a["value"], a.get("attn_mask", a.get("attn_bias")), 0.0, bool(a.get("is_causal")),
        scale=a.get("scale"), enable_gqa=k.shape[1] != q.shape[1])[0]
    meta = UNIT["tensors"][str(op["outputs"][0])]
    return (torch.empty_strided(meta["shape"], meta["stride"], dtype=out.dtype, device=out.device).copy_(out),)


def _replay(inputs, dtype):
    env = dict(zip(UNIT["inputs"], inputs))
    device = next((t.device for t in inputs if isinstance(t, torch.Tensor)), torch.device("cpu"))
    for op in UNIT["ops"]:
        args = _arg(op["args"], env, dtype, device)
        kwargs = {{k: _arg(v, env, dtype, device) for k, v in op["kwargs"].items()}}
        if op["op"].split(".")[1] in _ATTENTION and (dtype == torch.float64 or _math_only()):
            out = _attention_math(op, args, kwargs)
        else:
            out = _fn(op["op"], op.get("mutates"))(*args, **kwargs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        for t, o in zip(op["outputs"], outs):
            if t is not None:
                env[t] = o
    res = tuple(env[t] for t in UNIT["outputs"])
    return res[0] if len(res) == 1 else res


def _float_dtype(inputs):
    return next((t.dtype for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()),
                getattr(torch, UNIT["model_dtype"]))


def reference(*inputs):
    return _replay(inputs, _float_dtype(inputs))


def reference_precise(*inputs):
    up = tuple(t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs)
    return _replay(up, torch.float64)


def flops(shape: dict) -> int:
    return max(1, int(FLOPS))


def bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    return int(FLOAT_ELEMS * (torch.finfo(dtype).bits // 8) + OTHER_BYTES)


def _layout_of(value, like):
    # value in like's own strides, gaps included, at its storage offset, broadcast dims broadcast again
    # (the recorded layout: a starter was made for it)
    wide = [i for i, (n, st) in enumerate(zip(like.shape, like.stride())) if st == 0 and n > 1]
    if wide:
        first = tuple(slice(0, 1) if i in wide else slice(None) for i in range(like.dim()))
        return _layout_of(value[first], like[first]).expand(like.shape)
    if like.numel() == 0:
        return value
    off = like.storage_offset()
    span = 1 + sum((n - 1) * st for n, st in zip(like.shape, like.stride()))
    try:
        out = torch.empty(off + span, dtype=value.dtype, device=value.device)
        return out.as_strided(like.shape, like.stride(), off).copy_(value)
    except RuntimeError:  # another overlapping layout: as computed
        return value


def _scaled(inputs, g):
    # Activations scaled by 4 (weights and integer tensors kept): tests range, not only N(0,1).
    return tuple(_layout_of(t * 4, t) if isinstance(t, torch.Tensor) and t.is_floating_point()
                 and not UNIT["tensors"][str(tid)].get("param") and "neg_inf_frac" not in UNIT["tensors"][str(tid)]
                 else t for t, tid in zip(inputs, UNIT["inputs"]))


ADVERSARIAL = {{"scaled_activations": _scaled}}
'''

# Appended to a backward task's reference.py (the harness reads backward_flops/backward_bytes_moved).
BACKWARD_COUNTS = '''

def backward_flops(shape: dict) -> int:
    # the gradient of every floating-point input: about twice the forward's work (an estimate)
    return 2 * flops(shape)


def backward_bytes_moved(shape: dict, dtype: torch.dtype) -> int:
    # the forward's inputs and the grad_outs read, a gradient per input written: about twice (an estimate)
    return 2 * bytes_moved(shape, dtype)
'''

NO_STARTER_MARK = "NO STARTER YET"  # the first words of a generated kernel.py that only raises


def has_no_starter(kernel_path) -> bool:
    """Whether a kernel.py is the placeholder ``KERNEL_MISSING`` wrote (it only raises, saying why)."""
    return no_starter_reason(kernel_path) is not None


def no_starter_reason(kernel_path) -> str | None:
    """Why a task's kernel.py is ``KERNEL_MISSING``'s placeholder (None when it is a kernel)."""
    text = Path(kernel_path).read_text(encoding="utf-8", errors="replace")
    if not text.lstrip('"\n ').startswith(NO_STARTER_MARK):
        return None
    found = re.search(r"could not make one: (.*?)\. There is no hand-written kernel", " ".join(text.split()))
    return found.group(1) if found else "no reason given"

KERNEL_MISSING = '''"""NO STARTER YET for generated task {name}.

This task's starter kernel is Inductor's Triton for the chain, written here by
autokernel_tui.profiling.inductor_starter, which could not make one: {why}. There is no hand-written kernel in this file: it raises, so the harness
reports FAIL instead of timing something that is not the op. An agent may write
kernel_fn(*inputs) from scratch (see reference.py for the exact aten calls it must match).
"""

import torch  # noqa: F401
import triton  # noqa: F401
import triton.language as tl  # noqa: F401


def kernel_fn(*inputs):
    raise NotImplementedError("generated task {name}: no starter kernel ({why})")
'''


def _starter_source(task_dir: Path) -> tuple[str | None, dict, str, str]:
    """(kernel.py text or None, its knob space, why not, what wrote it): Inductor's Triton for the task's
    reference at its recorded shape, or for a KernelBench forward the template covers, the GEMM
    template (``profiling/inductor_starter``, in a process of its own)."""
    from autokernel_tui.profiling.starter_process import for_task

    result = for_task(task_dir)
    # the reason is written into kernel.py's docstring and a string literal: keep it one plain line
    why = " ".join((result.reason or "").replace('"', "'").replace("\\", "/").split())
    return result.source, result.knobs, why, result.origin


INDUCTOR_STARTER_LINE = "starter = \"profiling/inductor_starter (Inductor's Triton for this chain)\""
TEMPLATE_STARTER_LINE = "starter = \"profiling/gemm_template (a tl.dot GEMM, its pointwise ops in its epilogue)\""


def write_kernel(dest: Path, name: str, spec: dict | None = None) -> tuple[str | None, str, str]:
    """Write the task's kernel.py: for a chain with a matmul or convolution (which Inductor leaves to
    cuBLAS/cuDNN), the GEMM template (``profiling/gemm_template``); else Inductor's Triton for its
    reference; its knobs appended to task.toml; else a file that says why there is none and raises.
    Returns (the starter or None, why not, where it came from)."""
    from autokernel_tui.profiling import gemm_template

    source, knobs, why, origin = None, {}, "", "profiling/inductor_starter"
    if spec is not None and gemm_template.applies(spec):
        try:
            source, knobs = gemm_template.template_source(spec, name)
            origin = "profiling/gemm_template"
        except gemm_template.NoTemplate as exc:
            why = f"the GEMM template: {exc}; Inductor: "
    if source is None:
        source, knobs, inductor_why, origin = _starter_source(dest)
        why = "" if source else why + inductor_why
    toml = dest / "task.toml"
    if origin == "profiling/gemm_template":
        toml.write_text(re.sub(r'^starter = "profiling/inductor_starter[^\n]*', TEMPLATE_STARTER_LINE,
                               toml.read_text(encoding="utf-8"), flags=re.M), encoding="utf-8")
    (dest / "kernel.py").write_text(source or KERNEL_MISSING.format(name=name, why=why), encoding="utf-8")
    if source and knobs:  # the tuner's search space: the template's tiles, or Inductor's blocks, warps, stages
        with toml.open("a", encoding="utf-8") as f:
            f.write("\n[knobs]    # the template's tile sizes (profiling/gemm_template)\n"
                    if origin == "profiling/gemm_template" else
                    "\n[knobs]    # Inductor's choices and their neighbours (profiling/inductor_starter)\n")
            f.writelines(f"{k} = {_toml(list(v))}\n" for k, v in knobs.items())
    return source, why, origin


# Tensor arguments autograd does not differentiate (by position), though they are floating point: a
# batch norm's running statistics ("not differentiable with respect to argument 'running_mean'").
NOT_DIFFERENTIABLE = {
    **dict.fromkeys(["native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
                     "batch_norm", "cudnn_batch_norm", "miopen_batch_norm", "instance_norm",
                     "_batch_norm_impl_index"], (3, 4)),
}


def _reads(op: dict) -> list[tuple[int, bool]]:
    """(tensor id, read at a differentiable argument) for each tensor ``op`` reads."""
    skip = NOT_DIFFERENTIABLE.get(packet(op["op"]), ())
    return ([(t, pos not in skip) for pos, arg in enumerate(op["args"]) for t in tensor_args(arg)]
            + [(t, True) for t in tensor_args(list(op.get("kwargs", {}).values()))])


def requires_grad(record: dict) -> set:
    """The recorded tensors a training step differentiates: the parameters (and views of them), and
    every floating-point result of an op that read one of those at a differentiable argument. The
    model's own inputs (token ids, images) and buffers are not among them."""
    t = record["tensors"]
    grad = {tid for tid, m in (enumerate(t) if isinstance(t, list) else t.items()) if m.get("param")}
    for op in record["ops"]:
        if any(differentiable and tid in grad for tid, differentiable in _reads(op)):
            grad |= {o for o in op["outputs"] if o is not None and t[o]["dtype"] in EPS}
    return grad


def differentiable_inputs(record: dict, unit: dict) -> list[int]:
    """The positions (in the unit's inputs) of the tensors a backward task differentiates: floating-point
    inputs the training step differentiates (``requires_grad``) that some op of the unit reads at a
    differentiable argument, masks left out (an additive -inf mask is data, not a value the model
    learns or passes a gradient through)."""
    t = record["tensors"]
    trained = requires_grad(record)
    read = {tid for i in unit["ops"] for tid, differentiable in _reads(record["ops"][i]) if differentiable}
    return [k for k, tid in enumerate(unit["inputs"]) if tid in trained and tid in read and t[tid]["dtype"] in EPS
            and "neg_inf_frac" not in t[tid]]


def write_task(dest: Path, name: str, record: dict, unit: dict, family: str, model: str, model_dtype: str,
               profile_info: dict | None = None, backward: bool = False, later: list | None = None) -> Path:
    """Write one generated task folder; returns it. Raises ValueError when the unit cannot be a task.

    ``later``: its starter (a compile in a process of its own) is not made here but appended to ``later``
    as ``(dest, job)``, for ``starter_process.make_all`` to make with the others at once.

    ``backward``: the task is the chain's backward (``kind = "backward"``): the same reference.py, whose
    forward the harness differentiates; ``kernel_fn(*inputs, *grad_outs)`` returns the gradient of each
    input the training step differentiates (``grad_inputs``: ``differentiable_inputs``), its starter
    Inductor's Triton for the traced backward."""
    dtype = _dtype_of_unit(record, unit, model_dtype)
    if dtype not in EPS:
        raise ValueError(f"dtype {dtype} is not a task dtype (float16, bfloat16, float32)")
    if not unit.get("replayable", True):
        raise ValueError(unit.get("why", "not replayable"))
    if not unit["outputs"]:
        raise ValueError("the unit produces no tensor")
    rec = dict(record, dtype=dtype)
    flops, nbytes = unit_cost(rec, unit, dtype)
    t = record["tensors"]
    float_elems = other = 0
    for tid in list(unit["inputs"]) + list(unit["outputs"]):
        m = t[tid]
        n = _numel(m["shape"])
        if m["dtype"] == dtype:
            float_elems += n
        else:
            other += n * ITEMSIZE.get(m["dtype"], 4)
    ops = [record["ops"][i]["op"] for i in unit["ops"]]
    compute = {op_family(o) for o in ops} & {"matmul", "conv", "attention"}
    depth = reduction_depth(record, unit)
    n_ops = sum(1 for o in ops if not is_view(o))
    forbidden = list(dict.fromkeys(f"aten::{packet(o).rstrip('_') if packet(o).endswith('_') else packet(o)}"
                                   for o in ops if not is_view(o)))
    what = " -> ".join(packet(o) for o in ops)
    if backward:
        grad_inputs = differentiable_inputs(record, unit)
        if not grad_inputs:
            raise ValueError("no floating-point input to differentiate")
        # a weight's or bias's gradient sums over every row of the tensors it met; twice the ops
        depth = max(depth, *(_numel(t[tid]["shape"]) // max(1, int(t[tid]["shape"][-1]))
                             for tid in list(unit["inputs"]) + list(unit["outputs"]) if t[tid]["shape"]))
        n_ops *= 2
        forbidden += [f"{f}_backward" for f in forbidden]
    tol = tolerances(dtype, depth, n_ops)
    dest.mkdir(parents=True)
    spec = unit_spec(record, unit, dtype)
    counts = ("bytes = outside inputs + outputs once each; FLOPs by op class (2MNK matmul, 2*out*Cin*k conv, "
              "4BHSSD attention, 8/elem norms, 5/elem softmax, 1/elem pointwise)")
    (dest / "reference.py").write_text(REFERENCE_TEMPLATE.format(
        what=what, model=model, counts=counts, unit_json=json.dumps(spec, separators=(",", ":")), flops=int(flops),
        bytes_=int(nbytes), model_dtype=dtype, float_elems=float_elems, other_bytes=other)
        + (BACKWARD_COUNTS if backward else ""), encoding="utf-8")
    described = (f"Backward of {what} from {model}: the gradient of each input the training step differentiates"
                 if backward else f"Replay of {what} from {model}") + ", at the recorded shapes and arguments"
    lines = [
        "# Harness-owned, generated by autokernel-tui from a recorded call (profiling/generate.py).",
        *([f"kind = {_toml('backward')}",
           f"grad_inputs = {_toml(grad_inputs)}  # the inputs the training step differentiates"] if backward else []),
        f"name = {_toml(name)}",
        f"family = {_toml(family)}",
        f"description = {_toml(described)}",
        f"bound = {_toml('compute' if compute else 'memory')}",
        f"baseline = {_toml(('autograd of the ' if backward else '') + 'recorded aten calls: ' + ', '.join(ops))}",
        f"dtypes = [{_toml(dtype)}]",
        f"forbidden_ops = {_toml(forbidden)}",
        "generated = true",
        INDUCTOR_STARTER_LINE,
        "",
        f"[tolerance.{dtype}]    # from the dtype's rounding unit, a {depth}-long sum and {n_ops} ops",
        f"atol = {tol['atol']!r}",
        f"rtol = {tol['rtol']!r}",
        f"max_rel_l2 = {tol['max_rel_l2']!r}",
        "",
        "[[shapes]]    # the recorded call: its shapes live in reference.py (UNIT)",
        f"name = {_toml(re.sub(r'[^A-Za-z0-9_-]+', '-', model).strip('-') + '-1')}",
        "CALL = 1",
        "",
        "[[test_shapes]]",
        "name = \"recorded\"",
        "CALL = 1",
    ]
    if profile_info:
        lines += ["", "[profile]"] + [f"{k} = {_toml(v)}" for k, v in profile_info.items()]
    (dest / "task.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")

    def starter() -> None:
        # a backward's starter is Inductor's for the traced backward (the GEMM template writes forward chains)
        source, why, origin = write_kernel(dest, name, None if backward else spec)
        kind = " (backward: the gradients of the inputs the training step differentiates)" if backward else ""
        (dest / "README.md").write_text(
            f"# {name} (generated)\n\nReplays `{what}` from `{model}` ({dtype}){kind}, recorded by a dispatch-mode "
            f"pass (profiling/replay.py).\n\n- reference.py: the recorded aten calls with their recorded arguments.\n"
            f"- kernel.py: {'from ' + origin if source else 'NO STARTER: ' + why + ' (it raises)'}.\n"
            f"- FLOPs {int(flops)}, bytes {int(nbytes)} (estimates: see reference.py).\n", encoding="utf-8")

    return now_or_later(dest, starter, later)


def now_or_later(dest: Path, starter: Callable[[], None], later: list | None) -> Path:
    """Make a task's starter now, or leave ``(dest, starter)`` in ``later`` for ``starter_process.make_all``."""
    if later is None:
        starter()
    else:
        later.append((dest, starter))
    return dest
