"""The control socket against hostile clients: bad requests (Infinity, deep nesting, wrong types,
bytes that are not UTF-8, endless lines) get an error reply and cost nothing else; more clients
than the limit are refused politely; running out of file descriptors never ends the accept
loop; and a real headless engine under a lowered RLIMIT_NOFILE still answers after 400 clients."""

import errno
import json
import logging
import resource
import socket
import subprocess
import time

import pytest

from autokernel_tui.engine import control
from autokernel_tui.engine.client import SocketClient
from autokernel_tui.engine.control import ControlServer
from autokernel_tui.errors import WorkspaceError
from autokernel_tui.ledger.events import read_events
from autokernel_tui.ledger.results import read_rows
from subproc import engine_env, run_args, wait_socket


class FakeEngine:
    def __init__(self):
        self.commands = []

    def subscribe(self, fn):
        self.fn = fn
        return lambda: None

    def command(self, cmd, **kw):
        self.commands.append((cmd, kw))
        if cmd == "snapshot":
            return {"ok": True, "snapshot": {"state": "running"}}
        return {"ok": True, "state": "running"}


def connect(path, timeout=5.0, auth=True):
    """A raw connection; with ``auth``, already past the token (its reply read)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(str(path))
    if auth:
        s.sendall(json.dumps({"id": 0, "cmd": "hello", "token": control.read_token(path)}).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        assert json.loads(data)["ok"] is True, data
    return s


def lines_from(sock, n, timeout=5.0):
    """The next n reply lines (or fewer if the server hangs up)."""
    sock.settimeout(timeout)
    data = b""
    while data.count(b"\n") < n:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return [json.loads(x) for x in data.split(b"\n") if x.strip()]


@pytest.fixture
def server(tmp_path):
    engine = FakeEngine()
    srv = ControlServer(engine, tmp_path / "c.sock").start()
    yield srv, engine
    srv.close()


BAD = [
    (b'{"id": 1, "cmd": "approve", "n": Infinity}', 1, "Infinity is not a number"),
    (b'{"id": 2, "cmd": "revert", "n": 1e400}', 2, "must be an experiment number"),
    (b'{"id": 3, "cmd": "approve", "n": NaN}', 3, "NaN is not a number"),
    (b'{"id": 4, "cmd": "approve", "n": true}', 4, "must be an experiment number"),
    (b'{"id": 5, "cmd": "revert", "n": "3"}', 5, "must be an experiment number"),
    (b'{"id": 6, "cmd": "revert"}', 6, "revert needs n"),
    (b'{"id": 7, "cmd": "pause", "extra": {"a": 1}}', 7, "pause takes no argument 'extra'"),
    (b'{"id": 8, "cmd": "rm -rf"}', 8, "unknown command"),
    (b'{"id": 9, "cmd": ["snapshot"]}', 9, "cmd must be a string"),
    (b'{"id": 10, "cmd": "set_policy", "policy": 5}', 10, "policy must be a string"),
    (b'{"id": [1], "cmd": "snapshot"}', None, "id must be"),
    (b"[" * 100000 + b"]" * 100000, None, "request too long (over 65536 bytes)"),
    (b"[" * 30000 + b"]" * 30000, None, "nested too deeply"),
    (b'{"id": 11, "cmd": "approve", "n": ' + b"[" * 5000 + b"]" * 5000 + b"}", None, "nested too deeply"),
    (b"[1, 2, 3]", None, "a JSON object, not a list"),
    (b"42", None, "a JSON object, not a int"),
    (b'{"id": 12, "cmd": "sn\xffap"}', None, "not UTF-8"),
    (b"{oops", None, "not JSON"),
]


def test_bad_requests_get_an_error_reply_and_the_connection_keeps_working(server):
    srv, engine = server
    sock = connect(srv.path)
    sock.sendall(b"\n".join(line for line, _, _ in BAD) + b"\n")
    replies = lines_from(sock, len(BAD))
    assert len(replies) == len(BAD)
    for (line, rid, expect), reply in zip(BAD, replies):
        assert reply["ok"] is False and reply["id"] == rid and expect in reply["error"], (line[:60], reply)
        assert reply["error"].startswith("bad request: ") and "\n" not in reply["error"]
    assert engine.commands == []  # nothing bad reached the engine
    sock.sendall(b'{"id": 99, "cmd": "approve", "n": 3}\n')
    assert lines_from(sock, 1) == [{"id": 99, "ok": True, "state": "running"}]
    assert engine.commands == [("approve", {"n": 3})]


def test_an_endless_line_is_refused_and_the_server_goes_on(server):
    srv, _ = server
    sock = connect(srv.path)
    sock.sendall(b'{"id": 1, "cmd": "' + b"x" * (control.MAX_REQUEST + 70000))
    reply = lines_from(sock, 1)
    assert reply and "request too long" in reply[0]["error"]  # answered before the line even ends
    sock.sendall(b'xxxx"}\n{"id": 2, "cmd": "snapshot"}\n')  # the rest of it is dropped; the next is served
    assert lines_from(sock, 1) == [{"id": 2, "ok": True, "snapshot": {"state": "running"}}]
    # A stream that never ends costs the server a bounded read, then the connection.
    try:
        for _ in range(control.MAX_SKIP // 65536 + 64):
            sock.sendall(b"y" * 65536)
    except OSError:
        pass
    rest = lines_from(sock, 1000)  # until the server hangs up (EOF or reset)
    assert len(rest) == 1 and "request too long" in rest[0]["error"]
    other = connect(srv.path)
    other.sendall(b'{"id": 1, "cmd": "snapshot"}\n')
    assert lines_from(other, 1)[0]["ok"] is True


def test_an_engine_error_is_a_reply_not_a_dead_reader(tmp_path):
    class Broken(FakeEngine):
        def command(self, cmd, **kw):
            raise OverflowError("cannot convert float infinity to integer")

    srv = ControlServer(Broken(), tmp_path / "c.sock").start()
    try:
        sock = connect(srv.path)
        sock.sendall(b'{"id": 1, "cmd": "pause"}\n{"id": 2, "cmd": "resume"}\n')
        replies = lines_from(sock, 2)
        assert [r["id"] for r in replies] == [1, 2] and "OverflowError" in replies[0]["error"]
    finally:
        srv.close()


def test_clients_beyond_the_limit_are_refused_politely(server, tmp_path):
    srv, _ = server
    srv.max_clients = 3
    held = [connect(srv.path) for _ in range(3)]
    for s in held:  # each is served
        s.sendall(b'{"id": 1, "cmd": "snapshot"}\n')
        assert lines_from(s, 1)[0]["ok"] is True
    extra = connect(srv.path, auth=False)
    (refusal,) = lines_from(extra, 1)
    assert refusal["ok"] is False and "already serves 3 clients" in refusal["error"]
    assert extra.recv(10) == b""
    # The client API says why, in one line, instead of "connection lost".
    ws = tmp_path / "ws"
    (ws / ".autokernel").mkdir(parents=True)
    (ws / ".autokernel" / "control.sock").symlink_to(srv.path)
    with pytest.raises(WorkspaceError, match="refused the connection: the engine already serves 3 clients"):
        SocketClient(ws).snapshot()
    for s in held:
        s.close()
    deadline = time.time() + 5
    while srv.clients and time.time() < deadline:
        time.sleep(0.02)
    client = SocketClient(ws)
    assert client.snapshot() == {"state": "running"}
    client.close()
    assert srv.refused == 2


def test_out_of_file_descriptors_the_accept_loop_backs_off_and_goes_on(tmp_path, monkeypatch, caplog):
    real_accept = socket.socket.accept
    failures = {"left": 5}

    def flaky_accept(self):
        if failures["left"]:
            failures["left"] -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return real_accept(self)

    monkeypatch.setattr(socket.socket, "accept", flaky_accept)
    caplog.set_level(logging.WARNING, logger="autokernel_tui")
    srv = ControlServer(FakeEngine(), tmp_path / "c.sock").start()
    try:
        sock = connect(srv.path)
        sock.sendall(b'{"id": 1, "cmd": "snapshot"}\n')
        assert lines_from(sock, 1)[0]["ok"] is True
        assert failures["left"] == 0
        warned = [r.getMessage() for r in caplog.records if "control socket" in r.getMessage()]
        assert len([w for w in warned if "out of file descriptors" in w]) == 1, warned  # once, not 5 times
    finally:
        srv.close()


def test_client_refuses_to_send_nan(server, tmp_path):
    srv, engine = server
    ws = tmp_path / "ws"
    (ws / ".autokernel").mkdir(parents=True)
    (ws / ".autokernel" / "control.sock").symlink_to(srv.path)
    client = SocketClient(ws)
    reply = client.send("approve", n=float("inf"))
    assert reply["ok"] is False and "bad request" in reply["error"]
    assert client.send("approve", n=2)["ok"] is True
    client.close()


def test_a_real_engine_under_a_low_fd_limit_survives_400_clients(workspace):
    """400 clients against a headless engine limited to 256 file descriptors: the surplus is
    refused, the engine keeps running experiments without an error, and answers afterwards."""
    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    env = engine_env(AUTOKERNEL_TEST_SCRIPT="90,95", AUTOKERNEL_TEST_AGENT_DELAY="0.05")
    proc = subprocess.Popen(run_args(workspace, "--policy", "auto", "--tag", "fd", "--max-experiments", "1000"),
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=low_limit)
    socks, refused, failed = [], 0, 0
    try:
        wait_socket(workspace, proc)
        path = workspace / ".autokernel" / "control.sock"
        deadline = time.time() + 30  # for all 400 (a Unix socket says EAGAIN while its backlog is full)
        for _ in range(400):
            while True:
                try:
                    socks.append(connect(path, timeout=2.0, auth=False))
                    break
                except (BlockingIOError, socket.timeout, ConnectionRefusedError):
                    if time.time() > deadline:
                        failed += 1
                        break
                    time.sleep(0.01)
        for s in socks:  # every accepted connection is either served or refused with a reason
            s.settimeout(0.05)
            try:
                data = s.recv(4096)
            except (socket.timeout, OSError):
                continue
            if b"already serves" in data:
                refused += 1
        assert failed == 0 and refused >= 400 - control.MAX_CLIENTS, (failed, refused)
        rows_during = len(read_rows(workspace / ".autokernel/runs/fd/results.tsv"))
        for s in socks:
            s.close()
        time.sleep(0.5)
        client = SocketClient(workspace)
        snap = client.snapshot()
        assert snap["state"] in ("running", "awaiting_approval") and snap["run"] == "fd"
        assert client.send("stop")["ok"] is True
        client.close()
        assert proc.wait(30) == 0
    finally:
        for s in socks:
            s.close()
        if proc.poll() is None:
            proc.kill()
    output = proc.stdout.read()
    rows = read_rows(workspace / ".autokernel/runs/fd/results.tsv")
    assert len(rows) > rows_during  # experiments went on while clients came and went, and after
    errors = [e["message"] for e in read_events(workspace / ".autokernel/runs/fd/events.jsonl") if e["type"] == "error"]
    assert errors == [], errors
    assert "Too many open files" not in output and "free space" not in output, output[-2000:]


def test_a_client_without_the_token_is_refused_and_hears_nothing(server):
    # Without bwrap a candidate runs as the same user, and Landlock does not mediate connecting to a
    # Unix socket: the token (a file it cannot read) is what keeps it from steering the engine.
    srv, engine = server
    engine.commands.clear()
    for line in (b'{"id": 1, "cmd": "set_policy", "policy": "auto"}\n',
                 b'{"id": 1, "cmd": "set_policy", "policy": "auto", "token": "guess"}\n'):
        sock = connect(srv.path, auth=False)
        sock.sendall(line)
        (reply,) = lines_from(sock, 1)
        assert reply["ok"] is False and "not authenticated" in reply["error"]
        assert sock.recv(10) == b""  # and hung up on
    assert engine.commands == []
    assert oct(control.token_path(srv.path).stat().st_mode & 0o777) == "0o600"


def test_a_workspace_too_deep_for_a_unix_socket_path_still_serves_and_attaches(tmp_path):
    # A socket path holds ~107 bytes: a deep workspace (a demo under a long XDG_DATA_HOME) could not
    # start its engine. Its socket lives in a private folder of the temp dir, found by engine and client alike.
    import os
    import shutil
    import stat

    from autokernel_tui.ledger import paths

    deep = tmp_path / ("d" * 60) / ("e" * 60) / "ws"
    sock = paths.socket_path(deep)
    assert len(str(sock)) < 100 and sock.parent.parent == paths.socket_home()
    assert paths.socket_path(deep) == sock and paths.socket_path(tmp_path / "other" / ("d" * 90)) != sock
    assert paths.socket_path(tmp_path / "ws") == (tmp_path / "ws").resolve() / ".autokernel" / "control.sock"
    try:
        paths.private_socket_dir(sock)
        for folder in (sock.parent, sock.parent.parent):
            assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        os.chmod(sock.parent, 0o755)  # a folder others can read is refused, not used
        with pytest.raises(Exception, match="not a private folder"):
            paths.private_socket_dir(sock)
    finally:
        shutil.rmtree(sock.parent, ignore_errors=True)
