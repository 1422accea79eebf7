"""Tasks from a profile: the top-ranked op families, as starters at the model's shapes or generated tasks.

``extract_tasks(profile, dest_kernels_dir, top)`` copies each starter folder and rewrites
its ``task.toml``: the ``[[shapes]]`` become the shapes the model really ran (heaviest
first), ``dtypes`` the model's dtype, and a ``[profile]`` table records the family's
share and time. Tolerances, knobs, test shapes and forbidden ops stay the starter's, so
the harness evaluates exactly the model's shapes with the starter's checks.
No torch: this runs in the engine process.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

from autokernel_tui.errors import TaskFormatError, WorkspaceError
from autokernel_tui.progress import ProgressFn
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


SHARE_THRESHOLD = 0.01  # families under 1% of the time get no task (listed, with that reason)
MAX_PER_FAMILY = 3  # distinct recorded calls of one family made into generated tasks
SKIPPED_FILE = "init-skipped.json"  # beside kernels/: every family or call that got no task, and why


def _starter_fits(record: dict, unit: dict, family: str) -> bool:
    """Whether the family's starter computes exactly this unit (else it gets a generated task)."""
    from autokernel_tui.profiling.replay import is_view, packet

    ops = [record["ops"][i] for i in unit["ops"] if not is_view(record["ops"][i]["op"])]
    if len(ops) != 1:  # an epilogue the starter would drop
        return False
    p = packet(ops[0]["op"])
    if family == "matmul":
        return p == "mm"  # addmm/baddbmm add a bias; bmm is not the starter's shape
    if family == "layernorm":  # the starter is affine: weight and bias present
        a = ops[0]["args"]
        return p == "native_layer_norm" and len(a) > 3 and isinstance(a[2], dict) and isinstance(a[3], dict)
    return True


def _units_by_family(profile: dict) -> dict[str, list[dict]]:
    """family -> [{unit, count, cost}] for the recorded calls, distinct signatures, costliest first."""
    from autokernel_tui.profiling import generate as gen

    record = profile.get("replay") or {}
    dtype = profile.get("model_args", {}).get("dtype", "float32")
    out: dict[str, dict[str, dict]] = {}
    for unit in record.get("units", []):
        if unit["kind"] == "view":
            continue
        fam = gen.unit_family(record, unit)
        sig = gen.signature(record, unit)
        flops, nbytes = gen.unit_cost(dict(record, dtype=dtype), unit, dtype)
        entry = out.setdefault(fam, {}).setdefault(sig, {"unit": unit, "count": 0, "cost": 0.0, "family": fam})
        entry["count"] += 1
        entry["cost"] += nbytes + flops / 50.0  # a rough time proxy (50 FLOP per byte) to order calls
    return {f: sorted(v.values(), key=lambda e: -e["cost"]) for f, v in out.items()}


def extract_all(profile: dict, dest_kernels_dir: Path, top: int = 5,
                threshold: float = SHARE_THRESHOLD, calls: int = MAX_PER_FAMILY,
                progress: ProgressFn | None = None) -> tuple[list[Path], list[dict]]:
    """Tasks for the ranked families: a starter where one fits, else generated tasks from the
    profile's replay record (the ``calls`` costliest distinct calls of each family; their starters made
    several at once, ``progress`` told of each). Returns (created folders, skipped): every family (and
    every recorded call of a chosen family) that got no task is in ``skipped`` with the reason."""
    from autokernel_tui.profiling import generate as gen
    from autokernel_tui.profiling.starter_process import make_all

    if not isinstance(profile, dict) or "families" not in profile:
        raise WorkspaceError("not a ranked profile: run `autokernel-tui profile MODEL --json FILE` to make one")
    dest_kernels_dir = Path(dest_kernels_dir)
    dest_kernels_dir.mkdir(parents=True, exist_ok=True)
    starters = taskspec.starters_dir()
    available = set(taskspec.list_starters())
    dtype = profile.get("model_args", {}).get("dtype", "bfloat16")
    label = _model_label(profile)
    record = profile.get("replay") or {}
    units = _units_by_family(profile) if record.get("units") else {}
    no_record = record.get("error") or ("" if record.get("units") else "the profile has no replay record "
                                        "(made before faithful capture: profile again)")
    created: list[Path] = []
    skipped: list[dict] = []
    starters_to_make: list = []  # (task folder, job): made together once every folder is written
    generated: dict[Path, tuple[dict, str]] = {}  # task folder -> (its family, the call it replays)
    families_done = 0  # --top counts families (each: its starter and/or up to MAX_PER_FAMILY generated tasks)

    def skip(family: dict, reason: str, call: str = "") -> None:
        skipped.append({"family": family["family"], "share": round(family.get("share", 0.0), 6),
                        **({"call": call} if call else {}), "reason": reason})

    for family in sorted(profile["families"], key=lambda f: f.get("rank", 1 << 30)):
        fam = family["family"]
        if families_done >= top:
            skip(family, f"--top {top}: that many families already have tasks")
            continue
        below = family.get("share", 0.0) < threshold  # a starter is still used; generated tasks are not made
        if fam == "overhead":
            skip(family, "views and allocations: no kernel to write")
            continue
        made_starter, why_starter = False, ""
        task = family.get("task")
        if task and task in available:
            starter = taskspec.load_spec(starters / task)
            shapes = task_shapes(family, set(starter.shapes[0].dims), dtype, label)
            if not shapes and starter.kind == "backward":
                # A backward op's own arguments (saved stats, grad_out) do not name the forward's
                # dims: it runs at the shapes of its forward, which the same profile recorded.
                forward = next((f for f in profile["families"] if f.get("family") == fam.removesuffix("_backward")), {})
                shapes = task_shapes(forward, set(starter.shapes[0].dims), dtype, label)
            if dtype not in starter.dtypes:
                why_starter = f"the {task} starter has no {dtype}"
            elif not shapes:
                why_starter = f"no recorded shape fits the {task} starter's dimensions"
            else:
                dest = dest_kernels_dir / task
                if dest.exists():
                    raise WorkspaceError(f"{dest} already exists; remove it or extract into another workspace")
                shutil.copytree(starters / task, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
                toml_path = dest / taskspec.SPEC_FILE
                toml_path.write_text(render_task_toml(toml_path.read_text(encoding="utf-8"), shapes, dtype, profile,
                                                      family), encoding="utf-8")
                taskspec.load_spec(dest)  # the rewritten file must still be a valid task
                created.append(dest)
                made_starter = True
        else:
            why_starter = "no hand-written starter for this family"
        families_done += made_starter
        backward = fam.endswith("_backward")
        if backward and made_starter:
            continue
        if below:
            if not made_starter:
                skip(family, f"share {100 * family.get('share', 0.0):.2f}% is under the {100 * threshold:g}% "
                             "threshold for generated tasks (init --min-share lowers it)")
            continue
        if backward:  # the recorded forward calls of the family, each differentiated: a backward task
            forward = fam.removesuffix("_backward")
            candidates = units.get(forward, [])
            if not candidates:
                skip(family, f"{why_starter}; {no_record or f'no forward call of {forward} was recorded to differentiate'}")
                continue
        else:
            candidates = [e for e in units.get(fam, []) if not (made_starter and _starter_fits(record, e["unit"], fam))]
        if not candidates:
            if not made_starter:
                if fam == "elementwise" and record.get("units"):
                    skip(family, f"{why_starter}; its recorded calls are epilogues inside chain tasks of other "
                                 "families (or none was recorded)")
                else:
                    skip(family, f"{why_starter}; {no_record or 'no forward call of this family was recorded'}")
            continue
        total_cost = sum(e["cost"] for e in candidates) or 1.0
        counted = False
        for n, e in enumerate(candidates, 1):
            what = " -> ".join(record["ops"][i]["op"] for i in e["unit"]["ops"])
            if n > calls:
                skip(family, f"beyond the {calls} costliest distinct calls of the family (init --calls)", what)
                continue
            name, k = gen.task_name(fam, record, e["unit"], n, backward), n
            while dest_kernels_dir / name in created:  # another family's call of the same op (T5: causal and not)
                k += 1
                name = gen.task_name(fam, record, e["unit"], k, backward)
            dest = dest_kernels_dir / name
            if dest.exists():
                raise WorkspaceError(f"{dest} already exists; remove it or extract into another workspace")
            info = {"model": profile.get("model", ""), "device": profile.get("device", ""),
                    "time_kind": profile.get("time_kind", ""), "family_share": round(family.get("share", 0.0), 6),
                    "share": round(family.get("share", 0.0) * e["cost"] / total_cost, 6),
                    "share_note": "the family's share split over its calls by estimated cost",
                    "calls_per_step": e["count"], "dtype": dtype}
            try:
                gen.write_task(dest, name, record, e["unit"], fam, str(profile.get("model", "model")), dtype, info,
                               backward=backward, later=starters_to_make)
            except (ValueError, TaskFormatError) as exc:
                shutil.rmtree(dest, ignore_errors=True)
                skip(family, f"cannot be a task: {exc}", what)
                continue
            created.append(dest)
            generated[dest] = (family, what)
            if not made_starter and not counted:
                families_done, counted = families_done + 1, True
    # The generated tasks' starters, several compiles at once; then each folder must be a valid task.
    failed = dict(make_all(starters_to_make, progress))
    for dest, (family, what) in generated.items():
        try:
            if dest in failed:
                raise failed[dest]
            taskspec.load_spec(dest)
        except (ValueError, TaskFormatError) as exc:
            shutil.rmtree(dest, ignore_errors=True)
            created.remove(dest)
            skip(family, f"cannot be a task: {exc}", what)
    (dest_kernels_dir.parent / SKIPPED_FILE).write_text(json.dumps(skipped, indent=1) + "\n", encoding="utf-8")
    return created, skipped


def extract_tasks(profile: dict, dest_kernels_dir: Path, top: int = 5, calls: int = MAX_PER_FAMILY,
                  min_share: float | None = None, progress: ProgressFn | None = None) -> list[Path]:
    """Create task folders for the ``top`` best-ranked families (starters or generated, up to ``calls``
    distinct calls each, generated ones only from ``min_share`` of the time, default SHARE_THRESHOLD);
    returns them. What got no task is written to ``init-skipped.json`` beside ``kernels/`` (``extract_all``)."""
    threshold = SHARE_THRESHOLD if min_share is None else min_share
    created, skipped = extract_all(profile, dest_kernels_dir, top, threshold=threshold, calls=calls, progress=progress)
    if not created:
        names = "; ".join(f"{s['family']}: {s['reason']}" for s in skipped[:8])
        raise WorkspaceError(f"no task could be made from the profile ({names})")
    return created


def skipped_lines(workspace: Path) -> list[str]:
    """init's report of what got no task (from ``init-skipped.json``), one line each."""
    path = Path(workspace) / SKIPPED_FILE
    if not path.is_file():
        return []
    items = json.loads(path.read_text(encoding="utf-8"))
    if not items:
        return []
    out = [f"no task for {len(items)} item(s) (list: {path}):"]
    for s in items:
        call = f" [{s['call']}]" if s.get("call") else ""
        out.append(f"  {s['family']} ({100 * s.get('share', 0.0):.1f}%){call}: {s['reason']}")
    return out
