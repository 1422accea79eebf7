"""Where the report's inputs live (standard library only: ``verify`` imports it on a bare GPU box)."""

from __future__ import annotations

from pathlib import Path

VERIFY_FILE = "verify.json"


def verify_path(workspace: str | Path, tag: str) -> Path:
    """Where a ``verify`` of run ``tag``'s kept kernels is saved (and the report looks for it)."""
    return Path(workspace).resolve() / ".autokernel" / "runs" / tag / VERIFY_FILE
