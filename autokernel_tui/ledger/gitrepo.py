"""The git side of a run: branch ``autokernel/<tag>`` in a dedicated worktree.

Why a worktree: the run must never touch the user's checkout (their current
branch, their uncommitted files, their index). The run branch is checked out in
``<ws>/.autokernel/worktrees/<tag>`` (``.autokernel/`` is git-excluded), so the
engine commits, resets and evaluates there while the user keeps working in the
main checkout. The branch is shared through the common repository, so
``git log autokernel/<tag>`` and ``git merge`` work from the user's checkout.

Experiments: one commit ``exp N: <description>`` per candidate, written with an
explicit identity (a box without ``user.name`` works) and without the user's
hooks or signing. The branch holds kept experiments only, at every moment: a
candidate is committed off the branch, straight to ``refs/autokernel/<tag>/exp-N``
(``commit_candidate``: the worktree holds its files, staged, while the branch
ref stays where it was), and the branch advances to it only once it is kept
(``advance``, a compare-and-swap from the candidate's parent). Any other outcome
just cleans the worktree back to the branch (``drop_candidate``): the commit
stays at its ref. A ref is created once and never overwritten, so a number is
never reused and a crash at any point loses no recorded commit.

Runs from before this layout committed the candidate on the branch itself and
wrote the ref only when discarding; ``retract`` (ref kept, branch moved back)
finishes such a run's undecided tip.
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
_FULL_SHA = re.compile(r"^[0-9a-f]{40}(\^|~[0-9]+)?$")
TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_GIT_ENV = {
    "GIT_AUTHOR_NAME": ACTOR.name, "GIT_AUTHOR_EMAIL": ACTOR.email,
    "GIT_COMMITTER_NAME": ACTOR.name, "GIT_COMMITTER_EMAIL": ACTOR.email,
}
# Our commits must not run the user's hooks, ask for a signing key or an editor.
_GIT_OPTS = ["-c", "core.hooksPath=/dev/null", "-c", "commit.gpgsign=false", "-c", "core.editor=true"]
# Commands that read, or write only objects and the index to the same content: a second run is harmless.
_SAFE_TO_RETRY = frozenset({"rev-parse", "rev-list", "add", "write-tree", "commit-tree"})


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
        self._shown: dict[tuple[str, str], str] = {}

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
        try:
            self._git("symbolic-ref", "-q", "HEAD")
        except git.GitCommandError:  # detached (by hand): back on the run branch
            self._git("symbolic-ref", "HEAD", f"refs/heads/{self.branch}")
        # Only the engine writes here; anything uncommitted is a half-done experiment
        # (a candidate's staged files, when the engine died while it was evaluated).
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
        command = ["git", *_GIT_OPTS, *args]
        try:
            return self.wt.git.execute(command, env=_GIT_ENV)
        except git.GitCommandError as exc:
            # A git process killed by a signal (a negative status) is run once more where running it
            # twice is harmless. CI saw `commit-tree` die of SIGHUP while its terminal closed, in a
            # session of its own (ShieldedGit), on a loaded machine, once: how that signal reached
            # it is not known, and the experiment was lost to it. A ref update is never retried
            # (its compare-and-swap would fail after a first attempt that wrote the ref).
            if not (isinstance(exc.status, int) and exc.status < 0 and args[0] in _SAFE_TO_RETRY):
                raise
            return self.wt.git.execute(command, env=_GIT_ENV)

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
        """The worktree's HEAD: the branch tip (the worktree stays on the branch)."""
        assert self.wt is not None
        return self.wt.head.commit

    def tip(self) -> git.Commit:
        """The run branch's tip: the last kept experiment (or the run's base)."""
        return self.repo.commit(f"refs/heads/{self.branch}")

    def task_dir(self, task: str) -> Path:
        return self.worktree / KERNELS / task

    def kernel_path(self, task: str) -> str:
        return f"{KERNELS}/{task}/kernel.py"

    def show(self, rev: str, task: str) -> str:
        """The task's kernel.py at ``rev``, byte-exact (GitPython strips the final newline unless
        told not to). Revisions named by a full commit id are read once (they never change)."""
        key = (rev, task)
        if key in self._shown:
            return self._shown[key]
        text = self.repo.git.show(f"{rev}:{self.kernel_path(task)}", strip_newline_in_stdout=False)
        if _FULL_SHA.match(rev):
            self._shown[key] = text
        return text

    def message_of(self, rev: str) -> str:
        """A commit's whole message (subject, body, trailers)."""
        return self.repo.git.log("-1", "--format=%B", rev, "--")

    def ref_name(self, n: int) -> str:
        return f"refs/autokernel/{self.tag}/exp-{n}"

    def ref_sha(self, n: int) -> str | None:
        try:
            return self.repo.git.rev_parse("--verify", "-q", self.ref_name(n) + "^{commit}")
        except git.GitCommandError:
            return None

    def is_commit(self, rev: str) -> bool:
        """``rev`` names a commit of this repository."""
        if not rev or rev.startswith("-"):
            return False
        try:
            self.repo.git.rev_parse("--verify", "-q", f"{rev}^{{commit}}")
        except git.GitCommandError:
            return False
        return True

    def diff(self, old: str, new: str, task: str) -> str:
        return self.repo.git.diff(old, new, "--", self.kernel_path(task))

    # --- writing: candidates off the branch ---------------------------------------
    def commit_candidate(self, n: int, task: str, source: str, message: str) -> tuple[str, str]:
        """Commit ``source`` as experiment ``n``'s candidate on top of the branch tip, at
        ``refs/autokernel/<tag>/exp-N`` only: the branch does not move. The worktree holds the
        candidate's files (staged), for the harness to evaluate. Returns (commit, parent).
        Refuses when the ref already exists (a number is never reused, a ref never overwritten)."""
        path = self.task_dir(task) / "kernel.py"
        if not path.parent.is_dir():
            raise WorkspaceError(f"task {task!r} is not in the run branch")
        parent = self._git("rev-parse", "--verify", "HEAD^{commit}").strip()
        path.write_text(source, encoding="utf-8")
        self._git("add", "--", self.kernel_path(task))
        tree = self._git("write-tree").strip()
        sha = self._git("commit-tree", tree, "-p", parent, "-m", message).strip()
        self._git("update-ref", "-m", f"autokernel: exp {n} candidate", self.ref_name(n), sha, "")
        return sha, parent

    def amend_candidate(self, n: int, sha: str, message: str) -> str:
        """Experiment ``n``'s candidate with a new message (same tree, same parent): the metric
        trailers. Its ref moves from ``sha`` to the new commit (compare-and-swap)."""
        tree = self._git("rev-parse", "--verify", f"{sha}^{{tree}}").strip()
        parents = self._git("rev-list", "--parents", "-n", "1", sha).split()[1:]
        args = [a for p in parents for a in ("-p", p)]
        new = self._git("commit-tree", tree, *args, "-m", message).strip()
        self._git("update-ref", "-m", f"autokernel: exp {n} measured", self.ref_name(n), new, sha)
        return new

    def advance(self, sha: str, parent: str) -> None:
        """Keep a candidate: the branch moves from ``parent`` to ``sha`` (refused if it is not at
        ``parent``), and the worktree follows."""
        self._git("update-ref", "-m", "autokernel: keep", f"refs/heads/{self.branch}", sha, parent)
        self._git("reset", "--hard", "-q", "HEAD")  # the worktree held the candidate already; now exactly

    def drop_candidate(self) -> None:
        """Not kept (or never finished): the worktree back to the branch tip; the commit stays at its ref."""
        self._git("reset", "--hard", "-q", "HEAD")
        self._git("clean", "-fdq", "--", KERNELS)

    def retract(self, n: int, sha: str, parent: str) -> None:
        """A tip that should not be on the branch (an undecided candidate of a run from before
        candidates lived off the branch): kept at its ref, the branch moved back to ``parent``."""
        self.keep_ref(n, sha)
        self._git("update-ref", "-m", "autokernel: not kept", f"refs/heads/{self.branch}", parent, sha)
        self._git("reset", "--hard", "-q", "HEAD")

    # --- writing: on the branch (kept test helpers and old callers) ------------------
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
