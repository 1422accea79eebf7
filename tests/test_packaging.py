"""The shipped starter tasks travel inside the wheel (autokernel_tui/kernels) and are found there."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_wheel_ships_every_starter_and_finds_them(tmp_path):
    pytest.importorskip("hatchling")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "dist"), str(REPO)], check=True, capture_output=True, timeout=300)
    wheel = next((tmp_path / "dist").glob("autokernel_tui-*.whl"))
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    shipped = sorted(p.parent.name for p in (REPO / "kernels").glob("*/task.toml"))
    code = ("import sys; sys.path.insert(0, sys.argv[1]);"
            "from autokernel_tui.tasks.spec import starters_dir, list_starters;"
            "print(starters_dir()); print(','.join(list_starters()))")
    out = subprocess.run([sys.executable, "-c", code, str(site)], cwd=tmp_path, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert Path(out[0]) == site / "autokernel_tui" / "kernels"
    assert out[1].split(",") == shipped and len(shipped) == 20  # eleven forward starters, nine backward (*_bwd)
    # A <task>_bwd's reference.py is a link to its forward's in the repository, content in the wheel.
    linked = sorted((REPO / "kernels").glob("*_bwd/reference.py"))
    assert len(linked) == 9
    for ref in linked:
        assert ref.is_symlink(), ref
        packed = site / "autokernel_tui" / "kernels" / ref.parent.name / "reference.py"
        assert packed.is_file() and not packed.is_symlink()
        assert packed.read_bytes() == (REPO / "kernels" / ref.parent.name.removesuffix("_bwd") / "reference.py").read_bytes()
