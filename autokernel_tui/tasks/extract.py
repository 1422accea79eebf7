"""Tasks from a profile: the top-ranked op families that have a starter, at the model's shapes.

``extract_tasks(profile, dest_kernels_dir, top)`` copies each starter folder and rewrites
its ``task.toml``: the ``[[shapes]]`` become the shapes the model really ran (heaviest
first), ``dtypes`` the model's dtype, and a ``[profile]`` table records the family's
share and time. Tolerances, knobs, test shapes and forbidden ops stay the starter's, so
the harness evaluates exactly the model's shapes with the starter's checks.
No torch: this runs in the engine process.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from autokernel_tui.errors import TaskFormatError, WorkspaceError
from autokernel_tui.tasks import spec as taskspec

MAX_SHAPES = 6  # the heaviest shapes of a family; the rest add evaluation time, not signal


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    text = str(v).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def _without_tables(text: str, names: tuple[str, ...]) -> str:
    """Drop ``[name]`` / ``[[name]]`` tables (header to the next header) from TOML text."""
    out, skipping = [], False
    for line in text.splitlines():
        header = re.match(r"^\s*\[\[?\s*([A-Za-z0-9_.]+)\s*\]\]?", line)
        if header:
            skipping = header.group(1) in names
        if not skipping:
            out.append(line)
    return "\n".join(out).rstrip() + "\n"


def _set_key(text: str, key: str, value: str) -> str:
    """Replace a top-level ``key = ...`` line (before the first table)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.lstrip().startswith("["):
            break
        if re.match(rf"^{key}\s*=", line):
            lines[i] = f"{key} = {value}"
            return "\n".join(lines) + "\n"
    raise TaskFormatError(f"starter task.toml has no top-level {key!r}")


def _model_label(profile: dict) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", str(profile.get("model", "model"))).strip("-") or "model"


def task_shapes(family: dict, dim_names: set[str], dtype: str, label: str) -> list[dict]:
    """The family's shapes that fit the starter's dimensions, heaviest first, named after the model."""
    out, seen = [], set()
    for s in family.get("shapes", []):
        dims = s.get("dims") or {}
        if set(dims) != dim_names or s.get("dtype", dtype) != dtype:
            continue
        if any(not isinstance(v, str) and (not isinstance(v, int) or v <= 0) for v in dims.values()):
            continue
        key = tuple(sorted(dims.items()))
        if key in seen:
            continue
        seen.add(key)
        out.append({"name": f"{label}-{len(out) + 1}", "dims": dims, "time_us": s.get("time_us", 0.0)})
        if len(out) == MAX_SHAPES:
            break
    return out


def render_task_toml(starter_text: str, shapes: list[dict], dtype: str, profile: dict, family: dict) -> str:
    text = _without_tables(starter_text, ("shapes", "profile"))
    text = _set_key(text, "dtypes", f'["{dtype}"]')
    share = family.get("share", 0.0)
    parts = [text, f"\n# Shapes from a profile of {profile.get('model')} ({dtype}), heaviest first.\n"]
    for s in shapes:
        parts.append(f"[[shapes]]\nname = {_toml_value(s['name'])}    # {s['time_us']:.1f} us per step\n")
        parts.extend(f"{k} = {_toml_value(v)}\n" for k, v in s["dims"].items())
    args = profile.get("model_args", {})
    parts.append("\n[profile]\n")
    for key, value in (("model", profile.get("model", "")), ("device", profile.get("device", "")),
                       ("time_kind", profile.get("time_kind", "")), ("share", round(share, 6)),
                       ("time_us", round(family.get("time_us", 0.0), 3)),
                       ("headroom", round(family.get("headroom", 1.0), 3)),
                       ("gain_if_at_floor", round(family.get("gain", 1.0), 4)),
                       ("batch", args.get("batch") or 0), ("seq", args.get("seq") or 0),
                       ("dtype", dtype), ("train", bool(args.get("train", False)))):
        parts.append(f"{key} = {_toml_value(value)}\n")
    if "layers" in args:
        parts.append(f"layers = {_toml_value(args['layers'])}\n")
    return "".join(parts)


def extract_tasks(profile: dict, dest_kernels_dir: Path, top: int = 5, skipped: list[dict] | None = None) -> list[Path]:
    """Create task folders for the ``top`` best-ranked families that have a starter; returns them.

    Each family ranked above the last one used that gets no task is appended to ``skipped`` as
    ``{"family", "rank", "reason"}`` (no starter for the op, a dtype the starter lacks, no shape
    that fits it), so a caller can say why ``top`` tasks were not made."""
    passed_over: list[dict] = []

    def skip(family: dict, reason: str) -> None:
        passed_over.append({"family": str(family.get("family", "?")), "rank": family.get("rank"), "reason": reason})

    if not isinstance(profile, dict) or "families" not in profile:
        raise WorkspaceError("not a ranked profile: run `autokernel-tui profile MODEL --json FILE` to make one")
    dest_kernels_dir = Path(dest_kernels_dir)
    dest_kernels_dir.mkdir(parents=True, exist_ok=True)
    starters = taskspec.starters_dir()
    available = set(taskspec.list_starters())
    dtype = profile.get("model_args", {}).get("dtype", "bfloat16")
    label = _model_label(profile)
    created: list[Path] = []
    for family in sorted(profile["families"], key=lambda f: f.get("rank", 1 << 30)):
        if len(created) >= top:
            break
        task = family.get("task")
        if not task:
            skip(family, "no starter task does this op")
            continue
        if task not in available:
            skip(family, f"no starter task {task!r} here")
            continue
        starter = taskspec.load_spec(starters / task)
        if dtype not in starter.dtypes:
            skip(family, f"the model runs {dtype}; the {task} starter supports {', '.join(starter.dtypes)}")
            continue
        shapes = task_shapes(family, set(starter.shapes[0].dims), dtype, label)
        if not shapes and starter.kind == "backward":
            # A backward op's own arguments (saved stats, grad_out) do not name the forward's dims:
            # it runs at the shapes of its forward, which the same profile recorded.
            forward = next((f for f in profile["families"] if f.get("family") == family["family"].removesuffix("_backward")), {})
            shapes = task_shapes(forward, set(starter.shapes[0].dims), dtype, label)
        if not shapes:
            skip(family, f"none of its {dtype} shapes has the {task} starter's dimensions "
                         f"({', '.join(starter.shapes[0].dims)})")
            continue
        dest = dest_kernels_dir / task
        if dest.exists():
            raise WorkspaceError(f"{dest} already exists; remove it or extract into another workspace")
        shutil.copytree(starters / task, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        toml_path = dest / taskspec.SPEC_FILE
        toml_path.write_text(render_task_toml(toml_path.read_text(encoding="utf-8"), shapes, dtype, profile, family),
                             encoding="utf-8")
        taskspec.load_spec(dest)  # the rewritten file must still be a valid task
        created.append(dest)
    if skipped is not None:
        skipped.extend(passed_over)
    if not created:
        why = "; ".join(f"{s['family']}: {s['reason']}" for s in passed_over[:8])
        raise WorkspaceError(f"no starter task matches the profile's top families ({why})")
    return created
