"""Put generated kernels into any model: find each recorded chain in the model's aten graph, call the kernel there.

A starter has a module to replace (``patch.py``); a generated task (``generate.py``) has none: it is
a chain of aten calls recorded at the dispatcher (``replay.py``), e.g. ``convolution -> relu`` or
``addmm -> mul -> leaky_relu``, that may sit anywhere inside a user's module. So the model is traced
once at the same level (``make_fx``: the calls the dispatcher sees, below autograd and every
CompositeImplicit decomposition, which is what the recorder saw), and each task's chain is looked for
in that graph: the same overloads in the same data flow, every non-tensor argument equal, every
tensor of the same shape, stride and dtype. Each site found is replaced by one call of the task's
``kernel_fn`` on the chain's outside tensors; a site that differs in anything is left alone, so a
kernel only ever runs on the exact call its task checked.

The result is a ``GraphPatched`` module: the traced graph (parameters held as constants, shapes
fixed to the traced call) with the kernels in it. Called with inputs of other shapes, dtypes or
devices it runs the original model instead (the graph would be wrong for them) and counts it.
In eager mode it runs the aten calls one by one like the model (without the modules' Python);
``custom_ops=True`` makes each kernel a ``torch.library`` custom op, so ``torch.compile`` of the
patched module keeps the kernel and compiles the rest, and CUDA graphs capture it; the profiler
ranges the trace recorded are then left out (each one would break the compiled graph).

For training (``patch_graph(..., backwards={...})``) the trace takes the parameters and buffers as inputs
and runs with gradients on, so the patched graph, run eagerly, is differentiated op by op like the
model; each site is then an autograd function whose forward is the forward task's kernel (or the
recorded chain, where only a backward task was given) and whose backward is the generated backward
task's kernel (``gen_<ops>_bwd_<n>``, the same recorded chain: ``kernel_fn(*inputs, *grad_outs)``),
else autograd through the chain replayed from its saved inputs. A chain whose inner values the
backward needs is still one site: the kernels take only the chain's outside tensors, so nothing the
model's own autograd would have kept is asked of them. Self-contained (torch and the standard
library): ``export`` copies it into the package it writes beside ``patch.py``.
"""

from __future__ import annotations

import hashlib
import json
import operator
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn as nn

try:  # inside autokernel-tui: the CLI prints these as one line
    from autokernel_tui.errors import AutokernelError as _Base
    from autokernel_tui.profiling.patch import (_load_module, activation_of, epilogue_candidates, load_kernel,
                                                takes_activation)
except ImportError:  # inside an exported package, beside its copy of patch.py
    _Base = Exception
    from ._patch import (_load_module, activation_of, epilogue_candidates, load_kernel,  # type: ignore[no-redef]
                         takes_activation)


class GraphPatchError(_Base):
    """A generated kernel cannot be put into the model."""


def is_generated(kernel_path: str | Path) -> bool:
    """Whether a kernel.py belongs to a generated task (its reference.py replays a recorded UNIT)."""
    ref = Path(kernel_path).parent / "reference.py"
    return ref.is_file() and "\nUNIT = " in ref.read_text(encoding="utf-8", errors="replace")


def load_unit(kernel_path: str | Path) -> dict:
    """The recorded chain (``UNIT``) of a generated task's kernel.py, read from its reference.py."""
    ref = Path(kernel_path).parent / "reference.py"
    text = ref.read_text(encoding="utf-8") if ref.is_file() else ""
    start = text.find("UNIT = json.loads(r'''")
    if start < 0:
        raise GraphPatchError(f"{ref}: not a generated task's reference (no recorded UNIT)")
    body = text[start + len("UNIT = json.loads(r'''"):]
    end = body.find("''')")
    try:
        return json.loads(body[:end])
    except ValueError as exc:
        raise GraphPatchError(f"{ref}: its UNIT is not valid JSON: {exc}") from None


# Matching -----------------------------------------------------------------------------------------
def _meta_of(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _tensor_matches(node: Any, meta: dict) -> bool:
    val = _meta_of(node)
    return (isinstance(val, torch.Tensor) and list(val.shape) == list(meta["shape"])
            and list(val.stride()) == list(meta["stride"]) and str(val.dtype).replace("torch.", "") == meta["dtype"])


def _scalar_matches(recorded: Any, value: Any) -> bool:
    if isinstance(recorded, dict):
        for key, conv in (("dtype", lambda v: str(v).replace("torch.", "")), ("device", lambda v: v.type),
                          ("layout", lambda v: str(v).replace("torch.", "")),
                          ("memory_format", lambda v: str(v).replace("torch.", ""))):
            if key in recorded:
                try:
                    return conv(value) == recorded[key]
                except AttributeError:
                    return False
        if "float" in recorded:
            return isinstance(value, float) and repr(value) == recorded["float"]
        return False
    if isinstance(recorded, bool) or isinstance(value, bool):
        return recorded is value or recorded == value and type(recorded) is type(value)
    return recorded == value


class _Binding:
    """Recorded tensor ids bound to graph nodes while one site is being matched."""

    def __init__(self, unit: dict) -> None:
        self.unit = unit
        self.env: dict[int, Any] = {}

    def arg(self, recorded: Any, value: Any) -> bool:
        if isinstance(recorded, dict) and "tensor" in recorded:
            tid = recorded["tensor"]
            if tid in self.env:
                return self.env[tid] is value
            if not isinstance(value, torch.fx.Node) or not _tensor_matches(value, self.unit["tensors"][str(tid)]):
                return False
            self.env[tid] = value
            return True
        if isinstance(recorded, list):
            return (isinstance(value, (list, tuple)) and len(value) == len(recorded)
                    and all(self.arg(r, v) for r, v in zip(recorded, value)))
        return not isinstance(value, torch.fx.Node) and _scalar_matches(recorded, value)

    def outputs(self, op: dict, node: torch.fx.Node) -> bool:
        """Bind the op's recorded outputs to ``node`` (one tensor) or its ``getitem`` users (several)."""
        outs = op["outputs"]
        val = _meta_of(node)
        if not isinstance(val, (tuple, list)):
            if len(outs) != 1 or outs[0] is None or not _tensor_matches(node, self.unit["tensors"][str(outs[0])]):
                return False
            self.env[outs[0]] = node
            return True
        items = {u.args[1]: u for u in node.users if u.target is operator.getitem}
        for i, tid in enumerate(outs):
            if tid is None or str(tid) not in self.unit["tensors"]:
                continue
            if i in items:
                if not _tensor_matches(items[i], self.unit["tensors"][str(tid)]):
                    return False
                self.env[tid] = items[i]
            else:
                self.env[tid] = (node, i)  # unused in the model: nothing to rewire
        return True


def _target_name(node: torch.fx.Node) -> str:
    return str(node.target) if node.op == "call_function" else ""


def _try_op(b: _Binding, op: dict, node: torch.fx.Node) -> bool:
    if _target_name(node) != op["op"]:
        return False
    saved = dict(b.env)
    kwargs = op["kwargs"]
    ok = (len(node.args) == len(op["args"]) and all(b.arg(r, v) for r, v in zip(op["args"], node.args))
          and set(kwargs) == set(node.kwargs) and all(b.arg(kwargs[k], node.kwargs[k]) for k in kwargs)
          and b.outputs(op, node))
    if not ok:
        b.env = saved
    return ok


def match_site(unit: dict, root: torch.fx.Node) -> dict | None:
    """The unit matched with its first op at ``root``: {"nodes", "inputs", "outputs"} or None."""
    b = _Binding(unit)
    ops = unit["ops"]
    if not _try_op(b, ops[0], root):
        return None
    nodes = [root]
    for op in ops[1:]:
        # A later op reads a value an earlier op of the chain made: look among that value's users.
        made = [b.env[t] for t in _tensor_ids(op) if t in b.env and isinstance(b.env[t], torch.fx.Node)]
        users = [u for n in made for u in n.users if u not in nodes]
        hit = next((u for u in users if _try_op(b, op, u)), None)
        if hit is None:
            return None
        nodes.append(hit)
    inputs = [b.env.get(t) for t in unit["inputs"]]
    outputs = [b.env.get(t) for t in unit["outputs"]]
    if any(not isinstance(n, torch.fx.Node) for n in inputs) or any(o is None for o in outputs):
        return None
    # The chain's inner values must not be read outside it (the recorded chain had single consumers).
    inner = set(nodes) | {u for n in nodes for u in n.users if u.target is operator.getitem}
    exits = {o for o in outputs if isinstance(o, torch.fx.Node)}
    for n in inner - exits:
        if any(u not in inner for u in n.users):
            return None
    return {"nodes": nodes, "inputs": inputs, "outputs": outputs}


def _tensor_ids(op: dict) -> list[int]:
    found: list[int] = []

    def walk(v: Any) -> None:
        if isinstance(v, dict) and "tensor" in v:
            found.append(v["tensor"])
        elif isinstance(v, list):
            for x in v:
                walk(x)
    walk(op["args"])
    walk(list(op["kwargs"].values()))
    return found


def iter_sites(gm: torch.fx.GraphModule, unit: dict):
    """The non-overlapping places the unit's chain occurs in ``gm``'s graph, in graph order, found as
    they are asked for."""
    taken: set = set()
    for node in list(gm.graph.nodes):
        if node in taken or _target_name(node) != unit["ops"][0]["op"]:
            continue
        site = match_site(unit, node)
        if site is not None and not taken.intersection(site["nodes"]):
            taken.update(site["nodes"])
            yield site


# Ops that write an argument in place with no trailing underscore (so the record does not say
# "mutates"): a batch norm in training updates its running statistics (arguments 3 and 4).
_WRITES_RUNNING_STATS = ("aten.native_batch_norm.default", "aten._native_batch_norm_legit.default")


def _tid(arg: Any) -> int | None:
    return arg["tensor"] if isinstance(arg, dict) and "tensor" in arg else None


def running_stats(unit: dict) -> list[tuple[int, int, int, float]]:
    """(x, running mean, running var, momentum) for each batch norm in training in the chain whose
    three tensors are all the chain's inputs (positions among ``unit["inputs"]``): the site updates
    those statistics itself (``_update_running_stats``), as the op would have."""
    out = []
    for op in unit["ops"]:
        args = op["args"]
        if op["op"] in _WRITES_RUNNING_STATS and len(args) > 6 and args[5] is True:
            ids = [_tid(args[0]), _tid(args[3]), _tid(args[4])]
            if all(t in unit["inputs"] for t in ids) and isinstance(args[6], (int, float)):
                out.append((*(unit["inputs"].index(t) for t in ids), float(args[6])))
    return out


def _written(op: dict, unit: dict) -> list[int]:
    """The tensor ids an op of a unit writes in place (and the site does not write for it)."""
    args = op["args"]
    if op["op"] in _WRITES_RUNNING_STATS and len(args) > 5 and args[5] is True:
        handled = {unit["inputs"][p] for x, m, v, _ in running_stats(unit) for p in (m, v)}
        return [t for t in (_tid(a) for a in args[3:5]) if t is not None and t not in handled]
    if op.get("mutates") and args and isinstance(args[0], dict) and "tensor" in args[0]:
        return [args[0]["tensor"]]  # an in-place op writes its self argument
    return []


def writes_outside(unit: dict, site: dict) -> str | None:
    """Why a kernel cannot stand in for ``unit`` at ``site``: an op of the chain writes into a tensor
    from outside it that something else sees (the model's parameters or buffers, a batch norm's running
    statistics in training; a value another op reads too), which a kernel returning the chain's outputs
    would leave as it was. An in-place op on a value that only the chain reads (a residual ``+=``) is
    fine: the graph reads the result through the op. None when nothing outside is written."""
    chain = set(site["nodes"])
    for op in unit["ops"]:
        for tid in _written(op, unit):
            if tid not in unit["inputs"]:
                continue
            node = site["inputs"][unit["inputs"].index(tid)]
            if node.op in ("placeholder", "get_attr") or any(u not in chain for u in node.users):
                what = ("a batch norm in training updates its running statistics" if op["op"] in _WRITES_RUNNING_STATS
                        else f"{op['op'].replace('aten.', '')} writes into a tensor others see")
                return what + ", which the kernel does not"
    return None


def find_sites(gm: torch.fx.GraphModule, unit: dict) -> list[dict]:
    """Every non-overlapping place the unit's chain occurs in ``gm``'s graph, in graph order."""
    return list(iter_sites(gm, unit))


# The kernel as a call in the graph ------------------------------------------------------------------
_CALLS: dict[str, Callable] = {}


def _restride(out: torch.Tensor, meta: dict, inputs: tuple, taken: set[int] | None = None) -> torch.Tensor:
    """``out`` in the layout the recorded call had (the rest of the graph was traced reading that
    layout), and never one of the inputs itself. ``taken`` (a custom op's call): the storages of its
    inputs and of the outputs before this one, which ``out`` may not share either: a custom op may
    not return an alias (ViT's ``addmm -> split`` returns three views of one buffer; torch refused
    the op, and CUDA graph trees keep books of each output's storage). ``out``'s storage joins it."""
    ptr = out.untyped_storage().data_ptr() if taken is not None and out.numel() else None
    if list(out.stride()) != list(meta["stride"]) or any(out is x for x in inputs) or (ptr is not None
                                                                                    and ptr in taken):
        fixed = torch.empty_strided(meta["shape"], meta["stride"], dtype=out.dtype, device=out.device)
        fixed.copy_(out)
        out = fixed
    if taken is not None and out.numel():
        taken.add(out.untyped_storage().data_ptr())
    return out


def kernel_call(name: str, fn: Callable, unit: dict, custom_op: bool, label: str | None = None,
                gradients: "SiteGradients | None" = None) -> Callable:
    """``fn`` (a generated task's kernel_fn) as the graph calls it: outside tensors in, a list of the
    chain's outputs (in the recorded layout) out; a torch custom op with ``custom_op``. Each call runs
    inside ``record_function("autokernel::<label>")`` (default: the task's name), so a profile of the
    patched model puts the kernel's time under that family. With ``gradients`` it is differentiable
    (``SiteGradients``): an autograd function, or the custom op with its autograd registered."""
    metas = [unit["tensors"][str(t)] for t in unit["outputs"]]
    digest = hashlib.sha256(repr((name, id(fn), fn.__module__, custom_op, label, id(gradients))).encode()
                            ).hexdigest()[:12]
    key = f"gen_{digest}"
    if key in _CALLS:
        return _CALLS[key]
    label = f"autokernel::{label or name}"

    def run(xs: list[torch.Tensor]) -> list[torch.Tensor]:
        xs = tuple(xs)
        with torch.profiler.record_function(label):
            out = fn(*xs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        if len(outs) != len(metas):
            raise GraphPatchError(f"{name}: kernel_fn returned {len(outs)} tensors, the chain makes {len(metas)}")
        taken = {x.untyped_storage().data_ptr() for x in xs if x.numel()} if custom_op else None
        return [_restride(o, m, xs, taken) for o, m in zip(outs, metas)]

    if custom_op:
        op = torch.library.custom_op(f"autokernel::{key}", run, mutates_args=())

        @op.register_fake
        def _(xs):
            dev = xs[0].device if xs else torch.device("cpu")
            return [torch.empty_strided(m["shape"], m["stride"], dtype=getattr(torch, m["dtype"]), device=dev)
                    for m in metas]
        if gradients is not None:
            _register_site_autograd(op, key, gradients, metas)
        call = getattr(torch.ops.autokernel, key).default  # the overload: what FX writes as a call
    else:
        run.__name__ = key
        call = run if gradients is None else _differentiable(run, gradients)
    _CALLS[key] = call
    return call


# A site in training --------------------------------------------------------------------------------
class SiteGradients:
    """How a generated site is differentiated: the generated backward task's kernel
    (``kernel_fn(*inputs, *grad_outs)``, the gradients of ``positions``: its task.toml's grad_inputs)
    where every input that needs a gradient is among them; else autograd through ``reference`` (the
    task's reference.py: the recorded chain replayed from the saved inputs, its forward computed again
    in PyTorch)."""

    def __init__(self, reference: Callable, kernel: Callable | None = None, positions: tuple[int, ...] = (),
                 label: str = "autokernel::backward"):
        self.reference, self.kernel, self.positions, self.label = reference, kernel, tuple(positions), label

    def by_kernel(self, needs: list[bool]) -> bool:
        return self.kernel is not None and all(i in self.positions for i, n in enumerate(needs) if n)

    def grads(self, inputs: tuple, needs: list[bool], grad_outs: tuple) -> list:
        """The gradient of each input where ``needs`` (else None)."""
        grad_outs = tuple(g.contiguous() for g in grad_outs)  # as the harness checked the kernel: dense
        out: list = [None] * len(inputs)
        if self.by_kernel(needs):
            with torch.profiler.record_function(self.label):  # a profile of the step: its backward family
                got = self.kernel(*inputs, *grad_outs)
            for pos, g in zip(self.positions, got if isinstance(got, (tuple, list)) else (got,)):
                if needs[pos]:
                    out[pos] = g
            return out
        leaves = [t.detach().requires_grad_(bool(n)) for t, n in zip(inputs, needs)]
        wanted = [t for t, n in zip(leaves, needs) if n]
        with torch.enable_grad():
            result = self.reference(*leaves)
        results = result if isinstance(result, (tuple, list)) else (result,)
        pairs = [(r, g) for r, g in zip(results, grad_outs) if isinstance(r, torch.Tensor) and r.requires_grad]
        if pairs and wanted:
            got = iter(torch.autograd.grad([r for r, _ in pairs], wanted, [g for _, g in pairs], allow_unused=True))
            out = [next(got) if n else None for n in needs]
        return out


class _SiteFunction(torch.autograd.Function):
    """A site's kernel in eager autograd: ``run`` forward (the kernel, or the chain replayed), the
    site's ``SiteGradients`` backward, the inputs kept for it."""

    @staticmethod
    def forward(ctx, run, gradients, *xs):
        outs = run(list(xs))
        ctx.gradients = gradients
        ctx.save_for_backward(*xs)
        ctx.mark_non_differentiable(*[o for o in outs if not o.is_floating_point()])
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grad_outs):
        needs = list(ctx.needs_input_grad[2:])
        return (None, None, *ctx.gradients.grads(ctx.saved_tensors, needs, grad_outs))


def _differentiable(run: Callable, gradients: SiteGradients) -> Callable:
    def call(xs: list[torch.Tensor]) -> list[torch.Tensor]:
        if torch.is_grad_enabled() and any(x.requires_grad for x in xs):
            return list(_SiteFunction.apply(run, gradients, *xs))
        return run(xs)
    call.__name__ = run.__name__
    return call


def _unshared(tensors: list, against: tuple) -> list:
    """``tensors`` each with storage of its own: a custom op may return no alias of its inputs or of
    another of its outputs (a gradient that is grad_out itself, an addition's, would be one)."""
    taken = {t.untyped_storage().data_ptr() for t in against if t.numel()}
    out = []
    for t in tensors:
        if t.numel() and t.untyped_storage().data_ptr() in taken:
            t = t.clone()
        if t.numel():
            taken.add(t.untyped_storage().data_ptr())
        out.append(t)
    return out


def _register_site_autograd(op, key: str, gradients: SiteGradients, metas: list[dict]) -> None:
    """The site's custom op made differentiable for a compiled graph: its backward kernel another custom
    op (a Triton launch cannot take the fake tensors a compiled backward is traced with), a dense
    gradient per input (an empty one where none is needed). Autograd through the chain is plain torch
    ops in the backward formula itself, traced as they are: inside a custom op's implementation,
    below autograd, nothing would be recorded to differentiate."""

    def bwd_impl(xs: list[torch.Tensor], needs: list[bool], grad_outs: list[torch.Tensor]) -> list[torch.Tensor]:
        got = gradients.grads(tuple(xs), list(needs), tuple(grad_outs))
        dense = [x.new_empty(0) if g is None else g.contiguous() for x, g in zip(xs, got)]
        return _unshared(dense, (*xs, *grad_outs))

    bwd = torch.library.custom_op(f"autokernel::{key}_bwd", bwd_impl, mutates_args=())

    @bwd.register_fake
    def _(xs, needs, grad_outs):
        return [x.new_empty(x.shape if n else (0,)) for x, n in zip(xs, needs)]

    def setup_context(ctx, inputs, output):
        (xs,) = inputs
        ctx.needs = [x.requires_grad and x.is_floating_point() for x in xs]
        ctx.save_for_backward(*xs)

    def backward(ctx, grads):
        xs = ctx.saved_tensors
        grads = [torch.zeros(m["shape"], dtype=getattr(torch, m["dtype"]), device=xs[0].device) if g is None else g
                 for g, m in zip(grads, metas)]
        if not gradients.by_kernel(ctx.needs):
            return gradients.grads(tuple(xs), ctx.needs, tuple(grads))
        got = bwd(list(xs), ctx.needs, grads)
        return [g if n else None for g, n in zip(got, ctx.needs)]

    op.register_autograd(backward, setup_context=setup_context)


def _update_running_stats(gm: torch.fx.GraphModule, site: dict, unit: dict, call: torch.fx.Node) -> None:
    """Before the site's call, the running statistics of each batch norm in training in its chain
    (``running_stats``) move as the op would have moved them: by ``momentum`` toward the batch's mean
    and unbiased variance over every dimension but the channels, from the input detached (statistics
    carry no gradient). Before, not after: the call keeps its inputs for the backward, and a write
    after it would change what it kept; in training a batch norm's outputs do not read them. Plain
    aten ops in the graph, so a compiled graph sees the buffers written too."""
    g = gm.graph
    aten = torch.ops.aten
    for x_pos, mean_pos, var_pos, momentum in running_stats(unit):
        x, stats = site["inputs"][x_pos], (site["inputs"][mean_pos], site["inputs"][var_pos])
        dims = [0, *range(2, len(_meta_of(x).shape))]
        with g.inserting_before(call):
            both = g.call_function(aten.var_mean.correction, (g.call_function(aten.detach.default, (x,)), dims),
                                   {"correction": 1})
            for i, stat in ((1, stats[0]), (0, stats[1])):  # var_mean returns (var, mean)
                value = g.call_function(aten._to_copy.default, (g.call_function(operator.getitem, (both, i)),),
                                        {"dtype": _meta_of(stat).dtype})
                g.call_function(aten.lerp_.Scalar, (stat, value, momentum))


def _rewire(gm: torch.fx.GraphModule, site: dict, call: Callable) -> torch.fx.Node:
    g = gm.graph
    with g.inserting_after(site["nodes"][-1]):
        new = g.call_function(call, (list(site["inputs"]),))
    for i, old in enumerate(site["outputs"]):
        if not isinstance(old, torch.fx.Node):
            continue  # a recorded output nothing in the model reads
        with g.inserting_after(new):
            item = g.call_function(operator.getitem, (new, i))
        item.meta = dict(old.meta)  # later sites are matched on this value's shape and layout
        old.replace_all_uses_with(item)
    dead = set(site["nodes"]) | {u for n in site["nodes"] for u in n.users if u.target is operator.getitem}
    for n in reversed(list(g.nodes)):
        if n in dead and not n.users:
            g.erase_node(n)
    return new


# The patched module ------------------------------------------------------------------------------
def _signature(inputs: tuple) -> list:
    return [(tuple(x.shape), x.dtype, x.device.type) if isinstance(x, torch.Tensor) else repr(x) for x in inputs]


class GraphPatched(nn.Module):
    """The model's traced graph with kernels in it; other inputs than the traced ones run ``original``."""

    def __init__(self, original: nn.Module, gm: torch.fx.GraphModule, inputs: tuple, counts: dict[str, int],
                 left_out: dict[str, str] | None = None):
        super().__init__()
        self.original = original
        self.graph_module = gm
        self.counts = counts
        self.left_out = left_out or {}  # {task: why its chain stays as the model runs it}
        self._signature = _signature(inputs)
        self.fallbacks = 0  # calls with other inputs, which ran the original model

    def forward(self, *inputs):
        if _signature(inputs) != self._signature:
            self.fallbacks += 1
            return self.original(*inputs)
        return self.graph_module(*inputs)


class TrainGraphPatched(GraphPatched):
    """The model's traced training forward with kernels in it, its parameters and buffers graph inputs:
    every call hands the graph the model's current ones, so gradients reach them and an optimizer's
    steps are seen. Other inputs, or the other of train/eval mode than the trace's, run ``original``."""

    def __init__(self, original: nn.Module, gm: torch.fx.GraphModule, inputs: tuple, counts: dict[str, int],
                 state_names: list[str], left_out: dict[str, str] | None = None):
        super().__init__(original, gm, inputs, counts, left_out)
        self.state_names = state_names
        self.traced_training = original.training
        self.train(original.training)

    def forward(self, *inputs):
        if _signature(inputs) != self._signature or self.training != self.traced_training:
            self.fallbacks += 1
            return self.original(*inputs)
        state = _state(self.original)
        return self.graph_module(*[state[n] for n in self.state_names], *inputs)


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's parameters, then its buffers, by name (a tied parameter once)."""
    state = dict(model.named_parameters())
    state.update(model.named_buffers())
    return state


def trace_for_training(model: nn.Module, inputs: tuple) -> tuple[torch.fx.GraphModule, list[str]]:
    """(the model's forward as the dispatcher runs it in a training step, its parameters and buffers
    first among the graph's inputs, by these names). Traced with gradients on (the ops a training step
    runs: an attention's backend may differ without them); the ``detach`` calls with which autograd
    keeps what it saves are dropped, as no op of the model reads them."""
    from torch.fx.experimental.proxy_tensor import make_fx

    state = _state(model)
    names, k = list(state), len(state)

    def step(*args):
        return torch.func.functional_call(model, dict(zip(names, args[:k])), tuple(args[k:]))

    # Copies: the trace runs the model once, and a batch norm's running statistics must not move for it.
    copies = [state[n].detach().clone().requires_grad_(state[n].requires_grad) for n in names]
    with torch.enable_grad():
        try:
            gm = make_fx(step, tracing_mode="real")(*copies, *inputs)
        except Exception as exc:
            raise GraphPatchError(f"the model's training step could not be traced to put generated kernels in: "
                                  f"{type(exc).__name__}: {exc}".splitlines()[0][:300]) from None
    gm.graph.eliminate_dead_code()  # autograd's detaches of what it saves; mutating ops stay (impure)
    gm.recompile()
    return gm, names


def trace(model: nn.Module, inputs: tuple) -> torch.fx.GraphModule:
    """The model's forward as the dispatcher runs it (aten overloads), under no_grad, shapes fixed. The
    trace runs the model once: in training mode its buffers (a batch norm's running statistics and
    step count) are put back as they were."""
    from torch.fx.experimental.proxy_tensor import make_fx

    kept = [(b, b.detach().clone()) for b in model.buffers()] if model.training else []
    with torch.no_grad():
        try:
            return make_fx(lambda *xs: model(*xs), tracing_mode="real")(*inputs)
        except Exception as exc:  # a model make_fx cannot follow: say what, keep the model as it is
            raise GraphPatchError(f"the model could not be traced to put generated kernels in: "
                                  f"{type(exc).__name__}: {exc}".splitlines()[0][:300]) from None
        finally:
            for buffer, was in kept:
                buffer.copy_(was)


_PROBE = "autokernel::probe::"


def _probed_trace(model: nn.Module, inputs: tuple, modules: list[nn.Module]):
    """One trace of ``model`` with each of ``modules``' forwards inside a profiler range of its own:
    (the graph's nodes, their positions, [(the range's enter position, its exit position, module id)],
    one range per call)."""
    labels: dict[str, int] = {}
    saved: list[tuple[nn.Module, Any]] = []
    for i, mod in enumerate(modules):
        label = f"{_PROBE}{i}"
        labels[label] = id(mod)
        saved.append((mod, mod.__dict__.get("forward")))

        def probed(*args, _forward=mod.forward, _label=label, **kwargs):
            with torch.profiler.record_function(_label):
                return _forward(*args, **kwargs)
        mod.forward = probed
    try:
        gm = trace(model, inputs)
    finally:
        for mod, own in saved:
            if own is None:
                mod.__dict__.pop("forward", None)
            else:
                mod.forward = own
    nodes = list(gm.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    ranges = []
    for n in nodes:
        if n.op == "call_function" and "record_function_enter" in str(n.target) and n.args \
                and isinstance(n.args[0], str) and n.args[0] in labels:
            ends = [order[u] for u in n.users if "record_function_exit" in str(u.target)]
            ranges.append((order[n], max(ends, default=len(nodes)), labels[n.args[0]]))
    return gm, nodes, order, ranges


def covered_modules(model: nn.Module, inputs: tuple, kernels: dict[str, str | Path],
                    modules: list[nn.Module]) -> set[int]:
    """Ids of those ``modules`` (a starter's patch sites) that a site of a generated task in ``kernels``
    runs through. A generated chain is the larger fusion (a GEMM with its GELU), so where both could
    go in, the chain does and the starter leaves that module alone: patched first, the starter would
    hide the chain from the trace (run 18's ViT: its addmm -> gelu task found no site). Found by one
    trace of ``model`` with each module's forward inside a profiler range of its own, the ranges
    then read against the graph positions of every site's ops."""
    if not modules or not kernels:
        return set()
    gm, _, order, ranges = _probed_trace(model, inputs, modules)
    covered: set[int] = set()
    for path in kernels.values():
        for site in iter_sites(gm, load_unit(path)):
            for node in site["nodes"]:
                covered.update(mid for lo, hi, mid in ranges if lo < order[node] < hi)
    return covered


def epilogue_pairs(model: nn.Module, inputs: tuple, kernels: dict[str, Callable],
                   skip: set[int] | None = None) -> dict[int, nn.Module]:
    """{id of a Linear: the module that takes its output alone, into one kernel of the two}, for
    ``patch_model``'s ``fuse``: a GELU after a Linear with a bias where the matmul kernel in ``kernels``
    applies it in its epilogue (``patch.takes_activation``), and a cross-entropy loss after a Linear
    without one (an LM head) where ``kernels`` has a linear_cross_entropy kernel. A pair is only one whose
    data flow the trace shows: each module called once, the Linear's output used by nothing but the
    other module, which reads nothing else (a loss: and its targets). So GPT-2's ``act(c_fc(x))`` and
    ``loss(lm_head(x), targets)`` pair, and ``act(h) + h``, logits also returned, or a module called
    twice do not. Modules in ``skip`` (a generated chain's) stay out. A model the trace cannot follow has
    none."""
    gelu = "matmul" in kernels and takes_activation(kernels["matmul"])
    loss = "linear_cross_entropy" in kernels
    if not (gelu or loss):
        return {}
    linears, takers = epilogue_candidates(model, activations=gelu, losses=loss)
    linears = [m for m in linears if id(m) not in (skip or set())]
    takers = [m for m in takers if id(m) not in (skip or set())]
    if not linears or not takers:
        return {}
    try:
        _, nodes, _, ranges = _probed_trace(model, inputs, linears + takers)
    except GraphPatchError:  # a model make_fx cannot follow: its modules run apart, as before
        return {}
    calls: dict[int, list[tuple[int, int]]] = {}
    for lo, hi, mid in ranges:
        calls.setdefault(mid, []).append((lo, hi))
    # The nodes inside each module's one call (a module called more than once pairs with nothing), and
    # which Linear made each node inside one
    inner = {id(m): set(nodes[calls[id(m)][0][0] + 1:calls[id(m)][0][1]]) for m in linears + takers
             if len(calls.get(id(m), ())) == 1}
    made_by = {n: lin for lin in linears if id(lin) in inner for n in inner[id(lin)]}
    pairs: dict[int, nn.Module] = {}
    for taker in takers:
        if id(taker) not in inner:
            continue
        is_loss = activation_of(taker) is None
        inner_t = inner[id(taker)]
        feeds = {i for n in inner_t for i in n.all_input_nodes if i not in inner_t}
        if len(feeds) != (2 if is_loss else 1):  # a loss reads the logits and the targets
            continue
        out = next((f for f in feeds if f in made_by), None)
        lin = made_by.get(out)
        if lin is None or (lin.bias is None) != is_loss:  # a GELU follows a Linear with a bias, a loss one without
            continue
        inner_l = inner[id(lin)]
        leaving = {n for n in inner_l if any(u not in inner_l for u in n.users)}
        if leaving == {out} and all(u in inner_t for u in out.users if u not in inner_l):
            pairs[id(lin)] = taker
    return pairs


def patch_graph(model: nn.Module, inputs: tuple, kernels: dict[str, str | Path], custom_ops: bool = False,
                labels: dict[str, str] | None = None, backwards: dict[str, tuple[int, ...]] | None = None,
                ) -> tuple[GraphPatched, dict[str, int]]:
    """``model`` with every site of each generated task in ``kernels`` ({task: kernel.py}) calling
    its kernel: (the patched module, {task: sites replaced}). ``model`` itself is not changed.
    ``labels``: {task: the family its kernel's time is profiled under} (default: the task name).

    ``backwards`` ({task: grad_inputs} of the generated backward tasks among ``kernels``; may be empty)
    makes it trainable (``TrainGraphPatched``): a forward task and the backward task of the same
    recorded chain become one differentiable site (``SiteGradients``); a chain with only one of them
    gets the recorded ops for the other half."""
    train = backwards is not None
    gm, names = trace_for_training(model, inputs) if train else (trace(model, inputs), [])
    counts: dict[str, int] = {}
    left_out: dict[str, str] = {}
    for tasks, unit, make_call in _site_calls(kernels, backwards, custom_ops, labels or {}):
        call = None
        for task in tasks:
            counts[task] = 0
        done: set = set()
        # One site at a time, the graph searched again after each: a site's inputs may be another's
        # outputs (a residual stream through repeated blocks), which rewiring replaces.
        while True:
            site = next((x for x in iter_sites(gm, unit) if x["nodes"][0] not in done), None)
            if site is None:
                break
            done.add(site["nodes"][0])
            why = writes_outside(unit, site)
            if why:
                left_out.update(dict.fromkeys(tasks, why))
                continue
            call = call or make_call()
            _update_running_stats(gm, site, unit, _rewire(gm, site, call))
            for task in tasks:
                counts[task] += 1
    if custom_ops:
        _drop_profiler_ranges(gm)
    gm.graph.lint()
    gm.recompile()
    if train:
        return TrainGraphPatched(model, gm, inputs, counts, names, left_out), counts
    return GraphPatched(model, gm, inputs, counts, left_out), counts


def pair_chains(kernels: dict[str, str | Path], backward_tasks) -> list[tuple[str | None, str | None, dict]]:
    """(forward task, backward task, unit) for each recorded chain among ``kernels``: the tasks in
    ``backward_tasks`` are backwards, the rest forwards, paired where their recorded units are equal."""
    chains: dict[str, dict] = {}
    for name, path in kernels.items():
        unit = load_unit(path)
        chain = chains.setdefault(json.dumps(unit, sort_keys=True), {"unit": unit, "forward": None, "backward": None})
        side = "backward" if name in backward_tasks else "forward"
        if chain[side] is not None:
            raise GraphPatchError(f"{chain[side]} and {name} are both the {side} of one recorded chain: give one")
        chain[side] = name
    return [(c["forward"], c["backward"], c["unit"]) for c in chains.values()]


def _site_calls(kernels: dict[str, str | Path], backwards: dict[str, tuple[int, ...]] | None, custom_ops: bool,
                labels: dict[str, str]):
    """(the tasks of one recorded chain, its unit, a function making the call its sites get) for each
    chain among ``kernels``: one task each for inference (``backwards`` None); in training a forward
    task and the backward task of the same chain (equal units) share the sites."""
    if backwards is None:
        for name, path in kernels.items():
            unit = load_unit(path)
            yield [name], unit, (lambda name=name, path=path, unit=unit:
                                 kernel_call(name, load_kernel(path), unit, custom_ops, labels.get(name)))
        return
    for fwd, bwd, unit in pair_chains(kernels, backwards):

        def make(fwd=fwd, bwd=bwd, unit=unit):
            first = Path(kernels[fwd or bwd])
            reference = _load_module(first.parent / "reference.py", "reference").reference
            gradients = SiteGradients(reference, load_kernel(kernels[bwd]) if bwd else None,
                                      tuple(backwards[bwd]) if bwd else (), f"autokernel::{labels.get(bwd) or bwd}")
            fn = load_kernel(kernels[fwd]) if fwd else reference  # no forward kernel: the chain, recorded
            return kernel_call(fwd or bwd, fn, unit, custom_ops, labels.get(fwd or bwd), gradients=gradients)
        yield [t for t in (fwd, bwd) if t], unit, make


def _drop_profiler_ranges(gm: torch.fx.GraphModule) -> None:
    """Remove the ``record_function`` ranges the trace recorded as profiler ops (a model's own labels,
    a patched starter's): ``torch.compile`` breaks its graph at every one (run 18, H100: T5 with its
    rmsnorm and matmul sites was still compiling after 3 min 40 s, a subgraph between each pair of
    labels). Eager keeps them, so a profile of the patched model still sees them; a kernel's own
    label is taken at run time inside its call."""
    for node in reversed(list(gm.graph.nodes)):  # an exit before the enter whose handle it holds
        if node.op == "call_function" and getattr(node.target, "namespace", None) == "profiler" and not node.users:
            gm.graph.erase_node(node)
