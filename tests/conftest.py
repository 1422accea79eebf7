"""Shared test set-up.

On a machine without CUDA, Triton kernels run under the interpreter; the
variable must be set before any kernel is defined, so it is set here, first.
GPU tests carry ``@pytest.mark.gpu`` and are skipped without CUDA (run them on
the device machine with ``python -m pytest -m gpu``).
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1") if not os.environ.get("AUTOKERNEL_TEST_CUDA") else None

# Generated tasks get their starter from torch.compile in a process of its own (5-15 s each under
# the interpreter); the tests that are about starters turn it back on (tests/profiling/test_anyop.py).
os.environ.setdefault("AUTOKERNEL_INDUCTOR_STARTERS", "0")

import pytest  # noqa: E402

import glob  # noqa: E402

try:
    import torch  # noqa: E402

    # Asked of the file system, not the driver: this process starts no CUDA or NVML of its own
    # before the harness's tests start theirs.
    HAS_CUDA = bool(torch.version.cuda) and bool(glob.glob("/dev/nvidia[0-9]*"))
except Exception:  # pragma: no cover - torch is a hard dependency
    HAS_CUDA = False

if HAS_CUDA and os.environ.get("TRITON_INTERPRET") == "1" and not os.environ.get("AUTOKERNEL_FORCE_INTERPRET"):
    # A GPU box: run kernels for real.
    os.environ.pop("TRITON_INTERPRET")


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the device machine: python -m pytest -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
