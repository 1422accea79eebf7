"""The kernel-task format, read without importing torch.

A task is a folder ``<name>/`` holding:

* ``task.toml``     harness-owned metadata: shapes, dtypes, tolerances, knobs.
* ``reference.py``  harness-owned PyTorch side: ``make_inputs``, ``reference``,
                    ``flops``, ``bytes_moved``, ``ADVERSARIAL`` (needs torch).
* ``kernel.py``     the one file an agent edits: ``kernel_fn(*inputs)``.

Everything but ``kernel.py`` is harness-owned; ``owned_file_hashes`` lets the
harness refuse an evaluation when any of them changed (see docs/TASK_FORMAT.md).
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from autokernel_tui.errors import TaskFormatError

KERNEL_FILE = "kernel.py"
SPEC_FILE = "task.toml"
REFERENCE_FILE = "reference.py"
HARNESS_OWNED = (SPEC_FILE, REFERENCE_FILE)
DTYPES = ("float16", "bfloat16", "float32")
BOUNDS = ("memory", "compute")
KINDS = ("forward", "backward")


@dataclass(frozen=True)
class Shape:
    """One named problem size: ``dims`` maps dimension names to integers."""

    name: str
    dims: dict[str, int | str]

    def label(self) -> str:
        return "x".join(f"{k}{v}" for k, v in self.dims.items())


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    # ||out - ref||_2 / ||ref||_2 against a float64 reference: zeros cannot pass.
    max_rel_l2: float


@dataclass(frozen=True)
class TaskSpec:
    name: str
    family: str
    description: str
    bound: str
    baseline: str
    dtypes: tuple[str, ...]
    tolerances: dict[str, Tolerance]
    shapes: tuple[Shape, ...]
    test_shapes: tuple[Shape, ...]
    forbidden_ops: tuple[str, ...]
    knob_space: dict[str, tuple[Any, ...]]
    profile: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    # "forward", or "backward": kernel_fn(*inputs, grad_out) returns the gradients of the inputs
    # at ``grad_inputs`` (positions in the inputs), checked against autograd of the reference.
    kind: str = "forward"
    grad_inputs: tuple[int, ...] = ()
    # A backward task's tensors its forward saved (e.g. attention's output and row logsumexp, as
    # FlashAttention's forward keeps them): the reference's ``saved_for_backward(*inputs)`` computes
    # them, and kernel_fn takes them between the inputs and the grad_outs.
    saved: tuple[str, ...] = ()

    @property
    def kernel_path(self) -> Path:
        assert self.path is not None
        return self.path / KERNEL_FILE

    def shapes_for(self, device: str) -> tuple[Shape, ...]:
        """Full default shapes on a GPU; the small test shapes on the CPU interpreter."""
        return self.shapes if device == "cuda" else self.test_shapes


def _shape_list(raw: Any, where: str) -> tuple[Shape, ...]:
    if not isinstance(raw, list) or not raw:
        raise TaskFormatError(f"{where}: needs at least one [[{where.split(':')[-1]}]] entry")
    shapes = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict) or "name" not in entry:
            raise TaskFormatError(f"{where}[{i}]: each shape needs a name")
        dims = {k: v for k, v in entry.items() if k != "name"}
        # Dimensions are positive integers; a string value names a variant (e.g. gelu's approximation).
        bad = [k for k, v in dims.items()
               if not isinstance(v, str) and (not isinstance(v, int) or isinstance(v, bool) or v <= 0)]
        if bad or not dims:
            raise TaskFormatError(f"{where}[{i}] ({entry['name']}): dimensions must be positive integers "
                                  f"(or variant strings): {bad or 'none given'}")
        shapes.append(Shape(str(entry["name"]), dims))
    names = [s.name for s in shapes]
    if len(set(names)) != len(names):
        raise TaskFormatError(f"{where}: shape names must be unique")
    return tuple(shapes)


def parse_spec(data: dict[str, Any], path: Path | None = None) -> TaskSpec:
    """Validate a task.toml dictionary; every problem is one readable line."""
    where = str(path / SPEC_FILE) if path else SPEC_FILE
    for key in ("name", "family", "description", "bound", "baseline", "dtypes", "tolerance", "shapes", "test_shapes"):
        if key not in data:
            raise TaskFormatError(f"{where}: missing key '{key}'")
    if data["bound"] not in BOUNDS:
        raise TaskFormatError(f"{where}: bound must be one of {BOUNDS}, not {data['bound']!r}")
    dtypes = tuple(data["dtypes"])
    unknown = [d for d in dtypes if d not in DTYPES]
    if unknown or not dtypes:
        raise TaskFormatError(f"{where}: dtypes must be a non-empty subset of {DTYPES}, got {list(dtypes)}")
    tolerances = {}
    for d in dtypes:
        t = data["tolerance"].get(d)
        if not isinstance(t, dict):
            raise TaskFormatError(f"{where}: missing [tolerance.{d}]")
        try:
            tolerances[d] = Tolerance(float(t["atol"]), float(t["rtol"]), float(t["max_rel_l2"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise TaskFormatError(f"{where}: [tolerance.{d}] needs numeric atol, rtol, max_rel_l2 ({exc})") from None
    kind = data.get("kind", "forward")
    if kind not in KINDS:
        raise TaskFormatError(f"{where}: kind must be one of {KINDS}, not {kind!r}")
    grad_inputs = data.get("grad_inputs", [])
    if not isinstance(grad_inputs, list) or not all(isinstance(i, int) and i >= 0 for i in grad_inputs) \
            or (kind == "backward") != bool(grad_inputs):
        raise TaskFormatError(f"{where}: a backward task names grad_inputs = [input positions] (and only it)")
    saved = data.get("saved", [])
    if not isinstance(saved, list) or not all(isinstance(n, str) and n for n in saved) \
            or (saved and kind != "backward"):
        raise TaskFormatError(f"{where}: saved = [names of what the forward saves] belongs to a backward task")
    knobs = data.get("knobs", {})
    if not isinstance(knobs, dict) or any(not isinstance(v, list) or not v for v in knobs.values()):
        raise TaskFormatError(f"{where}: [knobs] maps each knob name to a non-empty list of values")
    return TaskSpec(
        name=str(data["name"]),
        family=str(data["family"]),
        description=str(data["description"]),
        bound=data["bound"],
        baseline=str(data["baseline"]),
        dtypes=dtypes,
        tolerances=tolerances,
        shapes=_shape_list(data["shapes"], f"{where}: shapes"),
        test_shapes=_shape_list(data["test_shapes"], f"{where}: test_shapes"),
        forbidden_ops=tuple(data.get("forbidden_ops", ())),
        knob_space={k: tuple(v) for k, v in knobs.items()},
        profile=dict(data.get("profile", {})),
        path=path,
        kind=kind,
        grad_inputs=tuple(grad_inputs),
        saved=tuple(saved),
    )


def load_spec(task_dir: str | Path) -> TaskSpec:
    task_dir = Path(task_dir)
    spec_path = task_dir / SPEC_FILE
    if not spec_path.is_file():
        raise TaskFormatError(f"{task_dir}: not a task folder (no {SPEC_FILE})")
    for name in (REFERENCE_FILE, KERNEL_FILE):
        if not (task_dir / name).is_file():
            raise TaskFormatError(f"{task_dir}: missing {name}")
    try:
        data = tomllib.loads(spec_path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TaskFormatError(f"{spec_path}: malformed TOML: {exc}") from None
    return parse_spec(data, task_dir)


def owned_file_hashes(task_dir: str | Path) -> dict[str, str]:
    """sha256 of each harness-owned file, to detect tampering between evaluations."""
    task_dir = Path(task_dir)
    return {name: hashlib.sha256((task_dir / name).read_bytes()).hexdigest() for name in HARNESS_OWNED}


def starters_dir() -> Path:
    """The shipped starter tasks: inside the wheel, or ``kernels/`` in a checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "kernels", here.parent / "kernels"):
        if candidate.is_dir() and any(candidate.glob(f"*/{SPEC_FILE}")):
            return candidate
    raise TaskFormatError("the starter kernels are missing from this installation")


def list_starters() -> list[str]:
    return sorted(p.parent.name for p in starters_dir().glob(f"*/{SPEC_FILE}"))


def find_tasks(root: str | Path) -> list[TaskSpec]:
    """Every task folder directly under ``root`` (a workspace's ``kernels/``)."""
    root = Path(root)
    return [load_spec(p.parent) for p in sorted(root.glob(f"*/{SPEC_FILE}"))]
