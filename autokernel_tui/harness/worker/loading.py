"""Import a task's reference.py and a candidate's kernel.py from files (worker side).

Each load gets a fresh, uniquely named module so one evaluation never sees
another's objects; Triton needs the source on disk (it reads it with inspect).
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import tempfile
from pathlib import Path
from types import ModuleType

_counter = itertools.count()


def load_module(path: Path, prefix: str) -> ModuleType:
    name = f"_autokernel_{prefix}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and Triton look modules up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def load_text(source: str, prefix: str) -> ModuleType:
    """``source`` imported from a file of its own in a fresh temporary folder: Triton reads a kernel's
    source from its file, so text exec'd in memory cannot define one. For tests and benchmarks that
    assemble a kernel file from parts (the GEMM template's, or an older revision's)."""
    path = Path(tempfile.mkdtemp(prefix=f"{prefix}-")) / f"{prefix}.py"
    path.write_text(source)
    return load_module(path, prefix)


def unload(module: ModuleType) -> None:
    sys.modules.pop(module.__name__, None)
