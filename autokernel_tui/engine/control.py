"""The control channel: a Unix socket in the workspace for attaching clients.

``<ws>/.autokernel/control.sock``, mode 0600 (created under a 0077 umask, so
there is no window where others could connect). Newline-delimited JSON both
ways: a client sends ``{"id": k, "cmd": ..., ...args}`` and gets
``{"id": k, "ok": bool, ...}``; every engine event is pushed to every client as
``{"event": {...}}``. A slow or dead client never blocks the engine: each has a
bounded outgoing queue and is dropped when it overflows.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import threading
from pathlib import Path
from typing import Any

MAX_LINE = 1 << 20
QUEUE_LIMIT = 10000


class _Client:
    def __init__(self, server: "ControlServer", conn: socket.socket):
        self.server, self.conn = server, conn
        self.out: queue.Queue[bytes | None] = queue.Queue(QUEUE_LIMIT)
        self.alive = True
        self._writer_thread = threading.Thread(target=self._writer, daemon=True, name="control-writer")
        self._writer_thread.start()
        threading.Thread(target=self._reader, daemon=True, name="control-reader").start()

    def send(self, obj: dict[str, Any]) -> None:
        if not self.alive:
            return
        try:
            self.out.put_nowait((json.dumps(obj, default=str) + "\n").encode())
        except queue.Full:
            self.close()

    def _writer(self) -> None:
        while self.alive:
            data = self.out.get()
            if data is None:
                break
            try:
                self.conn.sendall(data)
            except OSError:
                break
        self.close()

    def _reader(self) -> None:
        buf = b""
        try:
            while self.alive:
                chunk = self.conn.recv(65536)
                if not chunk:
                    break
                buf += chunk
                if len(buf) > MAX_LINE and b"\n" not in buf:
                    break
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        self._handle(line)
        except OSError:
            pass
        self.close()

    def _handle(self, line: bytes) -> None:
        try:
            msg = json.loads(line)
            if not isinstance(msg, dict):
                raise ValueError("a request is a JSON object")
        except ValueError as exc:
            self.send({"id": None, "ok": False, "error": f"bad request: {exc}"})
            return
        rid = msg.pop("id", None)
        cmd = msg.pop("cmd", None)
        if not isinstance(cmd, str):
            self.send({"id": rid, "ok": False, "error": "missing cmd"})
            return
        reply = self.server.engine.command(cmd, **msg)
        self.send({"id": rid, **reply})

    def finish(self, timeout: float = 2.0) -> None:
        """Send what is already queued (the engine's last events), then close: for a shutdown."""
        if self.alive and threading.current_thread() is not self._writer_thread:
            try:
                self.out.put(None, timeout=timeout)  # the writer stops after everything queued before it
                self._writer_thread.join(timeout)
            except queue.Full:
                pass
        self.close()

    def close(self) -> None:
        if not self.alive:
            return
        self.alive = False
        try:
            self.out.put_nowait(None)
        except queue.Full:
            pass
        try:
            self.conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()
        self.server._forget(self)


class ControlServer:
    def __init__(self, engine: Any, path: Path):
        self.engine = engine
        self.path = Path(path)
        self.sock: socket.socket | None = None
        self.clients: list[_Client] = []
        self._lock = threading.Lock()
        self._unsubscribe = None

    def start(self) -> "ControlServer":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # We hold engine.lock, so a socket file here is a dead engine's leftover.
        self.path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o077)
        try:
            sock.bind(str(self.path))
        except OSError as exc:
            sock.close()
            from autokernel_tui.errors import WorkspaceError

            raise WorkspaceError(f"cannot create the control socket {self.path}: {exc.strerror or exc} "
                                 "(Unix socket paths are limited to about 100 characters)") from None
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        sock.listen(8)
        self.sock = sock
        self._unsubscribe = self.engine.subscribe(self._broadcast)
        threading.Thread(target=self._accept, daemon=True, name="control-accept").start()
        return self

    def _accept(self) -> None:
        while self.sock is not None:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self.clients.append(_Client(self, conn))

    def _broadcast(self, event: dict[str, Any]) -> None:
        with self._lock:
            clients = list(self.clients)
        for c in clients:
            c.send({"event": event})

    def _forget(self, client: _Client) -> None:
        with self._lock:
            if client in self.clients:
                self.clients.remove(client)

    def close(self) -> None:
        if self._unsubscribe:
            self._unsubscribe()
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()
            self.path.unlink(missing_ok=True)
        for c in list(self.clients):
            c.finish()
