"""Extraction: starter tasks at the model's real shapes, valid for the harness."""

import json
import sys

import pytest

from autokernel_tui.errors import WorkspaceError
from autokernel_tui.profiling.pipeline import run_profile
from autokernel_tui.tasks import spec as taskspec
from autokernel_tui.profiling.extract import extract_tasks

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@pytest.fixture(scope="module")
def llama_profile():
    return run_profile("llama-tiny", dtype="bfloat16", device="cpu", steps=1)


def test_extracted_tasks_are_valid_and_carry_the_models_shapes(llama_profile, tmp_path):
    created = extract_tasks(llama_profile, tmp_path / "kernels", top=10)
    names = [p.name for p in created if not p.name.startswith("gen_")]  # generated tasks: tests/tasks/
    created = [p for p in created if not p.name.startswith("gen_")]
    ranked = [f["task"] for f in llama_profile["families"] if f["task"]]
    assert names == [t for t in ranked if t in names]  # in ranking order
    assert {"matmul", "rmsnorm", "swiglu", "rotary", "flash_attention"} <= set(names)
    fams = {f["family"]: f for f in llama_profile["families"]}
    for path in created:
        spec = taskspec.load_spec(path)
        starter = taskspec.load_spec(taskspec.starters_dir() / path.name)
        assert spec.dtypes == ("bfloat16",)
        family = fams[path.name]
        want = [s["dims"] for s in family["shapes"] if s["dtype"] == "bfloat16"]
        assert [s.dims for s in spec.shapes] == want[: len(spec.shapes)]
        # Everything the harness checks with stays the starter's.
        assert spec.test_shapes == starter.test_shapes
        assert spec.knob_space == starter.knob_space
        assert spec.tolerances["bfloat16"] == starter.tolerances["bfloat16"]
        assert spec.forbidden_ops == starter.forbidden_ops
        assert (path / "kernel.py").read_text() == (taskspec.starters_dir() / path.name / "kernel.py").read_text()
        assert spec.profile["model"] == "llama-tiny"
        assert spec.profile["share"] == pytest.approx(family["share"], abs=1e-6)
        assert spec.profile["time_us"] == pytest.approx(family["time_us"], rel=1e-3)
    rms = taskspec.load_spec(tmp_path / "kernels" / "rmsnorm")
    assert [s.dims for s in rms.shapes] == [{"M": 32, "N": 64}]
    attn = tomllib.loads((tmp_path / "kernels" / "flash_attention" / "task.toml").read_text())
    assert attn["shapes"] == [{"name": "llama-tiny-1", "B": 2, "H": 4, "KVH": 2, "S": 16, "D": 16}]


def test_top_limits_and_existing_folders_refuse(llama_profile, tmp_path):
    made = extract_tasks(llama_profile, tmp_path / "k", top=2)  # two families: starters and generated tasks
    fams = {taskspec.load_spec(p).family for p in made}
    assert len(fams) == 2 and len(made) >= 2
    with pytest.raises(WorkspaceError, match="already exists"):
        extract_tasks(llama_profile, tmp_path / "k", top=2)
    with pytest.raises(WorkspaceError, match="not a ranked profile"):
        extract_tasks({"model": "x"}, tmp_path / "other")


def test_a_dtype_the_starter_lacks_is_skipped(tmp_path):
    profile = run_profile("llama-tiny", dtype="float32", device="cpu", steps=1)
    names = [p.name for p in extract_tasks(profile, tmp_path / "kernels", top=10)]
    assert "flash_attention" not in names  # its starter is fp16/bf16 only
    assert "rmsnorm" in names


def test_gelu_variant_survives_extraction(tmp_path):
    profile = run_profile("gpt2-tiny", dtype="float32", device="cpu", steps=1)
    created = extract_tasks(profile, tmp_path / "kernels", top=10)
    assert "gelu" in [p.name for p in created] and "layernorm" in [p.name for p in created]
    gelu = taskspec.load_spec(tmp_path / "kernels" / "gelu")
    assert gelu.shapes[0].dims == {"M": 32, "N": 128, "approximate": "tanh"}


def test_init_from_profile_creates_a_committed_workspace(llama_profile, tmp_path):
    from autokernel_tui.ledger.workspace import init_workspace

    pfile = tmp_path / "profile.json"
    pfile.write_text(json.dumps(llama_profile))
    ws = init_workspace(tmp_path / "ws", from_profile=pfile, top=3)
    tasks = taskspec.find_tasks(ws / "kernels")
    # --top counts families: three families, a starter each plus generated tasks for the chains
    # (mm -> silu -> mul, ...) the matmul starter would cut short.
    assert len({t.family for t in tasks}) == 3 and all(t.profile.get("model") == "llama-tiny" for t in tasks)


def test_a_training_profile_gives_backward_tasks_at_their_forwards_shapes(tmp_path):
    """Issue 20, item 4: `init --from-profile` of a training profile extracts backward tasks."""
    profile = run_profile("llama-tiny", dtype="bfloat16", device="cpu", steps=1, train=True)
    fams = {f["family"]: f for f in profile["families"]}
    assert fams["flash_attention_backward"]["task"] == "flash_attention_bwd"
    assert fams["swiglu_backward"]["task"] == "swiglu_bwd"
    created = {p.name: p for p in extract_tasks(profile, tmp_path / "kernels", top=30)}
    assert {"flash_attention_bwd", "swiglu_bwd", "cross_entropy_bwd"} <= set(created), sorted(created)
    for name, forward in (("flash_attention_bwd", "flash_attention"), ("swiglu_bwd", "swiglu")):
        bwd = taskspec.load_spec(created[name])
        assert bwd.kind == "backward"
        # a backward op's own arguments do not name the dims: it runs at its forward's, as recorded
        assert [s.dims for s in bwd.shapes] == [s.dims for s in taskspec.load_spec(created[forward]).shapes]
        assert (created[name] / "reference.py").read_text() == \
            (taskspec.starters_dir() / forward / "reference.py").read_text()
        assert not (created[name] / "reference.py").is_symlink()
