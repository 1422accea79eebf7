"""A contestant's temporary folder is its candidate's scratch, whatever was asked before the assignment.

Run 18 (H100): a spare compiled the fused fingerprint kernels before it was given a kernel, which made
Python cache the pool's shared scratch as its temporary folder; after Landlock allowed writes only to
the candidate's own scratch, Triton's .ptx for the candidate could not be written there
(PermissionError) and the honest starter CRASHed. Driven in a child process: assign sets limits and
the environment for good."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from .conftest import GOOD


def test_assign_moves_the_temporary_folder_into_the_candidates_scratch(tiny_task, tmp_path):
    early, scratch, cache = tmp_path / "pool-scratch", tmp_path / "contestant-1", tmp_path / "triton"
    for d in (early, scratch, cache):
        d.mkdir()
    kernel = tmp_path / "src" / "kernel.py"
    kernel.parent.mkdir()
    kernel.write_text(GOOD)
    script = textwrap.dedent(f"""
        import os, tempfile
        os.environ["TMPDIR"] = {str(early)!r}
        assert tempfile.gettempdir() == {str(early)!r}  # cached from here on, as a spare's warm-up did
        from autokernel_tui.harness.worker.contestant import Contestant
        c = Contestant(sock=None, device="cpu")
        c.assign({{"scratch": {str(scratch)!r}, "triton_cache": {str(cache)!r}, "task_dir": {str(tiny_task)!r},
                  "kernel_path": {str(kernel)!r}}})
        with tempfile.NamedTemporaryFile(suffix=".ptx") as f:
            print(os.path.dirname(f.name))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TRITON_INTERPRET": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == str(scratch)
