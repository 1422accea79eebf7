"""A starter for generated matmul and convolution chains that Inductor hands to a library (issue 19).

Inductor writes no Triton for ``mm``/``addmm``: it calls cuBLAS (an extern kernel), so a generated
task such as GPT-2's ``addmm -> view -> gelu -> view`` (the Linear layers: most of a transformer's
time) had no starter at all. This module writes one as straight-line code over the recorded chain:
the matmul a tiled ``tl.dot`` kernel with the bias added in its epilogue (a matrix-vector product: a
row-dot reduction split over K; a convolution, 1- to 3-D, grouped or transposed: the same as an implicit
GEMM over (channel, kernel depth, row, column)), each pointwise op a Triton elementwise kernel, views as
the same views; and average pooling, which Inductor leaves to aten for big windows, as a direct
window sum (``POOL``, used by ``inductor_starter``). The pointwise ops that follow a matmul or
convolution run in its epilogue (``epilogue_at``): on the tile in registers, one kernel where Inductor
runs the library call and a Triton kernel; the unfused lines stay beside the fused call under the
``FUSE_EPILOGUE`` knob. The tiles are untuned: their sizes are the tuner's knobs. A chain with an op
outside these sets gets no template, and says which op.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any, NamedTuple

from autokernel_tui.profiling import attention_template as attention
from autokernel_tui.profiling.replay import is_view, packet, tensor_args

MATMULS = {"aten.mm.default", "aten.addmm.default", "aten.bmm.default", "aten.baddbmm.default",
           "aten.convolution.default"}
# Pointwise ops: name -> the Triton expression over x (and, for BINARY, y), computed in float32.
UNARY = {
    "aten.relu.default": "tl.maximum(x, 0.0)",
    "aten.silu.default": "x / (1.0 + tl.exp(-x))",
    "aten.sigmoid.default": "1.0 / (1.0 + tl.exp(-x))",
    "aten.neg.default": "-x",
    "aten.tanh.default": "_tanh(x)",
    "aten.exp.default": "tl.exp(x)",
    "aten.abs.default": "tl.abs(x)",
    # softplus past 20 is x (torch's threshold), so exp never overflows where it is used
    "aten.mish.default": "x * _tanh(tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(x))))",
    "aten.hardswish.default": "x * tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) / 6.0",
    "aten.hardsigmoid.default": "tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) / 6.0",
}
BINARY = {"aten.add.Tensor": "x + y", "aten.sub.Tensor": "x - y", "aten.mul.Tensor": "x * y",
          "aten.div.Tensor": "x / y", "aten.maximum.default": "tl.maximum(x, y)",
          "aten.minimum.default": "tl.minimum(x, y)"}
POWERS = {2: "x * x", 3: "x * x * x", 0.5: "tl.sqrt(x)", 1: "x"}  # aten.pow.Tensor_Scalar's exponents
GELU = {"none": "0.5 * x * (1.0 + _erf(x * 0.7071067811865476))",
        "tanh": "0.5 * x * (1.0 + _tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))"}
# The 16-bit tile, and the fp32 one (fp32 dots need more registers per element): each task gets the
# knobs of its dtypes (``knobs_for``), so the tuner never turns a knob its kernel does not read.
KNOBS = {"BLOCK_M": [64, 128], "BLOCK_N": [64, 128, 256], "BLOCK_K": [32, 64, 128], "NUM_WARPS": [4, 8],
         "NUM_STAGES": [2, 3, 4], "GROUP_M": [1, 4, 8, 16], "USE_TMA": [0, 1]}
GEMV_KNOBS = {"GEMV_BLOCK_M": [8, 16, 32, 64], "GEMV_BLOCK_K": [128, 256, 512], "GEMV_NUM_WARPS": [2, 4, 8],
              "GEMV_PROGRAMS_PER_SM": [2, 4, 8]}
DEPTHWISE_KNOBS = {"DW_BLOCK_M": [32, 64, 128, 256], "DW_BLOCK_N": [4, 8, 16, 32, 64], "DW_NUM_WARPS": [2, 4, 8]}
POOL_KNOBS = {"POOL_BLOCK": [128, 256, 512, 1024], "POOL_NUM_WARPS": [2, 4, 8]}
FP32_KNOBS = {"FP32_BLOCK_M": [32, 64, 128], "FP32_BLOCK_N": [32, 64, 128], "FP32_BLOCK_K": [16, 32, 64],
              "FP32_NUM_WARPS": [4, 8], "FP32_NUM_STAGES": [2, 3, 4]}


def knobs_for(dtypes, gemm: bool = True, gemv: bool = False, conv: bool = False,
              depthwise: bool = False) -> dict[str, list[int]]:
    """The tile knobs a kernel for inputs of ``dtypes`` reads (GROUP_M only for a GEMM: a convolution's
    tiles go in grid order; the GEMV_* knobs only for a chain with a matrix-vector product;
    CONV_CHANNELS_LAST and CONV_SPLIT_PROGRAMS_PER_SM for a convolution, the DW_* ones for a depthwise one)."""
    out: dict[str, list[int]] = {}
    if "float32" in dtypes:
        out.update(FP32_KNOBS)
    if set(dtypes) - {"float32"} or not out:
        out.update({k: v for k, v in KNOBS.items() if k not in ("GROUP_M", "USE_TMA")})
        if gemm:  # only a 16-bit GEMM reads through TMA
            out["USE_TMA"] = KNOBS["USE_TMA"]
    if gemm:
        out["GROUP_M"] = KNOBS["GROUP_M"]
    if gemv:
        out.update(GEMV_KNOBS)
    if conv:
        out["CONV_CHANNELS_LAST"] = [0, 1]
        out["CONV_SPLIT_PROGRAMS_PER_SM"] = [0, 1, 2, 4]
    if depthwise:
        out.update(DEPTHWISE_KNOBS)
    return out


def _meta(spec: dict, tensor_id) -> dict | None:
    tensors = spec["tensors"]
    return tensors.get(tensor_id, tensors.get(str(tensor_id))) if tensor_id is not None else None


def _is_vector_product(spec: dict, op: dict) -> bool:
    """Whether ``op`` is a mm/addmm that makes one row or one column (KernelBench's matrix-vector problem)."""
    if op["op"] not in ("aten.mm.default", "aten.addmm.default"):
        return False
    return any(meta and 1 in meta["shape"][-2:] for meta in (_meta(spec, o) for o in op["outputs"]))


def _has_vector_product(spec: dict) -> bool:
    return any(_is_vector_product(spec, op) for op in spec["ops"])


def _is_depthwise(spec: dict, op: dict) -> bool:
    """Whether ``op`` is a convolution with one input channel per group (depthwise: MobileNet's, ConvNeXt's
    7x7, KernelBench's 82-86; transposed: such a convolution's input gradient), which _conv computes
    elementwise, not as a GEMM."""
    if op["op"] != "aten.convolution.default":
        return False
    weight = _meta(spec, op["args"][1].get("tensor") if isinstance(op["args"][1], dict) else None)
    if not weight or len(weight["shape"]) < 2:
        return False
    # the weight: (C_out, C_in / groups, ...), transposed (C_in, C_out / groups, ...)
    return weight["shape"][0] == int(op["args"][8]) if op["args"][6] else weight["shape"][1] == 1


def _has_depthwise(spec: dict) -> bool:
    return any(_is_depthwise(spec, op) for op in spec["ops"])


class NoTemplate(ValueError):
    """The chain has an op this template does not write."""


def _t(v: Any) -> str | None:
    return f"t{v['tensor']}" if isinstance(v, dict) and "tensor" in v else None


def _lit(v: Any) -> str:
    if isinstance(v, dict) and "float" in v:
        return repr(float(v["float"]))
    return repr(v)


def _number(v: Any) -> float:
    """A scalar argument folded into a kernel's expression (a finite number only)."""
    x = float(v["float"]) if isinstance(v, dict) and "float" in v else v
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise NoTemplate(f"the scalar {v!r} has no template")
    return float(x)


def _view(op: dict, name: str) -> str:
    """A view op as the same tensor method (the static check allows no torch.ops)."""
    a = op["args"]
    x = _t(a[0])
    p, kw = packet(name), op.get("kwargs", {})
    rest = a[1:]
    if p in ("view", "reshape", "_unsafe_view", "_reshape_alias"):
        return f"{x}.reshape({_lit(rest[0])})"
    if p in ("transpose", "permute", "unsqueeze", "expand", "select", "unbind", "split", "split_with_sizes",
             "movedim", "narrow", "flatten", "unflatten", "chunk", "squeeze", "t", "as_strided", "view_as",
             "expand_as"):
        args = [(_t(v) or _lit(v)) for v in rest] + [f"{k}={_lit(v)}" for k, v in kw.items()]
        method = "split" if p == "split_with_sizes" else p
        return f"{x}.{method}({', '.join(args)})"
    if p == "slice":
        dim, start, end, step = (list(rest) + [0, None, None, 1][len(rest):])[:4]
        lead = f"(slice(None),) * {int(dim)} + " if dim else ""
        return f"{x}[{lead}(slice({start}, {end}, {step}),)]"
    if p in ("detach", "alias", "lift_fresh"):
        return x
    if p == "contiguous":
        return f"{x}.contiguous()"
    raise NoTemplate(f"view {name} has no template")


def _out_of_place(name: str) -> str:
    """``aten.add_.Tensor`` -> ``aten.add.Tensor``: the template computes into a new tensor, as the
    reference replays an in-place op by its functional form (a later read sees the new value's id)."""
    parts = name.split(".")
    if len(parts) == 3 and parts[1].endswith("_") and not parts[1].startswith("_"):
        return f"{parts[0]}.{parts[1][:-1]}.{parts[2]}"
    return name


def _elementwise(op: dict) -> tuple[str, list[str]] | None:
    """A pointwise op as (its Triton expression over x and y, computed in float32; the chain tensors it
    reads, [x] or [x, y]); None for an op that is not one of the template's pointwise ops. In-place
    forms are their functional ones."""
    name, a, kw = _out_of_place(op["op"]), op["args"], op.get("kwargs", {})
    if name == "aten.gelu.default":
        return GELU[kw.get("approximate", "none")], [_t(a[0])]
    if name in UNARY:
        return UNARY[name], [_t(a[0])]
    if name == "aten.leaky_relu.default":
        slope = _number(a[1] if len(a) > 1 else kw.get("negative_slope", 0.01))
        return f"tl.where(x > 0, x, x * {slope!r})", [_t(a[0])]
    arg = lambda i, key, default: a[i] if len(a) > i else kw.get(key, default)  # noqa: E731
    if name == "aten.hardtanh.default":
        lo, hi = _number(arg(1, "min_val", -1.0)), _number(arg(2, "max_val", 1.0))
        return f"tl.minimum(tl.maximum(x, {lo!r}), {hi!r})", [_t(a[0])]
    if name == "aten.clamp.default":
        lo, hi, expr = arg(1, "min", None), arg(2, "max", None), "x"
        if lo is not None:
            expr = f"tl.maximum({expr}, {_number(lo)!r})"
        if hi is not None:
            expr = f"tl.minimum({expr}, {_number(hi)!r})"
        return expr, [_t(a[0])]
    if name == "aten.softplus.default":
        beta, threshold = _number(arg(1, "beta", 1.0)), _number(arg(2, "threshold", 20.0))
        return (f"tl.where(x * {beta!r} > {threshold!r}, x, tl.log(1.0 + tl.exp(x * {beta!r})) / {beta!r})",
                [_t(a[0])])
    if name == "aten.elu.default":
        alpha, scale, input_scale = (_number(arg(1, "alpha", 1.0)), _number(arg(2, "scale", 1.0)),
                                     _number(arg(3, "input_scale", 1.0)))
        return (f"tl.where(x > 0, x * {scale!r}, {alpha * scale!r} * (tl.exp(x * {input_scale!r}) - 1.0))",
                [_t(a[0])])
    if name == "aten.pow.Tensor_Scalar":
        power = _number(a[1])
        if power not in POWERS:
            raise NoTemplate(f"pow with exponent {power!r} has no template ({', '.join(map(str, POWERS))} only)")
        return POWERS[power], [_t(a[0])]
    if name in BINARY:
        if kw.get("alpha", 1) != 1 or len(a) > 2 or _t(a[0]) is None:
            raise NoTemplate(f"{name} with alpha or a scalar first operand has no template")
        if _t(a[1]) is None:  # a Python number: folded into the expression
            return BINARY[name].replace("y", repr(_number(a[1]))), [_t(a[0])]
        return BINARY[name], [_t(a[0]), _t(a[1])]
    return None


def _matmul_call(op: dict, fused: str = "") -> str:
    """A matmul or convolution op as a call of the template's wrapper; ``fused`` adds the keyword
    arguments of a fused epilogue (baddbmm's add is then the epilogue's first line)."""
    name, a, kw = op["op"], op["args"], op.get("kwargs", {})
    if name in ("aten.addmm.default", "aten.baddbmm.default") and (kw.get("beta", 1) != 1 or kw.get("alpha", 1) != 1):
        raise NoTemplate(f"{packet(name)} with beta or alpha other than 1 has no template")
    if name == "aten.mm.default":
        return f"_gemm({_t(a[0])}, {_t(a[1])}, None{fused})"
    if name == "aten.addmm.default":
        return f"_gemm({_t(a[1])}, {_t(a[2])}, {_t(a[0])}{fused})"
    if name == "aten.bmm.default":
        return f"_bmm({_t(a[0])}, {_t(a[1])}{fused})"
    if name == "aten.baddbmm.default":
        return f"_bmm({_t(a[1])}, {_t(a[2])}{fused})"
    x, w, b, stride, padding, dilation, transposed, output_padding, groups = a[:9]
    if not 1 <= len(stride) <= 3:
        raise NoTemplate(f"a {len(stride)}-D convolution has no template (1-, 2- and 3-D only)")
    return (f"_conv({_t(x)}, {_t(w)}, {_t(b)}, {tuple(stride)!r}, {tuple(padding)!r}, {tuple(dilation)!r}, "
            f"{bool(transposed)!r}, {tuple(output_padding)!r}, {int(groups)!r}{fused})")


def _lhs(op: dict) -> str:
    outs = [f"t{o}" if o is not None else "_" for o in op["outputs"]]
    many = packet(op["op"]) in ("split", "split_with_sizes", "unbind", "chunk")
    return ", ".join(outs) + ("," if len(outs) == 1 and many else "")


def _line(op: dict, pointwise: dict[tuple[str, bool], str], spec: dict) -> str:
    """One op of the chain as a line of kernel_fn; ``pointwise`` collects the elementwise kernels it needs."""
    name = op["op"]
    if attention.is_attention(name):
        try:
            return attention.attention_call(op, spec["tensors"], set(_tensor_uses(spec)))
        except attention.NoAttentionTemplate as exc:
            raise NoTemplate(str(exc)) from exc

    def kernel(expr: str, binary: bool) -> str:
        return pointwise.setdefault((expr, binary), f"_pw{len(pointwise)}")

    elementwise = _elementwise(op)
    if name == "aten.baddbmm.default":
        rhs = f"_pointwise({kernel(BINARY['aten.add.Tensor'], True)}, {_matmul_call(op)}, {_t(op['args'][0])})"
    elif name in MATMULS:
        rhs = _matmul_call(op)
    elif elementwise is not None:
        expr, operands = elementwise
        rhs = f"_pointwise({kernel(expr, len(operands) == 2)}, {', '.join(operands)})"
    elif is_view(name):
        rhs = _view(op, name)
    else:
        raise NoTemplate(f"{name} has no template (matmul, convolution, attention, "
                         f"{', '.join(sorted(POINTWISE_OPS))} and views only)")
    return f"    {_lhs(op)} = {rhs}"


# Every pointwise op the template writes (its name in the reason a chain gets no template).
POINTWISE_OPS = {p.split(".")[1] for p in list(UNARY) + list(BINARY)} | {
    "gelu", "leaky_relu", "hardtanh", "clamp", "softplus", "elu", "pow"}

# Views that keep a packed tensor's element order: a GEMM's epilogue reads through them.
ORDER_KEEPING_VIEWS = {"view", "reshape", "_unsafe_view", "_reshape_alias"}


class Epilogue(NamedTuple):
    """Ops ``start``..``end`` of a chain as one kernel: the matmul or convolution at ``start`` with the
    pointwise ops after it applied to each tile in registers before it is stored."""
    start: int
    end: int
    lines: list[str]  # statements over v (the tile, float32) and e0, e1, ... (the operands, loaded)
    operands: list[tuple[str, tuple]]  # (chain tensor, the shape it meets the running value at)
    out: str  # the chain tensor the last fused op makes
    out_shape: tuple  # ...its shape (a GEMM's (M, N) result is reshaped to it)


def _tensor_uses(spec: dict) -> Counter:
    """How many times each chain tensor is read (an op's argument, or a chain output)."""
    uses = Counter(spec["outputs"])
    for op in spec["ops"]:
        uses.update(tensor_args(op["args"]) + tensor_args(list(op.get("kwargs", {}).values())))
    return uses


def _subst(expr: str, x: str, y: str | None = None) -> str:
    return re.sub(r"\b[xy]\b", lambda m: x if m.group(0) == "x" else str(y), expr)


def epilogue_at(spec: dict, i: int, uses: dict) -> Epilogue | None:
    """The epilogue to fuse into the matmul or convolution at ``ops[i]``, or None.

    The pointwise ops that follow it are folded in while each value is read once, by the next op (not
    a chain output, not read elsewhere: else it must exist in memory), and no operand broadcasts the
    result to a bigger shape. A GEMM's result reads through views that keep its element order; a
    matrix-vector product keeps its split-K kernel and is not fused."""
    ops = spec["ops"]
    op = ops[i]
    name = op["op"]
    if name not in MATMULS or _is_vector_product(spec, op):
        return None
    shape = lambda t: tuple(_meta(spec, t)["shape"])  # noqa: E731
    running = op["outputs"][0]
    lines: list[str] = []
    operands: list[tuple[str, tuple]] = []
    end = None
    if name == "aten.baddbmm.default":  # its bias: the epilogue's first add
        operands.append((_t(op["args"][0]), shape(running)))
        lines.append("v = v + e0")
        end = i
    j = i + 1
    while j < len(ops) and uses.get(running) == 1:
        nxt = ops[j]
        reads = _t(nxt["args"][0]) if nxt["args"] else None
        if name != "aten.convolution.default" and packet(nxt["op"]) in ORDER_KEEPING_VIEWS and reads == f"t{running}":
            running, j = nxt["outputs"][0], j + 1
            continue
        try:
            elementwise = _elementwise(nxt)
        except NoTemplate:
            break
        if elementwise is None or f"t{running}" not in elementwise[1] or shape(nxt["outputs"][0]) != shape(running):
            break
        expr, names = elementwise
        args = []
        for tensor in names:
            if tensor == f"t{running}":
                args.append("v")
            else:
                operands.append((tensor, shape(running)))
                args.append(f"e{len(operands) - 1}")
        lines.append("v = " + _subst(expr, *args))
        running, end, j = nxt["outputs"][0], j, j + 1
    if end is None:
        return None
    last = ops[end]["outputs"][0]
    return Epilogue(i, end, lines, operands, f"t{last}", shape(last))


def _fused_call(spec: dict, epi: Epilogue, kernel: str) -> str:
    op = spec["ops"][epi.start]
    operands = "".join(f"({t}, {s!r})," for t, s in epi.operands)
    call = _matmul_call(op, f", kernel={kernel}, epilogue=({operands})")
    if tuple(_meta(spec, op["outputs"][0])["shape"]) != epi.out_shape:  # a GEMM's (M, N), viewed
        call += f".reshape({epi.out_shape!r})"
    return f"    {epi.out} = {call}"


POINTWISE_KERNEL = """

@triton.jit
def {name}(X, {y}OUT, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n, other=0.0).to(tl.float32)
{load_y}    tl.store(OUT + offs, ({expr}).to(OUT.dtype.element_ty), mask=offs < n)
"""


def applies(spec: dict) -> bool:
    """Whether the chain has a matmul, convolution or attention: the chains this template is for."""
    return any(op["op"] in MATMULS or attention.is_attention(op["op"]) for op in spec["ops"])


def template_source(spec: dict, name: str) -> tuple[str, dict[str, list[int]]]:
    """kernel.py for a generated task whose chain (``spec``: reference.py's UNIT) contains a matmul, and
    its knob space. Raises NoTemplate for a chain without a matmul or with an op it does not write."""
    ops = spec["ops"]
    if not applies(spec):
        raise NoTemplate("no mm/addmm/bmm/baddbmm/convolution/attention in the chain")
    dtypes = {m["dtype"] for m in spec["tensors"].values() if m["dtype"] in ("float16", "bfloat16", "float32")}
    if len(dtypes) > 1:  # type promotion between operands: the template computes in its first operand's dtype
        raise NoTemplate(f"the chain mixes {', '.join(sorted(dtypes))}")
    pointwise: dict[tuple[str, bool], str] = {}
    lines = [_line(op, pointwise, spec) for op in ops]
    body, fused = _body(spec, lines)
    kernels = "".join(POINTWISE_KERNEL.format(
        name=fn, expr=expr, y="Y, " if binary else "",
        load_y="    y = tl.load(Y + offs, mask=offs < n, other=0.0).to(tl.float32)\n" if binary else "")
        for (expr, binary), fn in pointwise.items())
    kernels += "".join(epilogue_kernel(spec, epi, k) for k, epi in enumerate(fused))
    outs = [f"t{t}" for t in spec["outputs"]]
    params = ", ".join(f"t{t}" for t in spec["inputs"])
    chain = " -> ".join(packet(op["op"]) for op in ops)
    code = "\n".join(body)
    gemm = any(op["op"] in MATMULS for op in ops)
    parts = [HEAD.format(name=name, chain=chain) if gemm else attention.HEAD.format(name=name, chain=chain)]
    if fused:
        parts.append(FUSE_KNOB)
    parts += [part for part, used in ((MATH, "_erf(" in kernels or "_tanh(" in kernels),
                                      (GEMM, "_gemm(" in code or "_bmm(" in code), (CONV, "_conv(" in code),
                                      (attention.SOURCE, "_attention(" in code),
                                      (POINTWISE, bool(pointwise))) if used]
    parts.append(TAIL.format(pointwise=kernels, params=params, body=code,
                             ret=outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ",)"))
    # the tiles the kernels read: a chain whose only library call is the attention has no GEMM tile
    knobs = knobs_for(dtypes, gemm="_gemm(" in code or "_bmm(" in code,
                      gemv="_gemm(" in code and _has_vector_product(spec), conv="_conv(" in code,
                      depthwise="_conv(" in code and _has_depthwise(spec)) if gemm else {}
    if fused:
        knobs["FUSE_EPILOGUE"] = [0, 1]
    if "_attention(" in code:
        knobs.update(attention.knobs_for(dtypes))
    return "".join(parts), knobs


def _body(spec: dict, lines: list[str]) -> tuple[list[str], list[Epilogue]]:
    """kernel_fn's lines: each matmul with an epilogue as its fused call, with the unfused lines kept
    beside it under ``FUSE_EPILOGUE = 0`` (the knob that measures what the fusion buys); the epilogues."""
    uses = _tensor_uses(spec)
    body: list[str] = []
    fused: list[Epilogue] = []
    i = 0
    while i < len(lines):
        epi = epilogue_at(spec, i, uses)
        if epi is None:
            body.append(lines[i])
            i += 1
            continue
        kernel = ("_conv_kernel" if spec["ops"][i]["op"] == "aten.convolution.default" else "_gemm_kernel") + \
            f"_e{len(fused)}"
        body += ["    if FUSE_EPILOGUE:", "    " + _fused_call(spec, epi, kernel), "    else:"]
        body += ["    " + line for line in lines[epi.start:epi.end + 1]]
        fused.append(epi)
        i = epi.end + 1
    return body, fused


FUSE_KNOB = '''# 1: each matmul's pointwise ops run in its epilogue, on the tile in registers (one kernel, no round
# trip through memory per op); 0: each op its own elementwise kernel, as the chain recorded them.
FUSE_EPILOGUE = 1


'''


TILE = '''# 16-bit inputs: a Hopper-sized tile (tl.dot lowers to wgmma on sm_90).
BLOCK_M = 128
BLOCK_N = 128
BLOCK_K = 64
NUM_WARPS = 8
NUM_STAGES = 3
GROUP_M = 8
USE_TMA = 1  # 16-bit matmuls with 16-byte-aligned rows (Hopper): A and B through TMA descriptors, not pointers
# fp32 inputs: a smaller tile, and dots at the precision torch runs the op at by default: matmuls as
# precise as fp32 (torch.backends.cuda.matmul.allow_tf32 is off): "tf32x3", three TF32 tensor-core
# products per step, about fp32's accuracy ("ieee": CUDA cores, exact products); convolutions in TF32,
# one product with 10-bit mantissas, as cuDNN runs them (torch.backends.cudnn.allow_tf32 is on). A
# model that turns TF32 off for its convolutions wants CONV_FP32_DOT = "tf32x3".
FP32_DOT = "tf32x3"
CONV_FP32_DOT = "tf32"
FP32_BLOCK_M = 64
FP32_BLOCK_N = 64
FP32_BLOCK_K = 32
FP32_NUM_WARPS = 4
FP32_NUM_STAGES = 3


WIDE_FROM = 2**31  # the element offset from which offsets are computed in 64 bits


def _wide(*tensors):
    # the farthest element a kernel reaches from a tensor's first one, for its sizes and strides
    return any(sum((n - 1) * abs(st) for n, st in zip(t.shape, t.stride())) + 1 >= WIDE_FROM for t in tensors)


def _tile(dtype):
    """(BM, BN, BK, warps, stages) for inputs of ``dtype``."""
    if dtype == torch.float32:
        return FP32_BLOCK_M, FP32_BLOCK_N, FP32_BLOCK_K, FP32_NUM_WARPS, FP32_NUM_STAGES
    return BLOCK_M, BLOCK_N, BLOCK_K, NUM_WARPS, NUM_STAGES


# device -> SM count, asked once per device (not on every call: the host's time per call counts); dict(),
# not braces: HEAD + TILE is a format string
_SMS = dict()


def _num_sms(device):
    if device not in _SMS:
        _SMS[device] = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 2
    return _SMS[device]


# Launch plans (dicts of named fields), decided once per input signature (shapes, strides, dtype, device,
# the fused kernel, the knobs): a call is a key, one dict lookup, its allocations and its launches, with no
# per-call Python heuristics on the host path a model pays for (issue 21)
_PLANS = dict()


def _epilogue_key(epilogue):
    # a fused epilogue's operands as part of a plan's key: their shapes, strides and the shapes they meet
    return tuple((e.shape, e.stride(), shape) for e, shape in epilogue)


'''
HEAD = '''"""Starter for generated task {name}: {chain}, from autokernel_tui/profiling/gemm_template.py.

Inductor calls a library (cuBLAS, cuDNN) for the matmul or convolution, so this starter is a template rather than Inductor's
Triton: the matmul is a tiled tl.dot kernel (fp32 accumulation, the bias added in its epilogue), views
the recorded views, and the pointwise ops after a matmul, where each value is read once, run in its
epilogue on the tile in float32 (FUSE_EPILOGUE = 1); the others, and all of them with FUSE_EPILOGUE = 0,
are elementwise Triton kernels. 16-bit operands whose rows start on 16-byte boundaries are read
through TMA descriptors on Hopper (USE_TMA). Knobs: the tile of the task's dtype (BLOCK_* and NUM_* for
16-bit inputs, FP32_* for float32), GROUP_M, the rows of tiles visited together so their B columns stay
in L2, USE_TMA and FUSE_EPILOGUE.
"""

import torch
import triton
import triton.language as tl

''' + TILE
# The helpers kernel.py needs, each written only when the chain uses it.
MATH = '''@triton.jit
def _erf(x):
    return tl.math.erf(x)


@triton.jit
def _tanh(x):
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x >= 0, t, -t)


'''
# The two tiled kernels, with the marks where a fused epilogue goes (``render_kernel``).
GEMM_KERNEL = '''@triton.jit
def _gemm_kernel(A, B, C, BIAS, M, N, K, sab, sam, sak, sbb, sbk, sbn, scb, scm, scn, sbias_m, sbias_n,__EPI_PARAMS__
                 HAS_BIAS: tl.constexpr, BIAS_2D: tl.constexpr, FP32: tl.constexpr, DOT: tl.constexpr,
                 WIDE: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GM: tl.constexpr,
                 TMA: tl.constexpr = False, B_T: tl.constexpr = False, WIDEN: tl.constexpr = False):
    # Tiles in groups of GM rows, column by column: a group's B columns are read from L2, not HBM.
    # TMA: A and B are tensor descriptors (Hopper's bulk copies, rows 16-byte aligned; B_T: B read through
    # its transpose, a Linear's weight), else pointers with any strides.
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    group = pid // (GM * tiles_n)
    first_m = group * GM
    rows = tl.minimum(tiles_m - first_m, GM)
    pid_m = first_m + (pid % (GM * tiles_n)) % rows
    pid_n = (pid % (GM * tiles_n)) // rows
    batch = tl.program_id(2)  # bmm: one matrix of the batch per grid plane (mm: a single plane)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    if WIDE:  # an operand of 2**31 elements or more: 32-bit offsets would wrap
        batch = batch.to(tl.int64)
        rm = rm.to(tl.int64)
        rn = rn.to(tl.int64)
        rk = rk.to(tl.int64)
    if not TMA:
        A += batch * sab
        B += batch * sbb
    C += batch * scb
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        if TMA:  # zero-filled past the edges: no masks
            a = A.load([pid_m * BM, k0])
            if B_T:
                b = B.load([pid_n * BN, k0]).T
            else:
                b = B.load([k0, pid_n * BN])
        else:
            kk = k0 + rk
            a = tl.load(A + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < M) & (kk[None, :] < K),
                        other=0.0)
            b = tl.load(B + kk[:, None] * sbk + rn[None, :] * sbn, mask=(kk[:, None] < K) & (rn[None, :] < N),
                        other=0.0)
        if FP32:  # float32 inputs: at the precision torch runs this op at (FP32_DOT)
            acc += tl.dot(a, b, input_precision=DOT)
        elif WIDEN:  # bfloat16 under the interpreter, which multiplies its tiles' raw bits: exact in float32
            acc += tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
        else:
            acc += tl.dot(a, b)
    inside = (rm[:, None] < M) & (rn[None, :] < N)
    if HAS_BIAS:
        if BIAS_2D:  # a bias of more than one row: one value per output element (stride 0 where broadcast)
            acc += tl.load(BIAS + rm[:, None] * sbias_m + rn[None, :] * sbias_n, mask=inside, other=0.0).to(tl.float32)
        else:  # one row, added to every row
            acc += tl.load(BIAS + rn * sbias_n, mask=rn < N, other=0.0).to(tl.float32)[None, :]
__EPILOGUE__    tl.store(C + rm[:, None] * scm + rn[None, :] * scn, __RESULT__.to(C.dtype.element_ty), mask=inside)


'''
CONV_KERNEL = '''@triton.jit
def _conv_kernel(X, W, BIAS, Y, M, CG, D, H, WI, OCG, OD, OH, OW, KD, KH, KW, sd, sh, sw, pd, ph, pw, dd, dh, dw,
                 sxn, sxc, sxd, sxh, sxw, swa, swb, swd, swh, sww, syn, syc, syd, syh, syw, sbias,
                 P, sps, spm, SPLITS, K_PER,__EPI_PARAMS__
                 TRANSPOSED: tl.constexpr, HAS_BIAS: tl.constexpr, FP32: tl.constexpr, DOT: tl.constexpr,
                 WIDE: tl.constexpr, BY_POSITION: tl.constexpr, SPLIT: tl.constexpr, DEPTHWISE: tl.constexpr,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # Implicit GEMM for one group (grid axis 2): rows are output points (n, od, oh, ow), columns the
    # group's output channels, K over the group's input channels and kernel positions. SPLIT: grid axis 2
    # is (group, part of K), and each part's float32 sums go to P[part, row, channel] for _conv_split_sum.
    # DEPTHWISE (one input channel per group, transposed or not): no GEMM; the columns run over every
    # output channel (OCG is their count here, CG the output channels each input channel has) and each
    # kernel position adds input x weight to the tile, elementwise.
    g = tl.program_id(2)
    part = 0
    if SPLIT:
        part = g % SPLITS
        g = g // SPLITS
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    if DEPTHWISE:
        # A tile's rows are BM consecutive points of one output row (grid axis 0: rows x blocks of a
        # row), so that in NCHW the compiler sees them contiguous and coalesces their loads and stores.
        blocks = tl.cdiv(OW, BM)
        row = tl.program_id(0) // blocks
        ow = (tl.program_id(0) % blocks) * BM + tl.arange(0, BM)
        if WIDE:  # a tensor of 2**31 elements or more: 32-bit offsets would wrap
            row = row.to(tl.int64)
            ow = ow.to(tl.int64)
            rn = rn.to(tl.int64)
        flat = tl.zeros_like(ow)  # the row's indices spread over the tile, constant along it
        oh = flat + row % OH
        od = flat + (row // OH) % OD
        n = flat + row // (OH * OD)
        rm = tl.where(ow < OW, row * OW + ow, M)  # the flat point index; M (outside) past the row's end
    else:
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        if WIDE:
            rm = rm.to(tl.int64)
            rn = rn.to(tl.int64)
            g = g.to(tl.int64)
        ow, oh, od, n = _unravel(rm, OW, OH, OD)
    oc = g * OCG + rn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    if DEPTHWISE:
        cin = rn // CG
        # the weight of each column: W[oc, 0] (W[cin, oc % CG] transposed: input channels lead)
        wcol = cin * swa + (rn % CG) * swb if TRANSPOSED else rn * swa
        for pos in range(0, KD * KH * KW):
            kw = pos % KW
            kh = (pos // KW) % KH
            kd = pos // (KW * KH)
            i_d, i_h, i_w, ok = _input_point(od, oh, ow, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw, D, H, WI,
                                             TRANSPOSED)
            a = tl.load(X + (n * sxn + i_d * sxd + i_h * sxh + i_w * sxw)[:, None] + cin[None, :] * sxc,
                        mask=(ok & (rm < M))[:, None] & (rn[None, :] < OCG), other=0.0)
            b = tl.load(W + wcol + kd * swd + kh * swh + kw * sww, mask=rn < OCG, other=0.0)
            acc += a.to(tl.float32) * b.to(tl.float32)[None, :]
    elif BY_POSITION:
        # Many channels per group: K runs over kernel positions, then a block of channels at a time, so
        # each row's input point is worked out once per position (not per K element) and the channel
        # block is one strided vector per row.
        lo = 0
        hi = KD * KH * KW
        if SPLIT:  # this program's kernel positions
            lo = part * K_PER
            hi = tl.minimum(lo + K_PER, hi)
        for pos in range(lo, hi):
            kw = pos % KW
            kh = (pos // KW) % KH
            kd = pos // (KW * KH)
            i_d, i_h, i_w, ok = _input_point(od, oh, ow, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw, D, H, WI,
                                             TRANSPOSED)
            ok = ok & (rm < M)
            xrow = X + n * sxn + i_d * sxd + i_h * sxh + i_w * sxw
            wpos = kd * swd + kh * swh + kw * sww
            for c0 in range(0, CG, BK):
                c = c0 + tl.arange(0, BK)
                if WIDE:
                    c = c.to(tl.int64)
                cin = g * CG + c
                a = tl.load(xrow[:, None] + cin[None, :] * sxc, mask=ok[:, None] & (c[None, :] < CG), other=0.0)
                if TRANSPOSED:
                    wp = W + cin[:, None] * swa + rn[None, :] * swb + wpos
                else:
                    wp = W + oc[None, :] * swa + c[:, None] * swb + wpos
                b = tl.load(wp, mask=(c[:, None] < CG) & (rn[None, :] < OCG), other=0.0)
                if FP32:
                    acc += tl.dot(a, b, input_precision=DOT)
                else:
                    acc += tl.dot(a, b)
    else:
        # Few channels per group (an image's first layer, depthwise): K runs over (channel, kd, kh, kw)
        # together so a block is not mostly padding.
        ktot = CG * KD * KH * KW
        lo = 0
        hi = ktot
        if SPLIT:  # this program's K (K_PER a multiple of BK)
            lo = part * K_PER
            hi = tl.minimum(lo + K_PER, hi)
        for k0 in range(lo, hi, BK):
            kk = k0 + tl.arange(0, BK)
            if WIDE:
                kk = kk.to(tl.int64)
            kw, kh, kd, c = _unravel(kk, KW, KH, KD)
            cin = g * CG + c
            i_d, i_h, i_w, ok = _input_point(od[:, None], oh[:, None], ow[:, None], kd[None, :], kh[None, :],
                                             kw[None, :], sd, sh, sw, pd, ph, pw, dd, dh, dw, D, H, WI, TRANSPOSED)
            if TRANSPOSED:
                wp = W + cin[:, None] * swa + rn[None, :] * swb
            else:
                wp = W + oc[None, :] * swa + c[:, None] * swb
            inside = ok & (rm[:, None] < M) & (kk[None, :] < ktot)
            a = tl.load(X + n[:, None] * sxn + cin[None, :] * sxc + i_d * sxd + i_h * sxh + i_w * sxw,
                        mask=inside, other=0.0)
            b = tl.load(wp + kd[:, None] * swd + kh[:, None] * swh + kw[:, None] * sww,
                        mask=(kk[:, None] < ktot) & (rn[None, :] < OCG), other=0.0)
            if FP32:
                acc += tl.dot(a, b, input_precision=DOT)
            else:
                acc += tl.dot(a, b)
    inside = (rm[:, None] < M) & (rn[None, :] < OCG)
    if HAS_BIAS:
        acc += tl.load(BIAS + oc * sbias, mask=rn < OCG, other=0.0).to(tl.float32)[None, :]
__EPILOGUE__    if SPLIT:
        tl.store(P + part * sps + rm[:, None] * spm + oc[None, :], acc, mask=inside)
    else:
        tl.store(Y + n[:, None] * syn + oc[None, :] * syc + od[:, None] * syd + oh[:, None] * syh + ow[:, None] * syw,
                 __RESULT__.to(Y.dtype.element_ty), mask=inside)


'''
GEMM = '''from triton.tools.tensor_descriptor import TensorDescriptor

# Matrix-vector products (one column of B, or one row of A): a row-dot reduction, K split across programs.
GEMV_BLOCK_M = 16  # output elements a program computes
GEMV_BLOCK_K = 256  # elements of K per step
GEMV_NUM_WARPS = 4
GEMV_PROGRAMS_PER_SM = 4  # K is split until about this many programs per SM read the matrix


@triton.jit
def _gemv_kernel(A, X, P, M, K, sam, sak, sx, K_PER, BM: tl.constexpr, BK: tl.constexpr, WIDE: tl.constexpr):
    # One split of K for BM rows: the products summed over BK-wide steps, the rows' sums to P[split].
    split = tl.program_id(1)
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rk = tl.arange(0, BK)
    if WIDE:  # an operand of 2**31 elements or more: 32-bit offsets would wrap
        split = split.to(tl.int64)
        rm = rm.to(tl.int64)
        rk = rk.to(tl.int64)
    k_start = split * K_PER
    k_end = tl.minimum(k_start + K_PER, K)
    acc = tl.zeros((BM, BK), dtype=tl.float32)
    for k0 in range(k_start, k_end, BK):
        kk = k0 + rk
        a = tl.load(A + rm[:, None] * sam + kk[None, :] * sak, mask=(rm[:, None] < M) & (kk[None, :] < k_end),
                    other=0.0)
        x = tl.load(X + kk * sx, mask=kk < k_end, other=0.0)
        acc += a.to(tl.float32) * x.to(tl.float32)[None, :]
    tl.store(P + split * M + rm, tl.sum(acc, axis=1), mask=rm < M)


@triton.jit
def _gemv_sum_kernel(P, BIAS, C, M, SPLITS, scm, sbias, HAS_BIAS: tl.constexpr, BM: tl.constexpr):
    # The splits' partial sums added in a fixed order (the same result every run), then the bias.
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    acc = tl.zeros((BM,), dtype=tl.float32)
    for s in range(0, SPLITS):
        acc += tl.load(P + s * M + rm, mask=rm < M, other=0.0)
    if HAS_BIAS:
        acc += tl.load(BIAS + rm * sbias, mask=rm < M, other=0.0).to(tl.float32)
    tl.store(C + rm * scm, acc.to(C.dtype.element_ty), mask=rm < M)


def _gemv_plan(a, b, bias, c):
    """How _gemv launches for these operands (bias expanded to (M, N): a row, or one element for every
    row of a column): which is the matrix, its strides, the split of K and both grids."""
    k = a.shape[1]
    if b.shape[1] == 1:  # c[:, 0] = a @ b[:, 0]; a bias of one element is added to every row
        swap, sm, sk, sv, rows, sc, sbias = False, a.stride(0), a.stride(1), b.stride(0), a.shape[0], c.stride(0), 0
    else:  # c[0, :] = b^T @ a[0, :]
        swap, sm, sk, sv, rows, sc = True, b.stride(1), b.stride(0), a.stride(1), b.shape[1], c.stride(1)
        sbias = bias.stride(1) if bias is not None else 0
    tiles = triton.cdiv(rows, GEMV_BLOCK_M)
    wanted = GEMV_PROGRAMS_PER_SM * _num_sms(a.device)
    splits = max(1, min(triton.cdiv(k, GEMV_BLOCK_K), triton.cdiv(wanted, tiles)))
    k_per = triton.cdiv(triton.cdiv(k, splits), GEMV_BLOCK_K) * GEMV_BLOCK_K
    splits = triton.cdiv(k, k_per)
    # swap: b is the matrix (a is one row); partial: the float32 partial sums' shape; launch, ints, meta:
    # the products; reduce, reduce_ints, reduce_meta: their sum in a fixed order (the same result every run)
    return dict(gemv=True, swap=swap, partial=(splits, rows), launch=_gemv_kernel[(tiles, splits)],
                 ints=(rows, k, sm, sk, sv, k_per),
                 meta=dict(BM=GEMV_BLOCK_M, BK=GEMV_BLOCK_K, WIDE=_wide(a, b, c), num_warps=GEMV_NUM_WARPS),
                 reduce=_gemv_sum_kernel[(triton.cdiv(rows, 256),)], reduce_ints=(rows, splits, sc, sbias),
                 reduce_meta=dict(HAS_BIAS=bias is not None, BM=256))


def _gemv(p, a, b, bias, c):
    """c = a @ b (+ bias) where b is one column or a is one row, as plan p says: each output a dot
    product over K, K split across programs so that a few per SM read the matrix (a tile of tl.dot would
    waste all but one line)."""
    partial = torch.empty(p["partial"], dtype=torch.float32, device=a.device)
    p["launch"](b if p["swap"] else a, a if p["swap"] else b, partial, *p["ints"], **p["meta"])
    p["reduce"](partial, bias if bias is not None else c, c, *p["reduce_ints"], **p["reduce_meta"])
    return c


__GEMM_KERNEL__def _epilogue_args(epilogue, c):
    """A fused epilogue's operands as kernel arguments: each broadcast to the shape it met in the chain
    and laid over c's (batch,) rows and columns: the tensor, then its batch, row and column strides."""
    args = []
    for e, shape in epilogue:
        e = e.expand(shape).reshape(c.shape)  # a view where strides allow (a broadcast row), else a copy
        args += [e, *((0,) * (3 - e.dim())), *e.stride()]
    return args


def _gemm_knobs():
    # everything a GEMM plan is computed from besides its inputs: a knob set in place (knob_sweep.py,
    # the tests) makes new plans
    return (BLOCK_M, BLOCK_N, BLOCK_K, NUM_WARPS, NUM_STAGES, GROUP_M, USE_TMA, FP32_DOT, FP32_BLOCK_M,
            FP32_BLOCK_N, FP32_BLOCK_K, FP32_NUM_WARPS, FP32_NUM_STAGES, GEMV_BLOCK_M, GEMV_BLOCK_K,
            GEMV_NUM_WARPS, GEMV_PROGRAMS_PER_SM, _gemm_kernel, _gemv_kernel, _gemv_sum_kernel)


# Triton's interpreter runs @triton.jit functions as Python (they are then no JITFunction): there it
# multiplies bfloat16 tiles as their raw bits, so they are widened to float32 first (exact)
_INTERPRETED = not isinstance(_gemm_kernel, triton.JITFunction)
_HOPPER = dict()  # device -> whether it has TMA (sm_90 and newer), asked once per device


def _has_tma(device):
    if device not in _HOPPER:
        _HOPPER[device] = _INTERPRETED or (device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9)
    return _HOPPER[device]


def _rows_aligned(t):
    # TMA reads [rows, columns] with unit column stride, each row starting on a 16-byte boundary
    return t.stride(1) == 1 and t.data_ptr() % 16 == 0 and (t.stride(0) * t.element_size()) % 16 == 0


def _tma_operands(a, b, c):
    """None when the pointer kernel runs, else whether B goes through its transpose: 16-bit operands whose
    rows (B's, or its transpose's, as a Linear's weight is) TMA can read, on a device that has it."""
    if not USE_TMA or a.dtype not in (torch.float16, torch.bfloat16) or _wide(a, b, c) or not _has_tma(a.device):
        return None
    if not _rows_aligned(a):
        return None
    if _rows_aligned(b):
        return False
    return True if _rows_aligned(b.t()) else None


def _gemm_plan(a, b, bias, c, kernel, operands):
    """How _gemm launches for these operands (bias expanded to (M, N), the epilogue's as kernel
    arguments): _gemv_plan's, or the GEMM kernel bound to its grid, its integer arguments and constexprs
    (and with TMA, the descriptors' shapes, strides and blocks)."""
    m, k = a.shape
    n = b.shape[1]
    if (n == 1 or m == 1) and kernel is None and (bias is None or bias.stride(0) == 0 or m == 1):
        return _gemv_plan(a, b, bias, c)
    bm, bn, bk, warps, stages = _tile(a.dtype)
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn), 1, 1)
    b_t = _tma_operands(a, b, c)
    tma = None
    if b_t is not None:
        tma = (([m, k], [a.stride(0), 1], [bm, bk]),
               ([n, k], [b.stride(1), 1], [bn, bk]) if b_t else ([k, n], [b.stride(0), 1], [bk, bn]), b_t)
    return dict(gemv=False, launch=(kernel or _gemm_kernel)[grid], tma=tma,
                 ints=(m, n, k, 0, a.stride(0), a.stride(1), 0, b.stride(0), b.stride(1), 0, c.stride(0), c.stride(1),
                       *(bias.stride() if bias is not None else (0, 0))),
                 meta=dict(HAS_BIAS=bias is not None, BIAS_2D=bias is not None and bias.stride(0) != 0,
                           FP32=a.dtype == torch.float32, DOT=FP32_DOT, WIDE=_wide(a, b, c, *operands[::4]),
                           BM=bm, BN=bn, BK=bk, GM=GROUP_M, TMA=tma is not None, B_T=bool(b_t),
                           WIDEN=_INTERPRETED and a.dtype == torch.bfloat16, num_warps=warps, num_stages=stages))


def _gemm(a, b, bias, out=None, kernel=None, epilogue=()):
    """a @ b (+ bias: a row, a column or a full matrix), any strides; written into ``out`` (any strides) or
    a packed result. ``kernel``: a _gemm_kernel with a fused epilogue, over the ``epilogue`` operands."""
    key = ("gemm", a.shape, a.stride(), b.shape, b.stride(), a.dtype, a.device,
           None if bias is None else (bias.shape, bias.stride()), None if out is None else (out.shape, out.stride()),
           kernel, _epilogue_key(epilogue), _gemm_knobs(), a.data_ptr() % 16 == 0, b.data_ptr() % 16 == 0)
    c = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device) if out is None else out
    operands = _epilogue_args(epilogue, c) if epilogue else ()
    p = _PLANS.get(key)
    if p is None:
        p = _PLANS[key] = _gemm_plan(a, b, None if bias is None else bias.expand(c.shape), c, kernel, operands)
    if p["gemv"]:
        return _gemv(p, a, b, bias, c)
    if p["tma"] is not None:  # descriptors hold the base address: one per call
        desc_a, desc_b, b_t = p["tma"]
        a, b = TensorDescriptor(a, *desc_a), TensorDescriptor(b.t() if b_t else b, *desc_b)
    p["launch"](a, b, c, bias if bias is not None else c, *p["ints"], *operands, **p["meta"])
    return c


def _bmm(a, b, out=None, kernel=None, epilogue=()):
    """a @ b for a batch of matrices, any strides; written into ``out`` or a packed result. ``kernel``: a
    _gemm_kernel with a fused epilogue, over the ``epilogue`` operands."""
    key = ("bmm", a.shape, a.stride(), b.shape, b.stride(), a.dtype, a.device,
           None if out is None else (out.shape, out.stride()), kernel, _epilogue_key(epilogue), _gemm_knobs())
    c = torch.empty((a.shape[0], a.shape[1], b.shape[2]), dtype=a.dtype, device=a.device) if out is None else out
    operands = _epilogue_args(epilogue, c) if epilogue else ()
    p = _PLANS.get(key)
    if p is None:
        nb, m, k = a.shape
        n = b.shape[2]
        bm, bn, bk, warps, stages = _tile(a.dtype)
        grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn), 1, nb)
        p = _PLANS[key] = dict(
            launch=(kernel or _gemm_kernel)[grid], ints=(m, n, k, *a.stride(), *b.stride(), *c.stride(), 0, 0),
            meta=dict(HAS_BIAS=False, BIAS_2D=False, FP32=a.dtype == torch.float32, DOT=FP32_DOT,
                      WIDE=_wide(a, b, c, *operands[::4]), BM=bm, BN=bn, BK=bk, GM=GROUP_M, num_warps=warps,
                      num_stages=stages))
    p["launch"](a, b, c, c, *p["ints"], *operands, **p["meta"])
    return c

'''
CONV = '''@triton.jit
def _input_point(od, oh, ow, kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw, D, H, WI, TRANSPOSED: tl.constexpr):
    # The input point an output point reads at a kernel position (any broadcast of the two), and
    # whether it exists. Transposed: the input points that land on the output, i = (o + p - k d) / s
    # where s divides it.
    if TRANSPOSED:
        nd = od + pd - kd * dd
        nh = oh + ph - kh * dh
        nw = ow + pw - kw * dw
        ok = (nd >= 0) & (nh >= 0) & (nw >= 0) & (nd % sd == 0) & (nh % sh == 0) & (nw % sw == 0)
        i_d = nd // sd
        i_h = nh // sh
        i_w = nw // sw
    else:
        i_d = od * sd - pd + kd * dd
        i_h = oh * sh - ph + kh * dh
        i_w = ow * sw - pw + kw * dw
        ok = (i_d >= 0) & (i_h >= 0) & (i_w >= 0)
    return i_d, i_h, i_w, ok & (i_d < D) & (i_h < H) & (i_w < WI)


@triton.jit
def _unravel(i, A, B, C):
    # i as (i % A, then B, then C, the rest): the digits of a mixed-radix index, fastest first
    t = i // A
    u = t // B
    return i % A, t % B, u % C, u // C


__CONV_KERNEL__CONV_BY_POSITION = 16  # channels per group from which K runs over kernel positions, then channels
# 1: with CONV_BY_POSITION channels or more per group, the input and the weight are copied with their
# channels innermost before the kernel runs (a pass over each), so a tile's slice of input channels (K)
# and of output channels (N) are contiguous. In torch's NCHW layout a K slice of the input reads one
# element per H*W: compiled for sm_90 (tests/kernels/test_template_compile.py), a 64-channel bf16
# convolution loads its input tile with 64 scalar 2-byte loads and no async copies (232 registers);
# channels innermost, with 16-byte cp.async copies (164). A SASS reading, not a timing: the GPU decides.
CONV_CHANNELS_LAST = 1


# Split-K: where a convolution's output has fewer tiles than CONV_SPLIT_PROGRAMS_PER_SM per SM and its K
# is long (a weight's gradient: output channels x kernel positions, K over the batch and every output
# point; a ResNet stem's is 2 tiles of 100k K on 132 SMs), each tile's K is cut into parts summed in float32
# by _conv_split_sum, in a fixed order (deterministic). 0: never split.
CONV_SPLIT_PROGRAMS_PER_SM = 2
CONV_SPLIT_MIN_TRIPS = 4  # trips of the K loop's outer level each part keeps at least


# Depthwise (one input channel per group): a tile of DW_BLOCK_M output points by DW_BLOCK_N channels,
# each kernel position one multiply-add per element (no tensor cores: K per output is the kernel's size).
DW_BLOCK_M = 128
DW_BLOCK_N = 16
DW_NUM_WARPS = 4


CONV_FLAT_BLOCK_M = 64  # few channels per group (K over channel and position together): the tile's rows
CONV_FLAT_BLOCK_K = (32, 16)  # and its K, 16-bit and fp32


def _conv_splits(tiles, trips, device):
    """Parts of K per output tile: enough for CONV_SPLIT_PROGRAMS_PER_SM programs per SM, each part at
    least CONV_SPLIT_MIN_TRIPS of the K loop."""
    wanted = CONV_SPLIT_PROGRAMS_PER_SM * _num_sms(device)
    if not wanted or tiles >= wanted:
        return 1
    return max(1, min(triton.cdiv(wanted, tiles), trips // CONV_SPLIT_MIN_TRIPS))


@triton.jit
def _conv_split_sum(P, BIAS, Y, TOTAL, OCT, SPLITS, OD, OH, OW, syn, syc, syd, syh, syw, sbias,
                    HAS_BIAS: tl.constexpr, WIDE: tl.constexpr, BLOCK: tl.constexpr):
    # Y[point, channel] = sum of the parts' P[part, point, channel] (+ bias), in part order
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if WIDE:
        i = i.to(tl.int64)
    inside = i < TOTAL
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for part in range(0, SPLITS):
        acc += tl.load(P + part * TOTAL + i, mask=inside, other=0.0)
    oc = i % OCT
    if HAS_BIAS:
        acc += tl.load(BIAS + oc * sbias, mask=inside, other=0.0).to(tl.float32)
    ow, oh, od, n = _unravel(i // OCT, OW, OH, OD)
    tl.store(Y + n * syn + oc * syc + od * syd + oh * syh + ow * syw, acc.to(Y.dtype.element_ty), mask=inside)


def _as_3d(t, spatial):
    # N-C-(1-3 spatial dims) as N-C-D-H-W: size-1 dims in front, a view (writes reach t)
    for _ in range(3 - spatial):
        t = t.unsqueeze(2)
    return t


def _conv_knobs():
    # everything a convolution's plan is computed from besides its inputs (see _gemm_knobs)
    return (BLOCK_M, BLOCK_N, BLOCK_K, NUM_WARPS, NUM_STAGES, CONV_FP32_DOT, FP32_BLOCK_M, FP32_BLOCK_N,
            FP32_BLOCK_K, FP32_NUM_WARPS, FP32_NUM_STAGES, CONV_BY_POSITION, CONV_CHANNELS_LAST,
            CONV_SPLIT_PROGRAMS_PER_SM, CONV_SPLIT_MIN_TRIPS, CONV_FLAT_BLOCK_M, CONV_FLAT_BLOCK_K, DW_BLOCK_M,
            DW_BLOCK_N, DW_NUM_WARPS, _conv_kernel, _conv_split_sum)


def _conv_plan(x, w, bias, stride, padding, dilation, transposed, output_padding, groups, out, kernel, epilogue):
    """How _conv launches for these inputs: computed once per signature (see _conv)."""
    spatial = x.dim() - 2
    lead = 3 - spatial
    each = lambda v: tuple(v) * spatial if len(tuple(v)) == 1 else tuple(v)  # noqa: E731  (one value: every dim)
    stride = (1,) * lead + each(stride)
    padding = (0,) * lead + each(padding)
    dilation = (1,) * lead + each(dilation)
    output_padding = (0,) * lead + each(output_padding)
    x5, w5 = _as_3d(x, spatial), _as_3d(w, spatial)
    n, c = x5.shape[0], x5.shape[1]
    if transposed:
        cg, ocg = c // groups, w5.shape[1]
    else:
        cg, ocg = w5.shape[1], w5.shape[0] // groups
    depthwise = cg == 1  # (transposed too: a depthwise convolution's input gradient)
    by_position = cg >= CONV_BY_POSITION
    x_strides = w_strides = None
    if CONV_CHANNELS_LAST and by_position:  # (few channels: K runs over (c, kd, kh, kw), W's order is better)
        x5 = x5.movedim(1, -1).contiguous().movedim(-1, 1)  # (N, C, D, H, W) strides (DHWC, 1, HWC, WC, C)
        # the weight's tile dim (output channels: dim 0, or 1 when transposed) innermost, then the other
        inner, outer = (1, 0) if transposed else (0, 1)
        w5 = w5.permute(2, 3, 4, outer, inner).contiguous().permute(*((4, 3) if inner == 0 else (3, 4)), 0, 1, 2)
        x_strides, w_strides = x5.stride(), w5.stride()
    ks = w5.shape[2:]
    if transposed:
        size = [(i - 1) * s - 2 * p + d * (k - 1) + op + 1
                for i, s, p, d, k, op in zip(x5.shape[2:], stride, padding, dilation, ks, output_padding)]
    else:
        size = [(i + 2 * p - d * (k - 1) - 1) // s + 1 for i, s, p, d, k in zip(x5.shape[2:], stride, padding, dilation, ks)]
    out_shape = (n, ocg * groups, *size[lead:])
    if out is None:  # a fresh result's layout (each call allocates its own)
        out = torch.empty(out_shape, dtype=x.dtype, device=x.device)
    y5 = _as_3d(out, spatial)
    m = n * size[0] * size[1] * size[2]
    bm, bn, bk, warps, stages = _tile(x.dtype)
    if depthwise:  # (rows no longer than an output row needs)
        bm, bn, warps = min(DW_BLOCK_M, max(16, triton.next_power_of_2(size[2]))), DW_BLOCK_N, DW_NUM_WARPS
    else:  # no wider than the group's output channels need (KernelBench level 2: 16 of 128 columns used)
        bn = min(bn, max(16, triton.next_power_of_2(ocg)))
        if not by_position:
            # Each K element's input point is worked out per element of the tile: the tile no bigger than
            # CONV_FLAT_BLOCK_M x CONV_FLAT_BLOCK_K, nor wider than K needs (compiled for sm_90, a 16-bit
            # 128 x 64 tile of this index math spilled 96 to 584 bytes: a 3-channel 3x3 convolution, a
            # weight gradient over a batch of 4; 128 x 32, 216 bytes)
            bm = min(bm, CONV_FLAT_BLOCK_M)
            bk = min(bk, CONV_FLAT_BLOCK_K[x.dtype == torch.float32],
                     max(16, triton.next_power_of_2(cg * ks[0] * ks[1] * ks[2])))
    tiles = triton.cdiv(m, bm) * triton.cdiv(ocg, bn) * groups
    volume = ks[0] * ks[1] * ks[2]
    trips = volume if by_position else triton.cdiv(cg * volume, bk)  # of the K loop's outer level
    # (a fused epilogue needs whole sums; a depthwise tile's K is one kernel's positions)
    splits = _conv_splits(tiles, trips, x.device) if kernel is None and not depthwise else 1
    per = triton.cdiv(trips, splits)
    splits = triton.cdiv(trips, per)
    total = m * ocg * groups
    wide = _wide(x5, w5, y5, *_conv_operands(epilogue, spatial)[::6]) or (splits > 1 and splits * total >= WIDE_FROM)
    sbias = bias.stride(0) if bias is not None else 0
    grid = (n * size[0] * size[1] * triton.cdiv(size[2], bm), triton.cdiv(ocg * groups, bn), 1) if depthwise else \
        (triton.cdiv(m, bm), triton.cdiv(ocg, bn), groups * splits)
    reduce = reduce_ints = reduce_meta = None
    if splits > 1:
        reduce = _conv_split_sum[(triton.cdiv(total, 1024),)]
        reduce_ints = (total, ocg * groups, splits, *size, *y5.stride(), sbias)
        reduce_meta = dict(HAS_BIAS=bias is not None, WIDE=wide, BLOCK=1024)
    # spatial: 1-3 dims; x_strides, w_strides: the channels-innermost copies' strides (None: x and w as they
    # come); out: a fresh result's shape; partial: the split-K parts' shape (None: no split); launch, ints
    # (before the parts' tensor), split_ints (after it), meta: the convolution; reduce, reduce_ints,
    # reduce_meta: the parts' sum (None: no split)
    # the kernel's CG and OCG (depthwise: the output channels per input channel, and every output channel)
    cg_arg, ocg_arg = (ocg, ocg * groups) if depthwise else (cg, ocg)
    return dict(
        spatial=spatial, x_strides=x_strides, w_strides=w_strides, out=out_shape,
        partial=(splits, m, ocg * groups) if splits > 1 else None, launch=(kernel or _conv_kernel)[grid],
        ints=(m, cg_arg, *x5.shape[2:], ocg_arg, *size, *ks, *stride, *padding, *dilation, *x5.stride(),
              *w5.stride(), *y5.stride(), sbias),
        split_ints=(total, ocg * groups, splits, per if by_position else per * bk),
        meta=dict(TRANSPOSED=bool(transposed), HAS_BIAS=bias is not None and splits == 1,
                  FP32=x.dtype == torch.float32, DOT=CONV_FP32_DOT, WIDE=wide, BY_POSITION=by_position,
                  SPLIT=splits > 1, DEPTHWISE=depthwise, BM=bm, BN=bn, BK=bk, num_warps=warps, num_stages=stages),
        reduce=reduce, reduce_ints=reduce_ints, reduce_meta=reduce_meta)


def _conv_operands(epilogue, spatial):
    # a fused epilogue's operands as kernel arguments: each as N-C-D-H-W over the output's points (stride 0
    # where broadcast), then its five strides
    operands = []
    for e, shape in epilogue:
        e = _as_3d(e.expand(shape), spatial)
        operands += [e, *e.stride()]
    return operands


def _conv(x, w, bias, stride, padding, dilation, transposed=False, output_padding=(0,), groups=1, out=None,
          kernel=None, epilogue=()):
    # A 1-, 2- or 3-D convolution, grouped or not, transposed or not, as an implicit GEMM; written
    # into out (any strides: e.g. channels-last) or a packed result. kernel: a _conv_kernel with a
    # fused epilogue, over the epilogue operands (each a tensor and the shape it met in the chain).
    key = ("conv", x.shape, x.stride(), w.shape, w.stride(), x.dtype, x.device,
           None if bias is None else (bias.shape, bias.stride()), tuple(stride), tuple(padding), tuple(dilation),
           bool(transposed), tuple(output_padding), groups, None if out is None else (out.shape, out.stride()),
           kernel, _epilogue_key(epilogue), _conv_knobs())
    p = _PLANS.get(key)
    if p is None:
        p = _PLANS[key] = _conv_plan(x, w, bias, stride, padding, dilation, transposed, output_padding, groups,
                                     out, kernel, epilogue)
    x5, w5 = _as_3d(x, p["spatial"]), _as_3d(w, p["spatial"])
    if p["x_strides"] is not None:  # copied with the channels innermost
        x5 = torch.empty_strided(x5.shape, p["x_strides"], dtype=x.dtype, device=x.device).copy_(x5)
        w5 = torch.empty_strided(w5.shape, p["w_strides"], dtype=w.dtype, device=w.device).copy_(w5)
    if out is None:
        out = torch.empty(p["out"], dtype=x.dtype, device=x.device)
    y5 = _as_3d(out, p["spatial"])
    partial = y5 if p["partial"] is None else torch.empty(p["partial"], dtype=torch.float32, device=x.device)
    bias_or_y = bias if bias is not None else y5
    p["launch"](x5, w5, bias_or_y, y5, *p["ints"], partial, *p["split_ints"], *_conv_operands(epilogue, p["spatial"]),
                **p["meta"])
    if p["reduce"] is not None:
        p["reduce"](partial, bias_or_y, y5, *p["reduce_ints"], **p["reduce_meta"])
    return out


'''
POOL = '''POOL_BLOCK = 256  # output points a program averages
POOL_NUM_WARPS = 4


@triton.jit
def _avg_pool_kernel(X, Y, total, C, D, H, WI, OD, OH, OW, sxn, sxc, sxd, sxh, sxw, syn, syc, syd, syh, syw,
                     sd, sh, sw, pd, ph, pw, divisor, KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr,
                     COUNT_PAD: tl.constexpr, OVERRIDE: tl.constexpr, BLOCK: tl.constexpr, WIDE: tl.constexpr):
    # One output point per lane: the window's in-bounds elements summed in fp32, divided as PyTorch does
    # (divisor_override; else the window clipped to the padded input, with count_include_pad; else the
    # elements inside the input).
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if WIDE:
        i = i.to(tl.int64)
    live = i < total
    ow = i % OW
    t = i // OW
    oh = t % OH
    t = t // OH
    od = t % OD
    t = t // OD
    c = t % C
    n = t // C
    d0 = od * sd - pd
    h0 = oh * sh - ph
    w0 = ow * sw - pw
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for kd in tl.static_range(KD):
        for kh in tl.static_range(KH):
            for kw in tl.static_range(KW):
                d = d0 + kd
                h = h0 + kh
                w = w0 + kw
                ok = live & (d >= 0) & (d < D) & (h >= 0) & (h < H) & (w >= 0) & (w < WI)
                acc += tl.load(X + n * sxn + c * sxc + d * sxd + h * sxh + w * sxw, mask=ok, other=0.0).to(tl.float32)
    if OVERRIDE:
        count = tl.zeros((BLOCK,), dtype=tl.float32) + divisor
    elif COUNT_PAD:
        count = ((tl.minimum(d0 + KD, D + pd) - d0) * (tl.minimum(h0 + KH, H + ph) - h0)
                 * (tl.minimum(w0 + KW, WI + pw) - w0)).to(tl.float32)
    else:
        count = ((tl.minimum(d0 + KD, D) - tl.maximum(d0, 0)) * (tl.minimum(h0 + KH, H) - tl.maximum(h0, 0))
                 * (tl.minimum(w0 + KW, WI) - tl.maximum(w0, 0))).to(tl.float32)
    tl.store(Y + n * syn + c * syc + od * syd + oh * syh + ow * syw, (acc / count).to(Y.dtype.element_ty), mask=live)


def _pool_size(length, k, s, p, ceil_mode):
    # PyTorch's pooling output size; with ceil_mode the last window must start inside the padded input
    out = (length + 2 * p - k + ((s - 1) if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= length + p:
        out -= 1
    return out


def _avg_pool(x, nd, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
              divisor_override=None, out=None):
    """aten.avg_pool{nd}d on (N, C, *spatial) or (C, *spatial), any strides; into ``out`` or a new tensor."""
    def dims(v, default):
        v = default if v is None or (isinstance(v, (list, tuple)) and len(v) == 0) else v
        v = [int(a) for a in v] if isinstance(v, (list, tuple)) else [int(v)]
        return v * nd if len(v) == 1 else v
    k = dims(kernel_size, kernel_size)
    s = dims(stride, k)
    p = dims(padding, 0)
    spatial = list(x.shape[-nd:])
    lead = list(x.shape[:-nd])
    osp = [_pool_size(L, kk, ss, pp, ceil_mode) for L, kk, ss, pp in zip(spatial, k, s, p)]
    y = torch.empty(lead + osp, dtype=x.dtype, device=x.device) if out is None else out
    pad = 3 - nd  # to 3 spatial dims: leading ones of size 1 (stride 0, window 1)
    k, s, p = [1] * pad + k, [1] * pad + s, [0] * pad + p
    xs = [1] * pad + spatial
    ys = [1] * pad + osp
    sx = [0] * pad + list(x.stride()[-nd:])
    sy = [0] * pad + list(y.stride()[-nd:])
    if len(lead) == 2:
        n, c, sxn, sxc, syn, syc = lead[0], lead[1], x.stride(0), x.stride(1), y.stride(0), y.stride(1)
    else:  # unbatched: (C, *spatial)
        n, c, sxn, sxc, syn, syc = 1, lead[0], 0, x.stride(0), 0, y.stride(0)
    total = n * c * ys[0] * ys[1] * ys[2]
    if total == 0:
        return y
    _avg_pool_kernel[(triton.cdiv(total, POOL_BLOCK),)](
        x, y, total, c, *xs, *ys, sxn, sxc, *sx, syn, syc, *sy, *s, *p,
        float(divisor_override or 1), KD=k[0], KH=k[1], KW=k[2], COUNT_PAD=bool(count_include_pad),
        OVERRIDE=bool(divisor_override), BLOCK=POOL_BLOCK, WIDE=_wide(x, y) or total >= WIDE_FROM,
        num_warps=POOL_NUM_WARPS)
    return y


'''
POINTWISE = '''POINTWISE_BLOCK = 1024


def _broadcast(a, b):
    """The shape two operands broadcast to (numpy's rule)."""
    n = max(len(a), len(b))
    a, b = [1] * (n - len(a)) + a, [1] * (n - len(b)) + b
    return [max(i, j) if 1 in (i, j) else i for i, j in zip(a, b)]


def _pointwise(kernel, x, y=None):
    """One elementwise op over packed operands (broadcast first), computed in float32."""
    if y is not None:
        shape = _broadcast(list(x.shape), list(y.shape))
        x, y = x.expand(shape).contiguous(), y.expand(shape).contiguous()
    else:
        x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    kernel[(triton.cdiv(n, POINTWISE_BLOCK),)](*((x, y) if y is not None else (x,)), out, n, BLOCK=POINTWISE_BLOCK)
    return out


'''
TAIL = '''{pointwise}

def kernel_fn({params}):
{body}
    return {ret}
'''


# Where a fused epilogue reads its operands, per kernel: the operand's strides over the tile's
# (batch, row, column) or (n, channel, d, h, w) and how each index is spread over the tile.
_OPERAND_DIMS = {
    "_gemm_kernel": (("b", "batch"), ("m", "rm[:, None]"), ("n", "rn[None, :]")),
    "_conv_kernel": (("n", "n[:, None]"), ("c", "oc[None, :]"), ("d", "od[:, None]"), ("h", "oh[:, None]"),
                     ("w", "ow[:, None]")),
}


def render_kernel(text: str, base: str, name: str | None = None, operands: int = 0, lines: tuple = ()) -> str:
    """GEMM_KERNEL or CONV_KERNEL (``base`` its kernel's name) as source: plain (no ``name``), or as
    kernel ``name`` with a fused epilogue: ``operands`` tensors loaded as e0, e1, ... beside the tile
    and ``lines`` (statements over v, the tile in float32) applied before v is stored."""
    if name is None:
        return text.replace("__EPI_PARAMS__", "").replace("__EPILOGUE__", "").replace("__RESULT__", "acc")
    dims = _OPERAND_DIMS[base]
    params = "".join(f" E{k}, " + ", ".join(f"se{k}{d}" for d, _ in dims) + "," for k in range(operands))
    body = ["    # The fused epilogue: the chain's pointwise ops on the tile, in float32, before it is stored.",
            "    v = acc"]
    body += [f"    e{k} = tl.load(E{k} + " + " + ".join(f"{at} * se{k}{d}" for d, at in dims)
             + ", mask=inside, other=0.0).to(tl.float32)" for k in range(operands)]
    body += [f"    {line}" for line in lines]
    return (text.replace(f"def {base}(", f"def {name}(").replace("__EPI_PARAMS__", "\n                " + params)
            .replace("__EPILOGUE__", "\n".join(body) + "\n").replace("__RESULT__", "v"))


def epilogue_kernel(spec: dict, epi: Epilogue, k: int) -> str:
    """The kernel of fused epilogue number ``k`` of a chain (``_gemm_kernel_e{k}``/``_conv_kernel_e{k}``)."""
    conv = spec["ops"][epi.start]["op"] == "aten.convolution.default"
    base = "_conv_kernel" if conv else "_gemm_kernel"
    return "\n\n" + render_kernel(CONV_KERNEL if conv else GEMM_KERNEL, base, f"{base}_e{k}", len(epi.operands),
                                  tuple(epi.lines)).rstrip() + "\n"


GEMM = GEMM.replace("__GEMM_KERNEL__", render_kernel(GEMM_KERNEL, "_gemm_kernel"))
CONV = CONV.replace("__CONV_KERNEL__", render_kernel(CONV_KERNEL, "_conv_kernel"))
