"""Create a workspace: a git repository holding task folders under ``kernels/``.

``init_workspace`` works on an empty folder or an existing repository. It copies
the chosen starter tasks (or the tasks extracted from a profile), git-excludes
``.autokernel/`` (run state never enters history) and commits the new task
folders only, with an explicit identity, leaving anything else of the user's
untouched.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Iterable

import git

from autokernel_tui.errors import WorkspaceError
from autokernel_tui.ledger.gitrepo import _GIT_ENV, _GIT_OPTS, KERNELS, ShieldedRepo, exclude_state_dir
from autokernel_tui.tasks import spec as taskspec

def _copy_starters(tasks: Iterable[str], kernels: Path) -> list[Path]:
    available = taskspec.list_starters()
    out = []
    for name in tasks:
        if name not in available:
            raise WorkspaceError(f"no starter task {name!r}; available: {', '.join(available)}")
        dest = kernels / name
        if dest.exists():
            raise WorkspaceError(f"{dest} already exists; remove it or choose another task")
        shutil.copytree(taskspec.starters_dir() / name, dest,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        out.append(dest)
    return out


def _extract(from_profile: Path, kernels: Path, top: int) -> list[Path]:
    try:
        from autokernel_tui.tasks.extract import extract_tasks
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("autokernel_tui"):
            raise WorkspaceError("--from-profile needs task extraction, which this installation lacks") from None
        raise
    try:
        profile = json.loads(Path(from_profile).read_text(encoding="utf-8"))
    except OSError as exc:
        raise WorkspaceError(f"{from_profile}: cannot read the profile: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise WorkspaceError(f"{from_profile}: not a JSON profile ({exc.msg})") from None
    return list(extract_tasks(profile, kernels, top=top))


def init_workspace(path: str | Path, tasks: list[str] | None = None, from_profile: str | Path | None = None,
                   top: int = 5) -> Path:
    """Create (or extend) the workspace at ``path``; returns its resolved path."""
    path = Path(path).resolve()
    if not tasks and not from_profile:
        raise WorkspaceError("choose starter tasks (--task NAME) or a profile (--from-profile FILE)")
    path.mkdir(parents=True, exist_ok=True)
    try:
        repo = ShieldedRepo(path)
    except git.InvalidGitRepositoryError:
        repo = ShieldedRepo.init(path)
    if Path(repo.working_tree_dir).resolve() != path:
        raise WorkspaceError(f"{path} is inside the repository {repo.working_tree_dir}; use its top folder")
    exclude_state_dir(repo)
    kernels = path / KERNELS
    kernels.mkdir(exist_ok=True)
    created = _copy_starters(tasks or [], kernels)
    if from_profile:
        created += _extract(Path(from_profile), kernels, top)
    if not created:
        raise WorkspaceError("no task was created")
    for task_dir in created:
        taskspec.load_spec(task_dir)  # refuse to commit a malformed task
    rel = [str(p.relative_to(path)) for p in created]
    repo.git.execute(["git", *_GIT_OPTS, "add", "--", *rel], env=_GIT_ENV)
    names = ", ".join(p.name for p in created)
    repo.git.execute(["git", *_GIT_OPTS, "commit", "--no-verify", "-q", "-m", f"autokernel: add tasks {names}",
                      "--", *rel], env=_GIT_ENV)
    return path
