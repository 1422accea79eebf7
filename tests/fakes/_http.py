"""A tiny scripted HTTP server on 127.0.0.1 (random port), shared by the fake API servers.

Tests queue responses; each POST takes the next one and is recorded (path,
headers, JSON body) so tests can assert on what the client sent.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""  # a complete body (JSON errors)
    chunks: list[bytes] = field(default_factory=list)  # streamed, flushed one by one (SSE)


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any


class ScriptedServer:
    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s  # seconds every reply waits before it starts (a model's time to answer)
        self.replies: list[Reply] = []
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                try:
                    body = json.loads(raw or b"null")
                except json.JSONDecodeError:
                    body = raw.decode("utf-8", "replace")
                with server._lock:
                    server.requests.append(Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                    reply = server.replies.pop(0) if server.replies else server.exhausted()
                if server.delay_s:
                    time.sleep(server.delay_s)
                self.send_response(reply.status)
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                if reply.chunks:
                    self.send_header("Connection", "close")
                    self.end_headers()
                    for chunk in reply.chunks:
                        self.wfile.write(chunk)
                        self.wfile.flush()
                    self.close_connection = True
                else:
                    self.send_header("Content-Length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)

    def exhausted(self) -> Reply:
        """The reply when the script ran out: a server error that says so."""
        return Reply(500, {"Content-Type": "application/json"}, b'{"error": {"message": "fake server: script exhausted"}}')

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def queue(self, *replies: Reply) -> "ScriptedServer":
        with self._lock:
            self.replies.extend(replies)
        return self

    def start(self) -> "ScriptedServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def json_reply(status: int, payload: dict, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(payload).encode())
