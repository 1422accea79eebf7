"""The environment a sandboxed process gets: what Python, CUDA and Triton need, no secrets.

An allowlist, not a blocklist: a variable reaches the judge and the candidate
only when its name is one of these or starts with one of these prefixes, and
never when its name looks like a credential. ``ANTHROPIC_API_KEY``,
``OPENAI_API_KEY``, cloud and git credentials, SSH agents: none of them.
"""

from __future__ import annotations

import re
from typing import Mapping

ALLOWED_NAMES = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH", "CC", "CXX", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "PYTHONPATH", "PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONWARNINGS",
    "AUTOKERNEL_FORCE_INTERPRET", "AUTOKERNEL_CACHE_DIR",
})
ALLOWED_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "TRITON_", "TORCH_", "TORCHINDUCTOR_", "NCCL_", "NVSHMEM_",
                    "CUBLAS_", "CUDNN_", "AUTOKERNEL_HARNESS_")
# Whatever the prefix, a name like these is a credential and stays out.
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.IGNORECASE)


def allowed(name: str) -> bool:
    if SECRET_NAME.search(name):
        return False
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)


def clean(env: Mapping[str, str], **overrides: str) -> dict[str, str]:
    """The allowed part of ``env``, plus ``overrides`` (which win)."""
    out = {k: v for k, v in env.items() if allowed(k)}
    out.update(overrides)
    return out
