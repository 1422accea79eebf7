"""A task's reference, as the judge and the contestants use it (worker side: torch + stdlib).

A forward task's ``reference.py`` is used as it is. A backward task (``kind = "backward"`` in
task.toml) has the same ``reference.py`` (its forward op, inputs, adversarial transforms; the FLOP
and byte counts of its backward as ``backward_flops``/``backward_bytes_moved``, else ``flops``/
``bytes_moved``; in kernels/ the ``<task>_bwd/reference.py`` is a link to the forward's) plus ``grad_inputs``, the indices of the inputs whose
gradients the kernel returns; ``BackwardReference`` turns it into what the harness checks and
times:

* ``make_inputs`` adds ``grad_out`` (the gradient flowing into the op's output, random, drawn from
  the same seed) after the forward inputs, so a candidate's ``kernel_fn(*inputs, grad_out)``
  returns the gradients of the ``grad_inputs``; an op whose reference returns a tuple gets one
  ``grad_out`` per output, in order (``kernel_fn(*inputs, *grad_outs)``: add_rmsnorm's
  ``(y, new_residual)`` takes ``grad_y, grad_new_residual``);
* a task that names ``saved`` in task.toml (what its forward keeps for the backward, e.g. attention's
  output and row logsumexp) gets them between the forward inputs and the grad_outs
  (``kernel_fn(*inputs, *saved, *grad_outs)``), computed by the reference's ``saved_for_backward``
  from the forward inputs, and computed again whenever those change (an adversarial transform, a
  rep's fresh contents: ``refresh``), so they always belong to the inputs beside them;
* ``reference`` is autograd of the forward reference (``reference_precise``: in float64);
* ``backward_only(forward)`` gives what the baselines time: the backward alone of eager autograd,
  or of ``torch.compile``'s generated backward, on a graph whose forward ran before the clock.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch

from autokernel_tui.harness.worker.loading import load_module

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def load_reference(task_dir: Path) -> Any:
    """The task's reference module, wrapped for a backward task."""
    module = load_module(Path(task_dir) / "reference.py", "reference")
    data = tomllib.loads((Path(task_dir) / "task.toml").read_text(encoding="utf-8"))
    if data.get("kind", "forward") == "backward":
        return BackwardReference(module, tuple(int(i) for i in data.get("grad_inputs", ())),
                                 tuple(data.get("saved", ())))
    return module


def baseline_call(ref: Any, compiled: Callable | None = None) -> tuple[Callable[[tuple], tuple], Callable[..., Any]]:
    """(prepare, fn): what a baseline times, ``fn(*prepare(inputs))``. A forward task's reference (or
    ``compiled``, its torch.compile); a backward task's backward alone, its forward (eager, or ``compiled``)
    run in ``prepare``, off the clock. The judge and ``benchmarks/kernel_quality.py`` both time this."""
    if hasattr(ref, "backward_only"):
        return ref.backward_only(compiled)
    return (lambda inputs: inputs), (compiled or ref.reference)


def compile_target(ref: Any, sample: tuple) -> tuple[Callable[..., Any], tuple]:
    """(function, its sample inputs) that torch.compile compiles for a baseline: a backward task's forward
    on the forward inputs (its generated backward is then what ``baseline_call`` times), else the reference."""
    if hasattr(ref, "backward_only"):
        return ref.module.reference, ref.split(sample)[0]
    return ref.reference, sample


def _leaf(t: Any, requires: bool, double: bool = False) -> Any:
    if not isinstance(t, torch.Tensor):
        return t
    t = t.detach().double() if double and t.is_floating_point() else t.detach()
    return t.requires_grad_(True) if requires else t


class BackwardReference:
    """A backward task's reference (see the module docstring)."""

    def __init__(self, module: ModuleType, grad_inputs: tuple[int, ...], saved: tuple[str, ...] = ()) -> None:
        if not grad_inputs:
            raise ValueError("a backward task names its grad_inputs in task.toml")
        if saved and not callable(getattr(module, "saved_for_backward", None)):
            raise ValueError(f"the task names saved = {list(saved)}, its reference.py has no saved_for_backward")
        self.module = module
        self.grad_inputs = grad_inputs
        self.n_saved = len(saved)
        self.n_grad_outs = 1  # the reference's output count, known once make_inputs has run
        # The forward's transforms, or BACKWARD_ADVERSARIAL where the reference defines it (inputs
        # that test a forward well can make its gradient ill-conditioned: a saturated softmax).
        transforms = getattr(module, "BACKWARD_ADVERSARIAL", None)
        if transforms is None:
            transforms = getattr(module, "ADVERSARIAL", {}) or {}
        self.ADVERSARIAL = {name: self._on_forward_inputs(fn) for name, fn in transforms.items()}

    def _on_forward_inputs(self, transform: Callable) -> Callable:
        """``transform`` applied to the forward inputs alone: the grad_outs kept, the saved tensors computed anew."""
        def apply(inputs: tuple, gen: torch.Generator) -> tuple:
            fwd, _, grads = self.parts(inputs)
            fwd = tuple(transform(fwd, gen))
            return (*fwd, *self._saved(fwd), *grads)
        return apply

    def parts(self, inputs: tuple) -> tuple[tuple, tuple, tuple]:
        """(the forward inputs, what the forward saved, the grad_outs) of a backward task's inputs."""
        inputs = tuple(inputs)
        k = len(inputs) - self.n_grad_outs
        return inputs[:k - self.n_saved], inputs[k - self.n_saved:k], inputs[k:]

    def split(self, inputs: tuple) -> tuple[tuple, tuple]:
        """(the forward inputs, the grad_outs) of a backward task's inputs."""
        fwd, _, grads = self.parts(inputs)
        return fwd, grads

    def _saved(self, fwd: tuple) -> tuple:
        if not self.n_saved:
            return ()
        with torch.no_grad():
            saved = tuple(self.module.saved_for_backward(*fwd))
        if len(saved) != self.n_saved:
            raise ValueError(f"saved_for_backward returned {len(saved)} tensors, task.toml names {self.n_saved}")
        return saved

    def refresh(self, inputs: tuple) -> tuple:
        """``inputs`` with what the forward saved computed again from its (changed) forward inputs."""
        if not self.n_saved:
            return tuple(inputs)
        fwd, _, grads = self.parts(inputs)
        return (*fwd, *self._saved(fwd), *grads)

    def make_inputs(self, shape: dict, dtype: torch.dtype, device: str, seed: int) -> tuple:
        fwd = tuple(self.module.make_inputs(shape, dtype, device, seed))
        out = self.module.reference(*fwd)
        outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        self.n_grad_outs = len(outs)
        g = torch.Generator(device=device).manual_seed(seed ^ 0x5EED)
        grad_outs = tuple(torch.randn(o.shape, generator=g, device=device, dtype=torch.float32).to(o.dtype)
                          for o in outs)
        return (*fwd, *self._saved(fwd), *grad_outs)

    def _grads(self, fn: Callable, inputs: tuple, double: bool) -> tuple:
        fwd, grad_outs = self.split(inputs)
        leaves = [_leaf(t, i in self.grad_inputs, double) for i, t in enumerate(fwd)]
        with torch.enable_grad():
            out = fn(*leaves)
            outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
            gs = tuple(g.double() if double else g for g in grad_outs)
            return tuple(torch.autograd.grad(outs, [leaves[i] for i in self.grad_inputs], gs))

    def reference(self, *inputs: Any) -> tuple:
        """Eager autograd of the forward reference, in the input dtype: (grad of each grad input)."""
        return self._grads(self.module.reference, inputs, double=False)

    def reference_precise(self, *inputs: Any) -> tuple:
        precise = getattr(self.module, "reference_precise", None) or self.module.reference
        return self._grads(precise, inputs, double=True)

    def backward_only(self, forward: Callable | None = None) -> tuple[Callable[[tuple], tuple], Callable[..., Any]]:
        """(prepare, run): ``prepare(inputs)`` runs the forward (the eager reference, or ``forward``,
        e.g. its torch.compile) off the clock and returns what ``run(*prepared)`` needs to run only
        the backward (autograd's, or the compiled graph's generated one)."""
        forward = forward or self.module.reference

        def prepare(inputs: tuple) -> tuple:
            fwd, grad_outs = self.split(inputs)
            leaves = [_leaf(t, i in self.grad_inputs) for i, t in enumerate(fwd)]
            with torch.enable_grad():
                out = forward(*leaves)
            outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
            return (outs, grad_outs, *[leaves[i] for i in self.grad_inputs])

        def run(outs: tuple, grad_outs: tuple, *leaves: torch.Tensor) -> tuple:
            # retain_graph: a warm-up may run the backward of one graph twice; the work is the same
            return torch.autograd.grad(outs, leaves, grad_outs, retain_graph=True)

        return prepare, run

    # The backward's own work: ``backward_flops``/``backward_bytes_moved`` where the op's reference
    # defines them (one reference.py serves the forward task and, linked, its ``<task>_bwd`` task).
    def flops(self, shape: dict) -> int:
        return getattr(self.module, "backward_flops", self.module.flops)(shape)

    def bytes_moved(self, shape: dict, dtype: torch.dtype) -> int:
        return getattr(self.module, "backward_bytes_moved", self.module.bytes_moved)(shape, dtype)
