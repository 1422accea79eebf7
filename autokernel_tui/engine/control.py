"""The control channel: a Unix socket in the workspace for attaching clients.

``<ws>/.autokernel/control.sock``, mode 0600 (created under a 0077 umask, so
there is no window where others could connect). Newline-delimited JSON both
ways: a client sends ``{"id": k, "cmd": ..., "token": T, ...args}`` and gets
``{"id": k, "ok": bool, ...}``; every engine event is pushed to every
authenticated client as ``{"event": {...}}``.

Authentication: a file mode is not enough where candidate code runs as the same
user (without bwrap, Landlock does not mediate connecting to a Unix socket), so
the engine writes a fresh random token to ``<ws>/.autokernel/control.token``
(0600) and a connection is served, and sent events, only once a request carries
it. A sandboxed candidate cannot read the workspace, so it cannot connect. A slow or dead client never blocks the engine: each has a
bounded outgoing queue and is dropped when it overflows.

Hostile or broken clients cost them, never the engine: at most ``max_clients``
connections at once (a further one gets a one-line refusal and is closed);
running out of file descriptors (EMFILE/ENFILE) makes the accept loop back off
and retry, logged once, instead of ending it; a request is at most
``MAX_REQUEST`` bytes and is checked before it reaches the engine (``parse_request``:
JSON without NaN/Infinity, at most ``MAX_DEPTH`` levels of nesting, a known command
with arguments of the right types), and anything wrong gets an error reply.
"""

from __future__ import annotations

import errno
import hmac
import json
import logging
import math
import os
import queue
import resource
import secrets
import socket
import threading
import time
from pathlib import Path
from typing import Any

from autokernel_tui.ledger import paths

MAX_REQUEST = 64 * 1024  # bytes in one request line; commands are small
MAX_SKIP = 16 << 20  # an over-long request is read past up to this many bytes, then the client is dropped
MAX_DEPTH = 8  # levels of [ and { in a request
MAX_CLIENTS = 64
QUEUE_LIMIT = 10000
_log = logging.getLogger("autokernel_tui")
_FD_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)

# command -> {argument: (kind, required)}; kinds: "n" (a whole number >= 1), "str".
COMMANDS: dict[str, dict[str, tuple[str, bool]]] = {
    "hello": {},  # answered by the connection itself: presents the token, reaches no engine
    "snapshot": {}, "pause": {}, "resume": {}, "start": {}, "skip": {}, "stop": {},
    "approve": {"n": ("n", False), "reason": ("str", False)},
    "veto": {"n": ("n", False), "reason": ("str", False)},
    "set_policy": {"policy": ("str", True)},
    "revert": {"n": ("n", True), "run": ("str", False)},
}


def token_path(sock_path: Path) -> Path:
    """Where the engine keeps the control channel's token: beside the socket (the real one, when
    the path given is a link to it)."""
    return Path(sock_path).resolve().with_name(paths.TOKEN_FILE)


def read_token(sock_path: Path) -> str:
    """The token a client must present (OSError when it cannot be read)."""
    return token_path(sock_path).read_text(encoding="ascii").strip()


class BadRequest(ValueError):
    """A request the engine will not look at; the message is the error reply."""


def _reject_constant(name: str) -> Any:
    raise BadRequest(f"{name} is not a number a request may carry")


def _depth(data: bytes) -> int:
    """Deepest nesting of [ and { outside strings (checked before json.loads sees the text)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    return deepest
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def parse_request(line: bytes) -> tuple[Any, str, dict[str, Any]]:
    """``(id, cmd, args)`` of one request line, or BadRequest saying what is wrong with it."""
    if len(line) > MAX_REQUEST:
        raise BadRequest(f"request too long ({len(line)} bytes; at most {MAX_REQUEST})")
    if _depth(line) > MAX_DEPTH:
        raise BadRequest(f"request nested too deeply (at most {MAX_DEPTH} levels)")
    try:
        msg = json.loads(line.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError:
        raise BadRequest("request is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise BadRequest(f"not JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise BadRequest("request nested too deeply") from None
    if not isinstance(msg, dict):
        raise BadRequest(f"a request is a JSON object, not a {type(msg).__name__}")
    msg.pop("token", None)  # checked by the connection (``_Client``), never an argument of a command
    rid = msg.pop("id", None)
    if rid is not None and (isinstance(rid, bool) or not isinstance(rid, (int, str)) or
                            (isinstance(rid, str) and len(rid) > 100)):
        raise BadRequest("id must be a number or a short string")
    cmd = msg.pop("cmd", None)
    if not isinstance(cmd, str):
        raise BadRequest("missing cmd" if cmd is None else "cmd must be a string")
    spec = COMMANDS.get(cmd)
    if spec is None:
        raise BadRequest(f"unknown command {cmd[:40]!r}; known: {', '.join(COMMANDS)}")
    for name in msg:
        if name not in spec:
            raise BadRequest(f"{cmd} takes no argument {name[:40]!r}" if not spec else
                             f"{cmd}: unknown argument {name[:40]!r}; it takes {', '.join(spec)}")
    for name, (kind, required) in spec.items():
        value = msg.get(name)
        if value is None:
            if required:
                raise BadRequest(f"{cmd} needs {name}")
            continue
        if kind == "n" and not (isinstance(value, int) and not isinstance(value, bool) and 1 <= value < 2**63):
            shown = value if not isinstance(value, float) or math.isfinite(value) else "a non-finite number"
            raise BadRequest(f"{cmd}: {name} must be an experiment number (a whole number of at least 1), "
                             f"not {json.dumps(shown)[:40]}")
        if kind == "str" and not (isinstance(value, str) and len(value) <= 1000):
            raise BadRequest(f"{cmd}: {name} must be a string of at most 1000 characters")
    return rid, cmd, msg


def client_limit() -> int:
    """How many clients to serve at once: MAX_CLIENTS, fewer when the file-descriptor limit is
    low (a quarter of it), so clients can never take the descriptors the engine needs."""
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return MAX_CLIENTS
    if soft == resource.RLIM_INFINITY:
        return MAX_CLIENTS
    return max(2, min(MAX_CLIENTS, soft // 4))


def _token_of(line: bytes) -> str | None:
    """The ``token`` field of a request line, when it is a short string."""
    if len(line) > MAX_REQUEST or _depth(line) > MAX_DEPTH:
        return None
    try:
        msg = json.loads(line.decode("utf-8"), parse_constant=lambda _name: None)
    except (ValueError, RecursionError):
        return None
    token = msg.get("token") if isinstance(msg, dict) else None
    return token if isinstance(token, str) and len(token) <= 200 else None


class _Client:
    def __init__(self, server: "ControlServer", conn: socket.socket):
        self.server, self.conn = server, conn
        self.authenticated = False
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
        skipping = 0  # bytes of an over-long request dropped so far (its reply is already sent)
        try:
            while self.alive:
                chunk = self.conn.recv(65536)
                if not chunk:
                    break
                if skipping:
                    head, nl, chunk = chunk.partition(b"\n")
                    skipping += len(head)
                    if not nl:
                        if skipping > MAX_SKIP:  # a stream with no end in sight: hang up
                            break
                        continue
                    skipping = 0
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        self._handle(line)
                if len(buf) > MAX_REQUEST:  # memory stays bounded: answer now, drop the rest of the line
                    self.send({"id": None, "ok": False,
                               "error": f"bad request: request too long (over {MAX_REQUEST} bytes)"})
                    skipping, buf = len(buf), b""
        except OSError:
            pass
        except Exception as exc:  # a bug here must cost this client, never the engine
            _log.warning("autokernel-tui: control client dropped: %s: %s", type(exc).__name__, exc)
        # What is already queued goes out first (a bounded wait): hanging up on an endless line right
        # after queueing its "request too long" lost that reply when the writer had not run yet (CI,
        # a loaded machine).
        self.finish(timeout=1.0)

    def _handle(self, line: bytes) -> None:
        if not self.authenticated:
            token = _token_of(line)
            if token is None or not hmac.compare_digest(token, self.server.token):
                self.send({"id": _id_of(line), "ok": False, "error": (
                    "not authenticated: a request must carry the token in .autokernel/control.token "
                    "(autokernel-tui's own clients do)")})
                self.finish()
                return
            self.authenticated = True
        try:
            rid, cmd, args = parse_request(line)
        except BadRequest as exc:
            self.send({"id": _id_of(line), "ok": False, "error": f"bad request: {exc}"})
            return
        if cmd == "hello":
            self.send({"id": rid, "ok": True})
            return
        try:
            reply = self.server.engine.command(cmd, **args)
        except Exception as exc:  # the engine answers bad input itself; anything else is our bug
            reply = {"ok": False, "error": f"the engine could not carry out {cmd}: {type(exc).__name__}: {exc}"}
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


def _id_of(line: bytes) -> Any:
    """The id of a request that was refused, when it can be read safely (so the client's waiting
    call gets its error at once instead of timing out)."""
    if len(line) > MAX_REQUEST or _depth(line) > MAX_DEPTH:
        return None
    try:
        msg = json.loads(line.decode("utf-8"), parse_constant=lambda _name: None)
    except (ValueError, RecursionError):
        return None
    rid = msg.get("id") if isinstance(msg, dict) else None
    return rid if isinstance(rid, (int, str)) and not isinstance(rid, bool) and len(str(rid)) <= 100 else None


class ControlServer:
    def __init__(self, engine: Any, path: Path):
        self.engine = engine
        self.path = Path(path)
        self.sock: socket.socket | None = None
        self.clients: list[_Client] = []
        self._lock = threading.Lock()
        self._unsubscribe = None
        self.max_clients = client_limit()
        self.refused = 0  # connections turned away because max_clients were connected
        self.token = secrets.token_urlsafe(32)
        self.token_path = token_path(self.path)

    def start(self) -> "ControlServer":
        if self.path.parent.parent == paths.socket_home():  # a deep workspace's socket, in the temp dir
            paths.private_socket_dir(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # We hold engine.lock, so a socket file here is a dead engine's leftover.
        self.path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o077)
        try:
            self.token_path.unlink(missing_ok=True)
            fd = os.open(self.token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="ascii") as fh:
                fh.write(self.token + "\n")
            sock.bind(str(self.path))
        except OSError as exc:
            sock.close()
            from autokernel_tui.errors import WorkspaceError

            raise WorkspaceError(f"cannot create the control socket {self.path}: {exc.strerror or exc} "
                                 "(Unix socket paths are limited to about 100 characters)") from None
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        sock.listen(64)
        self.sock = sock
        self._unsubscribe = self.engine.subscribe(self._broadcast)
        threading.Thread(target=self._accept, daemon=True, name="control-accept").start()
        return self

    def _accept(self) -> None:
        backoff, warned = 0.0, False
        while self.sock is not None:
            sock = self.sock
            try:
                conn, _ = sock.accept()
            except OSError as exc:
                if self.sock is None:  # closed: we are shutting down
                    return
                if exc.errno in (errno.EINTR, errno.ECONNABORTED, errno.EPROTO, errno.EAGAIN):
                    continue
                # Out of file descriptors (or anything else): the pending connection waits in the
                # backlog; back off and try again. Never end the loop: the engine must stay reachable.
                if not warned:
                    what = "out of file descriptors" if exc.errno in _FD_ERRORS else "accept failed"
                    _log.warning("autokernel-tui: control socket: %s (%s); retrying, with back-off",
                                 what, exc.strerror or exc)
                    warned = True
                backoff = min(1.0, backoff * 2 or 0.05)
                time.sleep(backoff)
                continue
            if warned:
                _log.warning("autokernel-tui: control socket: accepting connections again")
            backoff, warned = 0.0, False
            try:
                self._admit(conn)
            except Exception as exc:  # e.g. no thread could be started: that client, not the loop
                _log.warning("autokernel-tui: control socket: dropped a connection: %s", exc)
                try:
                    conn.close()
                except OSError:
                    pass

    def _admit(self, conn: socket.socket) -> None:
        with self._lock:
            full = len(self.clients) >= self.max_clients
        if full:
            self.refused += 1
            try:
                conn.settimeout(0.5)
                conn.sendall((json.dumps({"id": None, "ok": False, "error": (
                    f"the engine already serves {self.max_clients} clients (its limit); close one and retry")})
                    + "\n").encode())
            except OSError:
                pass
            conn.close()
            return
        with self._lock:  # its threads may end (and _forget it) at once: they wait for this lock
            self.clients.append(_Client(self, conn))

    def _broadcast(self, event: dict[str, Any]) -> None:
        with self._lock:
            clients = list(self.clients)
        for c in clients:
            if c.authenticated:
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
            self.token_path.unlink(missing_ok=True)
        for c in list(self.clients):
            c.finish()
