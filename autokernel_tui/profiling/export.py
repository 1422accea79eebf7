"""Write kept kernels as a standalone package (torch + triton only) with ``patch(model)``.

The package holds a verbatim copy of ``profiling/patch.py`` (the code ``verify`` uses) and
a copy of each task's ``kernel.py``; its ``__init__`` only maps families to those files::

    OUT/
      __init__.py        patch(model, families=None) -> {family: modules replaced}
                         patch_graph(model, example_inputs, train=False) -> (new module, {task: sites}),
                         generated tasks too (with train=True a training step's graph: a generated
                         backward task's kernel differentiates its chain's site)
      _patch.py          = autokernel_tui/profiling/patch.py
      _graph_patch.py    = autokernel_tui/profiling/graph_patch.py
      kernels/<task>.py  = <workspace>/kernels/<task>/kernel.py (a starter)
      kernels/<task>_bwd.py, kernels/<task>_reference.py
                         its backward task's kernel.py where there is one, and its reference.py: what
                         autograd runs, so a patched model trains (the backward kernel, else autograd
                         through the reference)
      kernels/<task>/    kernel.py and reference.py of a generated task (its recorded chain is in reference.py)
      manifest.json      source, sha256 of each kernel, commit of the workspace when known
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

from autokernel_tui.errors import AutokernelError

INIT_TEMPLATE = '''"""Triton kernels found by autokernel-tui, packaged to patch a PyTorch model.

    import {name}
    {name}.patch(model)      # replaces the modules each kernel implements, in place
    {name}.patch(model, custom_ops=True); model = torch.compile(model)   # inside a compiled graph
    # (mode="reduce-overhead" adds CUDA graphs; `autokernel-tui verify` says which mode is fastest)

Needs only torch and triton. Without a GPU, kernels run in Triton's interpreter
(set TRITON_INTERPRET=1 before importing triton): correct, but slow.
"""

import copy
from pathlib import Path

from . import _graph_patch, _patch

KERNELS = {kernels!r}  # task/family -> file in this package
BACKWARDS = {backwards!r}  # family -> its backward kernel's file (or None), gradient positions, reference file
GENERATED = {generated!r}  # generated task -> its kernel.py (its recorded chain beside it, in reference.py)
GENERATED_BACKWARD = {generated_backward!r}  # generated backward task -> the inputs it gives gradients for
_HERE = Path(__file__).resolve().parent


def patch(model, families=None, custom_ops=False, train=True, example_inputs=None):
    """Put the kernels into ``model`` (in place); returns {{family: modules replaced}}.

    ``custom_ops``: each kernel as a torch custom op, for a model you will torch.compile (its
    kernels then run inside the compiled graph, and under CUDA graphs with mode="reduce-overhead").
    ``train``: each kernel differentiable (its backward kernel, else autograd through its task's
    reference), so the patched model trains; ``train=False`` for inference only, where a patched
    module passes no gradient back.
    ``example_inputs``: one call's inputs; with them one trace of the model finds each Linear whose
    output only one module takes: a GELU then runs in the Linear's matmul kernel's epilogue, and a
    cross-entropy loss after an LM head (with ``train=False``) runs as one linear_cross_entropy kernel.
    """
    _patch.use_interpreter_if_no_gpu(next((p.device.type for p in model.parameters()), "auto"))
    fns = _patch.load_kernels({{f: _HERE / rel for f, rel in KERNELS.items()}})
    fuse = None
    if example_inputs is not None and (not families or {{"matmul", "linear_cross_entropy"}} & set(families)):
        fuse = _graph_patch.epilogue_pairs(model, tuple(example_inputs), fns)
    return _patch.patch_model(model, fns, families, custom_ops=custom_ops, backwards=_backwards() if train else None,
                              fuse=fuse)


def _backwards():
    return _patch.load_backwards({{
        f: {{"kernel": b["kernel"] and _HERE / b["kernel"], "positions": tuple(b["positions"]),
            "saved": b.get("saved", False), "reference": b["reference"] and _HERE / b["reference"]}}
        for f, b in BACKWARDS.items()}})


def patch_graph(model, example_inputs, custom_ops=False, train=False):
    """Every kernel, generated tasks' too: returns (a new module, {{task: sites replaced}}); ``model``
    is not changed. A generated kernel replaces a recorded chain of aten calls wherever it occurs in
    the model's forward graph, traced once at ``example_inputs`` (shapes fixed: other inputs run the
    model without the generated kernels). ``train``: the graph of a training step, each chain a
    differentiable site (its generated backward kernel where one is here, else autograd through the
    recorded chain); without it, inference, and the backward kernels stay out."""
    _patch.use_interpreter_if_no_gpu(next((p.device.type for p in model.parameters()), "auto"))
    m = copy.deepcopy(model)
    generated = {{t: _HERE / rel for t, rel in GENERATED.items() if train or t not in GENERATED_BACKWARD}}
    counts = {{}}
    if KERNELS:  # as custom ops: a trace sees them; a module a generated chain runs through is the chain's
        fns = _patch.load_kernels({{f: _HERE / rel for f, rel in KERNELS.items()}})
        skip = _graph_patch.covered_modules(m, tuple(example_inputs), generated, _patch.patch_sites(m, list(fns)))
        fuse = _graph_patch.epilogue_pairs(m, tuple(example_inputs), fns, skip)
        counts = _patch.patch_model(m, fns, custom_ops=True, skip=skip, backwards=_backwards() if train else None,
                                    fuse=fuse)
    if generated:
        m, sites = _graph_patch.patch_graph(m, tuple(example_inputs), generated, custom_ops=custom_ops,
                                            backwards={{t: tuple(g) for t, g in GENERATED_BACKWARD.items()}}
                                            if train else None)
        counts.update(sites)
    return m, counts


def unpatch(model):
    _patch.unpatch_model(model)
'''


class ExportError(AutokernelError):
    """The package cannot be written."""


def _git_head(path: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def export_package(out: Path, kernels: dict[str, Path], source: str = "") -> Path:
    """Write the package at ``out`` (its folder name is the import name); returns ``out``."""
    out = Path(out)
    name = out.name
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ExportError(f"{out}: the folder name is the package's import name and must be a Python identifier")
    if out.exists() and any(out.iterdir()):
        raise ExportError(f"{out} exists and is not empty; choose a new folder")
    if not kernels:
        raise ExportError("no kernels to export")
    from autokernel_tui.profiling.graph_patch import is_generated
    from autokernel_tui.profiling.verify import backward_plans, generated_backwards
    from autokernel_tui.tasks import spec as taskspec

    backward_tasks = {task for task, path in kernels.items() if not is_generated(Path(path))
                      and (Path(path).parent / taskspec.SPEC_FILE).is_file()
                      and taskspec.load_spec(Path(path).parent).kind == "backward"}
    if backward_tasks and backward_tasks == set(kernels):
        raise ExportError(f"{', '.join(sorted(backward_tasks))}: backward tasks only; export them with their "
                          "forward tasks (each goes into the package as its forward kernel's backward)")
    (out / "kernels").mkdir(parents=True, exist_ok=True)
    files, generated, backwards, manifest = {}, {}, {}, {"source": source, "kernels": {}, "backwards": {}}

    def copy(path: Path, rel: str) -> dict:  # the file into the package, and its manifest record
        shutil.copyfile(path, out / rel)
        return {"file": rel, "from": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                "commit": _git_head(path.parent)}

    for family, path in sorted(kernels.items()):
        path = Path(path)
        if family in backward_tasks:
            continue  # goes in as its forward's backward, below
        if is_generated(path):
            rel = f"kernels/{family}/kernel.py"
            (out / "kernels" / family).mkdir()
            shutil.copyfile(path.parent / "reference.py", out / "kernels" / family / "reference.py")
            generated[family] = rel
        else:
            rel = f"kernels/{family}.py"
            files[family] = rel
        manifest["kernels"][family] = copy(path, rel)
    for family, plan in backward_plans({f: kernels[f] for f in files}).items():
        entry = {"kernel": None, "positions": list(plan["positions"]), "saved": plan["saved"], "reference": None}
        record = manifest["backwards"][family] = {"positions": entry["positions"], "saved": plan["saved"]}
        for part, suffix in (("kernel", "bwd"), ("reference", "reference")):
            if plan[part]:
                entry[part] = f"kernels/{family}_{suffix}.py"
                record[part] = copy(Path(plan[part]), entry[part])
        backwards[family] = entry
    generated_backward = {t: list(g) for t, g in generated_backwards({t: kernels[t] for t in generated}).items()}
    shutil.copyfile(Path(__file__).with_name("patch.py"), out / "_patch.py")
    shutil.copyfile(Path(__file__).with_name("graph_patch.py"), out / "_graph_patch.py")
    (out / "__init__.py").write_text(INIT_TEMPLATE.format(name=name, kernels=files, generated=generated,
                                                          generated_backward=generated_backward, backwards=backwards),
                                     encoding="utf-8")
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return out
