"""Rules of the house, enforced: the engine never imports Textual, and the
harness worker imports only torch, triton and the standard library."""

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "autokernel_tui"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_only_the_tui_imports_textual():
    offenders = [
        str(p.relative_to(PKG))
        for p in PKG.rglob("*.py")
        if "tui" not in p.relative_to(PKG).parts and "textual" in _imports(p)
    ]
    assert offenders == [], f"non-TUI modules import textual: {offenders}"


def test_engine_import_does_not_pull_textual():
    code = (
        "import sys, importlib, pkgutil, autokernel_tui\n"
        "for sub in ('engine', 'ledger', 'harness', 'agents', 'tasks', 'profiling'):\n"
        "    try:\n"
        "        pkg = importlib.import_module('autokernel_tui.' + sub)\n"
        "    except ModuleNotFoundError:\n"
        "        continue\n"
        "    for m in pkgutil.iter_modules(pkg.__path__):\n"
        "        importlib.import_module(f'autokernel_tui.{sub}.{m.name}')\n"
        "bad = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'))\n"
        "print(len(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0", out.stdout + out.stderr
