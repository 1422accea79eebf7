"""The judge's float64 reference on a GPU, compiled (worker side; ``AUTOKERNEL_HARNESS_PRECISE=compiled``).

Every output the judge checks (each correctness call, each verified timed rep, each fetched rep: about
a hundred a warm rmsnorm evaluation) is compared with the task's reference run in float64. Eager float64
makes one pass over 8-byte tensors per op; ``torch.compile`` of the same function fuses them (the
upcast stays eager, one kernel per input, so every dtype of a task shares one compiled graph).

The compiled reference is trusted only where it agrees with eager: the first result for each input
signature (shapes, dtypes, scalars) is computed both ways and compared (same inf and nan, finite values
within ``AGREEMENT`` of each other, relative to the output's largest); a disagreement, or any failure
to compile or run, puts the task back on eager for good, and ``note`` says why. ``precise_reference``
(eager) stays the definition and the default: the CPU, a reference too big for the card, and anything but
``compiled`` in the variable take it.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

import torch

from autokernel_tui.harness.worker.correctness import _double_bytes, _precise, precise_reference
from autokernel_tui.harness.worker.errors import one_line
from autokernel_tui.harness.worker.timing import raise_dynamo_limits

# "eager" (the default) or "compiled" (on CUDA only). Eager stays the default until a GPU run has timed the
# compiled way and its compile cost on large references (KernelBench's models): this tree's device time ran
# out before that run.
PRECISE_WAY_VARIABLE = "AUTOKERNEL_HARNESS_PRECISE"
AGREEMENT = 1e-9  # float64 results of two evaluation orders differ by ~1e-16 n^0.5 relative; 1e-9 is far looser


def _signature(inputs: tuple) -> tuple:
    return tuple((tuple(t.shape), t.dtype, t.device.type) if isinstance(t, torch.Tensor)
                 else (type(t).__name__, repr(t)) for t in inputs)


def _agree(a: tuple, b: tuple) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
            if x != y:
                return False
            continue
        if x.shape != y.shape:
            return False
        if not torch.equal(torch.isnan(x), torch.isnan(y)) or not torch.equal(torch.isinf(x), torch.isinf(y)):
            return False
        finite = torch.isfinite(y)
        if not torch.equal(torch.where(torch.isinf(x), x, 0), torch.where(torch.isinf(y), y, 0)):
            return False
        scale = float(y[finite].abs().max()) if bool(finite.any()) else 0.0
        if bool(finite.any()) and float((x[finite] - y[finite]).abs().max()) > AGREEMENT * max(scale, 1e-300):
            return False
    return True


class PreciseReference:
    """One task's float64 reference for the judge: compiled where chosen and checked, eager otherwise."""

    def __init__(self, ref_module: Any, device: str, backend: str | Callable = "inductor") -> None:
        self.ref = ref_module
        self.backend = backend
        way = os.environ.get(PRECISE_WAY_VARIABLE, "eager")
        self.note: str = "compiled" if way == "compiled" and device == "cuda" else "eager"
        self._fn: Callable | None = None
        self._checked: set[tuple] = set()

    @property
    def compiled(self) -> bool:
        return self.note == "compiled"

    def __call__(self, inputs: tuple, device_bytes: int | None = None) -> tuple:
        """The float64 reference of ``inputs`` (``precise_reference``'s contract, ``device_bytes`` included)."""
        if not self.compiled or (device_bytes is not None and _double_bytes(inputs, "cpu") > device_bytes):
            return precise_reference(self.ref, inputs, device_bytes)
        try:
            out = self._run(inputs)
        except Exception as exc:  # noqa: BLE001 - a reference Inductor cannot take: eager, said in ``note``
            inner = getattr(exc, "inner_exception", None) or exc.__cause__ or exc  # dynamo wraps a backend's error
            self._give_up(f"eager (compiling the float64 reference failed: "
                          f"{one_line(f'{type(inner).__name__}: {inner}', 160)})")
            return _precise(self.ref, inputs)
        sig = _signature(inputs)
        if sig in self._checked:
            return out
        eager = _precise(self.ref, inputs)
        if not _agree(out, eager):
            self._give_up("eager (the compiled float64 reference disagreed with eager's)")
            return eager
        self._checked.add(sig)
        return out

    def _run(self, inputs: tuple) -> tuple:
        if self._fn is None:
            raise_dynamo_limits()
            target = getattr(self.ref, "reference_precise", None) or self.ref.reference

            def precise_for_compile(*args):  # a code object of its own: no cache shared with the baselines'
                return target(*args)

            self._fn = torch.compile(precise_for_compile, backend=self.backend)
        return _precise(self.ref, inputs, self._fn)

    def _give_up(self, note: str) -> None:
        self.note = note
        self._fn = None
        print(f"harness judge: float64 reference of {getattr(self.ref, '__name__', 'a task')}: {note}",
              file=sys.stderr, flush=True)

