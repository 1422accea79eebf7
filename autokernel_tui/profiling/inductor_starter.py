"""A generated task's starting kernel.py: Inductor's own Triton, made self-contained.

``starter_source(fn, example_inputs, device)`` compiles ``fn`` with ``torch.compile``
(``fullgraph=True``, static shapes), captures the Python module Inductor generates, and
rewrites it into a kernel.py:

* each ``@triton_heuristics.*`` + ``@triton.jit`` kernel becomes a plain ``@triton.jit``
  kernel (body unchanged); ``triton_helpers.X`` calls are inlined as ``_ih_X`` (their
  source copied from torch), ``libdevice`` comes from ``triton.language.extra``,
  ``tl_math`` is ``tl.math``: no inductor import is left;
* the config Inductor chose for each kernel (XBLOCK / YBLOCK / R0_BLOCK / num_warps /
  num_stages) becomes module-level knob constants ``K<i>_XBLOCK`` ... and the task.toml
  knob space (``StarterResult.knobs``); launches compute their grid from the knobs, and
  every kernel masks against its numel, so any power-of-two block stays correct;
* the ``call(args)`` body becomes plain Python: ``empty_strided_*`` -> ``torch.empty_strided``
  on the inputs' device, ``reinterpret_tensor(t, ...)`` -> ``t.as_strided(..., t.storage_offset() + ...)`` (a view),
  ``K.run(...)`` -> ``K[grid](...)``; a library call Inductor makes (``extern_kernels.mm``,
  ``addmm``, ``bmm``, a 1- to 3-D ``convolution``, grouped or transposed; ``aten.avg_pool{1,2,3}d``,
  which Inductor leaves to aten for big windows) becomes the GEMM template's Triton kernel
  (``gemm_template``: ``_gemm``/``_bmm``/``_conv``/``_avg_pool``, writing into the buffer Inductor laid
  out), with the template's tile (or pooling block) as knobs. Anything else (another library call, ``aten.*``, a cpp
  kernel) is reported as the reason no starter was made.

Shapes are static (as torch.compile specialises them): the kernels hold their numels.
``more_inputs`` adds further input signatures (e.g. the task's CPU test shapes), each a
variant of its own (kernels ``..._v1``, knobs ``V1_K0_XBLOCK``); ``kernel_fn`` dispatches on
the inputs' signature (shapes, strides, dtypes, scalars), caching the launch grids per
signature, and raises a clear error on a signature it was not generated for.

Devices: on CUDA the module is captured while ``torch.compile`` runs it for real, and the
config each kernel's autotuner kept is read from the loaded module. On the CPU Inductor
emits Triton with ``cpu_backend = "triton"`` but cannot load it (no active Triton driver),
so the module is captured at load time, the load is aborted, and each kernel gets the
first config its heuristic lists. Everything after the capture is one code path. The
result is checked against ``fn`` when the kernels can run here (CUDA, or the CPU under
``TRITON_INTERPRET=1``).
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import os
import re
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from unittest import mock

import torch

from autokernel_tui.profiling import gemm_template
from autokernel_tui.profiling.patch import PatchError, load_kernel
from autokernel_tui.profiling.starter_process import VERIFY_ENV, StarterResult

__all__ = ["StarterResult", "starter_source", "NoStarter"]

NUM_WARPS_SPACE = [1, 2, 4, 8, 16, 32]
NUM_STAGES_SPACE = [1, 2, 3, 4, 5]
_BLOCK_NAMES = ("XBLOCK", "YBLOCK", "ZBLOCK", "R0_BLOCK", "R1_BLOCK")
# "yz": the y blocks beyond the y grid's limit go to grid z (the kernel reads program_id(2) for them).
_GRIDS = {"Grid1D": ("x",), "Grid2D": ("x", "y"), "Grid3D": ("x", "y", "z"), "Grid2DWithYZOverflow": ("x", "y", "yz")}
MAX_Y_GRID = 65535  # CUDA's limit on grid y (Inductor's get_max_y_grid)


class NoStarter(Exception):
    """Inductor's code for the op cannot become a kernel.py; the message says why."""


# ---------------------------------------------------------------------------------------------
# Capture


@dataclass
class _Capture:
    code: str
    input_order: list[int]                   # call(args)[k] is fn's input input_order[k]
    chosen: dict[str, Any] = field(default_factory=dict)   # kernel name -> triton.Config (CUDA)


class _Abort(Exception):
    pass


def _capture(fn: Callable, inputs: tuple, device: str) -> _Capture:
    import warnings

    import torch._dynamo.config as dcfg
    import torch._inductor.config as icfg
    import torch.utils._triton as utriton
    from torch._inductor.codecache import PyCodeCache
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.graph import GraphLowering

    codes: list[str] = []
    orders: list[list[int]] = []
    modules: list[Any] = []
    on_cpu = torch.device(device).type == "cpu"

    def backend(gm, example_inputs):
        order = []
        for ex in example_inputs:
            hit = [i for i, x in enumerate(inputs) if x is ex]
            if len(hit) != 1:
                raise NoStarter("cannot map a graph input of the compiled graph onto fn's inputs")
            order.append(hit[0])
        orders.append(order)
        return compile_fx(gm, example_inputs)

    original_load = PyCodeCache.load_by_key_path

    def load(*args, **kwargs):
        if on_cpu:
            # The module's source is at the path being loaded. Once a Triton driver has been active
            # in this process (a kernel run under the interpreter), Inductor can load the module
            # before save_output_code sees it: take the code here too, then stop the load.
            path = kwargs.get("path", args[1] if len(args) > 1 else None)
            try:
                text = open(path, encoding="utf-8").read() if path else ""
            except OSError:
                text = ""
            if "def call(" not in text:
                # a single kernel's module, loaded while the graph is generated: harmless to load
                return original_load(*args, **kwargs)
            if text not in codes:
                codes.append(text)
            raise _Abort()
        mod = original_load(*args, **kwargs)
        modules.append(mod)
        return mod

    torch._dynamo.reset()
    patches = [mock.patch.object(GraphLowering, "save_output_code", codes.append),
               mock.patch.object(PyCodeCache, "load_by_key_path", load),
               # a cached graph is loaded without its code passing save_output_code
               icfg.patch(force_disable_caches=True),
               # a module's warnings.warn (InstanceNorm's on 3-D input) is no graph break: it runs after
               dcfg.patch(reorderable_logging_functions=set(dcfg.reorderable_logging_functions) | {warnings.warn})]
    if on_cpu:
        # CPU: Inductor emits Triton, but no Triton driver is active here to hash or load it
        patches += [icfg.patch(cpu_backend="triton"),
                    mock.patch.object(utriton, "triton_hash_with_backend", lambda: "0" * 64)]
    with contextlib.ExitStack() as stack:
        for p in patches:
            stack.enter_context(p)
        try:
            torch.compile(fn, backend=backend, fullgraph=True, dynamic=False)(*inputs)
        except NoStarter:
            raise
        except Exception as e:  # noqa: BLE001 - the CPU capture aborts the load on purpose
            if not (on_cpu and codes and _is_abort(e)):
                raise NoStarter(f"torch.compile failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}") from e
        finally:
            torch._dynamo.reset()
    if len(orders) != 1 or len(codes) != 1:
        raise NoStarter(f"torch.compile made {len(codes)} modules from {len(orders)} graphs; one was expected")
    chosen = {}
    for mod in modules:
        for name, obj in vars(mod).items():
            launchers = getattr(obj, "launchers", None)
            if launchers:
                chosen[name] = launchers[0].config
    return _Capture(codes[0], orders[0], chosen)


def _is_abort(e: BaseException) -> bool:
    while e is not None:
        if isinstance(e, _Abort) or "_Abort" in repr(e):
            return True
        e = e.__cause__ or e.__context__
    return False


# ---------------------------------------------------------------------------------------------
# Kernels


def _configs_of(kernel_src: str, name: str) -> list:
    """Run the kernel's heuristic decorator with cached_autotune recording its configs."""
    from torch._inductor.runtime import triton_heuristics as th

    seen: list = []

    def record(size_hints, configs, *a, **k):
        seen.append(list(configs))
        return lambda f: f

    # without @triton.jit: only the heuristic's configs are wanted, and outside the interpreter Triton
    # refuses a function whose source is not in a file
    src = "\n".join(ln for ln in kernel_src.splitlines()
                    if "set_driver_to_" not in ln and ln.strip() != "@triton.jit")
    ns: dict[str, Any] = {"__file__": f"<{name}>", "__name__": f"_ih_{name}"}
    with mock.patch.object(th, "cached_autotune", record):
        exec(compile(src, f"<{name}>", "exec"), ns)  # noqa: S102 - torch's own generated code
    if not seen or not seen[0]:
        raise NoStarter(f"kernel {name}: its heuristic listed no config")
    return seen[0]


def _helper_sources(used: set[str]) -> list[str]:
    """Source of each triton_helpers function used, renamed _ih_X, with its own helper calls."""
    from torch._inductor.runtime import triton_helpers as th

    out: dict[str, str] = {}
    todo = list(used)
    while todo:
        name = todo.pop()
        if name in out:
            continue
        obj = getattr(th, name, None)
        fn = getattr(obj, "fn", None)
        if fn is None:
            raise NoStarter(f"Inductor's kernel calls triton_helpers.{name}, which is not a plain jit function")
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        fdef = tree.body[0]
        fdef.name = f"_ih_{name}"
        fdef.decorator_list = [ast.parse("triton.jit", mode="eval").body]
        for node in ast.walk(fdef):
            if isinstance(node, ast.Name):
                if node.id == "math":
                    node.id = "tl_math"
                elif node.id == "_LOG_2_E":
                    node.id = "_IH_LOG_2_E"
                elif node.id != name and getattr(getattr(th, node.id, None), "fn", None) is not None:
                    todo.append(node.id)
                    node.id = f"_ih_{node.id}"
        out[name] = ast.unparse(fdef)
    return [out[k] for k in sorted(out)]


@dataclass
class _Kernel:
    name: str             # new name in kernel.py
    source: str           # plain @triton.jit def
    params: list[str]     # runtime (non-constexpr) parameters, in order
    blocks: dict[str, int]   # constexpr block params -> chosen value
    fixed: dict[str, int]    # constexpr block params that must stay (persistent reduction R0_BLOCK)
    num_warps: int
    num_stages: int
    grid: tuple[str, ...]    # ('x', 'y') numel names driving the grid
    prefix: str           # knob prefix, e.g. K0_ / V1_K0_


def _kernel(old: str, new: str, src: str, prefix: str, chosen, helpers: set[str]) -> _Kernel:
    tree = ast.parse(src)
    fdefs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == old]
    if len(fdefs) != 1:
        raise NoStarter(f"kernel {old}: no single function of that name in its source")
    fdef = fdefs[0]
    deco = [d for d in fdef.decorator_list if isinstance(d, ast.Call)
            and ast.unparse(d.func).startswith("triton_heuristics.")]
    kind = ast.unparse(deco[0].func).split(".")[1] if deco else "?"
    if kind not in ("pointwise", "reduction", "persistent_reduction"):
        raise NoStarter(f"kernel {old}: Inductor heuristic '{kind}' is not supported (pointwise, reduction, "
                        "persistent_reduction are)")
    meta = {}
    for kw in deco[0].keywords:
        if kw.arg == "inductor_meta":
            meta = ast.literal_eval(kw.value) if _literal(kw.value) else {}
    grid_type = meta.get("grid_type", "Grid1D")
    if grid_type not in _GRIDS:
        raise NoStarter(f"kernel {old}: grid type {grid_type} is not supported")
    config = chosen or _configs_of(src, old)[0]
    constexprs = [a.arg for a in fdef.args.args if a.annotation is not None
                  and "constexpr" in ast.unparse(a.annotation)]
    params = [a.arg for a in fdef.args.args if a.arg not in constexprs]
    blocks, fixed = {}, {}
    for c in constexprs:
        if c not in config.kwargs:
            raise NoStarter(f"kernel {old}: constexpr {c} has no value in Inductor's config")
        if c not in _BLOCK_NAMES:
            raise NoStarter(f"kernel {old}: constexpr {c} is not a block size")
        if kind == "persistent_reduction" and c.startswith("R"):
            fixed[c] = int(config.kwargs[c])     # one block spans the whole reduction
        else:
            blocks[c] = int(config.kwargs[c])
    for d in _GRIDS[grid_type]:
        if d != "yz" and f"{d}numel" not in params:
            raise NoStarter(f"kernel {old}: grid needs {d}numel, not among its arguments")
    fdef.name = new
    fdef.decorator_list = [ast.parse("triton.jit", mode="eval").body]
    for node in ast.walk(fdef):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "triton_helpers":
            helpers.add(node.attr)
            ast.copy_location(node, node)
    body_src = ast.unparse(fdef)
    tree2 = ast.parse(body_src)
    for node in ast.walk(tree2):
        for fname, val in ast.iter_fields(node):
            if isinstance(val, ast.Attribute) and isinstance(val.value, ast.Name) and val.value.id == "triton_helpers":
                setattr(node, fname, ast.Name(id=f"_ih_{val.attr}", ctx=ast.Load()))
            elif isinstance(val, list):
                for i, v in enumerate(val):
                    if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id == "triton_helpers":
                        val[i] = ast.Name(id=f"_ih_{v.attr}", ctx=ast.Load())
    for node in ast.walk(tree2):
        if isinstance(node, ast.Name) and node.id in ("triton_helpers", "triton_heuristics"):
            raise NoStarter(f"kernel {old}: uses {node.id} in a way that cannot be inlined")
    return _Kernel(new, ast.unparse(tree2), params, blocks, fixed, int(config.num_warps),
                   int(config.num_stages), _GRIDS[grid_type], prefix)


def _literal(node: ast.AST) -> bool:
    try:
        ast.literal_eval(node)
        return True
    except ValueError:
        return False


# ---------------------------------------------------------------------------------------------
# The call(args) body


def _launch_src(k: _Kernel, call: ast.Call, variant: int) -> str:
    args = [ast.unparse(a) for a in call.args]
    if len(args) != len(k.params):
        raise NoStarter(f"kernel {k.name}: launched with {len(args)} arguments, takes {len(k.params)}")
    numel = dict(zip(k.params, args))
    dims = []
    for d in k.grid:
        if d == "yz":  # y blocks over the limit: y capped, the rest counted on z
            y = dims[-1]
            dims[-1] = f"min({y}, {MAX_Y_GRID})"
            dims.append(f"triton.cdiv({y}, {MAX_Y_GRID})")
            continue
        b = f"{d.upper()}BLOCK"
        dims.append(f"triton.cdiv({numel[d + 'numel']}, {k.prefix}{b})" if b in k.blocks else numel[d + "numel"])
    grid = "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"
    consts = [f"{c}={k.prefix}{c}" for c in k.blocks] + [f"{c}={v}" for c, v in k.fixed.items()]
    consts += [f"num_warps={k.prefix}NUM_WARPS", f"num_stages={k.prefix}NUM_STAGES"]
    return f"{k.name}[{grid}]({', '.join(args + consts)})"


class _Reinterpret(ast.NodeTransformer):
    """``reinterpret_tensor(t, size, stride, offset)`` -> ``t.as_strided(size, stride, t.storage_offset() +
    offset)``: the same view, as a tensor method (the static check keeps ``torch.*`` to allocation and
    metadata). Inductor's offset counts from ``t``'s own start; ``as_strided``'s from its storage's: an
    input that is a view into a larger buffer (GPT-2's q, k and v, three slices of one projection) read
    q's elements for k and v when the two were taken as one."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "reinterpret_tensor" and len(node.args) >= 3:
            t = node.args[0]
            start = ast.Call(func=ast.Attribute(value=t, attr="storage_offset", ctx=ast.Load()), args=[], keywords=[])
            offset = node.args[3] if len(node.args) > 3 else ast.Constant(0)
            if not (isinstance(offset, ast.Constant) and offset.value == 0):
                start = ast.BinOp(left=start, op=ast.Add(), right=offset)
            return ast.Call(func=ast.Attribute(value=t, attr="as_strided", ctx=ast.Load()),
                            args=[node.args[1], node.args[2], start], keywords=node.keywords)
        return node


def _plain(src: str) -> str:
    """A line of Inductor's call() with its helpers inside expressions (e.g. the returned tuple) as torch."""
    if "reinterpret_tensor(" not in src:
        return src
    return ast.unparse(_Reinterpret().visit(ast.parse(src)))


def _kwargs(call: ast.Call) -> dict[str, str]:
    return {k.arg: ast.unparse(k.value) for k in call.keywords if k.arg}


POOL_PARAMS = ("input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")
CONV_PARAMS = ("input", "weight", "bias", "stride", "padding", "dilation", "transposed", "output_padding", "groups")


def _library_call(call: ast.Call, target: str | None, layouts: dict[str, tuple[str, str]],
                  uses: set[str]) -> list[str] | None:
    """Inductor's call of a library matmul/convolution as the GEMM template's Triton (``gemm_template``),
    writing into the buffer Inductor allocated (or, for a convolution, one of the layout Inductor
    asserts next), so the rest of Inductor's code reads it as before. None: not one of those calls."""
    func = ast.unparse(call.func)
    args = [ast.unparse(a) for a in call.args]
    kw = _kwargs(call)
    ones = all(kw.get(k, "1") == "1" for k in ("alpha", "beta"))
    if func == "extern_kernels.mm" and len(args) == 2 and "out" in kw:
        uses.add("gemm")
        return [f"_gemm({args[0]}, {args[1]}, None, out={kw['out']})"]
    if func == "extern_kernels.addmm" and len(args) == 3 and "out" in kw and ones:
        uses.add("gemm")
        return [f"_gemm({args[1]}, {args[2]}, {args[0]}, out={kw['out']})"]
    if func == "extern_kernels.bmm" and len(args) == 2 and "out" in kw:
        uses.add("gemm")
        return [f"_bmm({args[0]}, {args[1]}, out={kw['out']})"]
    pool = re.fullmatch(r"torch\.ops\.aten\.avg_pool([123])d\.default", func)
    if pool and target is not None:  # Inductor falls back to aten for big windows (3-D: 27 elements)
        uses.add("pool")
        a = {**dict(zip(POOL_PARAMS, args)), **kw}
        call_src = (f"_avg_pool({a['input']}, {pool.group(1)}, {a['kernel_size']}, {a.get('stride', '()')}, "
                    f"{a.get('padding', '0')}, {a.get('ceil_mode', 'False')}, {a.get('count_include_pad', 'True')}, "
                    f"{a.get('divisor_override', 'None')}")
        if target in layouts:
            return [f"{target} = torch.empty_strided({layouts[target][0]}, {layouts[target][1]}, "
                    f"dtype={a['input']}.dtype, device=device)", f"{call_src}, out={target})"]
        return [f"{target} = {call_src})"]
    if func == "extern_kernels.convolution" and target is not None:
        # aten.convolution's parameters, whether Inductor passed them by position or by name
        a = {**dict(zip(CONV_PARAMS, args)), **kw}
        if "stride" not in a or not 1 <= len(ast.literal_eval(a["stride"])) <= 3:
            raise NoStarter("Inductor calls a library convolution that is not 1- to 3-D (or without its "
                            "stride): the GEMM template writes 1- to 3-D ones")
        uses.add("conv")
        out = [] if target not in layouts else [
            f"{target} = torch.empty_strided({layouts[target][0]}, {layouts[target][1]}, dtype={a['input']}.dtype, "
            f"device=device)"]
        call_src = (f"_conv({a['input']}, {a['weight']}, {a.get('bias', 'None')}, {a['stride']}, "
                    f"{a.get('padding', '(0,)')}, {a.get('dilation', '(1,)')}, {a.get('transposed', 'False')}, "
                    f"{a.get('output_padding', '(0,)')}, {a.get('groups', '1')}")
        return out + ([f"{call_src}, out={target})"] if out else [f"{target} = {call_src})"])
    return None


def _asserted_layouts(body: list[ast.stmt]) -> dict[str, tuple[str, str]]:
    """{buffer: (size, stride)} from Inductor's ``assert_size_stride(buf, size, stride, ...)`` lines."""
    out = {}
    for stmt in body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
                and ast.unparse(stmt.value.func) == "assert_size_stride" and len(stmt.value.args) >= 3:
            a = stmt.value.args
            out[ast.unparse(a[0])] = (ast.unparse(a[1]), ast.unparse(a[2]))
    return out


DEVICE_SCOPES = ("torch.cuda._DeviceGuard(", "torch.cuda.device(", "torch.xpu._DeviceGuard(")


def _flat_body(body: list[ast.stmt]) -> list[ast.stmt]:
    """call()'s statements without its device scope: on a GPU Inductor wraps them in ``with
    torch.cuda._DeviceGuard(0):`` and ``torch.cuda.set_device(0)``; the starter runs on the inputs'
    device, so the scope adds nothing."""
    out: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, ast.With) and all(ast.unparse(i.context_expr).startswith(DEVICE_SCOPES)
                                              and i.optional_vars is None for i in stmt.items):
            out += _flat_body(stmt.body)
        elif not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
                  and ast.unparse(stmt.value.func) in ("torch.cuda.set_device", "torch.xpu.set_device")):
            out.append(stmt)
    return out


def _call_body(call_fn: ast.FunctionDef, kernels: dict[str, _Kernel], variant: int,
               uses: set[str] | None = None) -> list[str]:
    """call()'s body as plain Python; ``uses`` collects the GEMM template's helpers it calls."""
    lines: list[str] = []
    uses = set() if uses is None else uses
    body = _flat_body(call_fn.body)
    layouts = _asserted_layouts(body)
    for stmt in body:
        s = _plain(ast.unparse(stmt))
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            func = ast.unparse(stmt.value.func)
            if func in ("args.clear", "assert_size_stride", "assert_alignment"):
                continue
            if func.endswith(".run") and func[:-4] in kernels:
                lines.append(_plain(_launch_src(kernels[func[:-4]], stmt.value, variant)))
                continue
            library = _library_call(stmt.value, None, layouts, uses)
            if library is not None:
                lines += [_plain(ln) for ln in library]
                continue
            raise NoStarter(f"Inductor's code calls {func}(): {_extern_reason(func)}")
        if isinstance(stmt, ast.Delete):
            lines.append(s)
            continue
        if isinstance(stmt, ast.Return):
            lines.append(s)
            continue
        if isinstance(stmt, ast.Assign):
            v = stmt.value
            if isinstance(v, (ast.Name, ast.Tuple)) and all(isinstance(e, ast.Name) for e in ast.walk(v)
                                                           if not isinstance(e, (ast.Tuple, ast.Load, ast.Store))):
                lines.append(s)
                continue
            if isinstance(v, ast.Call):
                func = ast.unparse(v.func)
                if func == "get_raw_stream":
                    continue
                if func.startswith("empty_strided_") and len(v.args) == 3:
                    size, stride, dtype = (ast.unparse(a) for a in v.args)
                    lines.append(f"{ast.unparse(stmt.targets[0])} = torch.empty_strided({size}, {stride}, "
                                 f"dtype={dtype}, device=device)")
                    continue
                if func == "reinterpret_tensor":
                    lines.append(s)  # a view, written as t.as_strided(...) by _plain
                    continue
                target = stmt.targets[0].id if isinstance(stmt.targets[0], ast.Name) else None
                library = _library_call(v, target, layouts, uses)
                if library is not None:
                    lines += [_plain(ln) for ln in library]
                    continue
                raise NoStarter(f"Inductor's code calls {func}(): {_extern_reason(func)}")
        raise NoStarter(f"unsupported statement in Inductor's call(): {s[:120]}")
    return lines


def _extern_reason(func: str) -> str:
    if func.startswith("extern_kernels.") or func.startswith("aten.") or func.startswith("torch.ops."):
        return ("Inductor called a library kernel (extern kernel) that the GEMM template does not write "
                "(it writes mm, addmm with alpha = beta = 1, bmm, 1- to 3-D convolutions and average pooling)")
    return "not a Triton kernel launch or an allocation"


def _grid_knobs(k: _Kernel, numels: dict[str, int]) -> dict[str, list[int]]:
    out = {}
    for b, v in k.blocks.items():
        d = b[0].lower() if b[0] != "R" else b[:2].lower() + "_"
        n = numels.get(f"{d}numel", v)
        top = max(v, 1 << max(0, int(n - 1).bit_length()))
        space = [1 << i for i in range(0, 14) if (1 << i) <= max(v * 8, 1) and (1 << i) <= top]
        if b.startswith("R"):
            space = [s for s in space if s >= 2] or [v]
        out[f"{k.prefix}{b}"] = sorted(set(space) | {v})
    out[f"{k.prefix}NUM_WARPS"] = sorted(set(NUM_WARPS_SPACE) | {k.num_warps})
    out[f"{k.prefix}NUM_STAGES"] = sorted(set(NUM_STAGES_SPACE) | {k.num_stages})
    return out


def _variant(cap: _Capture, variant: int, helpers: set[str], templates: set[str]):
    """(kernels, call()'s argument names, its body, knobs) of one captured module; ``helpers`` and
    ``templates`` collect the inlined triton_helpers and the GEMM template parts it needs."""
    tree = ast.parse(cap.code)
    kernels: dict[str, _Kernel] = {}
    call_fn = None
    numels: dict[str, dict[str, int]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = ast.unparse(node.value.func)
            if func.startswith("async_compile.") and func != "async_compile.wait":
                old = node.targets[0].id
                if func != "async_compile.triton":
                    raise NoStarter(f"Inductor made a {func.split('.')[1]} kernel ({old}), not a Triton one")
                src = node.value.args[1].value
                prefix = (f"V{variant}_" if variant else "") + f"K{len(kernels)}_"
                new = old + (f"_v{variant}" if variant else "")
                kernels[old] = _kernel(old, new, src, prefix, cap.chosen.get(old), helpers)
        if isinstance(node, ast.FunctionDef) and node.name == "call":
            call_fn = node
    if call_fn is None:
        raise NoStarter("no call() in Inductor's module")
    for stmt in _flat_body(call_fn.body):
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            func = ast.unparse(stmt.value.func)
            if func.endswith(".run") and func[:-4] in kernels:
                k = kernels[func[:-4]]
                numels[k.name] = {p: a.value for p, a in zip(k.params, stmt.value.args)
                                  if p.endswith("numel") and isinstance(a, ast.Constant)}
    # the first statement unpacks args
    first = call_fn.body[0]
    if not (isinstance(first, ast.Assign) and ast.unparse(first.value) == "args"):
        raise NoStarter("Inductor's call() does not start by unpacking its arguments")
    targets = first.targets[0]
    names = [e.id for e in targets.elts] if isinstance(targets, ast.Tuple) else [targets.id]
    used: set[str] = set()
    body = _call_body(ast.FunctionDef(name="call", args=call_fn.args, body=call_fn.body[1:], decorator_list=[]),
                      kernels, variant, used)
    if not kernels and not used:
        raise NoStarter("Inductor generated no Triton kernel (the graph has no compute)")
    templates |= used
    knobs: dict[str, list[int]] = {}
    for k in kernels.values():
        knobs.update(_grid_knobs(k, numels.get(k.name, {})))
    return kernels, names, body, knobs


# ---------------------------------------------------------------------------------------------
# Assembling kernel.py


def _signature(inputs) -> tuple:
    return tuple((tuple(x.shape), tuple(x.stride()), str(x.dtype)) if isinstance(x, torch.Tensor) else repr(x)
                 for x in inputs)


def _template_sources(templates: set[str]) -> list[str]:
    """The GEMM template's tile knobs and helpers (``_gemm``/``_bmm``, ``_conv``) that call() uses."""
    if not templates:
        return []
    parts = ["# The library calls (matmul, convolution) as the GEMM template's Triton (gemm_template.py).\n"
             + gemm_template.TILE.rstrip()]
    if "gemm" in templates:
        parts.append(gemm_template.GEMM.rstrip())
    if "conv" in templates:
        parts.append(gemm_template.CONV.rstrip())
    if "pool" in templates:
        parts.append(gemm_template.POOL.rstrip())
    return parts


def _emit(variants, helper_src: list[str], out_spec, description: str) -> str:
    lines = [f'"""{description}', "",
             "Generated from torch.compile's Inductor code by autokernel_tui.profiling.inductor_starter: the",
             "kernels are Inductor's, the knobs are the block sizes, warps and stages Inductor chose.",
             '"""', "",
             "import os", "", "import torch", "import triton", "import triton.language as tl",
             "from triton.language.extra import libdevice", "", "tl_math = tl.math",
             *_libdevice_shim(variants),
             f"_IH_LOG_2_E: tl.constexpr = tl.constexpr({1.4426950408889634!r})", "",
             "# Tunable knobs: module-level constants the offline tuner rewrites."]
    for v in variants:
        for k in v["kernels"].values():
            for b, val in k.blocks.items():
                lines.append(f"{k.prefix}{b} = {val}")
            lines.append(f"{k.prefix}NUM_WARPS = {k.num_warps}")
            lines.append(f"{k.prefix}NUM_STAGES = {k.num_stages}")
    lines += ["", ""]
    for h in helper_src:
        lines += [h, "", ""]
    for v in variants:
        for k in v["kernels"].values():
            lines += [k.source, "", ""]
    for j, v in enumerate(variants):
        lines.append(f"def _call_v{j}(args, device):")
        lines.append(f"    {', '.join(v['names'])}{',' if len(v['names']) == 1 else ''} = args")
        lines += ["    " + ln for ln in v["body"]]
        lines += ["", ""]
    lines.append("_VARIANTS = {")
    for j, v in enumerate(variants):
        lines.append(f"    {v['signature']!r}: (_call_v{j}, {v['order']!r}),")
    lines += ["}", "", "",
              "def _signature(inputs):",
              "    return tuple((tuple(x.shape), tuple(x.stride()), str(x.dtype)) if isinstance(x, torch.Tensor)",
              "                 else repr(x) for x in inputs)", "", "",
              "def kernel_fn(*inputs):",
              "    key = _signature(inputs)",
              "    if key not in _VARIANTS:",
              "        raise ValueError(f'kernel_fn was generated for the input signatures {list(_VARIANTS)}, not {key}')",
              "    call, order = _VARIANTS[key]",
              "    device = next((x.device for x in inputs if isinstance(x, torch.Tensor)), None)",
              "    outs = call([inputs[i] for i in order], device)"]
    lines.append(f"    return {out_spec}")
    return "\n".join(lines) + "\n"


# libdevice's generic stubs do nothing under TRITON_INTERPRET=1: the same math through tl there.
_INTERP_LIBDEVICE = {
    "tanh": "2.0 * tl.sigmoid(2.0 * x) - 1.0",
    "isnan": "x != x",
    "isinf": "tl.abs(x) == float('inf')",
    "log1p": "tl.log(1.0 + x)",
    "expm1": "tl.exp(x) - 1.0",
    "pow": "tl.exp2(y * tl.log2(x))",
    "signbit": "x < 0",
    "nearbyint": "tl.floor(x + 0.5)",
    "trunc": "tl.where(x < 0, tl.ceil(x), tl.floor(x))",
    "tan": "tl.sin(x) / tl.cos(x)",
}
_UNARY_TL_MATH = {"erf", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "floor", "ceil", "abs"}


def _libdevice_shim(variants) -> list[str]:
    used = sorted({m for v in variants for k in v["kernels"].values() for m in _libdevice_uses(k.source)})
    if not used:
        return []
    out = ["", "if os.environ.get(\"TRITON_INTERPRET\") == \"1\":",
           "    # the interpreter runs libdevice's stubs as no-ops: the same math through tl",
           "    class libdevice:  # noqa: N801"]
    for m in used:
        if m in _INTERP_LIBDEVICE:
            args = "x, y" if m == "pow" else "x"
            out += ["        @staticmethod", f"        def {m}({args}):", f"            return {_INTERP_LIBDEVICE[m]}"]
        elif m in _UNARY_TL_MATH:
            out += ["        @staticmethod", f"        def {m}(x):", f"            return tl.math.{m}(x)"]
        else:
            raise NoStarter(f"libdevice.{m} has no interpreter stand-in")
    return out


def _libdevice_uses(src: str) -> set[str]:
    return {n.attr for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name) and n.value.id == "libdevice"}


def _out_spec(example_out) -> str:
    if isinstance(example_out, torch.Tensor):
        return "outs[0]"
    if isinstance(example_out, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in example_out):
        body = ", ".join(f"outs[{i}]" for i in range(len(example_out)))
        return f"({body}{',' if len(example_out) == 1 else ''})" if isinstance(example_out, tuple) else f"[{body}]"
    raise NoStarter(f"fn returns {type(example_out).__name__}; a tensor or a tuple/list of tensors is supported")


def _can_run(device: str) -> bool:
    if torch.device(device).type == "cuda":
        return torch.cuda.is_available()
    return os.environ.get("TRITON_INTERPRET") == "1"


def _verify(source: str, fn: Callable, all_inputs: list[tuple]) -> None:
    with tempfile.TemporaryDirectory(prefix="autokernel-starter-") as folder:
        path = Path(folder) / "kernel.py"  # triton.jit reads each kernel's source from its file
        path.write_text(source, encoding="utf-8")
        try:
            kernel_fn = load_kernel(path)
        except PatchError as e:
            raise NoStarter(f"generated kernel.py does not load: {e}") from e
        for inputs in all_inputs:
            _check_against(kernel_fn, fn, inputs)


# Relative L2 error within which the starter and fn are the same computation (a wrong kernel is O(1)):
# TF32's rounding unit (2**-11) for float32, bfloat16's (2**-8) for 16-bit outputs, with room for a sum.
RELATIVE_L2_SAME = {"wide": 5e-3, "16-bit": 3e-2}


def _check_against(kernel_fn: Callable, fn: Callable, inputs: tuple) -> None:
    want = fn(*inputs)
    try:
        got = kernel_fn(*inputs)
    except Exception as e:  # noqa: BLE001 - any failure of the generated code is a reason, not a crash
        raise NoStarter(f"generated kernel_fn raised {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                        if str(e) else f"generated kernel_fn raised {type(e).__name__}") from e
    wants = [want] if isinstance(want, torch.Tensor) else list(want)
    gots = [got] if isinstance(got, torch.Tensor) else list(got)
    if len(wants) != len(gots):
        raise NoStarter(f"generated kernel_fn returned {len(gots)} outputs, fn {len(wants)}")
    for w, g in zip(wants, gots):
        if w.shape != g.shape or w.dtype != g.dtype:
            raise NoStarter(f"generated kernel_fn output {tuple(g.shape)} {g.dtype} != fn's "
                            f"{tuple(w.shape)} {w.dtype}")
        wide = w.dtype in (torch.float32, torch.float64)
        tol = 1e-4 if wide else 2e-2
        if w.is_floating_point() and not torch.allclose(g.float(), w.float(), atol=tol, rtol=tol, equal_nan=True):
            # fn on a GPU may itself round to TF32 (cuDNN's float32 convolutions do by default) where the
            # starter is as precise as fp32: the same computation is within a relative L2 of TF32's unit
            diff = (g.double() - w.double()).nan_to_num()
            rel_l2 = float(diff.norm() / w.double().nan_to_num().norm().clamp_min(1e-30))
            if rel_l2 > (RELATIVE_L2_SAME["wide"] if wide else RELATIVE_L2_SAME["16-bit"]):
                raise NoStarter("generated kernel_fn does not match fn (max abs err "
                                f"{diff.abs().max().item():.3g}, rel L2 {rel_l2:.2g})")
        if not w.is_floating_point() and not torch.equal(g, w):
            raise NoStarter("generated kernel_fn does not match fn")


# Inductor's calls of a library attention kernel (flash, memory-efficient, cuDNN, the CPU's flash).
LIBRARY_ATTENTION = re.compile(r"_scaled_dot_product_\w*attention|_flash_attention_forward|_efficient_attention_forward")
ATTENTION_WRITTEN_OUT = (" Attention is written out (matmul, softmax, matmul: torch's math backend), as"
                         " Inductor's own code calls a library attention kernel, which has no Triton to take.")


def starter_source(fn: Callable, example_inputs: tuple, device: str = "cuda", *,
                   more_inputs: tuple[tuple, ...] = (), verify: bool | None = None,
                   description: str = "Inductor's Triton for this task, as a starting kernel.py.") -> StarterResult:
    """kernel.py text whose ``kernel_fn(*inputs)`` computes ``fn(*inputs)`` with Inductor's kernels.

    ``example_inputs`` (and each of ``more_inputs``) must already be on ``device``. Never raises for
    an op it cannot handle: ``result.reason`` says why, ``result.source`` is then None. Where
    Inductor calls a library attention kernel (KernelBench's D = 1024 attention, a ViT's or T5's
    bidirectional one), the capture is made again under torch's math attention backend, which
    Inductor compiles to its Triton softmax between two matmuls (the GEMM template's).
    """
    result = _starter_source(fn, example_inputs, device, more_inputs, verify, description)
    if result.ok or not LIBRARY_ATTENTION.search(result.reason or ""):
        return result
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        written_out = _starter_source(fn, example_inputs, device, more_inputs, verify,
                                      description + ATTENTION_WRITTEN_OUT)
    if written_out.ok:
        return written_out
    written_out.reason = f"{result.reason}; with attention written out: {written_out.reason}"
    return written_out


def _starter_source(fn: Callable, example_inputs: tuple, device: str, more_inputs: tuple[tuple, ...],
                    verify: bool | None, description: str) -> StarterResult:
    codes: list[str] = []
    try:
        all_inputs = [tuple(example_inputs)] + [tuple(m) for m in more_inputs]
        with torch.no_grad():
            spec = _out_spec(fn(*all_inputs[0]))
        helpers: set[str] = set()
        templates: set[str] = set()
        variants, seen = [], set()
        for j, inputs in enumerate(all_inputs):
            sig = _signature(inputs)
            if sig in seen:
                continue
            seen.add(sig)
            cap = _capture(fn.graph_for(inputs) if isinstance(fn, Traced) else fn, inputs, device)
            codes.append(cap.code)
            kernels, names, body, knobs = _variant(cap, len(variants), helpers, templates)
            if len(names) != len(cap.input_order):
                raise NoStarter(f"Inductor's call() takes {len(names)} arguments, the graph {len(cap.input_order)}")
            variants.append({"kernels": kernels, "names": names, "body": body, "knobs": knobs,
                             "signature": sig, "order": cap.input_order})
        source = _emit(variants, _helper_sources(helpers) + _template_sources(templates), spec, description)
        knobs = {k: v for var in variants for k, v in var["knobs"].items()}
        if templates:  # the GEMM template's tile of the inputs' dtypes
            tensors = [x for inputs in all_inputs for x in inputs
                       if isinstance(x, torch.Tensor) and x.is_floating_point()]
            floats = {str(x.dtype).replace("torch.", "") for x in tensors}
            # a matrix-vector product is likely where an operand is one column or one row (KernelBench's)
            gemv = "gemm" in templates and any(x.dim() >= 2 and 1 in x.shape[-2:] for x in tensors)
            if templates - {"pool"}:
                knobs.update(gemm_template.knobs_for(floats, gemm="gemm" in templates, gemv=gemv,
                                                    conv="conv" in templates))
            if "pool" in templates:
                knobs.update(gemm_template.POOL_KNOBS)
        verified = False
        if verify is None:
            verify = _can_run(device)
        if verify:
            with torch.no_grad():
                _verify(source, fn, all_inputs)
            verified = True
        return StarterResult(source, knobs, None, verified, codes)
    except NoStarter as e:
        return StarterResult(None, {}, str(e), False, codes)


class Traced:
    """``fn`` traced to aten ops (``make_fx``) once per input signature, for what Dynamo cannot trace:
    a backward task's reference calls ``torch.autograd.grad``. Called, it runs ``fn`` itself (the check
    of the starter against it); ``graph_for(inputs)`` is the graph torch.compile compiles, the forward
    recomputed and its backward, as aten calls with the shapes of ``inputs`` baked in (a convolution's
    backward as convolutions, ``conv_backward``: Inductor writes no Triton for ``convolution_backward``)."""

    def __init__(self, fn: Callable) -> None:
        self.fn = fn
        self._graphs: dict = {}

    def __call__(self, *inputs):
        return self.fn(*inputs)

    def graph_for(self, inputs: tuple):
        from torch.fx.experimental.proxy_tensor import make_fx

        from autokernel_tui.profiling.conv_backward import decompositions

        b = torch.backends.cuda  # the SDPA backends on: a replay under the math backend writes attention out
        key = (_signature(inputs), b.flash_sdp_enabled(), b.mem_efficient_sdp_enabled(), b.cudnn_sdp_enabled())
        if key not in self._graphs:
            self._graphs[key] = _no_output_aliases(make_fx(self.fn, decomposition_table=decompositions())(*inputs),
                                                   inputs)
        return self._graphs[key]


def _no_output_aliases(graph: torch.fx.GraphModule, inputs: tuple) -> torch.fx.GraphModule:
    """``graph`` with each output that shares memory with an input (a residual add's gradient is its
    grad_out itself, or a view of it) copied (``aten.clone``). torch.compile hands such an output back
    outside Inductor's code, whose call() would then return fewer tensors than the graph."""
    with torch.no_grad():
        outs = graph(*inputs)
    outs = [outs] if isinstance(outs, torch.Tensor) else list(outs)
    storages = {x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor)}
    aliased = {i for i, o in enumerate(outs) if isinstance(o, torch.Tensor) and o.untyped_storage().data_ptr()
               in storages}
    if not aliased:
        return graph
    output = next(n for n in graph.graph.nodes if n.op == "output")
    values = output.args[0]
    single = not isinstance(values, (tuple, list))
    values = [values] if single else list(values)
    with graph.graph.inserting_before(output):
        for i in aliased:
            values[i] = graph.graph.call_function(torch.ops.aten.clone.default, (values[i],))
    output.args = (values[0] if single else type(output.args[0])(values),)
    graph.recompile()
    return graph


def _template_starter(ref, inputs: tuple, name: str, check: bool | None) -> StarterResult | None:
    """A KernelBench forward as the GEMM template (``gemm_template.template_source``) when every op it
    runs is one the template writes, else None (Inductor's then). The forward is recorded on the meta
    device (no memory, no time); ``kernel_fn(*inputs)`` hands the chain its tensors by position; checked
    against the reference where it can run here, like Inductor's."""
    from autokernel_tui.profiling import generate
    from autokernel_tui.profiling.replay import op_inputs, record_forward

    meta = tuple(x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs)
    try:
        with torch.no_grad():
            ref.reference(*meta)  # the reference builds its Model on first use: not ops of the forward
        record = record_forward(ref.reference, meta, known=meta)
    except Exception:  # noqa: BLE001 - a forward the recorder cannot follow: Inductor's starter instead
        return None
    seen: list[int] = []
    for op in record["ops"]:
        seen += [t for t in op_inputs(op) if record["tensors"][t]["producer"] is None and t not in seen]
    if not record["model_outputs"] or any(t not in record["known"] for t in seen):
        return None  # a tensor the forward made without an op, or no output
    unit = {"ops": list(range(len(record["ops"]))), "inputs": seen, "outputs": record["model_outputs"]}
    chain = generate.unit_spec(record, unit,
                               str(next((x.dtype for x in inputs if isinstance(x, torch.Tensor)
                                         and x.is_floating_point()), torch.float32)).replace("torch.", ""))
    if not gemm_template.applies(chain):
        return None
    try:
        source, knobs = gemm_template.template_source(chain, name)
    except gemm_template.NoTemplate:
        return None
    positions = [record["known"].index(t) for t in seen]
    source = source.replace("\ndef kernel_fn(", "\ndef _chain(") + KERNELBENCH_ADAPTER.format(positions=positions)
    verified = False
    if check is not False and (torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"):
        try:
            _verify(source, ref.reference, [tuple(inputs)])
        except NoStarter:
            return None
        verified = True
    return StarterResult(source, knobs, None, verified, origin="profiling/gemm_template")


KERNELBENCH_ADAPTER = '''

# kernel_fn takes the problem's inputs, then the Model's parameters and buffers (reference.py's STATE);
# the chain above takes the tensors its ops read, in first-use order: these are their positions.
_CHAIN_ARGS = {positions!r}


def kernel_fn(*inputs):
    return _chain(*[inputs[i] for i in _CHAIN_ARGS])
'''


# ---------------------------------------------------------------------------------------------
# A task's starter (run by profiling/starter_process.py in a process of its own)

def _task_main(task_dir: str) -> int:
    """Print a StarterResult (JSON) for the generated task in ``task_dir``: its reference at its shape."""
    import importlib.util
    import json
    import sys
    from pathlib import Path

    import tomllib

    # task.toml read directly: the task has no kernel.py yet (this makes it)
    spec = tomllib.loads((Path(task_dir) / "task.toml").read_text(encoding="utf-8"))
    backward = spec.get("kind", "forward") == "backward"
    if backward:  # the forward's reference differentiated, as the harness checks it: inputs + grad_outs
        from autokernel_tui.harness.worker.reference import load_reference

        ref = load_reference(Path(task_dir))
    else:
        loader = importlib.util.spec_from_file_location("reference", Path(task_dir) / "reference.py")
        ref = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(ref)  # type: ignore[union-attr]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, spec["dtypes"][0])

    def dims(shape: dict) -> dict:
        return {k: v for k, v in shape.items() if k != "name"}

    first = dims(spec["shapes"][0])
    inputs = ref.make_inputs(first, dtype, device, 0)
    more = tuple(ref.make_inputs(dims(s), dtype, device, 0) for s in spec.get("test_shapes", []) if dims(s) != first)
    check = None if os.environ.get(VERIFY_ENV) != "0" else False
    # a KernelBench forward of matmuls or convolutions and the template's pointwise ops: its GEMM template,
    # epilogue fused (Inductor's would be a library call plus a Triton kernel)
    r = _template_starter(ref, tuple(inputs), spec["name"], check) if spec.get("profile", {}).get("kernelbench") \
        else None
    if r is None:
        fn = Traced(ref.reference) if backward else ref.reference
        what = "its forward recomputed and its backward" if backward else "this task"
        r = starter_source(fn, tuple(inputs), device, more_inputs=more, verify=check,
                           description=f"Inductor's Triton for {spec['name']} ({what}), as a starting kernel.py.")
    json.dump({"source": r.source, "knobs": r.knobs, "reason": r.reason, "verified": r.verified,
               "origin": r.origin}, sys.stdout)
    return 0
