"""`autokernel-tui init` where a user would not expect it to work, through the real CLI:
inside another git checkout (refused with a way out; --nested to do it anyway), and failures
half-way (unknown task, bad profile, a locked git index) that must leave nothing behind."""

import json
import os
import subprocess
import sys

import pytest


def git(ws, *args):
    return subprocess.run(["git", "-C", str(ws), *args], capture_output=True, text=True, check=True).stdout


def init(*args, cwd=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOKERNEL_", "GIT_"))}
    return subprocess.run([sys.executable, "-m", "autokernel_tui", "init", *map(str, args)], capture_output=True,
                          text=True, timeout=120, cwd=cwd, env=env)


def tree(root):
    """Every path under root (the .git internals summarised), to compare before and after."""
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        if rel.startswith(".git"):
            continue
        out |= {os.path.join(rel, n) for n in dirnames + filenames}
    return out


@pytest.fixture
def outer(tmp_path):
    """A user's project checkout, with one commit and a subfolder."""
    repo = tmp_path / "project"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "model.py").write_text("x = 1\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    git(repo, "add", ".")
    git(repo, "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "mine")
    return repo


def one_line_error(proc):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_init_inside_another_checkout_is_refused_with_a_way_out(outer):
    before = tree(outer)
    for target, cwd in ((outer / "sub" / "ws", None), (".", outer / "src")):
        msg = one_line_error(init(target, "--task", "rmsnorm", cwd=cwd))
        assert f"inside the git repository {outer}" in msg and "--nested" in msg
        assert f"autokernel-tui init {outer}" in msg
    assert tree(outer) == before and git(outer, "status", "--porcelain") == ""  # nothing made, not even sub/


def test_nested_on_request_and_the_top_folder_still_work(outer):
    proc = init(outer / "sub" / "ws", "--task", "rmsnorm", "--nested")
    assert proc.returncode == 0, proc.stderr
    ws = outer / "sub" / "ws"
    assert (ws / ".git").is_dir() and git(ws, "ls-files").split()[0] == "kernels/rmsnorm/kernel.py"
    assert git(outer, "log", "--format=%s").splitlines() == ["mine"]  # the outer repository untouched
    # At the top of the checkout: the tasks are added to that repository (its own history).
    proc = init(outer, "--task", "softmax")
    assert proc.returncode == 0, proc.stderr
    assert git(outer, "log", "-1", "--format=%s").strip() == "autokernel: add tasks softmax"


def test_a_failed_init_in_a_new_folder_leaves_nothing(tmp_path):
    target = tmp_path / "a" / "b" / "ws"
    msg = one_line_error(init(target, "--task", "rmsnorm", "--task", "nope"))
    assert "no starter task 'nope'" in msg
    assert not (tmp_path / "a").exists()
    (tmp_path / "bad.json").write_bytes(b"[1, 2]")
    msg = one_line_error(init(target, "--from-profile", tmp_path / "bad.json"))
    assert "not a profile" in msg and not (tmp_path / "a").exists()
    (tmp_path / "shape.json").write_text(json.dumps({"families": 5, "model_args": []}))
    msg = one_line_error(init(target, "--task", "rmsnorm", "--from-profile", tmp_path / "shape.json"))
    assert "shape.json" in msg and not (tmp_path / "a").exists()


def test_a_failed_init_in_an_existing_repository_takes_back_what_it_did(tmp_path):
    ws = tmp_path / "ws"
    assert init(ws, "--task", "rmsnorm").returncode == 0
    head = git(ws, "rev-parse", "HEAD")
    exclude = (ws / ".git" / "info" / "exclude").read_bytes()
    before = tree(ws)
    # A profile that is not one: the starter copied first must go again.
    (tmp_path / "shape.json").write_text(json.dumps({"families": [{"family": 3}], "model_args": 1}))
    one_line_error(init(ws, "--task", "softmax", "--from-profile", tmp_path / "shape.json"))
    assert tree(ws) == before and git(ws, "status", "--porcelain") == ""
    # git itself fails half-way (a stale index.lock): tasks copied, then taken back, one line said.
    (ws / ".git" / "index.lock").write_text("")
    msg = one_line_error(init(ws, "--task", "softmax"))
    assert "init failed in git" in msg and "index.lock" in msg and "nothing was left behind" in msg
    (ws / ".git" / "index.lock").unlink()
    assert tree(ws) == before and git(ws, "status", "--porcelain") == ""
    assert git(ws, "rev-parse", "HEAD") == head and (ws / ".git" / "info" / "exclude").read_bytes() == exclude
    assert init(ws, "--task", "softmax").returncode == 0  # and a retry starts clean


def test_a_plain_folder_that_is_a_file_or_a_bad_top(tmp_path):
    (tmp_path / "file").write_text("x")
    assert "is not a folder" in one_line_error(init(tmp_path / "file", "--task", "rmsnorm"))
    (tmp_path / "p.json").write_text("{}")
    assert "--top must be at least 1" in one_line_error(init(tmp_path / "w", "--from-profile", tmp_path / "p.json",
                                                             "--top", "0"))
    assert not (tmp_path / "w").exists()
