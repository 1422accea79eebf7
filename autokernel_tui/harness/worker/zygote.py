"""The fork server: fresh contestants in milliseconds, with torch and triton already imported.

The judge forks this process before it initialises CUDA (a CUDA context does not
survive a fork), so every contestant starts from a clean interpreter that has
never run candidate code. It serves three requests on a SOCK_SEQPACKET socket:

* ``spawn``: fork a contestant and hand the judge its end of a fresh socket pair;
* ``sweep``: kill every process below this one except the live contestants named
  (this process is a child subreaper, so whatever a candidate forked, double
  forked or ``setsid``-ed is below it), and say which were running (a comparison
  sweeps after each side's timed calls: a process a candidate leaves running
  would take the CPU or GPU from the other side while it is timed);
* ``status``: how a contestant ended (exit code or signal), once reaped.

It never runs candidate code itself and is not dumpable, so no contestant can
read or patch it.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import socket
import sys
from typing import Any

_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 1, 4, 36


def prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: these are hardening, not function
        pass


PF_EXITING = 0x4  # /proc/<pid>/stat's flags: the process is in the kernel's exit path (runs no user code)
SIGKILL_BIT = 1 << (signal.SIGKILL - 1)  # in /proc/<pid>/status's pending-signal masks


def _stat(path: str) -> tuple[str, int, int]:
    """(state, parent pid, flags) from a ``/proc/<pid>/stat`` or ``/proc/<pid>/task/<tid>/stat`` file (the
    command name, in parentheses, may itself hold spaces and parentheses)."""
    with open(path, encoding="ascii", errors="replace") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return fields[0], int(fields[1]), int(fields[6])


def _dying(pid: int, flags: int) -> bool:
    """Killed already: exiting, or a SIGKILL pending (a contestant the pool retired tears its CUDA context
    down for a while after its SIGKILL; seen as a "stray" in run 20's tuner, it failed an honest kernel)."""
    if flags & PF_EXITING:
        return True
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith(("SigPnd:", "ShdPnd:")) and int(line.split()[1], 16) & SIGKILL_BIT:
                    return True
    except (OSError, ValueError, IndexError):
        pass
    return False


def _gone(pid: int, state: str, flags: int) -> bool:
    """Runs nothing: a zombie, or killed and on its way out, and so is every thread of it. A leader thread
    that exits alone shows its process as a zombie (or exiting) while its other threads run on."""
    if state not in ("Z", "X") and not _dying(pid, flags):
        return False
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in threads:
        try:
            state, _, flags = _stat(f"/proc/{pid}/task/{tid}/stat")
        except (OSError, ValueError, IndexError):
            continue
        if state not in ("Z", "X") and not flags & PF_EXITING:
            return False
    return True


def descendants(root: int, running: bool = False) -> list[int]:
    """Every live process below ``root`` (read from /proc); ``running``: not those that have exited and
    wait to be reaped, nor those already killed and on their way out, unless a thread of theirs still runs
    (``_gone``)."""
    children: dict[int, list[int]] = {}
    gone: set[int] = set()  # still walked through: what a dying process forked may be running
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            state, ppid, flags = _stat(f"/proc/{entry}/stat")
        except (OSError, ValueError, IndexError):
            continue
        if running and _gone(int(entry), state, flags):
            gone.add(int(entry))
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in gone:
                out.append(child)
            todo.append(child)
    return out


def exit_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    return f"exited with code {os.WEXITSTATUS(status)}"


class Zygote:
    def __init__(self, ctrl: socket.socket, device: str) -> None:
        self.ctrl = ctrl
        self.device = device
        self.exits: dict[int, str] = {}
        self.children: dict[int, int] = {}  # contestants not reaped yet: pid -> the spawn's serial
        self.spawned = 0

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.exits[pid] = exit_text(status)
            self.children.pop(pid, None)

    def spawn(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:  # the contestant
            code = 70
            try:
                self.ctrl.close()
                mine.close()
                os.setpgid(0, 0)
                prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
                prctl(_PR_SET_DUMPABLE, 1)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                from autokernel_tui.harness.worker import contestant
                code = contestant.run(theirs, self.device)
            except BaseException:  # noqa: BLE001 - a contestant must never return into the zygote
                import traceback
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        theirs.close()
        self.spawned += 1
        self.children[pid] = self.spawned
        self.exits.pop(pid, None)  # a pid used again: what ended before was another contestant
        socket.send_fds(self.ctrl, [json.dumps({"pid": pid, "serial": self.spawned}).encode()], [mine.fileno()])
        mine.close()

    def kill(self, pid: int, serial: int) -> bool:
        """SIGKILL contestant ``pid`` (its process group) if it is the one spawned as ``serial`` and not
        reaped yet. Only this process reaps its children, so a pid it has not reaped cannot belong to
        anyone else; the judge's own ``killpg`` of a pid reaped here could hit any process group on the
        machine once pids wrap (32768 on many hosts): a terminal's shell and everything in it."""
        self.reap()
        if self.children.get(pid) != serial:
            return False
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # not its own group yet (just forked)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        return True

    def sweep(self, keep: list[int]) -> None:
        running = [p for p in descendants(os.getpid(), running=True) if p not in keep]
        kill_descendants(set(keep), self.reap)
        self.reply({"ok": True, "pids": running})

    def reply(self, message: dict[str, Any]) -> None:
        self.ctrl.send(json.dumps(message).encode())

    def serve(self) -> None:
        while True:
            ready, _, _ = select.select([self.ctrl], [], [], 0.2)
            self.reap()
            if not ready:
                continue
            data = self.ctrl.recv(65536)
            if not data:
                return
            message = json.loads(data)
            op = message.get("op")
            if op == "spawn":
                self.spawn()
            elif op == "sweep":
                self.sweep([int(p) for p in message.get("keep", [])])
            elif op == "kill":
                self.reply({"ok": True, "killed": self.kill(int(message["pid"]), int(message["serial"]))})
            elif op == "status":
                self.reply({"ok": True, "exit": self.exits.get(int(message["pid"]))})
            elif op == "exit":
                return


def kill_descendants(keep: set[int] = frozenset(), reap=lambda: None) -> None:
    """SIGKILL every process below this one but ``keep``, ``reap``-ing after each pass."""
    for _ in range(3):  # a fork racing one pass is caught by the next
        victims = [p for p in descendants(os.getpid()) if p not in keep]
        if not victims:
            return
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        reap()


def _die_with_descendants(*_: object) -> None:
    try:
        kill_descendants()
    finally:
        os._exit(0)


def run(ctrl: socket.socket, device: str) -> None:
    """The body of the forked zygote; never returns."""
    code = 0
    sys.argv = ["autokernel-zygote"]  # the judge's command line (its pipes' numbers) is none of a contestant's business
    try:
        # The judge's death (its engine killed, say) reaches this process as SIGTERM, not SIGKILL, so that
        # what a candidate left below it (setsid, double forked: this is their subreaper) dies with it:
        # under bwrap the pid namespace does that; with Landlock alone nothing else would.
        signal.signal(signal.SIGTERM, _die_with_descendants)
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() == 1:  # the judge died before the line above took effect
            _die_with_descendants()
        prctl(_PR_SET_CHILD_SUBREAPER, 1)
        prctl(_PR_SET_DUMPABLE, 0)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        Zygote(ctrl, device).serve()
    except BaseException:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        code = 70
    finally:
        try:
            kill_descendants()
        except OSError:
            pass
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
