"""Every raw-results path the docs cite resolves: in the working tree, or at the commit they name.

docs/benchmarks.md keeps in the tree only the JSON behind its current tables; the rest of the
raw results live in git history and are cited as ``COMMIT:benchmarks/results/<path>``, or inside
a run's section by the run folder alone (``run6e/ncu_matmul_odd.log``, ``h200-run3/flush-sweeps/``),
which means the same path at ``ARCHIVE``.
"""

from __future__ import annotations

import fnmatch
import functools
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted((REPO / "docs").glob("*.md")) + [REPO / "benchmarks" / "README.md", REPO / "README.md"]
ARCHIVE = "54becbf"  # where runs 1-6's raw results live (docs/benchmarks.md, "Raw outputs")

FULL = re.compile(r"(?:\b([0-9a-f]{7,40}):)?(benchmarks/results(?:/(?:\{[^{}]*\}|[^\s`'\")\]|;,{<])*)?)")
SHORT = re.compile(r"`((?:h200-run\d[\w.-]*|run\d[a-z]\w*)/[^`\s]*)`")


def _expand(pattern: str) -> list[str]:
    """``a/run5{a,b,c}/`` -> the three paths (one level of braces, as the docs write them)."""
    m = re.search(r"\{([^{}]*)\}", pattern)
    if not m:
        return [pattern]
    return [p for alt in m.group(1).split(",") for p in _expand(pattern[:m.start()] + alt + pattern[m.end():])]


def _resolves(path: str, files: list[str]) -> bool:
    """A file, a folder (trailing slash or not) or a glob that matches at least one of ``files``."""
    path = path.rstrip(".").rstrip("/")
    if any(ch in path for ch in "*?["):
        return any(fnmatch.fnmatch(f, path) or fnmatch.fnmatch(f, path + "/*") for f in files)
    return any(f == path or f.startswith(path + "/") for f in files)


def _tree_files() -> list[str]:
    return [str(p.relative_to(REPO)) for p in (REPO / "benchmarks" / "results").rglob("*") if p.is_file()]


@functools.lru_cache(maxsize=None)
def _files_at(commit: str) -> list[str] | None:
    """Paths under benchmarks/results at ``commit``, or None where git or the commit is not here
    (a shallow clone, a source archive)."""
    try:
        proc = subprocess.run(["git", "ls-tree", "-r", "--name-only", commit, "--", "benchmarks/results"],
                              cwd=REPO, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.splitlines() if proc.returncode == 0 else None


def _citations() -> list[tuple[str, str | None, str]]:
    """(where, commit or None, path) for every benchmarks/results path the docs name."""
    out = []
    for doc in DOCS:
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{doc.relative_to(REPO)}:{n}"
            for m in FULL.finditer(line):
                commit, path = m.group(1), m.group(2)
                archive = re.search(r"git archive ([0-9a-f]{7,40}) $", line[:m.start()])
                commit = commit or (archive.group(1) if archive else None)
                out += [(where, commit, p) for p in _expand(path)]
            for short in SHORT.findall(line):
                if short.startswith("h200-run"):
                    full = f"benchmarks/results/{short}"
                else:  # run6e/... -> benchmarks/results/h200-run6/run6e/...
                    full = f"benchmarks/results/h200-run{short[3]}/{short}"
                out += [(where, "short", p) for p in _expand(full)]
    return out


def test_the_docs_cite_raw_results_at_all():
    cited = _citations()
    assert any(c is None for _, c, _ in cited) and any(c == ARCHIVE for _, c, _ in cited)


def test_paths_in_the_tree_exist():
    files = _tree_files()
    missing = [f"{w}: {p}" for w, c, p in _citations() if c is None and not _resolves(p, files)]
    assert not missing, "cited but not in the tree (cite them as COMMIT:path?):\n" + "\n".join(missing)


def test_paths_at_a_commit_exist_there():
    cited = [(w, c, p) for w, c, p in _citations() if c not in (None, "short")]
    if any(_files_at(c) is None for _, c, _ in cited):
        pytest.skip("a cited commit is not in this checkout's history (shallow clone?)")
    missing = [f"{w}: {c}:{p}" for w, c, p in cited if not _resolves(p, _files_at(c))]
    assert not missing, "cited at a commit that does not hold them:\n" + "\n".join(missing)


def test_run_folders_named_short_are_in_the_tree_or_the_archive():
    if _files_at(ARCHIVE) is None:
        pytest.skip(f"{ARCHIVE} is not in this checkout's history (shallow clone?)")
    files = _tree_files() + _files_at(ARCHIVE)
    missing = [f"{w}: {p}" for w, c, p in _citations() if c == "short" and not _resolves(p, files)]
    assert not missing, "named by run folder but found neither in the tree nor at " + ARCHIVE + ":\n" + "\n".join(missing)


def test_the_tree_keeps_only_what_the_docs_cite():
    """benchmarks/results/ holds no raw file that no doc names (run 7's folder is named whole)."""
    cited = [p for _, c, p in _citations() if c is None]
    stray = [f for f in _tree_files() if "__pycache__" not in f
             and not any(_resolves(p, [f]) for p in cited if p.rstrip("/") != "benchmarks/results")]
    assert not stray, "raw results in the tree that no doc cites:\n" + "\n".join(stray)
