"""What the zygote's sweep calls a stray: a process below it that runs, not one already on its way out.
Run 20 (H100): a contestant the pool had retired (SIGKILL sent, its CUDA context still being torn down)
was reported as a process the candidate left running, and an honest kernel was REJECTED in a comparison."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time

import pytest

from autokernel_tui.harness.worker import zygote


def _wait(predicate, seconds=10.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_a_running_child_is_a_stray_and_a_zombie_is_not():
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        assert _wait(lambda: open(f"/proc/{dead.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z")
        running = zygote.descendants(os.getpid(), running=True)
        assert live.pid in running and dead.pid not in running
        assert dead.pid in zygote.descendants(os.getpid())  # the killing pass still sees it
    finally:
        live.kill()
        live.wait()
        dead.wait()


def test_a_process_already_killed_is_not_a_stray_but_what_it_forked_is(monkeypatch):
    code = ("import subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            "print(p.pid, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        real = zygote._gone
        monkeypatch.setattr(zygote, "_gone", lambda pid, state, flags: pid == parent.pid or real(pid, state, flags))
        running = zygote.descendants(os.getpid(), running=True)
        assert parent.pid not in running and child in running  # walked through the dying one
    finally:
        parent.kill()
        parent.wait()
        os.system(f"kill -9 {child} 2>/dev/null")


def test_dying_reads_the_exit_flag_and_a_pending_kill():
    assert zygote._dying(os.getpid(), zygote.PF_EXITING)
    assert not zygote._dying(os.getpid(), 0)  # this process: no SIGKILL pending
    assert zygote.SIGKILL_BIT == 0x100


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the exit syscall's number is x86-64's")
def test_a_process_whose_leader_thread_exited_alone_is_still_a_stray():
    """The main thread leaves with the exit syscall (not exit_group): the process shows as a zombie while a
    second thread runs on. A candidate must not hide a running process so."""
    code = ("import ctypes, os, sys, threading, time\n"
            "threading.Thread(target=lambda: time.sleep(60)).start()\n"
            "print('ready', flush=True)\n"
            "ctypes.CDLL(None).syscall(60, 0)\n")  # SYS_exit on x86-64: this thread only
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert _wait(lambda: open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z")
        assert proc.pid in zygote.descendants(os.getpid(), running=True)
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def pool(tmp_path):
    """A real zygote and contestants in this process, no sandbox: their pids are the machine's."""
    from autokernel_tui.harness.worker.pool import ContestantPool

    p = ContestantPool("cpu", tmp_path, tmp_path / "cache", timeout_s=120, memory_limit_mb=8000, landlock=False,
                       read_roots=None, spares=0)
    yield p
    p.close()


def _gone_or_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_the_zygote_kills_its_own_contestant_once_and_never_a_stranger(pool):
    """CI twice saw a tmux test's engine vanish mid-experiment, with no row and no last event: the judge
    killed contestants by pid (``killpg``), also ones the zygote had already reaped, and on a host whose
    pids wrap at 32768 such a pid can be a stranger's process group (a terminal's shell and its engine).
    Now only the zygote kills, and only a child it spawned and has not reaped."""
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        for serial in (0, 1, 2):  # whatever serial: not one of its children
            assert pool._ask({"op": "kill", "pid": stranger.pid, "serial": serial})["killed"] is False
        proxy = pool._spawn()
        assert not pool._ask({"op": "kill", "pid": proxy.pid, "serial": proxy.birth + 1})["killed"]  # another spawn
        assert not _gone_or_zombie(proxy.pid)
        proxy.kill()
        assert _wait(lambda: _gone_or_zombie(proxy.pid))
        assert not proxy.alive
        assert _wait(lambda: pool.exit_of(proxy.pid) == "killed by SIGKILL")  # reaped by the zygote
        # Reaped, its pid free for anyone: asked again (a stale proxy), the zygote refuses.
        assert pool._ask({"op": "kill", "pid": proxy.pid, "serial": proxy.birth})["killed"] is False
        time.sleep(0.3)
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_a_dead_zygote_makes_kill_a_no_op(pool):
    proxy = pool._spawn()
    os.kill(pool.zygote_pid, 9)  # not reaped here: the pool's close reaps it
    assert _wait(lambda: _gone_or_zombie(pool.zygote_pid))
    proxy.kill()  # no error, no killpg from here: the contestant dies of its parent-death signal
    assert _wait(lambda: _gone_or_zombie(proxy.pid))
