"""The judge's side of its contestants: the zygote, ready spares, and one proxy per contestant.

``ContestantPool.acquire(source)`` takes a spare that has already initialised the
device, gives it its own scratch folder and Triton cache, and assigns it the
kernel; ``release`` kills it and everything it started, and forks a new spare.
Every request to a contestant is timed from here (the outside clock), bounded
by a deadline and by a memory limit, and a contestant that dies, hangs or
answers nonsense becomes a verdict (CRASH, TIMEOUT) for that candidate alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autokernel_tui.harness import protocol
from autokernel_tui.harness.sandbox import landlock
from autokernel_tui.harness.worker.errors import Verdict, one_line

SPAWN_TIMEOUT_S = 300.0
IDLE_DROP_S = 30.0  # a warm contestant asked to give its memory back: the time it has to answer
MAX_LIVE = 4  # contestants kept warm (a task's candidate and incumbent, twice for A/A), least recent first out


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


@dataclass
class Clock:
    """Outside-clock seconds of the requests made to one contestant, by kind."""
    seconds: dict[str, list[float]] = field(default_factory=dict)

    def add(self, op: str, s: float) -> None:
        self.seconds.setdefault(op, []).append(s)


class ContestantProxy:
    def __init__(self, pool: "ContestantPool", pid: int, sock: socket.socket, birth: int) -> None:
        self.pool = pool
        self.pid = pid
        self.birth = birth  # the zygote's serial for this spawn: with the pid, names this process alone
        self.sock = sock
        self.ready = False
        self.alive = True
        self.scratch: Path | None = None
        self.sandbox = ""
        self.clock = Clock()
        self.deadline = float("inf")
        self.serial = 0
        self.key: tuple[str, str, str] | None = None

    def wait_ready(self, timeout_s: float) -> None:
        if not self.ready:
            reply, _ = self._exchange(None, "startup", min(timeout_s, SPAWN_TIMEOUT_S))
            if not reply.get("ready"):
                raise Verdict("CRASH", "static", f"contestant did not start: {reply}")
            self.ready = True

    def request(self, message: dict[str, Any], stage: str) -> tuple[dict[str, Any], float]:
        """Send one request; (reply, seconds on the outside clock). A failed request raises a Verdict."""
        self.serial += 1
        message = {**message, "id": self.serial}
        reply, seconds = self._exchange(message, stage, self.deadline - time.monotonic())
        self.clock.add(message["op"], seconds)
        if reply.get("id") != self.serial:
            self.kill()
            raise Verdict("CRASH", stage, "the contestant answered out of turn (a reply to no request)")
        if not reply.get("ok"):
            raise Verdict(str(reply.get("status") or "CRASH"), str(reply.get("stage") or stage),
                          one_line(str(reply.get("reason") or reply)))
        return reply, seconds

    def _exchange(self, message: dict[str, Any] | None, stage: str, timeout_s: float) -> tuple[dict, float]:
        if not self.alive:
            raise Verdict("CRASH", stage, "the contestant is gone")
        fd = self.sock.fileno()
        t0 = time.perf_counter()
        try:
            if message is not None:
                protocol.send(fd, message)
            end = time.monotonic() + max(timeout_s, 0.0)
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    self.kill()
                    raise Verdict("TIMEOUT", stage, f"no answer within the evaluation's {self.pool.timeout_s:.0f} s "
                                                    "(hang or infinite loop?): contestant killed")
                ready, _, _ = select.select([fd], [], [], min(0.25, left))
                if ready:
                    reply = protocol.recv(fd)
                    seconds = time.perf_counter() - t0
                    if reply is None:
                        raise Verdict("CRASH", stage, self._death())
                    if not isinstance(reply, dict):
                        raise Verdict("CRASH", stage, "the contestant answered something that is not a reply")
                    return reply, seconds
                rss = rss_mb(self.pid)
                if rss > self.pool.memory_limit_mb:
                    self.kill()
                    raise Verdict("CRASH", stage, f"memory blowup: the contestant used {rss / 1024:.1f} GiB of host "
                                                  f"memory (limit {self.pool.memory_limit_mb / 1024:.1f} GiB): killed")
        except (BrokenPipeError, ConnectionResetError):
            raise Verdict("CRASH", stage, self._death()) from None
        except (ValueError, UnicodeDecodeError) as exc:  # a malformed frame: never trusted, never parsed further
            self.kill()
            raise Verdict("CRASH", stage, f"the contestant broke the protocol ({one_line(str(exc))})") from None

    def _death(self) -> str:
        self.alive = False
        how = None
        for _ in range(40):  # the zygote reaps within a few of its 0.2 s ticks
            how = self.pool.exit_of(self.pid)
            if how:
                break
            time.sleep(0.05)
        how = how or "stopped answering"
        hint = " (os._exit / sys.exit in candidate code?)" if how.startswith("exited") else ""
        return f"the contestant {how}{hint}"

    def kill(self) -> None:
        if self.alive:
            self.pool.kill_contestant(self)
        self.alive = False
        try:
            self.sock.close()
        except OSError:
            pass


def output_transfer(landlock: bool, private_shm: bool) -> tuple[str, list[str]]:
    """(how CUDA outputs travel, ``transfer.WAYS``; the ``/dev/shm`` write roots a contestant gets).

    torch's IPC keeps a handle's reference count in /dev/shm: open to a contestant only where that
    /dev/shm is the sandbox's own, never the host's (other programs' shared memory). Under Landlock
    alone handles come from the CUDA driver itself, which writes nothing."""
    if landlock and not private_shm:
        return "driver", []
    return "torch", ["/dev/shm"] if landlock else []


class ContestantPool:
    def __init__(self, device: str, scratch_root: Path, cache_root: Path, *, timeout_s: float,
                 memory_limit_mb: float, landlock: bool, read_roots: list[str] | None, spares: int = 1,
                 private_shm: bool = False) -> None:
        self.device = device
        self.scratch_root = scratch_root
        self.cache_root = cache_root
        self.timeout_s = timeout_s
        self.memory_limit_mb = memory_limit_mb
        self.landlock = landlock
        self.transfer, self.shm_roots = output_transfer(landlock, private_shm)
        self.read_roots = read_roots or ["/"]
        self.n_spares = spares
        self._spares: list[ContestantProxy] = []
        self._live: list[ContestantProxy] = []  # warm contestants, least recently used first
        self._busy: list[ContestantProxy] = []  # acquired and not yet released: in an evaluation
        self._count = 0
        self.replaced = 0
        ctrl, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            # Nothing of the judge's reaches a contestant: above all not its pipes to the runner.
            keep = theirs.fileno()
            os.closerange(3, keep)
            os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
            from autokernel_tui.harness.worker import zygote
            zygote.run(theirs, device)  # never returns
        theirs.close()
        self.zygote_pid = pid
        self.ctrl = ctrl

    # The zygote -------------------------------------------------------------------------
    def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        self.ctrl.send(json.dumps(message).encode())
        return json.loads(self.ctrl.recv(65536))

    def kill_contestant(self, proxy: "ContestantProxy") -> None:
        """The zygote kills the contestant, if it has not reaped it (``Zygote.kill``): never by pid from
        here, where a contestant that already died and was reaped may have left its pid to a stranger."""
        try:
            self._ask({"op": "kill", "pid": proxy.pid, "serial": proxy.birth})
        except (OSError, ValueError):
            pass  # the zygote is gone, and its contestants with it (their parent-death signal)

    def exit_of(self, pid: int) -> str | None:
        try:
            return self._ask({"op": "status", "pid": pid}).get("exit")
        except (OSError, ValueError):
            return None

    def _spawn(self) -> ContestantProxy:
        self.ctrl.send(json.dumps({"op": "spawn"}).encode())
        data, fds, _, _ = socket.recv_fds(self.ctrl, 65536, 1)
        if not fds:
            raise RuntimeError("the zygote did not hand over a contestant")
        born = json.loads(data)
        return ContestantProxy(self, int(born["pid"]), socket.socket(fileno=fds[0]), int(born["serial"]))

    def fill_spares(self) -> None:
        while len(self._spares) < self.n_spares:
            self._spares.append(self._spawn())

    def settle(self) -> None:
        """Wait until every spare has its device ready, so no CUDA context starts while we time."""
        for proxy in list(self._spares):
            try:
                proxy.wait_ready(SPAWN_TIMEOUT_S)
            except Verdict:
                proxy.kill()
                self._spares.remove(proxy)

    # Contestants ------------------------------------------------------------------------
    def acquire(self, kernel_source: str, task_copy: Path, slot: str = "a", stage: str = "static") -> ContestantProxy:
        """A contestant running ``kernel_source`` for ``task_copy``: the warm one that ran it last
        (its Triton kernels compiled and loaded), else a spare assigned now. ``slot`` keeps two
        contestants of one source apart (an A/A comparison still runs in two processes)."""
        digest = hashlib.sha256(kernel_source.encode()).hexdigest()[:24]
        key = (digest, str(task_copy), slot)
        self.trim_idle()
        for proxy in self._live:
            if proxy.key == key and proxy.alive:
                self._live.remove(proxy)
                self._live.append(proxy)
                self._busy.append(proxy)
                proxy.deadline = time.monotonic() + self.timeout_s
                return proxy
        self.fill_spares()
        proxy = self._spares.pop(0)
        self._live.append(proxy)
        self._busy.append(proxy)
        self.fill_spares()  # the next one starts while this one works
        proxy.deadline = time.monotonic() + self.timeout_s
        proxy.wait_ready(self.timeout_s)
        self._count += 1
        scratch = self.scratch_root / f"contestant-{self._count}-{os.urandom(6).hex()}"
        scratch.mkdir(mode=0o700)
        source_dir = self.scratch_root / f"src-{digest}"  # one path per source: Triton's caches key on it
        if not (source_dir / "kernel.py").exists():
            source_dir.mkdir(exist_ok=True)
            (source_dir / "kernel.py").write_text(kernel_source, encoding="utf-8")
        cache = self.cache_root / "triton-src" / digest
        cache.mkdir(parents=True, exist_ok=True)
        proxy.scratch = scratch
        proxy.key = key
        reply, _ = proxy.request({"op": "assign", "scratch": str(scratch), "kernel_path": str(source_dir / "kernel.py"),
                                  "task_dir": str(task_copy), "triton_cache": str(cache), "landlock": self.landlock,
                                  "transfer": self.transfer,
                                  "write_roots": [str(scratch), str(cache), *landlock.device_files(), *self.shm_roots],
                                  "read_roots": self.read_roots + [str(task_copy), str(source_dir), str(scratch),
                                                                   str(cache)]},
                                 stage)
        proxy.sandbox = str(reply.get("sandbox", ""))
        return proxy

    def release(self, proxy: ContestantProxy, failed: bool = False) -> None:
        """After an evaluation: a failed contestant dies; a good one stays warm (up to MAX_LIVE).
        Either way every process it started is killed."""
        if proxy in self._busy:
            self._busy.remove(proxy)
        if failed or not proxy.alive:
            self._retire(proxy)
            if failed:
                self.replaced += 1
        else:
            try:
                proxy.request({"op": "drop", "sets": True, "idle": True}, "timing")
            except Verdict:
                self._retire(proxy)
        while len(self._live) > MAX_LIVE:
            self._retire(self._live[0])
        try:
            self._ask({"op": "sweep", "keep": [p.pid for p in self._spares + self._live]})
        except (OSError, ValueError):
            pass

    def trim_idle(self) -> None:
        """Where the card is short of memory, the warm contestants outside any evaluation give their cached
        inputs and free blocks back. Each trims itself when it goes idle, but only if the card is short then:
        four of them kept what a big task's batches had grown them to, the judge's float64 attention
        references beside them, and every flash attention experiment after the ninth ran out of memory
        (run 21, H100)."""
        idle = [p for p in self._live if p not in self._busy]
        if self.device != "cuda" or not idle:
            return
        from autokernel_tui.harness.worker import memory  # torch: the judge's process only
        if not memory.short():
            return
        memory.release_cached()
        for proxy in idle:
            proxy.deadline = time.monotonic() + IDLE_DROP_S
            try:
                proxy.request({"op": "drop", "sets": True, "idle": True}, "timing")
            except Verdict:
                self._retire(proxy)

    def strays(self) -> list[int]:
        """Processes below the zygote that are not contestants (a candidate's, left running): killed, and
        their pids returned. The zygote could not be asked: none found."""
        try:
            reply = self._ask({"op": "sweep", "keep": [p.pid for p in self._spares + self._live]})
        except (OSError, ValueError):
            return []
        return [int(p) for p in reply.get("pids", [])]

    def retire_warm(self) -> None:
        """Every warm contestant ends (their memory back to the card); spares, which hold none, stay."""
        for proxy in list(self._live):
            self._retire(proxy)

    def _retire(self, proxy: ContestantProxy) -> None:
        proxy.kill()
        if proxy in self._live:
            self._live.remove(proxy)
        if proxy in self._busy:
            self._busy.remove(proxy)
        if proxy.scratch is not None:
            shutil.rmtree(proxy.scratch, ignore_errors=True)

    def close(self) -> None:
        for proxy in self._spares + self._live:
            proxy.kill()
        try:
            self.ctrl.send(json.dumps({"op": "exit"}).encode())
        except OSError:
            pass
        try:
            os.kill(self.zygote_pid, signal.SIGKILL)
            os.waitpid(self.zygote_pid, 0)
        except (OSError, ChildProcessError):
            pass
