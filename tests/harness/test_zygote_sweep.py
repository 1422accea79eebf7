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
