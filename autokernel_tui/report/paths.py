"""Where the report's inputs live (standard library only: ``verify`` imports it on a bare GPU box)."""

from __future__ import annotations

from pathlib import Path

from autokernel_tui.ledger import paths

VERIFY_FILE = paths.VERIFY_FILE


def verify_path(workspace: str | Path, tag: str) -> Path:
    """Where a ``verify`` of run ``tag``'s kept kernels is saved (and the report looks for it)."""
    return paths.verify_result_path(Path(workspace).resolve(), tag)
