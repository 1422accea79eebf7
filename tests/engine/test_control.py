"""A client attaches to a headless engine over the control socket, approves one candidate,
vetoes another, pauses and resumes, detaches and re-attaches, and sees it all in git and results.tsv."""

import json
import queue
import stat
import subprocess
import threading
import time

from autokernel_tui.engine.client import SocketClient, connect
from autokernel_tui.ledger.results import read_rows
from subproc import engine_env, start, wait_socket


def git(ws, *args):
    return subprocess.run(["git", "-C", str(ws), *args], capture_output=True, text=True, check=True).stdout


def next_event(q, kind, timeout=30.0, **match):
    end = time.time() + timeout
    while time.time() < end:
        try:
            ev = q.get(timeout=max(0.01, end - time.time()))
        except queue.Empty:
            break
        if ev["type"] == kind and all(ev.get(k) == v for k, v in match.items()):
            return ev
    raise AssertionError(f"no {kind} {match} event")


def test_attach_approve_veto_pause_resume(workspace):
    env = engine_env(AUTOKERNEL_TEST_SCRIPT="90,80,95,70", AUTOKERNEL_TEST_AGENT_DELAY="0.05")
    proc = start(workspace, "--policy", "manual", "--max-experiments", "4", "--tag", "live", env=env)
    try:
        wait_socket(workspace, proc)
        sock = workspace / ".autokernel" / "control.sock"
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        client = connect(workspace)
        assert isinstance(client, SocketClient)
        events = queue.Queue()
        client.subscribe(events.put)
        snap = client.snapshot()
        assert snap["run"] == "live" and snap["policy"] == "manual" and snap["tasks"][0]["name"] == "rmsnorm"

        pending = client.snapshot()["pending"] or next_event(events, "awaiting_approval", n=1)
        assert pending["n"] == 1 and "+# fake-latency-us: 90" in pending["diff"]
        assert client.send("approve", n=1)["ok"]
        next_event(events, "awaiting_approval", n=2)
        assert client.send("approve", n=1)["ok"] is False  # not the pending one
        assert client.send("veto", n=2)["ok"]
        next_event(events, "result", timeout=10)
        assert client.send("pause")["ok"]
        next_event(events, "state", state="paused")
        n_rows = len(read_rows(workspace / ".autokernel/runs/live/results.tsv"))
        time.sleep(0.5)
        assert len(read_rows(workspace / ".autokernel/runs/live/results.tsv")) == n_rows  # nothing runs
        client.close()  # detach ...

        client = SocketClient(workspace)  # ... and attach again
        events = queue.Queue()
        client.subscribe(events.put)
        assert client.snapshot()["state"] == "paused"
        status = subprocess.run(["autokernel-tui", "status", "-C", str(workspace), "--json"], capture_output=True,
                                text=True, env=env)
        assert json.loads(status.stdout)["state"] == "paused"
        assert client.send("resume")["ok"]
        next_event(events, "awaiting_approval", n=4)  # exp 3 is slower: discarded without a question
        assert client.send("approve", n=4)["ok"]
        next_event(events, "run_finished")
        client.close()
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    rows = read_rows(workspace / ".autokernel/runs/live/results.tsv")
    assert [r["status"] for r in rows] == ["keep", "vetoed", "discard", "keep"]
    assert git(workspace, "log", "--format=%s", "autokernel/live").splitlines()[:2] == [
        "exp 4: latency 70us", "exp 1: latency 90us"]
    assert git(workspace, "rev-parse", "refs/autokernel/live/exp-2").strip() == rows[1]["commit"]
    assert not (workspace / ".autokernel" / "control.sock").exists()


def test_the_last_events_reach_clients_when_the_server_closes(tmp_path):
    # The engine's final events (run_finished) are broadcast just before it shuts the channel:
    # closing must flush what is queued, not cut it off.
    import socket

    from autokernel_tui.engine.control import ControlServer

    class Engine:
        def subscribe(self, fn):
            self.fn = fn
            return lambda: None

        def command(self, cmd, **kw):
            return {"ok": True}

    engine = Engine()
    server = ControlServer(engine, tmp_path / "c.sock").start()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(str(tmp_path / "c.sock"))
    from autokernel_tui.engine.control import read_token
    conn.sendall(json.dumps({"id": 0, "cmd": "hello", "token": read_token(tmp_path / "c.sock")}).encode() + b"\n")
    end = time.time() + 5
    while not (server.clients and server.clients[0].authenticated) and time.time() < end:
        time.sleep(0.01)
    received = []

    def read():  # a client reading as it goes, as the app does
        data = b""
        while chunk := conn.recv(1 << 16):
            data += chunk
        received.extend(m["event"] for m in map(json.loads, data.decode().splitlines()) if "event" in m)

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(2000):
        engine.fn({"type": "result", "n": i})
    engine.fn({"type": "run_finished"})
    server.close()
    reader.join(10)
    assert len(received) == 2001 and received[-1] == {"type": "run_finished"}
