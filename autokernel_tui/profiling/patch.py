"""Put Triton kernels into a model by module replacement, one family at a time.

Self-contained on purpose (torch and the standard library only): ``export`` copies this
file verbatim into the package it writes, so ``verify`` and a shipped package patch a
model by exactly the same code.

A kernel is a ``kernel.py`` exposing ``kernel_fn`` with its task's reference signature
(docs/ARCHITECTURE.md, "Starter dimension names"). Patch sites per family:

=================  ==========================================================
rmsnorm            modules named ``*RMSNorm`` with ``weight`` and ``eps`` / ``variance_epsilon``
layernorm          ``nn.LayerNorm`` over the last dim, with weight and bias
gelu               ``nn.GELU`` or a module with ``approximate`` named ``GELU``
swiglu             a module with ``gate_proj``, ``up_proj``, ``down_proj`` and a SiLU gate
flash_attention    a module named ``SDPA`` with ``causal = True`` taking q, k, v[B, H(KV), S, D]
rotary             a module named ``Rotary`` taking (x[B,S,H,D], cos[S,D/2], sin[S,D/2])
softmax            ``nn.Softmax`` over the last dim
cross_entropy      a module named ``CrossEntropy`` or a plain ``nn.CrossEntropyLoss``
matmul             ``nn.Linear`` (kernel_fn(x[M,K], W^T[K,N], bias), or + bias where kernel_fn takes none)
linear_cross_entropy  a Linear without bias whose output only such a loss takes (an LM head): found by
                   a trace (``fuse``), the loss module runs kernel_fn(x, W, targets) on the head's input
=================  ==========================================================

Every replacement runs its kernel inside ``record_function("autokernel::<family>")`` so a
profile of the patched model attributes the Triton kernels to their family (and only
them: SwiGLU's projections run outside the label and stay matmuls).

``patch_model(..., custom_ops=True)`` puts each kernel in as a ``torch.library`` custom op
(``autokernel::<family>_<digest>``, with a fake implementation for shapes), so the patched
model compiles with ``torch.compile`` (the kernels are calls inside Inductor's graph; the
rest of the model is Inductor's) and captures into CUDA graphs (``mode="reduce-overhead"``),
where the host cost of launching disappears. In eager mode the plain function is cheaper to
call (no dispatcher on the way), so that is the default.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn

try:  # inside autokernel-tui: the CLI prints these as one line
    from autokernel_tui.errors import AutokernelError as _Base
except ImportError:  # inside an exported package
    _Base = Exception


class PatchError(_Base):
    """A kernel file cannot be loaded or put into the model."""


def use_interpreter_if_no_gpu(device: str = "auto") -> bool:
    """Run Triton kernels in its interpreter when there is no GPU to run them on.

    Must happen before Triton is imported; returns whether the interpreter is on.
    """
    if device == "cpu" or (device in ("auto", "", None) and not torch.cuda.is_available()):
        if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
            raise PatchError("no GPU: set TRITON_INTERPRET=1 before importing triton to run the kernels on the CPU")
        os.environ["TRITON_INTERPRET"] = "1"
        return True
    return os.environ.get("TRITON_INTERPRET") == "1"


def load_kernel(path: str | Path) -> Callable:
    """``kernel_fn`` of a kernel.py file, imported under a name unique to its contents."""
    path = Path(path)
    if not path.is_file():
        raise PatchError(f"no kernel file at {path}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    name = f"_autokernel_patch_{path.parent.name}_{path.stem}_{digest}"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # triton.jit reads the source through the module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(name, None)
            raise PatchError(f"{path}: import failed: {type(exc).__name__}: {exc}".splitlines()[0]) from None
    fn = getattr(module, "kernel_fn", None)
    if not callable(fn):
        raise PatchError(f"{path}: defines no kernel_fn")
    return fn


def load_kernels(paths: dict[str, str | Path]) -> dict[str, Callable]:
    """{family: kernel.py path} -> {family: kernel_fn}."""
    return {family: load_kernel(p) for family, p in paths.items()}


def _load_module(path: Path, prefix: str):
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    name = f"_autokernel_{prefix}_{path.parent.name}_{digest}"
    module = sys.modules.get(name)
    if module is None:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(name, None)
            raise PatchError(f"{path}: import failed: {type(exc).__name__}: {exc}".splitlines()[0]) from None
    return module


def load_backwards(plans: dict[str, dict]) -> dict[str, "Backward"]:
    """{family: Backward} from files: each plan names ``kernel`` (a backward task's kernel.py, or None),
    ``positions`` (the forward inputs its gradients are for), ``saved`` (true where that kernel takes what
    the forward saved, computed by the reference's ``saved_for_backward``) and ``reference`` (the forward
    task's reference.py, for autograd through it where there is no backward kernel). ``verify`` and an
    exported package build a trainable model by this one function."""
    out = {}
    for family, plan in plans.items():
        kernel = load_kernel(plan["kernel"]) if plan.get("kernel") else None
        module = _load_module(Path(plan["reference"]), "reference") if plan.get("reference") else None
        reference = getattr(module, "reference", None)
        saved = getattr(module, "saved_for_backward", None) if plan.get("saved") else None
        if kernel is not None and plan.get("saved") and saved is None:
            kernel = None  # its kernel needs what the forward saved and nothing here computes it: autograd
        if kernel is not None or reference is not None:
            out[family] = Backward(reference=reference, kernel=kernel, positions=tuple(plan.get("positions", ())),
                                   saved=saved)
    return out


class Backward:
    """How a family's kernel is differentiated: its own backward kernel
    (``bwd(*inputs, *saved, grad_out)`` returning the gradients of ``positions``; ``saved``, where its task
    names them, computed from the inputs by the reference's ``saved_for_backward``), else autograd through
    the task's reference, its forward recomputed in PyTorch."""

    def __init__(self, reference: Callable | None = None, kernel: Callable | None = None,
                 positions: tuple[int, ...] = (), saved: Callable | None = None) -> None:
        if kernel is None and reference is None:
            raise PatchError("a trainable kernel needs a backward kernel or the task's reference")
        self.reference, self.kernel, self.positions, self.saved = reference, kernel, positions, saved

    def grads(self, inputs: tuple, needs: list[bool], grad_out: torch.Tensor, saved: tuple | None = None) -> list:
        """The gradients of ``inputs`` where ``needs``; ``saved``: what the forward kernel kept for the
        backward kernel (else computed here by the reference, where the backward kernel takes any)."""
        out = [None] * len(inputs)
        if self.kernel is not None:
            if self.saved is None:
                saved = ()
            elif saved is None:
                with torch.no_grad():
                    saved = tuple(self.saved(*inputs))
            got = self.kernel(*inputs, *saved, grad_out.contiguous())
            got = got if isinstance(got, (tuple, list)) else (got,)
            for pos, g in zip(self.positions, got):
                if needs[pos]:
                    out[pos] = g
            return out
        leaves = [t.detach().requires_grad_(n) if isinstance(t, torch.Tensor) else t
                  for t, n in zip(inputs, needs)]
        wanted = [t for t, n in zip(leaves, needs) if n]
        with torch.enable_grad():
            result = self.reference(*leaves)
            got = torch.autograd.grad(result, wanted, grad_out, allow_unused=True)
        it = iter(got)
        return [next(it) if n else None for n in needs]


class _KernelFunction(torch.autograd.Function):
    """A kernel in autograd: the Triton forward, and the family's Backward. ``forward_saved``: the forward
    kernel's variant that also returns what the backward kernel takes (``kernel_fn_saved(*inputs) -> (output,
    saved tuple)``), or None."""

    @staticmethod
    def forward(ctx, fn, backward, forward_saved, *inputs):
        ctx.backward, ctx.forward_kept = backward, forward_saved is not None
        out, saved = forward_saved(*inputs) if forward_saved is not None else (fn(*inputs), ())
        _keep_inputs(ctx, inputs, *saved)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        inputs, saved = _kept_inputs(ctx)
        needs = list(ctx.needs_input_grad[3:])
        return (None, None, None, *ctx.backward.grads(inputs, needs, grad_out, saved if ctx.forward_kept else None))


def _keep_inputs(ctx, inputs: tuple, *extra: torch.Tensor) -> None:
    """Keeps a kernel's ``inputs`` for its backward (tensors by save_for_backward, the rest as they are), and
    ``extra`` tensors after them (what its forward saved)."""
    ctx.layout = [isinstance(t, torch.Tensor) for t in inputs]
    ctx.others = [None if isinstance(t, torch.Tensor) else t for t in inputs]
    ctx.save_for_backward(*[t for t in inputs if isinstance(t, torch.Tensor)], *extra)


def _kept_inputs(ctx) -> tuple[tuple, tuple]:
    """(the inputs ``_keep_inputs`` kept, the extra tensors kept after them)."""
    kept = ctx.saved_tensors
    it = iter(kept)
    inputs = tuple(next(it) if is_t else other for is_t, other in zip(ctx.layout, ctx.others))
    return inputs, tuple(kept[sum(ctx.layout):])


def _per_input(layout: list[bool], args: tuple, packed) -> tuple:
    """A backward op's packed gradients (one per tensor parameter) as autograd takes them, one per input:
    None for a non-tensor and for an integer tensor."""
    got = iter(packed)
    return tuple((g if t.is_floating_point() else None) if is_t else None
                 for is_t, t, g in ((is_t, t, next(got) if is_t else None) for is_t, t in zip(layout, args)))


def _signature(params, extra: tuple[str, ...] = (), returns=torch.Tensor) -> inspect.Signature:
    """A custom op's schema as a signature: ``params`` (name, type), then ``extra`` tensor parameters."""
    return inspect.Signature(
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=t) for n, t in params]
        + [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=torch.Tensor) for n in extra],
        return_annotation=returns)


def trainable(fn: Callable, backward: Backward) -> Callable:
    """``fn`` that autograd can differentiate (plain ``fn`` when no gradient is being recorded). Where the
    backward kernel takes what the forward saved and ``fn``'s kernel.py also defines ``kernel_fn_saved``
    (flash attention's: the output and its logsumexp in one pass), the forward runs that instead, so the
    backward does not compute them again."""
    forward_saved = _forward_saved(fn, backward)

    def call(*inputs):
        if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs):
            return _KernelFunction.apply(fn, backward, forward_saved, *inputs)
        return fn(*inputs)
    return call


def _forward_saved(fn: Callable, backward: Backward | None) -> Callable | None:
    """``kernel_fn_saved`` of ``fn``'s kernel.py where ``backward``'s kernel takes what the forward saved."""
    if backward is None or backward.kernel is None or backward.saved is None:
        return None
    return getattr(sys.modules.get(getattr(fn, "__module__", "") or ""), "kernel_fn_saved", None)


# family -> (kernel_fn's parameters with their types, the shape of its output from its inputs)
_T, _F, _S = torch.Tensor, float, str
# Every op's output is contiguous: the fakes say so, and the op makes it so (``_packed``), whatever
# layout a kernel.py allocates (a fake that copied an input's layout with ``empty_like`` disagreed with
# kernels that allocate packed outputs, and Inductor checks the strides it was promised).
OP_SIGNATURES: dict[str, tuple[tuple[tuple[str, type], ...], Callable[..., torch.Tensor]]] = {
    "rmsnorm": ((("x", _T), ("weight", _T), ("eps", _F)), lambda x, w, eps: x.new_empty(x.shape)),
    "layernorm": ((("x", _T), ("weight", _T), ("bias", _T), ("eps", _F)), lambda x, w, b, eps: x.new_empty(x.shape)),
    "gelu": ((("x", _T), ("approximate", _S)), lambda x, approximate: x.new_empty(x.shape)),
    "swiglu": ((("gate", _T), ("up", _T)), lambda g, u: g.new_empty(g.shape)),
    "flash_attention": ((("q", _T), ("k", _T), ("v", _T)), lambda q, k, v: q.new_empty(q.shape)),
    "rotary": ((("x", _T), ("cos", _T), ("sin", _T)), lambda x, cos, sin: x.new_empty(x.shape)),
    "softmax": ((("x", _T),), lambda x: x.new_empty(x.shape)),
    "cross_entropy": ((("logits", _T), ("targets", _T)), lambda logits, t: logits.new_empty(())),
    # b arrives as the weight's transpose, a view (strides (1, K)): the matmul task checks that layout
    # (its weight_layout case), so a kernel that passed reads the weight in place, as cuBLAS does.
    "matmul": ((("a", _T), ("b", _T)), lambda a, b: a.new_empty(a.shape[0], b.shape[1])),
    # a Linear's bias added in the kernel's epilogue (``takes_bias``), and the activation after it
    "matmul+bias": ((("a", _T), ("b", _T), ("bias", _T)), lambda a, b, bias: a.new_empty(a.shape[0], b.shape[1])),
    "matmul+bias+activation": ((("a", _T), ("b", _T), ("bias", _T), ("activation", _S)),
                               lambda a, b, bias, activation: a.new_empty(a.shape[0], b.shape[1])),
    # an LM head's input, its weight [V, K] as the Linear holds it, and the targets: the mean loss
    "linear_cross_entropy": ((("x", _T), ("w", _T), ("targets", _T)), lambda x, w, targets: x.new_empty(())),
}
# family -> what its forward saves for its backward kernel, in order: OUTPUT (the forward's output itself),
# or a fake of another tensor from the inputs (for a compiled graph). Attention: its output, and its float32
# row logsumexp.
OUTPUT = "output"
SAVED_FAKES: dict[str, tuple[str | Callable[..., torch.Tensor], ...]] = {
    "flash_attention": (OUTPUT, lambda q, k, v: q.new_empty(q.shape[:3], dtype=torch.float32)),
}
_OPS: dict[str, Callable] = {}


def as_custom_op(family: str, fn: Callable, backward: Backward | None = None,
                 signature: str | None = None) -> Callable:
    """``fn`` (a family's kernel_fn) as a torch custom op, registered once per kernel; with
    ``backward``, differentiable (its autograd registered, so a compiled model trains too).
    ``signature``: the ``OP_SIGNATURES`` entry it is called with, where not the family's own."""
    signature = signature or family
    if signature not in OP_SIGNATURES:
        raise PatchError(f"no custom-op signature for {signature}")
    params, fake = OP_SIGNATURES[signature]
    digest = hashlib.sha256(repr((signature, id(fn), fn.__module__, id(backward))).encode()).hexdigest()[:12]
    name = f"autokernel::{family}_{digest}"
    if name in _OPS:
        return _OPS[name]
    forward_saved = _forward_saved(fn, backward)
    if forward_saved is not None and family in SAVED_FAKES:
        _OPS[name] = _saved_custom_op(name, family, forward_saved, backward, params, fake)
        return _OPS[name]
    def op_impl(*args):
        out = fn(*args)
        return out if out.is_contiguous() else out.contiguous()

    op_impl.__signature__ = _signature(params)
    op = torch.library.custom_op(name, op_impl, mutates_args=())
    op.register_fake(fake)
    if backward is not None:
        # A backward kernel is an op of its own: a compiled graph traces the backward with fake
        # tensors, which a Triton launch cannot take (the autograd-through-the-reference path is
        # plain torch ops, traced as they are).
        bwd_op = _backward_op(name, params, backward) if backward.kernel is not None else None

        def setup_context(ctx, inputs, output):
            _keep_inputs(ctx, inputs)

        def op_backward(ctx, grad_out):
            args, _ = _kept_inputs(ctx)
            if bwd_op is not None:
                return _per_input(ctx.layout, args, bwd_op(*args, grad_out))
            needs = [is_t and t.requires_grad or is_t for is_t, t in zip(ctx.layout, args)]
            grads = backward.grads(args, [bool(n) for n in needs], grad_out)
            return tuple(g if is_t else None for g, is_t in zip(grads, ctx.layout))

        op.register_autograd(op_backward, setup_context=setup_context)
    _OPS[name] = op
    return op


def _saved_custom_op(name: str, family: str, forward_saved: Callable, backward: Backward, params,
                     fake: Callable) -> Callable:
    """A differentiable kernel whose forward keeps what its backward kernel takes (``kernel_fn_saved``): an op
    returning [output, *saved], its autograd handing the saved tensors to the backward kernel's op, and the
    output alone to the model. Compiled, the backward then does not compute the forward again."""
    kinds = SAVED_FAKES[family]

    def impl(*args):  # the output, then the saved tensors that are not the output (an op's returns never alias)
        out, saved = forward_saved(*args)
        return [out if out.is_contiguous() else out.contiguous(), *(t for t, k in zip(saved, kinds) if k != OUTPUT)]

    impl.__signature__ = _signature(params, returns=list[torch.Tensor])
    op = torch.library.custom_op(f"{name}_saved", impl, mutates_args=())
    op.register_fake(lambda *args: [fake(*args), *(k(*args) for k in kinds if k != OUTPUT)])
    bwd_op = _backward_op(name, params, backward, n_saved=len(kinds))

    def setup_context(ctx, inputs, output):
        others = iter(output[1:])
        _keep_inputs(ctx, inputs, *[output[0] if k == OUTPUT else next(others) for k in kinds])

    def op_backward(ctx, grads):
        args, saved = _kept_inputs(ctx)
        return _per_input(ctx.layout, args, bwd_op(*args, *saved, grads[0]))

    op.register_autograd(op_backward, setup_context=setup_context)

    def call(*args):
        return op(*args)[0]
    return call


def _backward_op(forward_name: str, params, backward: Backward, n_saved: int = 0) -> Callable:
    """The family's backward kernel as a custom op: the forward's parameters, the ``n_saved`` tensors its
    forward kept (``_saved_custom_op``) and grad_out in, one packed gradient per tensor parameter out (an
    empty one where there is none: integer inputs)."""
    tensors = [i for i, (_, t) in enumerate(params) if t is torch.Tensor]

    def bwd_impl(*args):
        *inputs, grad_out = args
        inputs, saved = inputs[:len(params)], tuple(inputs[len(params):])
        needs = [i in tensors and inputs[i].is_floating_point() for i in range(len(inputs))]
        grads = backward.grads(tuple(inputs), needs, grad_out, saved if n_saved else None)
        out = []
        for i in tensors:
            g = grads[i]
            out.append(inputs[i].new_empty(0) if g is None else (g if g.is_contiguous() else g.contiguous()))
        return out

    bwd_impl.__signature__ = _signature(params, (*(f"saved{i}" for i in range(n_saved)), "grad_out"),
                                        returns=list[torch.Tensor])
    op = torch.library.custom_op(f"{forward_name}_bwd", bwd_impl, mutates_args=())

    def fake(*args):
        return [args[i].new_empty(args[i].shape if args[i].is_floating_point() else (0,)) for i in tensors]

    op.register_fake(fake)
    return op


def _rows(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-1])


def _compiling() -> bool:
    compiler = getattr(torch, "compiler", None)
    return bool(compiler is not None and hasattr(compiler, "is_compiling") and compiler.is_compiling())


class _Patched(nn.Module):
    family = ""

    def __init__(self, original: nn.Module, fn: Callable, custom_op: bool = False,
                 backward: Backward | None = None):
        super().__init__()
        self.original = original  # keeps the parameters where the model expects them
        self.custom_op = custom_op
        self.trainable = backward is not None
        if custom_op:
            self.fn = as_custom_op(self.family, fn, backward, self.op_signature(original, fn))
        elif backward is not None:
            self.fn = trainable(fn, backward)
        else:
            self.fn = fn

    def forward(self, *args):
        if _compiling():  # a compiled graph has no use for the profiler label
            return self.run(*args)
        with torch.profiler.record_function(f"autokernel::{self.family}"):
            return self.run(*args)

    def extra_repr(self) -> str:
        return f"family={self.family}"

    def op_signature(self, original: nn.Module, fn: Callable) -> str:
        """The ``OP_SIGNATURES`` entry this site calls ``fn`` with as a custom op."""
        return self.family


class RMSNormKernel(_Patched):
    family = "rmsnorm"

    def run(self, x):
        m = self.original
        eps = getattr(m, "eps", None)
        eps = getattr(m, "variance_epsilon", eps)
        eps = torch.finfo(x.dtype).eps if eps is None else float(eps)
        return self.fn(_rows(x), m.weight, eps).view(x.shape)


class LayerNormKernel(_Patched):
    family = "layernorm"

    def run(self, x):
        m = self.original
        return self.fn(_rows(x), m.weight, m.bias, float(m.eps)).view(x.shape)


class GELUKernel(_Patched):
    family = "gelu"

    def run(self, x):
        return self.fn(_rows(x), self.original.approximate).view(x.shape)


class SwiGLUKernel(_Patched):
    family = "swiglu"

    def forward(self, x):
        # The projections stay outside the label: they are matmuls, not this family's work
        # (inside it, a profile of the patched model would charge them to swiglu).
        m = self.original
        g, u = m.gate_proj(x), m.up_proj(x)
        if _compiling():
            h = self.fn(_rows(g), _rows(u)).view(g.shape)
        else:
            with torch.profiler.record_function(f"autokernel::{self.family}"):
                h = self.fn(_rows(g), _rows(u)).view(g.shape)
        return m.down_proj(h)


class AttentionKernel(_Patched):
    family = "flash_attention"

    def run(self, q, k, v):
        return self.fn(q, k, v)


class RotaryKernel(_Patched):
    family = "rotary"

    def run(self, x, cos, sin):
        return self.fn(x, cos.to(x.dtype), sin.to(x.dtype))


class SoftmaxKernel(_Patched):
    family = "softmax"

    def run(self, x):
        return self.fn(_rows(x)).view(x.shape)


class CrossEntropyKernel(_Patched):
    family = "cross_entropy"

    def run(self, logits, targets):
        return self.fn(_rows(logits), targets.reshape(-1))


def _parameters(fn: Callable) -> tuple[str, ...]:
    try:
        return tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return ()


def takes_bias(fn: Callable) -> bool:
    """Whether a matmul ``kernel_fn`` adds a Linear's bias itself (``kernel_fn(a, b, bias)``, as the
    starter does in its epilogue; the task checks that path at every shape, its ``bias`` case)."""
    return "bias" in _parameters(fn)


def takes_activation(fn: Callable) -> bool:
    """Whether a matmul ``kernel_fn`` also applies the activation after a Linear (``kernel_fn(a, b, bias,
    activation)``: "gelu" or "gelu_tanh"; its task's ``bias_gelu*`` cases check it at every shape)."""
    return "bias" in _parameters(fn) and "activation" in _parameters(fn)


# A GELU module's ``approximate`` -> the matmul kernel's ``activation``
_GELU_ACTIVATIONS = {"none": "gelu", "tanh": "gelu_tanh"}


def activation_of(module: nn.Module) -> str | None:
    """The matmul epilogue's name for what ``module`` computes (a GELU, patched or not), or None."""
    if isinstance(module, _Patched) and module.family == "gelu":
        module = module.original
    if isinstance(module, _Patched) or not SITES["gelu"][0](module):
        return None
    return _GELU_ACTIVATIONS.get(getattr(module, "approximate", None))


def loss_fits(module: nn.Module) -> bool:
    """Whether ``module`` is a loss the linear_cross_entropy kernel computes (the cross_entropy site's,
    with F.cross_entropy's ignore index of -100, which the kernel keeps)."""
    return (not isinstance(module, _Patched) and SITES["cross_entropy"][0](module)
            and getattr(module, "ignore_index", -100) == -100)


def epilogue_candidates(model: nn.Module, activations: bool = True,
                        losses: bool = False) -> tuple[list[nn.Module], list[nn.Module]]:
    """(Linears, the modules that could take a Linear's output into a fused kernel: activations
    ``activation_of`` names, losses ``loss_fits`` takes), not yet replaced: what
    ``graph_patch.epilogue_pairs`` looks for pairs among."""
    linears, takers, seen = [], [], set()
    for parent in model.modules():
        if isinstance(parent, _Patched):
            continue
        for child in parent.children():
            if id(child) in seen:
                continue
            seen.add(id(child))
            if isinstance(child, nn.Linear):
                linears.append(child)
            elif (activations and activation_of(child) is not None) or (losses and loss_fits(child)):
                takers.append(child)
    return linears, takers


class LinearKernel(_Patched):
    family = "matmul"

    def __init__(self, original: nn.Module, fn: Callable, custom_op: bool = False,
                 backward: Backward | None = None, activation: str = "none"):
        # set first: op_signature, called by _Patched's __init__, reads it
        self.activation = activation
        super().__init__(original, fn, custom_op, backward)
        self.fused_bias = self.op_signature(original, fn) != "matmul"

    def op_signature(self, original: nn.Module, fn: Callable) -> str:
        if self.activation != "none":
            return "matmul+bias+activation"
        return "matmul+bias" if original.bias is not None and takes_bias(fn) else "matmul"

    def run(self, x):
        m = self.original
        # W.t() is a view (strides (1, K)): the kernel reads the weight in place, as nn.Linear's cuBLAS
        # call does; no copy to keep in step with the weight, and none inside a CUDA graph's pool.
        # The bias, and the activation after the Linear, are added in the kernel's epilogue (as cuBLAS's
        # addmm adds the bias): no pass over the output of their own.
        if self.activation != "none":
            y = self.fn(_rows(x), m.weight.t(), m.bias, self.activation)
        elif self.fused_bias:
            y = self.fn(_rows(x), m.weight.t(), m.bias)
        else:
            y = self.fn(_rows(x), m.weight.t())
            y = y if m.bias is None else y + m.bias
        return y.view(*x.shape[:-1], m.weight.shape[0])

    def extra_repr(self) -> str:
        return super().extra_repr() + (f", activation={self.activation}" if self.activation != "none" else "")


class FusedAway(_Patched):
    """A module whose work a neighbouring kernel now does, passing its input on: a GELU the Linear before
    it applies in its matmul's epilogue, or an LM head's Linear whose logits the loss kernel after it
    computes without writing them."""
    family = "fused"

    def __init__(self, original: nn.Module, replaces: str, into: str, where: str):
        nn.Module.__init__(self)
        self.original, self.replaces, self.into, self.where = original, replaces, into, where
        self.custom_op, self.trainable = False, False

    def forward(self, x):
        return x

    def extra_repr(self) -> str:
        return f"{self.replaces}, done by the {self.into} kernel of {self.where}"


class LinearCrossEntropyKernel(_Patched):
    """A loss module and the LM head before it in one kernel (``kernel_fn(x, w, targets)``): it takes the
    head's input (the head, a ``FusedAway`` now, passes it on) and reads the head's weight in place."""
    family = "linear_cross_entropy"

    def __init__(self, original: nn.Module, head: nn.Linear, fn: Callable, custom_op: bool = False,
                 backward: Backward | None = None):
        super().__init__(original, fn, custom_op, backward)
        self.head = [head]  # in a list: not a child, its weight stays where the model has it (tied or not)

    def run(self, hidden, targets):
        return self.fn(_rows(hidden), self.head[0].weight, targets.reshape(-1))


def _is_silu(act) -> bool:
    return act is None or isinstance(act, nn.SiLU) or type(act).__name__ in ("SiLU", "SiLUActivation")


# family -> (does this module qualify?, wrapper class)
SITES: dict[str, tuple[Callable[[nn.Module], bool], type]] = {
    "rmsnorm": (lambda m: type(m).__name__.endswith("RMSNorm") and getattr(m, "weight", None) is not None
                and getattr(m, "weight").dim() == 1, RMSNormKernel),
    "layernorm": (lambda m: isinstance(m, nn.LayerNorm) and len(m.normalized_shape) == 1
                  and m.weight is not None and m.bias is not None, LayerNormKernel),
    "gelu": (lambda m: isinstance(m, nn.GELU) or (type(m).__name__ == "GELU" and hasattr(m, "approximate")),
             GELUKernel),
    "swiglu": (lambda m: all(hasattr(m, a) for a in ("gate_proj", "up_proj", "down_proj"))
               and _is_silu(getattr(m, "act_fn", None)), SwiGLUKernel),
    "flash_attention": (lambda m: type(m).__name__ == "SDPA" and getattr(m, "causal", False), AttentionKernel),
    "rotary": (lambda m: type(m).__name__ == "Rotary", RotaryKernel),
    "softmax": (lambda m: isinstance(m, nn.Softmax) and m.dim in (-1, None), SoftmaxKernel),
    "cross_entropy": (lambda m: type(m).__name__ == "CrossEntropy" or (
        isinstance(m, nn.CrossEntropyLoss) and m.reduction == "mean" and m.weight is None
        and m.label_smoothing == 0.0 and m.ignore_index < 0), CrossEntropyKernel),
    "matmul": (lambda m: isinstance(m, nn.Linear), LinearKernel),
}


def _qualifying(model: nn.Module, family: str):
    """(parent, attribute name, module) for each module of ``model`` that ``family``'s kernel can replace."""
    qualifies = SITES[family][0]
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(parent, _Patched) and name == "original":
                continue  # the wrapped module itself (its own children may still be patched)
            if not isinstance(child, _Patched) and qualifies(child):
                yield parent, name, child


def patch_sites(model: nn.Module, families) -> list[nn.Module]:
    """The modules ``patch_model`` would replace for ``families`` (those it knows)."""
    return [child for f in families if f in SITES for _, _, child in _qualifying(model, f)]


def patch_model(model: nn.Module, kernels: dict[str, Callable], families: list[str] | None = None,
                custom_ops: bool = False, backwards: dict[str, Backward] | None = None,
                skip: set[int] | None = None, fuse: dict[int, nn.Module] | None = None) -> dict[str, int]:
    """Replace every qualifying module of each family in ``kernels``; returns {family: modules replaced}.

    In place. Families without a patch site here are reported with 0; nothing is patched twice.
    ``custom_ops``: call each kernel as a torch custom op (for ``torch.compile`` and CUDA graphs).
    ``backwards``: {family: Backward} for a model that trains: each kernel differentiable (its own
    backward kernel, or autograd through the task's reference). Without it a patched module passes
    no gradient back, so train only with ``backwards`` given.
    ``skip``: ids of modules left as they are (a generated task's chain runs through them:
    ``graph_patch.covered_modules``).
    ``fuse``: {id of a Linear: the module that takes its output alone} (``graph_patch.epilogue_pairs``,
    from a trace). An activation: where the matmul kernel applies it, the Linear's kernel does so in
    its epilogue and the activation module passes its input on. A loss: with a linear_cross_entropy
    kernel, the loss module runs it on the Linear's input and the Linear passes that on (in training only
    with that kernel's own backward kernel). A pair counts
    under each family it replaces a module of (and the loss kernel's own), so a profile's families
    before and after compare: the GELU's time gone and the matmul's grown, the LM head's matmul and
    the cross-entropy gone into linear_cross_entropy.
    """
    unknown = [f for f in kernels if f not in SITES]
    wanted = [f for f in (families or list(kernels)) if f in kernels]
    counts = {f: 0 for f in wanted}
    counts.update({f: 0 for f in unknown})
    if fuse:  # before each family's own modules: a fused pair is one kernel of the two
        for family, n in _fuse(model, kernels, wanted, fuse, custom_ops, backwards or {}).items():
            counts[family] = counts.get(family, 0) + n
    for family in wanted:
        if family not in SITES:
            continue
        wrapper = SITES[family][1]
        for parent, name, child in _qualifying(model, family):
            if skip and id(child) in skip:
                continue
            setattr(parent, name, wrapper(child, kernels[family], custom_ops, (backwards or {}).get(family)))
            counts[family] += 1
    return counts


def _fuse(model: nn.Module, kernels: dict[str, Callable], wanted: list[str], fuse: dict[int, nn.Module],
          custom_ops: bool, backwards: dict[str, Backward]) -> dict[str, int]:
    """The pairs of ``fuse`` whose kernel is in ``wanted`` put in (``patch_model``'s ``fuse``); returns the
    modules replaced per family."""
    places = {id(child): (parent, name) for parent in list(model.modules()) if not isinstance(parent, _Patched)
              for name, child in parent.named_children()}
    gelu = "matmul" in wanted and takes_activation(kernels["matmul"])
    # In training, only with a backward kernel: autograd through the reference would make the logits
    # again (a second LM-head GEMM a step), which costs more than writing and reading them once.
    lce_backward = backwards.get("linear_cross_entropy")
    loss = "linear_cross_entropy" in wanted and (not backwards or (lce_backward is not None
                                                                   and lce_backward.kernel is not None))
    counts: dict[str, int] = {}
    for lin_id, taker in fuse.items():
        if lin_id not in places or id(taker) not in places:
            continue
        parent, name = places[lin_id]
        lin = getattr(parent, name)
        taker_parent, taker_name = places[id(taker)]
        if isinstance(lin, _Patched):
            continue
        activation = activation_of(taker)
        if activation is not None and gelu and lin.bias is not None:
            setattr(parent, name, LinearKernel(lin, kernels["matmul"], custom_ops, backwards.get("matmul"), activation))
            setattr(taker_parent, taker_name,
                    FusedAway(taker.original if isinstance(taker, _Patched) else taker, "gelu", "matmul", name))
            done = ("matmul", "gelu")
        elif loss_fits(taker) and loss and lin.bias is None:
            setattr(taker_parent, taker_name, LinearCrossEntropyKernel(
                taker, lin, kernels["linear_cross_entropy"], custom_ops, backwards.get("linear_cross_entropy")))
            setattr(parent, name, FusedAway(lin, "matmul", "linear_cross_entropy", taker_name))
            done = ("linear_cross_entropy", "matmul", "cross_entropy")
        else:
            continue
        for family in done:
            counts[family] = counts.get(family, 0) + 1
    return counts


def fused_counts(model: nn.Module) -> dict[str, dict[str, int]]:
    """{family: {the kernel's family that now does its modules' work: how many}} in a patched model."""
    out: dict[str, dict[str, int]] = {}
    for m in model.modules():
        pairs = [(m.replaces, m.into)] if isinstance(m, FusedAway) else \
            [("cross_entropy", m.family)] if isinstance(m, LinearCrossEntropyKernel) else []
        for replaces, into in pairs:
            bucket = out.setdefault(replaces, {})
            bucket[into] = bucket.get(into, 0) + 1
    return out


def unpatch_model(model: nn.Module) -> None:
    """Undo ``patch_model`` in place."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, _Patched):
                setattr(parent, name, child.original)
