"""The ledger on its own: durable files, the run branch in its worktree, workspaces, history."""

import errno
import json
import os
import subprocess

import pytest

from autokernel_tui.errors import WorkspaceError
from autokernel_tui.ledger import durable
from autokernel_tui.ledger.events import AgentTextBatcher, EventLog, read_events
from autokernel_tui.ledger.gitrepo import RunRepo, message, parse_trailers
from autokernel_tui.ledger.results import COLUMNS, HEADER, ResultsLog, read_rows
from autokernel_tui.ledger.workspace import init_workspace


def git(ws, *args):
    return subprocess.run(["git", "-C", str(ws), *args], capture_output=True, text=True, check=True).stdout


def row(n, status="keep", **kw):
    return {"experiment": n, "timestamp": "t", "task": "rmsnorm", "commit": "abc", "status": status,
            "description": "d", **kw}


def test_results_torn_tail_is_repaired_and_rows_typed(tmp_path):
    path = tmp_path / "results.tsv"
    log = ResultsLog(path)
    log.append(row(1, speedup_vs_incumbent=1.25, tokens=7, description="tab\there\nnewline"))
    with open(path, "a") as fh:
        fh.write("2\t2026")  # a crash in the middle of the next row
    assert len(read_rows(path)) == 1
    log = ResultsLog(path)
    assert path.read_text().splitlines()[0] == HEADER
    assert path.read_text().endswith("\n")
    assert log.rows[0]["speedup_vs_incumbent"] == 1.25 and log.rows[0]["tokens"] == 7
    assert log.rows[0]["description"] == "tab here newline"
    assert list(log.rows[0]) == list(COLUMNS)
    log.append(row(2, "discard"))
    assert [r["experiment"] for r in read_rows(path, typed=True)] == [1, 2]
    with pytest.raises(ValueError):
        log.append(row(2, "discard"))  # never two rows for one experiment
    with pytest.raises(ValueError):
        log.append(row(3, "maybe"))


def test_failed_append_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "results.tsv"
    log = ResultsLog(path)
    log.append(row(1))
    before = path.read_bytes()
    real_write = os.write

    def full_disk(fd, data):
        real_write(fd, data[:5])  # part of the line lands, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(durable.os, "write", full_disk)
    with pytest.raises(OSError):
        log.append(row(2))
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [r["experiment"] for r in log.rows] == [1]
    log.append(row(2))
    assert [r["experiment"] for r in ResultsLog(path).rows] == [1, 2]


def test_events_and_agent_text_batching(tmp_path):
    log = EventLog(tmp_path / "events.jsonl", "tag", clock=lambda: 5.0)
    log.append(log.make("state", state="running"))
    with open(log.path, "a") as fh:
        fh.write('{"t": 1, "ty')
    log = EventLog(tmp_path / "events.jsonl", "tag")
    assert read_events(log.path) == [{"t": 5.0, "type": "state", "run": "tag", "state": "running"}]

    now = [0.0]
    out = []
    b = AgentTextBatcher(lambda k, t: out.append((k, t)), max_age_s=0.5, max_bytes=10, clock=lambda: now[0])
    for ch in "abc":
        b.add("thinking", ch)
    assert out == []  # small and young: held back
    b.add("text", "x")  # a change of kind flushes what came before, in order
    assert out == [("thinking", "abc")]
    b.add("text", "y" * 20)  # size limit
    assert out[-1] == ("text", "x" + "y" * 20)
    b.add("text", "z")
    now[0] = 1.0
    b.flush_if_due()
    assert out[-1] == ("text", "z")
    assert "".join(t for _, t in b.transcript) == "abcx" + "y" * 20 + "z"
    assert "## Thinking" in b.markdown("# exp 1")


def test_run_branch_in_a_worktree_leaves_the_user_checkout_alone(tmp_path, monkeypatch):
    # No git identity anywhere: our commits carry their own.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    ws = init_workspace(tmp_path / "ws", tasks=["rmsnorm"])
    assert "/.autokernel/" in (ws / ".git" / "info" / "exclude").read_text()
    (ws / "notes.txt").write_text("my uncommitted notes\n")
    user_head = git(ws, "rev-parse", "HEAD").strip()

    repo = RunRepo(ws, "night1")
    base = repo.create()
    assert base == user_head
    parent = repo.head().hexsha
    src = (repo.task_dir("rmsnorm") / "kernel.py").read_text() + "# tweak\n"
    repo.commit_kernel("rmsnorm", src, message(1, "tweak", {"Autokernel-Task": "rmsnorm"}))
    sha = repo.amend_message(message(1, "tweak", {"Autokernel-Task": "rmsnorm", "Autokernel-Speedup": 1.1}))
    assert parse_trailers(git(ws, "log", "-1", "--format=%B", sha)) == {
        "Autokernel-Task": "rmsnorm", "Autokernel-Speedup": "1.1"}
    assert git(ws, "log", "-1", "--format=%an <%ae>", sha).strip() == "autokernel-tui <autokernel@localhost>"
    repo.keep_ref(1, sha)
    repo.reset_to(parent)
    assert repo.ref_sha(1) == sha
    assert git(ws, "rev-parse", "autokernel/night1").strip() == parent
    assert "+# tweak" in repo.diff(parent, sha, "rmsnorm")
    # The user's checkout: same branch, same HEAD, notes still uncommitted, kernels untouched.
    assert git(ws, "rev-parse", "HEAD").strip() == user_head
    assert git(ws, "status", "--porcelain") == "?? notes.txt\n"

    with pytest.raises(WorkspaceError, match="already exists"):
        RunRepo(ws, "night1").create()  # it has experiments: never taken over
    git(ws, "branch", "night0")  # a start killed before run.json: the branch sits at the base
    git(ws, "branch", "-m", "night0", "autokernel/night0")
    assert RunRepo(ws, "night0").create() == user_head
    (ws / "kernels" / "rmsnorm" / "kernel.py").write_text("# half-finished edit\n")
    with pytest.raises(WorkspaceError, match="uncommitted changes in kernels/"):
        RunRepo(ws, "night2").create()
    with pytest.raises(WorkspaceError, match="run tag"):
        RunRepo(ws, "../evil")


def test_worktree_debris_after_a_crash_is_cleaned(tmp_path):
    ws = init_workspace(tmp_path / "ws", tasks=["rmsnorm"])
    repo = RunRepo(ws, "t")
    repo.create()
    head = repo.head().hexsha
    (repo.task_dir("rmsnorm") / "kernel.py").write_text("half written")
    (repo.task_dir("rmsnorm") / "stray.py").write_text("x")
    (ws / ".git" / "worktrees" / "t" / "index.lock").write_text("")
    again = RunRepo(ws, "t")
    again.open()
    assert again.head().hexsha == head
    assert not (again.task_dir("rmsnorm") / "stray.py").exists()
    assert "half written" not in (again.task_dir("rmsnorm") / "kernel.py").read_text()


def test_init_workspace_errors(tmp_path):
    with pytest.raises(WorkspaceError, match="no starter task"):
        init_workspace(tmp_path / "a", tasks=["nope"])
    with pytest.raises(WorkspaceError, match="choose starter tasks"):
        init_workspace(tmp_path / "b", tasks=[])
    ws = init_workspace(tmp_path / "c", tasks=["rmsnorm"])
    with pytest.raises(WorkspaceError, match="already exists"):
        init_workspace(ws, tasks=["rmsnorm"])
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(WorkspaceError):
        init_workspace(tmp_path / "d", from_profile=tmp_path / "bad.json")


def test_init_cli(tmp_path, capsys):
    from autokernel_tui.cli import main

    assert main(["init", str(tmp_path / "ws"), "--task", "rmsnorm"]) == 0
    assert "workspace ready" in capsys.readouterr().out
    assert git(tmp_path / "ws", "ls-files").split() == [
        "kernels/rmsnorm/kernel.py", "kernels/rmsnorm/reference.py", "kernels/rmsnorm/task.toml"]
    assert main(["init", str(tmp_path / "ws2"), "--task", "nope"]) == 2
    assert "no starter task" in capsys.readouterr().err


def test_init_from_a_profile_carries_the_share_to_the_orchestrator(tmp_path):
    from autokernel_tui.tasks.spec import load_spec

    profile = {"model": "toy", "device": "cpu", "model_args": {"dtype": "bfloat16"}, "families": [
        {"family": "rmsnorm", "task": "rmsnorm", "rank": 1, "share": 0.4, "time_us": 10.0,
         "shapes": [{"dims": {"M": 64, "N": 256}, "dtype": "bfloat16", "time_us": 10.0}]},
        {"family": "softmax", "task": "softmax", "rank": 2, "share": 0.1, "time_us": 2.0,
         "shapes": [{"dims": {"M": 64, "N": 512}, "dtype": "bfloat16", "time_us": 2.0}]}]}
    (tmp_path / "p.json").write_text(json.dumps(profile))
    ws = init_workspace(tmp_path / "ws", from_profile=tmp_path / "p.json", top=5)
    assert load_spec(ws / "kernels" / "rmsnorm").profile["share"] == 0.4
    assert git(ws, "status", "--porcelain") == ""
    assert "softmax" in git(ws, "log", "-1", "--format=%s")


def test_a_plain_existing_repository_works_and_stays_clean(tmp_path):
    from autokernel_tui.tasks.spec import starters_dir
    import shutil

    ws = tmp_path / "repo"
    shutil.copytree(starters_dir() / "rmsnorm", ws / "kernels" / "rmsnorm")
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    git(ws, "add", "kernels")
    git(ws, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "mine")
    RunRepo(ws, "t").create()
    assert (ws / ".autokernel" / "worktrees" / "t" / "kernels" / "rmsnorm" / "kernel.py").is_file()
    assert git(ws, "status", "--porcelain") == ""  # the run's state is excluded


def test_verdict_file_is_read_as_report_and_comparison_apart(tmp_path):
    from autokernel_tui.ledger.history import Verdict, read_verdict

    path = tmp_path / "exp-1.json"
    assert read_verdict(path) is None  # none recorded (a revert, or a crash before the verdict)
    report = {"status": "PASS", "stage": "timing", "shapes": [{"shape": "tiny-odd", "passed": True}]}
    comparison = {"speedup": 1.1, "ci_low": 1.05, "ci_high": 1.15, "n_samples": 20, "method": "m"}
    path.write_text(json.dumps({"report": report, "comparison": comparison}))  # what the engine writes
    assert read_verdict(path) == Verdict(report=report, comparison=comparison)
    path.write_text(json.dumps({"report": {"status": "FAIL", "reason": "max_abs_err"}, "comparison": None}))
    assert read_verdict(path) == Verdict(report={"status": "FAIL", "reason": "max_abs_err"}, comparison=None)
    for junk in ("{not json", "[]", json.dumps({"comparison": comparison})):
        path.write_text(junk)
        assert read_verdict(path) is None


def test_git_processes_run_in_their_own_session(tmp_path):
    # A terminal's Ctrl-C or hang-up goes to the whole foreground process group; the engine's git
    # processes (one-shot commands and GitPython's persistent cat-file helpers) must not hear it.
    ws = init_workspace(tmp_path / "ws", tasks=["rmsnorm"])
    rr = RunRepo(ws, "t")
    rr.create()
    rr.head()  # starts the worktree's persistent `git cat-file --batch-check`
    rr.repo.commit("HEAD").message  # and the main repository's
    helpers = [p for r in (rr.repo, rr.wt) for p in (r.git.cat_file_header, r.git.cat_file_all) if p is not None]
    assert helpers
    for helper in helpers:
        assert os.getsid(helper.proc.pid) == helper.proc.pid != os.getsid(0)
    sid = rr.wt.git.execute(["sh", "-c", "ps -o sid= -p $$"]).strip()  # every command goes through execute
    assert int(sid) != os.getsid(0)


def test_a_git_command_killed_by_a_signal_is_run_again_only_where_that_is_harmless(tmp_path, monkeypatch):
    # CI once saw `commit-tree` die of SIGHUP (status -1) as its terminal closed, and the experiment
    # was lost. Object writes and reads run once more; a ref update (compare-and-swap) never does.
    import git as gitpython

    ws = init_workspace(tmp_path / "ws", tasks=["rmsnorm"])
    rr = RunRepo(ws, "t")
    rr.create()
    real = rr.wt.git.execute
    killed = []

    def once_killed(command, *args, **kwargs):
        verb = next(c for c in command[1:] if not c.startswith("-") and "=" not in c)
        if verb in ("commit-tree", "update-ref") and verb not in killed:
            killed.append(verb)
            raise gitpython.GitCommandError(command, -1, b"", b"")
        return real(command, *args, **kwargs)

    monkeypatch.setattr(rr.wt.git, "execute", once_killed)
    with pytest.raises(gitpython.GitCommandError):  # commit-tree retried, then update-ref killed: raised
        rr.commit_candidate(1, "rmsnorm", (rr.task_dir("rmsnorm") / "kernel.py").read_text() + "# x\n",
                            message(1, "x", {"Autokernel-Task": "rmsnorm"}))
    assert killed == ["commit-tree", "update-ref"]
