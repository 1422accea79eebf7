"""How a viewer (the TUI, ``status``, tests) talks to an engine.

``LocalClient`` wraps an engine in this process; ``SocketClient`` talks to a
headless engine over ``.autokernel/control.sock``. Both offer the same four
calls, so the TUI does not care which it has. ``connect(ws)`` picks.
"""

from __future__ import annotations

import itertools
import json
import shlex
import socket
import threading
from pathlib import Path
from typing import Any, Callable

from autokernel_tui.engine.lock import live_pid
from autokernel_tui.errors import WorkspaceError
from autokernel_tui.ledger import paths

Callback = Callable[[dict[str, Any]], None]


def socket_path(workspace: str | Path) -> Path:
    return paths.socket_path(workspace)


class LocalClient:
    """The in-process client. ``LocalClient(engine)`` wraps an engine you manage;
    ``LocalClient(workspace, settings, **engine_kwargs)`` opens (or resumes) the run
    itself, serves the control socket so other terminals can attach or ask
    ``status``, and starts the loop; then ``close()`` stops it after the current
    experiment and waits for that."""

    def __init__(self, engine: Any, settings: Any = None, *, start: bool = True, serve: bool = True,
                 **engine_kwargs: Any):
        self._owns = isinstance(engine, (str, Path))
        if self._owns:
            from autokernel_tui.engine.loop import Engine

            engine = Engine(engine, settings, **engine_kwargs)
            try:
                if serve:
                    engine.serve_control()
                if start:
                    engine.start()
            except BaseException:
                engine.close()
                raise
        self.engine = engine
        self._unsubs: list[Callable[[], None]] = []

    def snapshot(self) -> dict[str, Any]:
        return self.engine.snapshot()

    def subscribe(self, callback: Callback) -> None:
        self._unsubs.append(self.engine.subscribe(callback))

    def send(self, cmd: str, **args: Any) -> dict[str, Any]:
        return self.engine.command(cmd, **args)

    def close(self) -> None:
        for unsub in self._unsubs:
            unsub()
        self._unsubs.clear()
        if self._owns:
            self._owns = False
            self.engine.request_stop()
            self.engine.join()
            self.engine.close()


MAX_MESSAGE = 64 << 20  # bytes in one line from the engine (a snapshot or event; diffs included)


class SocketClient:
    def __init__(self, workspace: str | Path, timeout_s: float = 10.0):
        self.path = socket_path(workspace)
        self.timeout_s = timeout_s
        from autokernel_tui.engine.control import read_token

        try:
            self._token = read_token(self.path)
        except OSError as exc:
            raise WorkspaceError(f"cannot read the engine's control token beside {self.path}: "
                                 f"{exc.strerror or exc}") from None
        try:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError as exc:  # e.g. this process is out of file descriptors
            raise WorkspaceError(f"cannot open a connection to the engine: {exc.strerror or exc}") from None
        try:
            self.sock.connect(str(self.path))
        except OSError as exc:
            self.sock.close()
            raise WorkspaceError(f"cannot reach the engine at {self.path}: {exc.strerror or exc}") from None
        self._refusal: str | None = None  # the engine's reason for hanging up on us, if it gave one
        self._ids = itertools.count(1)
        self._replies: dict[int, dict[str, Any]] = {}
        self._cv = threading.Condition()
        self._callbacks: list[Callback] = []
        self.closed = False
        self._reader = threading.Thread(target=self._read, daemon=True, name="control-client")
        self._reader.start()

    def _read(self) -> None:
        buf = b""
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        self._message(line)
                if len(buf) > MAX_MESSAGE:
                    break  # not the engine talking: hang up
        except OSError:
            pass
        with self._cv:
            self.closed = True
            self._cv.notify_all()

    def _message(self, line: bytes) -> None:
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError):
            return
        if not isinstance(msg, dict):
            return
        if "event" in msg:
            if isinstance(msg["event"], dict):
                for cb in list(self._callbacks):
                    try:
                        cb(msg["event"])
                    except Exception:
                        pass
            return
        rid = msg.get("id")
        with self._cv:
            if rid is None and msg.get("ok") is False:
                self._refusal = str(msg.get("error") or "refused")  # e.g. too many clients
            elif isinstance(rid, int) and not isinstance(rid, bool):
                self._replies[rid] = msg
            self._cv.notify_all()

    def send(self, cmd: str, **args: Any) -> dict[str, Any]:
        rid = next(self._ids)
        try:
            data = (json.dumps({"id": rid, "cmd": cmd, **args, "token": self._token}, allow_nan=False)
                    + "\n").encode()
        except (TypeError, ValueError) as exc:  # NaN, Infinity or an object JSON cannot carry
            return {"ok": False, "error": f"bad request: {exc}"}
        try:
            self.sock.sendall(data)
        except OSError as exc:
            return {"ok": False, "error": self._lost(f"engine connection lost: {exc.strerror or exc}")}
        with self._cv:
            ok = self._cv.wait_for(lambda: rid in self._replies or self.closed, self.timeout_s)
            if rid in self._replies:
                reply = self._replies.pop(rid)
                reply.pop("id", None)
                return reply
        return {"ok": False, "error": self._lost("engine connection lost") if ok else "the engine did not answer in time"}

    def _lost(self, default: str) -> str:
        with self._cv:
            self._cv.wait_for(lambda: self.closed, 1.0)  # the reader may still hold the engine's last words
            return f"the engine refused the connection: {self._refusal}" if self._refusal else default

    def snapshot(self) -> dict[str, Any]:
        reply = self.send("snapshot")
        if not reply.get("ok"):
            raise WorkspaceError(reply.get("error", "no snapshot"))
        return reply["snapshot"]

    def subscribe(self, callback: Callback) -> None:
        self._callbacks.append(callback)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def connect(workspace: str | Path, engine_factory: Callable[[], Any] | None = None) -> LocalClient | SocketClient:
    """A SocketClient when a live engine owns the workspace; otherwise a LocalClient on
    ``engine_factory()`` (an idle engine in this process: ``send("resume")`` starts it).
    Without a factory and without a live engine, a WorkspaceError says so."""
    if live_pid(Path(workspace)) is not None and socket_path(workspace).exists():
        return SocketClient(workspace)
    if engine_factory is None:
        raise WorkspaceError(f"no engine is running in {workspace} (start one with `autokernel-tui run --headless -C {shlex.quote(str(workspace))}`)")
    return LocalClient(engine_factory())
