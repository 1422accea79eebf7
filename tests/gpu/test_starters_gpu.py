"""Every starter at its FULL default shapes, every declared dtype, on CUDA: the same
checks as tests/kernels (float64 reference, NaN-poisoned outputs, adversarial
inputs, eager baseline within its own tolerance). Run on the GPU machine:

    AUTOKERNEL_TEST_CUDA=1 python -m pytest -m gpu tests/gpu/test_starters_gpu.py -q
"""

from pathlib import Path

import pytest

from benchmarks import starters_check as sc  # noqa: E402

from autokernel_tui.tasks.spec import find_tasks  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TASKS = find_tasks(REPO / "kernels")


def _cases():
    for spec in TASKS:
        ref = sc.load_module(spec.path / "reference.py", "gpu")
        for dtype in spec.dtypes:
            for shape in spec.shapes:
                yield pytest.param(spec.path, dtype, shape, None, id=f"{spec.name}-{dtype}-{shape.name}")
            for adv in getattr(ref, "ADVERSARIAL", {}):
                for shape in sc.adversarial_shapes(spec.shapes):
                    yield pytest.param(spec.path, dtype, shape, adv, id=f"{spec.name}-{dtype}-{shape.name}+{adv}")


@pytest.mark.gpu
@pytest.mark.parametrize("task_dir,dtype,shape,adversarial", list(_cases()))
def test_starter_on_gpu(task_dir, dtype, shape, adversarial):
    import torch

    row = sc.check_case(task_dir, dtype, shape, "cuda", seed=0, adversarial=adversarial, tag="gpu")
    torch.cuda.empty_cache()
    assert row["kernel"]["passed"], f"kernel: {row['kernel']['why']}"
    assert row["baseline"]["passed"], f"eager baseline fails its own tolerance: {row['baseline']['why']}"
