"""Create a workspace: a git repository holding task folders under ``kernels/``.

``init_workspace`` works on an empty folder or an existing repository (not on a
folder inside another checkout, unless asked: ``--nested``). It copies
the chosen starter tasks (or the tasks extracted from a profile), git-excludes
``.autokernel/`` (run state never enters history) and commits the new task
folders only, with an explicit identity, leaving anything else of the user's
untouched.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable, Iterable

import git

from autokernel_tui.errors import AutokernelError, WorkspaceError
from autokernel_tui.ledger.gitrepo import _GIT_ENV, _GIT_OPTS, KERNELS, ShieldedRepo, exclude_state_dir
from autokernel_tui.tasks import spec as taskspec


def _copy_starters(tasks: Iterable[str], kernels: Path) -> list[Path]:
    out = []
    for name in tasks:
        dest = kernels / name
        shutil.copytree(taskspec.starters_dir() / name, dest,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        out.append(dest)
    return out


def _check_starters(tasks: Iterable[str], kernels: Path) -> None:
    """Refuse unknown or already present tasks before anything is created."""
    available = taskspec.list_starters()
    for name in tasks:
        if name not in available:
            raise WorkspaceError(f"no starter task {name!r}; available: {', '.join(available)}")
        if (kernels / name).exists():
            raise WorkspaceError(f"{kernels / name} already exists; remove it or choose another task")


def _read_profile(from_profile: Path) -> dict:
    try:
        profile = json.loads(Path(from_profile).read_text(encoding="utf-8"))
    except OSError as exc:
        raise WorkspaceError(f"{from_profile}: cannot read the profile: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise WorkspaceError(f"{from_profile}: not a JSON profile (bytes that are not UTF-8)") from None
    except json.JSONDecodeError as exc:
        raise WorkspaceError(f"{from_profile}: not a JSON profile ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise WorkspaceError(f"{from_profile}: not a JSON profile (nested too deeply)") from None
    if not isinstance(profile, dict):
        raise WorkspaceError(f"{from_profile}: not a profile (a JSON {type(profile).__name__}, not an object)")
    return profile


def _extract(profile: dict, from_profile: Path, kernels: Path, top: int, calls: int,
             min_share: float | None, progress: Callable[..., None] | None) -> list[Path]:
    try:
        from autokernel_tui.profiling.extract import extract_tasks
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("autokernel_tui"):
            raise WorkspaceError("--from-profile needs task extraction, which this installation lacks") from None
        raise
    try:
        return list(extract_tasks(profile, kernels, top=top, calls=calls, min_share=min_share, progress=progress))
    except AutokernelError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a profile of the wrong shape
        raise WorkspaceError(f"{from_profile}: not a profile written by `autokernel-tui profile` "
                             f"({type(exc).__name__}: {exc})") from None


def enclosing_repo(path: Path) -> Path | None:
    """The top folder of the git checkout that ``path`` (existing or not) would sit inside, if any."""
    probe = path
    while not probe.exists():
        probe = probe.parent
    try:
        repo = git.Repo(probe, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None
    return Path(repo.working_tree_dir).resolve() if repo.working_tree_dir else None


class _Undo:
    """What ``init_workspace`` created, so a failure can take it all back (newest first)."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, Callable[[], None]]] = []

    def add(self, what: str, fn: Callable[[], None]) -> None:
        self.steps.append((what, fn))

    def run(self) -> list[str]:
        failed = []
        for what, fn in reversed(self.steps):
            try:
                fn()
            except Exception as exc:  # keep undoing the rest; say what is left behind
                failed.append(f"{what} ({exc})")
        return failed


def init_workspace(path: str | Path, tasks: list[str] | None = None, from_profile: str | Path | None = None,
                   top: int = 5, nested: bool = False, from_kernelbench: list | None = None,
                   calls: int = 3, min_share: float | None = None,
                   progress: Callable[..., None] | None = None) -> Path:
    """Create (or extend) the workspace at ``path``; returns its resolved path.

    A workspace is a git repository of its own. ``path`` inside another checkout (but not its
    top folder) is refused unless ``nested``: ``git`` commands there would act on the outer
    repository, and a repository nested in another is rarely what anyone wants; the message
    says how to add the tasks to the outer repository instead. A failed init takes back
    everything it created (folders, the repository, task folders, its exclude line, what it
    staged), so a retry starts from where the user was. With a profile, what got no task, and
    why, is written to ``init-skipped.json`` (``profiling.extract.extract_all``; ``skipped_lines`` reads it).
    ``progress`` (``progress.ProgressFn``) hears the generated tasks' starters being made.
    """
    path = Path(path).resolve()
    if not tasks and not from_profile and not from_kernelbench:
        raise WorkspaceError("choose starter tasks (--task NAME), a profile (--from-profile FILE) "
                             "or KernelBench problems (--from-kernelbench FILE...)")
    if top < 1:
        raise WorkspaceError(f"--top must be at least 1, not {top}")
    if calls < 1:
        raise WorkspaceError(f"--calls must be at least 1, not {calls}")
    if min_share is not None and not 0 <= min_share <= 1:
        raise WorkspaceError(f"--min-share must be a percentage from 0 to 100, not {100 * min_share:g}")
    if path.exists() and not path.is_dir():
        raise WorkspaceError(f"{path} exists and is not a folder")
    outer = enclosing_repo(path)
    if outer is not None and outer != path and not nested:
        raise WorkspaceError(
            f"{path} would be inside the git repository {outer}: a workspace is a repository of its own. "
            f"Add the tasks to that repository with `autokernel-tui init {outer}`, or create a separate "
            f"repository in there anyway with `autokernel-tui init --nested {path}`")
    kernels = path / KERNELS
    _check_starters(tasks or [], kernels)
    profile = _read_profile(Path(from_profile)) if from_profile else None

    undo = _Undo()
    try:
        made_dir = not path.exists()
        if made_dir:
            first = path
            while not first.parent.exists():
                first = first.parent
            path.mkdir(parents=True)
            undo.add(f"remove {first}", lambda: shutil.rmtree(first))
        if outer == path:
            repo = ShieldedRepo(path)
        else:
            repo = ShieldedRepo.init(path)
            if not made_dir:  # (a folder we made goes as a whole)
                undo.add(f"remove {path / '.git'}", lambda: shutil.rmtree(path / ".git"))
        exclude = Path(repo.common_dir) / "info" / "exclude"
        before = exclude.read_bytes() if exclude.exists() else None
        exclude_state_dir(repo)
        if (exclude.read_bytes() if exclude.exists() else None) != before:
            undo.add(f"restore {exclude}", lambda: exclude.write_bytes(before) if before is not None
                     else exclude.unlink(missing_ok=True))
        if not kernels.exists():
            kernels.mkdir()
            undo.add(f"remove {kernels}", lambda: shutil.rmtree(kernels))
        existing = set(kernels.iterdir())

        def remove_new_tasks() -> None:
            for p in set(kernels.iterdir()) - existing:
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        undo.add("remove the task folders it copied", remove_new_tasks)
        created = _copy_starters(tasks or [], kernels)
        if profile is not None:
            created += _extract(profile, Path(from_profile), kernels, top, calls, min_share, progress)
        if from_kernelbench:
            from autokernel_tui.profiling.kernelbench import write_tasks

            created += write_tasks(list(from_kernelbench), kernels, progress=progress)
        if not created:
            raise WorkspaceError("no task was created")
        for task_dir in created:
            taskspec.load_spec(task_dir)  # refuse to commit a malformed task
        rel = [str(p.relative_to(path)) for p in created]
        skipped_list = path / "init-skipped.json"  # what got no task and why (profiling/extract.py): committed too
        if skipped_list.is_file():
            undo.add(f"remove {skipped_list}", lambda: skipped_list.unlink(missing_ok=True))
            rel.append(skipped_list.name)
        undo.add("unstage the task folders", lambda: repo.git.execute(
            ["git", *_GIT_OPTS, "reset", "-q", "--", *rel], env=_GIT_ENV) if repo.head.is_valid() else
            repo.git.execute(["git", *_GIT_OPTS, "rm", "-rq", "--cached", "--ignore-unmatch", "--", *rel],
                             env=_GIT_ENV))
        repo.git.execute(["git", *_GIT_OPTS, "add", "--", *rel], env=_GIT_ENV)
        names = ", ".join(p.name for p in created)
        repo.git.execute(["git", *_GIT_OPTS, "commit", "--no-verify", "-q", "-m", f"autokernel: add tasks {names}",
                          "--", *rel], env=_GIT_ENV)
    except BaseException as exc:
        left = undo.run()
        if left:
            note = f" (could not clean up: {'; '.join(left)})"
            if isinstance(exc, AutokernelError):
                raise type(exc)(f"{exc}{note}") from None
        if isinstance(exc, git.GitCommandError):
            detail = " ".join(str(exc.stderr or exc).split())[:300]
            raise WorkspaceError(f"init failed in git: {detail}; nothing was left behind") from None
        raise
    return path
