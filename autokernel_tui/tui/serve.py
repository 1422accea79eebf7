"""The app in a browser: ``textual-serve`` behind a random token.

Every browser session runs ``autokernel-tui tui WS`` in a process of its own (the same app as in
a terminal: it attaches to a live engine, else starts or resumes the run in its process), its
screen carried over a WebSocket to xterm.js in the page.

What is served lives under ``/<token>/`` only: the page, its WebSocket, the static files and
downloads. Any other path is refused (403) before a process is started, and so is a WebSocket
whose ``Origin`` is not the page's own (another site's page that guessed nothing still cannot
open one). The page loads nothing from the network (textual-serve's own page asks a font service
for its font; this one uses the font textual-serve ships). Bound to 127.0.0.1 by default: reach it
from another machine through ``ssh -L``; binding beyond loopback prints a warning, as the
connection is plain HTTP and the token crosses the network in the clear.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import secrets
import shlex
import signal
import sys
from html import escape
from pathlib import Path
from typing import Callable

from aiohttp import web
from textual_serve.server import Server

DEFAULT_PORT = 8765


def new_token() -> str:
    return secrets.token_urlsafe(24)


def is_loopback(host: str) -> bool:
    if host.lower() in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def app_command(workspace: Path, extra: list[str] | None = None) -> str:
    """The shell command each browser session runs: this Python, this package, the same app. In a
    session of its own (``setsid`` where there is one), so the terminal's Ctrl+C reaches only the
    server, which then quits each session's app in order (textual-serve's quit message)."""
    import shutil

    argv = [sys.executable, "-m", "autokernel_tui", "tui", str(workspace), *(extra or [])]
    setsid = shutil.which("setsid")
    return ("exec " + (f"{shlex.quote(setsid)} " if setsid else "")) + " ".join(shlex.quote(a) for a in argv)


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="referrer" content="no-referrer">
<title>{title}</title>
<link rel="stylesheet" href="{static}css/xterm.css">
<style>
@font-face {{font-family: "Roboto Mono"; src: url("{static}fonts/RobotoMono-VariableFont_wght.ttf");}}
html, body {{margin: 0; padding: 0; height: 100%; background: #10161c;}}
#terminal {{position: absolute; inset: 0;}}
#waiting, #ended {{position: absolute; inset: 0; display: flex; align-items: center; justify-content: center;
  font: 15px "Roboto Mono", monospace; color: #d8dee4; background: #10161c; z-index: 5;}}
#ended {{display: none;}}
body.-first-byte #waiting {{display: none;}}
body.-closed #ended {{display: flex;}}
#ended a {{color: #ffaf00; margin-left: 1em;}}
</style>
<script src="{static}js/textual.js"></script>
</head><body>
<div id="waiting">{title}: starting the app&hellip;</div>
<div id="ended">The app's session ended.<a href="">Open it again</a></div>
<div id="terminal" class="textual-terminal" data-session-websocket-url="{websocket}" data-font-size="{font_size}"></div>
</body></html>
"""


class TokenServer(Server):
    """textual-serve's server with every route under ``/<token>/`` and our own page."""

    def __init__(self, command: str, host: str = "127.0.0.1", port: int = DEFAULT_PORT, token: str | None = None,
                 title: str = "autokernel-tui", on_ready: Callable[[str], None] | None = None):
        super().__init__(command, host=host, port=port, title=title)
        self.token = token or new_token()
        self.prefix = f"/{self.token}"
        self.on_ready = on_ready
        self.bound_port: int | None = None
        self._stop: asyncio.Event | None = None

    # --- the gate -----------------------------------------------------------------------------------
    def _allowed(self, request: web.Request) -> bool:
        first = request.path.split("/", 2)[1] if request.path.startswith("/") else ""
        return hmac.compare_digest(first.encode(), self.token.encode())

    @web.middleware
    async def _guard(self, request: web.Request, handler):
        if not self._allowed(request):
            return web.Response(status=403, text="autokernel-tui serve: this address needs the token that the "
                                                 "server printed when it started (http://HOST:PORT/TOKEN/)\n")
        return await handler(request)

    async def _make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard])
        p = self.prefix
        app.add_routes([
            web.get(f"{p}/", self.handle_index, name="index"),
            web.get(f"{p}/ws", self.handle_websocket, name="websocket"),
            web.get(f"{p}/download/{{key}}", self.handle_download, name="download"),
            web.static(f"{p}/static", self.statics_path, name="static"),
        ])
        return app

    # --- the page and its socket ----------------------------------------------------------------------
    async def handle_index(self, request: web.Request) -> web.Response:  # type: ignore[override]
        try:
            font_size = max(6, min(48, int(request.query.get("fontsize", "15"))))
        except ValueError:
            font_size = 15
        ws_scheme = "wss" if request.scheme == "https" else "ws"
        page = PAGE.format(title=escape(self.title), static=escape(f"{self.prefix}/static/"),
                           websocket=escape(f"{ws_scheme}://{request.host}{self.prefix}/ws"), font_size=font_size)
        return web.Response(text=page, content_type="text/html",
                            headers={"Cache-Control": "no-store", "X-Frame-Options": "DENY",
                                     "Referrer-Policy": "no-referrer"})

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        origin = request.headers.get("Origin")
        if origin is not None and origin not in (f"http://{request.host}", f"https://{request.host}"):
            raise web.HTTPForbidden(text="autokernel-tui serve: a WebSocket from another site's page\n")
        return await super().handle_websocket(request)

    # --- running --------------------------------------------------------------------------------------
    def url(self, host: str | None = None) -> str:
        host = host or self.host
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.bound_port or self.port}{self.prefix}/"

    async def run_async(self) -> None:
        app = await self._make_app()
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        server = site._server  # aiohttp keeps the listening sockets there; port 0 asks the system for one
        sockets = getattr(server, "sockets", None) or []
        self.bound_port = sockets[0].getsockname()[1] if sockets else self.port
        self._stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self._stop.set)
            except (NotImplementedError, RuntimeError):
                pass
        if self.on_ready:
            self.on_ready(self.url())
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()

    def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()

    def run(self) -> None:
        asyncio.run(self.run_async())


def describe(workspace: Path, host: str, url: str) -> list[str]:
    """What the command prints: the URL (with its token), who can use it, and what a session is."""
    from autokernel_tui.tui import workspace_files

    lines = [f"autokernel-tui serve: the app on {workspace}, in a browser at", "", f"    {url}", ""]
    lines.append("Anyone with this address can steer the run (approve, veto, stop). Ctrl+C stops the server.")
    if not is_loopback(host):
        lines += ["", f"WARNING: bound to {host}, beyond this machine's loopback: anyone who can reach this port "
                      "and has the address can steer the run, and the connection is plain HTTP, so the token "
                      "crosses the network unencrypted. Prefer the default (127.0.0.1) and an SSH tunnel: "
                      "ssh -L 8765:127.0.0.1:8765 THIS-HOST"]
        if host in ("0.0.0.0", "::"):
            lines.append(f"(replace {host} in the address with this machine's name or address)")
    if workspace_files.engine_is_live(workspace):
        lines.append("A live engine runs here: each browser session attaches to it; closing the tab detaches.")
    else:
        lines.append("No engine runs here now: a browser session starts or resumes the run in its own process, "
                     "and closing the tab stops it after the current experiment. For a run that outlives the "
                     f"tab: autokernel-tui run --headless --detach -C {shlex.quote(str(workspace))}")
    return lines

