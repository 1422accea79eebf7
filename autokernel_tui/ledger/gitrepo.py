"""The git side of a run: branch ``autokernel/<tag>`` in a dedicated worktree.

Why a worktree: the run must never touch the user's checkout (their current
branch, their uncommitted files, their index). The run branch is checked out in
``<ws>/.autokernel/worktrees/<tag>`` (``.autokernel/`` is git-excluded), so the
engine commits, resets and evaluates there while the user keeps working in the
main checkout. The branch is shared through the common repository, so
``git log autokernel/<tag>`` and ``git merge`` work from the user's checkout.

Experiments: one commit ``exp N: <description>`` per candidate, written with an
explicit identity (a box without ``user.name`` works) and without the user's
hooks or signing. A kept candidate stays on the branch; any other outcome keeps
the commit reachable at ``refs/autokernel/<tag>/exp-N`` and resets the branch.
The ref is written before the reset, so a crash between the two loses nothing.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import git
from git import Actor

from autokernel_tui.errors import WorkspaceError
from autokernel_tui.ledger import paths
from autokernel_tui.ledger.paths import KERNELS, STATE_DIR

ACTOR = Actor("autokernel-tui", "autokernel@localhost")
TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_GIT_ENV = {
    "GIT_AUTHOR_NAME": ACTOR.name, "GIT_AUTHOR_EMAIL": ACTOR.email,
    "GIT_COMMITTER_NAME": ACTOR.name, "GIT_COMMITTER_EMAIL": ACTOR.email,
}
# Our commits must not run the user's hooks, ask for a signing key or an editor.
_GIT_OPTS = ["-c", "core.hooksPath=/dev/null", "-c", "commit.gpgsign=false", "-c", "core.editor=true"]


class ShieldedGit(git.Git):
    """GitPython's command runner, with every git process in a session of its own.

    A terminal's Ctrl-C (SIGINT) and hang-up (SIGHUP) go to the whole foreground
    process group. Git processes started in ours died with them: one-shot commands
    half-way, and GitPython's persistent ``git cat-file --batch(-check)`` helpers, after
    which every object read failed with a broken pipe and the experiment in progress
    was never recorded (issue 25). The engine decides what a signal means (stop after
    the current experiment); its git helpers must outlive the signal to finish it.
    Like the harness worker, they start in a new session (no controlling terminal, so
    git never prompts either). ``execute`` is where GitPython starts every git process,
    the persistent helpers included, and it hands extra keywords to ``Popen``.
    """

    def execute(self, command, *args, **kwargs):  # type: ignore[override]
        kwargs.setdefault("start_new_session", True)
        return super().execute(command, *args, **kwargs)


class ShieldedRepo(git.Repo):
    """``git.Repo`` whose git processes are shielded from the terminal's signals (see ShieldedGit).
    ``GitCommandWrapperType`` is GitPython's own hook for the command runner a Repo uses."""

    GitCommandWrapperType = ShieldedGit


def check_tag(tag: str) -> str:
    if not TAG_RE.match(tag) or ".." in tag or tag.endswith((".lock", ".")):
        raise WorkspaceError(f"run tag {tag!r}: use letters, digits, '.', '_' or '-' (at most 64)")
    return tag


def open_repo(workspace: Path) -> git.Repo:
    try:
        repo = ShieldedRepo(workspace)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise WorkspaceError(f"{workspace}: not a git repository (create a workspace there with `{paths.init_hint(workspace)}`)") from None
    if repo.bare:
        raise WorkspaceError(f"{workspace}: a bare repository has no working tree")
    try:
        repo.head.commit
    except ValueError:
        raise WorkspaceError(f"{workspace}: the repository has no commit yet; commit the task folders first") from None
    return repo


def exclude_state_dir(repo: git.Repo) -> None:
    """Keep run state (and the run's worktree inside it) out of the user's `git status`."""
    exclude = Path(repo.common_dir) / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    text = exclude.read_text(encoding="utf-8") if exclude.exists() else ""
    if f"/{STATE_DIR}/" not in text.splitlines():
        with open(exclude, "a", encoding="utf-8") as fh:
            fh.write(("\n" if text and not text.endswith("\n") else "") + f"/{STATE_DIR}/\n")


def dirty_task_files(repo: git.Repo, folder: str = KERNELS) -> list[str]:
    out = repo.git.status("--porcelain", "--untracked-files=all", "--", folder)
    return [line[3:] for line in out.splitlines() if line.strip()]


class RunRepo:
    def __init__(self, workspace: Path, tag: str):
        self.workspace = Path(workspace).resolve()
        self.tag = check_tag(tag)
        self.repo = open_repo(self.workspace)
        self.branch = f"autokernel/{tag}"
        self.worktree = paths.worktree_dir(self.workspace, tag)
        self.wt: git.Repo | None = None

    # --- set-up ---------------------------------------------------------------
    def branch_exists(self) -> bool:
        return f"refs/heads/{self.branch}" in {r.path for r in self.repo.references}

    def create(self) -> str:
        """Start a new run branch from the user's HEAD; refuses on dirty task folders."""
        dirty = dirty_task_files(self.repo)
        if dirty:
            shown = ", ".join(dirty[:3]) + (" ..." if len(dirty) > 3 else "")
            raise WorkspaceError(f"uncommitted changes in {KERNELS}/ ({shown}): commit or stash them before a run")
        exclude_state_dir(self.repo)  # an existing repository not made by `init` works too
        base = self.repo.head.commit.hexsha
        if self.branch_exists():
            # A start killed before its run.json left the branch at the base: take it over.
            has_refs = bool(self.repo.git.for_each_ref(f"refs/autokernel/{self.tag}/"))
            if self.repo.commit(self.branch).hexsha != base or has_refs:
                raise WorkspaceError(f"branch {self.branch} already exists: pick another --tag")
        else:
            self.repo.git.branch(self.branch, base)
        self.open()
        return base

    def open(self) -> None:
        """Attach to the run's worktree (re-creating it if it vanished) and clean crash debris."""
        if not self.branch_exists():
            raise WorkspaceError(f"branch {self.branch} does not exist")
        if not (self.worktree / ".git").exists():
            if self.worktree.exists():  # a worktree add that was killed half-way: ours to redo
                shutil.rmtree(self.worktree)
            self.repo.git.worktree("prune")
            self.worktree.parent.mkdir(parents=True, exist_ok=True)
            self.repo.git.worktree("add", str(self.worktree), self.branch)
        self.wt = ShieldedRepo(self.worktree)
        self._remove_stale_locks()
        # Only the engine writes here; anything uncommitted is a half-done experiment.
        self._git("reset", "--hard", "HEAD")
        self._git("clean", "-fdq", "--", KERNELS)

    def _remove_stale_locks(self) -> None:
        # A kill -9 during a git command leaves lock files; we hold engine.lock, so they are ours.
        common = Path(self.repo.common_dir)
        candidates = [Path(self.wt.git_dir) / "index.lock", common / "refs" / "heads" / f"{self.branch}.lock"]
        candidates += list((common / "refs" / "autokernel" / self.tag).glob("*.lock"))
        for lock in candidates:
            lock.unlink(missing_ok=True)

    def _git(self, *args: str) -> str:
        assert self.wt is not None, "RunRepo.open() first"
        return self.wt.git.execute(["git", *_GIT_OPTS, *args], env=_GIT_ENV)

    # --- reading --------------------------------------------------------------
    def reset_git_processes(self) -> None:
        """Drop GitPython's persistent ``git cat-file`` helpers; new ones start on the next
        read. They run in their own session (ShieldedGit), so the terminal's signals no
        longer reach them; this is the fallback for one killed some other way, after
        which every object read would fail with a broken pipe."""
        for repo in (self.repo, self.wt):
            if repo is not None:
                repo.git.clear_cache()

    def head(self) -> git.Commit:
        assert self.wt is not None
        return self.wt.head.commit

    def task_dir(self, task: str) -> Path:
        return self.worktree / KERNELS / task

    def kernel_path(self, task: str) -> str:
        return f"{KERNELS}/{task}/kernel.py"

    def show(self, rev: str, task: str) -> str:
        # exact bytes: GitPython strips the final newline unless told not to
        return self.repo.git.show(f"{rev}:{self.kernel_path(task)}", strip_newline_in_stdout=False)

    def ref_name(self, n: int) -> str:
        return f"refs/autokernel/{self.tag}/exp-{n}"

    def ref_sha(self, n: int) -> str | None:
        try:
            return self.repo.git.rev_parse("--verify", "-q", self.ref_name(n) + "^{commit}")
        except git.GitCommandError:
            return None

    def diff(self, old: str, new: str, task: str) -> str:
        return self.repo.git.diff(old, new, "--", self.kernel_path(task))

    # --- writing --------------------------------------------------------------
    def commit_kernel(self, task: str, source: str, message: str) -> str:
        path = self.task_dir(task) / "kernel.py"
        if not path.parent.is_dir():
            raise WorkspaceError(f"task {task!r} is not in the run branch")
        path.write_text(source, encoding="utf-8")
        self._git("add", "--", self.kernel_path(task))
        self._git("commit", "--allow-empty", "--no-verify", "-q", "-m", message)
        return self.head().hexsha

    def amend_message(self, message: str) -> str:
        """Rewrite the head commit's message (same tree, same parent): adds the metric trailers."""
        self._git("commit", "--amend", "--allow-empty", "--no-verify", "-q", "-m", message)
        return self.head().hexsha

    def keep_ref(self, n: int, sha: str) -> None:
        self._git("update-ref", self.ref_name(n), sha)

    def reset_to(self, sha: str) -> None:
        self._git("reset", "--hard", "-q", sha)


def message(n: int, description: str, trailers: dict[str, object]) -> str:
    subject = " ".join(f"exp {n}: {description}".split())[:200]
    lines = [f"{k}: {' '.join(str(v).split())}" for k, v in trailers.items() if v not in (None, "")]
    return subject + ("\n\n" + "\n".join(lines) if lines else "") + "\n"


def parse_trailers(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(Autokernel-[A-Za-z-]+): (.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out
