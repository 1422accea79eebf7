"""Runtime guards around a candidate call (worker side: torch + triton + stdlib).

* ``LaunchCounter`` wraps the Triton launch entry (``JITFunction.run`` and, under
  the interpreter, ``InterpretedFunction.run``) so the harness knows a Triton
  kernel really ran. Class-level wrapping works for plain, autotuned and
  heuristic kernels alike, compiled or interpreted, on Triton 3.6 and 3.7.
* ``OpRecorder`` is a TorchDispatchMode that records every aten op kernel_fn
  issues. Only allocation, view and copy ops are allowed: any compute op means
  PyTorch did (part of) the work. It also fills every fresh ``empty*``
  allocation with NaN (a sentinel for integers), so output elements a kernel
  leaves unwritten, or memory it hopes still holds a freed reference result,
  show up as errors.
* ``live_threads`` counts the threads still alive that were started while
  candidate code was on the stack (hooks on ``threading.Thread.start`` and on
  ``_thread.start_new_thread``, which a candidate can call directly).
  Threads torch itself starts (inductor's compile workers while a baseline is
  prepared, for instance) are not the candidate's and must not reject it.
* ``IdentitySnapshot`` remembers the identity of every callable in the modules
  the harness trusts (timers, events, do_bench, torch, the harness itself), and
  of each Python function's code, defaults and closure, and names any that a
  candidate replaced (swapping a function's ``__code__`` keeps the object).
"""

from __future__ import annotations

import _thread
import builtins
import sys
import threading
import time
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# aten base names that allocate, view, copy or read metadata: no task work.
ALLOWED_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
    "zeros", "zeros_like", "new_zeros", "zero_", "ones", "ones_like", "new_ones", "full", "full_like",
    "new_full", "fill_", "arange", "scalar_tensor", "lift_fresh", "lift_fresh_copy",
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "t", "transpose", "permute", "expand",
    "unsqueeze", "squeeze", "select", "slice", "narrow", "split", "split_with_sizes", "unbind", "chunk",
    "alias", "detach", "view_as", "flatten", "unflatten", "movedim", "expand_as",
    "clone", "copy_", "_to_copy", "to", "contiguous", "set_", "_local_scalar_dense", "is_same_size",
    "resolve_conj", "resolve_neg", "_has_compatible_shallow_copy_type",
})
ALLOCATING_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})


def poison_value(dtype: torch.dtype) -> float | int | None:
    if dtype.is_floating_point:
        return float("nan")
    if dtype == torch.bool:
        return None
    return torch.iinfo(dtype).max


def poison_(t: torch.Tensor) -> None:
    value = poison_value(t.dtype)
    if value is not None and t.numel():
        t.fill_(value)


class LaunchCounter:
    """Counts Triton kernel launches process-wide (installed once per worker)."""

    def __init__(self) -> None:
        self.count = 0
        self._installed: list[tuple[type, Callable[..., Any]]] = []

    def install(self) -> None:
        classes = []
        from triton.runtime.jit import JITFunction
        classes.append(JITFunction)
        try:
            from triton.runtime.interpreter import InterpretedFunction
            classes.append(InterpretedFunction)
        except ImportError:  # pragma: no cover - every supported Triton has it
            pass
        for cls in classes:
            original = cls.run
            counter = self

            def run(self, *args, __original=original, **kwargs):
                if not kwargs.get("warmup", False):
                    counter.count += 1
                return __original(self, *args, **kwargs)

            cls.run = run
            self._installed.append((cls, run))

    def hooks_intact(self) -> bool:
        return all(cls.__dict__.get("run") is fn for cls, fn in self._installed)


class OpRecorder(TorchDispatchMode):
    """Records aten ops; poisons fresh allocations (see module docstring)."""

    def __init__(self, poison: bool = True) -> None:
        super().__init__()
        self.ops: list[str] = []
        self.poison = poison

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        base = func.name().split("::")[-1].split(".")[0]
        self.ops.append(f"aten::{base}")
        out = func(*args, **(kwargs or {}))
        if self.poison and base in ALLOCATING_OPS and isinstance(out, torch.Tensor):
            poison_(out)
        return out

    def forbidden(self) -> list[str]:
        seen = []
        for op in self.ops:
            if op.split("::")[-1] not in ALLOWED_OPS and op not in seen:
                seen.append(op)
        return seen


# Callables the verdict depends on. Big third-party namespaces are watched by name (a
# lazy import inside torch may legitimately rebind other attributes); small ones, and
# every harness module, are watched whole.
CRITICAL = {
    "torch": ("equal", "allclose", "isfinite", "isnan", "rand", "randperm", "randn", "mul", "dot", "empty",
              "empty_like", "zeros", "sum", "Generator", "Tensor", "compile", "linalg", "float64", "no_grad", "cuda"),
    "torch.Tensor": ("copy_", "clone", "double", "float", "to", "data_ptr", "untyped_storage", "abs", "sub",
                     "__sub__", "__mul__", "__eq__", "all", "any", "max", "sum", "fill_", "view", "reshape",
                     "contiguous", "numel", "element_size", "item", "__bool__", "__float__", "detach",
                     "uniform_"),
    "torch.linalg": ("vector_norm",),
    "torch.cuda": ("synchronize", "Event", "Stream", "current_stream", "get_device_name", "get_device_properties",
                   "max_memory_allocated", "reset_peak_memory_stats", "is_available"),
    "builtins": ("isinstance", "type", "len", "float", "int", "bool", "sum", "min", "max", "sorted", "print",
                 "open", "getattr", "setattr", "hasattr", "range", "zip", "enumerate", "iter", "next",
                 "__import__", "id"),
}


def _trusted_namespaces() -> dict[str, tuple[Any, tuple[str, ...] | None]]:
    import triton
    import triton.testing
    from triton.runtime import jit as triton_jit
    spaces: dict[str, tuple[Any, tuple[str, ...] | None]] = {
        "torch": (torch, CRITICAL["torch"]), "torch.Tensor": (torch.Tensor, CRITICAL["torch.Tensor"]),
        "torch.linalg": (torch.linalg, CRITICAL["torch.linalg"]), "torch.cuda": (torch.cuda, CRITICAL["torch.cuda"]),
        "builtins": (builtins, CRITICAL["builtins"]),
        "time": (time, None), "threading": (threading, None), "_thread": (_thread, None),
        "torch.cuda.Event": (torch.cuda.Event, None), "triton.testing": (triton.testing, None),
        "triton.runtime.jit.JITFunction": (triton_jit.JITFunction, None),
        "triton.runtime.jit.KernelInterface": (triton_jit.KernelInterface, None),
        "TorchDispatchMode": (TorchDispatchMode, None),
    }
    try:
        from triton.runtime import interpreter
        spaces["InterpretedFunction"] = (interpreter.InterpretedFunction, None)
    except ImportError:  # pragma: no cover
        pass
    for name, module in list(sys.modules.items()):
        if name.startswith("autokernel_tui.") and module is not None:
            spaces[name] = (module, None)
            for attr, value in vars(module).items():
                if isinstance(value, type) and value.__module__ == name:
                    spaces[f"{name}.{attr}"] = (value, None)
    return spaces


def _code_parts(value: Any) -> tuple | None:
    """A Python function's code, defaults and closure cells' contents (None for anything else): what a
    candidate can swap while the function object stays the same."""
    fn = getattr(value, "__func__", value)  # staticmethod, classmethod, bound method
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    return (code, fn.__defaults__, fn.__kwdefaults__, *(_cell_contents(c) for c in (fn.__closure__ or ())))


def _same(a: tuple | None, b: tuple) -> bool:
    """Element by element, by identity (a default may be a tensor, whose == is elementwise)."""
    return a is not None and len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _cell_contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


class IdentitySnapshot:
    """Identity of the trusted callables, to spot monkey-patching."""

    def __init__(self) -> None:
        self._spaces = _trusted_namespaces()
        # Hold the objects themselves (not ids: a freed id can be reused by a replacement).
        self._values = {}
        self._code: dict[str, tuple] = {}  # "space.name" -> what a function object carries that can be swapped
        for name, (ns, keys) in self._spaces.items():
            now = vars(ns)
            self._values[name] = {k: now[k] for k in (keys if keys is not None else list(now)) if k in now}
            for key, value in self._values[name].items():
                parts = _code_parts(value)
                if parts is not None:
                    self._code[f"{name}.{key}"] = parts
        self._modules = {name: sys.modules[name] for name in ("time", "threading", "builtins", "torch", "triton")
                         if name in sys.modules}
        self._modules.update({name: mod for name, mod in sys.modules.items() if name.startswith("autokernel_tui.")})

    def changed(self) -> list[str]:
        out = []
        for name, values in self._values.items():
            now = vars(self._spaces[name][0])
            for key, value in values.items():
                if key == "__warningregistry__":
                    continue
                if key not in now or now[key] is not value:
                    out.append(f"{name}.{key}")
                elif f"{name}.{key}" in self._code and not _same(_code_parts(value), self._code[f"{name}.{key}"]):
                    out.append(f"{name}.{key}.__code__")
        for name, module in self._modules.items():
            if sys.modules.get(name) is not module:
                out.append(f"sys.modules[{name!r}]")
        return out


# Source files of candidate code (kernel.py, or a test's stand-in function).
_CANDIDATE_FILES: set[str] = set()
_CANDIDATE_THREADS: list[threading.Thread] = []


def watch_candidate_code(fn_or_path: Any) -> None:
    """Attribute threads started under frames of this file to the candidate."""
    code = getattr(fn_or_path, "__code__", None)
    _CANDIDATE_FILES.add(code.co_filename if code is not None else str(fn_or_path))


def _candidate_on_stack() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename in _CANDIDATE_FILES:
            return True
        frame = frame.f_back
    return False


_RAW_THREADS = [0]  # threads started through _thread directly by candidate code, still running


def _install_thread_hook() -> None:
    original = threading.Thread.start
    if getattr(original, "_autokernel_hook", False):
        return

    def start(thread: threading.Thread, *args: Any, **kwargs: Any) -> Any:
        if _CANDIDATE_FILES and _candidate_on_stack():
            _CANDIDATE_THREADS.append(thread)
        return original(thread, *args, **kwargs)

    start._autokernel_hook = True  # type: ignore[attr-defined]
    threading.Thread.start = start  # type: ignore[method-assign]
    raw_start = _thread.start_new_thread  # threading keeps its own reference: Thread.start is hooked above

    def start_new_thread(function: Callable, args: tuple = (), kwargs: dict | None = None) -> int:
        if not (_CANDIDATE_FILES and _candidate_on_stack()):
            return raw_start(function, args, kwargs or {})

        def counted(*a: Any, **k: Any) -> Any:
            try:
                return function(*a, **k)
            finally:
                _RAW_THREADS[0] -= 1
        _RAW_THREADS[0] += 1
        try:
            return raw_start(counted, args, kwargs or {})
        except BaseException:
            _RAW_THREADS[0] -= 1
            raise

    _thread.start_new_thread = start_new_thread


_install_thread_hook()


def live_threads() -> int:
    """Threads started by candidate code that are still running."""
    _CANDIDATE_THREADS[:] = [t for t in _CANDIDATE_THREADS if t.is_alive()]
    return len(_CANDIDATE_THREADS) + _RAW_THREADS[0]


def watched_files_intact(files: frozenset[str]) -> bool:
    """Whether the candidate files the harness registered are all still watched (a candidate that
    empties the set would start threads unseen)."""
    return files <= _CANDIDATE_FILES
