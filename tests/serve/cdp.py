"""A headless Chromium driven over the DevTools protocol (CDP), with aiohttp (textual-serve's own
dependency): no Selenium, no Node. Enough for these tests: open a page, run JavaScript, type a key,
take a screenshot.

The flags are the ones known to work on these machines (no sandbox as root, no GPU, no background
network: the machine has no network beyond loopback)."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import aiohttp

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--remote-debugging-port=0", "--window-size=1280,800")


def find_browser() -> str | None:
    explicit = os.environ.get("AUTOKERNEL_TEST_CHROMIUM")
    if explicit:
        return explicit
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    def __init__(self, binary: str, profile_dir: Path):
        self.proc = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={profile_dir}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        deadline = time.time() + 60
        self.ws_url = None
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                break
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                self.ws_url = m.group(1)
                break
        if self.ws_url is None:
            self.close()
            raise RuntimeError("Chromium did not start its DevTools endpoint")
        self._ids = itertools.count(1)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class Page:
    """One tab, attached with a flat session."""

    def __init__(self, session: aiohttp.ClientSession, ws, session_id: str, ids):
        self._http, self._ws, self.session_id, self._ids = session, ws, session_id, ids

    @classmethod
    async def open(cls, browser: Browser) -> "Page":
        http = aiohttp.ClientSession()
        ws = await http.ws_connect(browser.ws_url, max_msg_size=0)
        ids = browser._ids
        target = await _call(ws, ids, "Target.createTarget", {"url": "about:blank"})
        attached = await _call(ws, ids, "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
        page = cls(http, ws, attached["sessionId"], ids)
        await page.call("Page.enable")
        await page.call("Runtime.enable")
        return page

    async def call(self, method: str, params: dict | None = None) -> dict:
        return await _call(self._ws, self._ids, method, params or {}, self.session_id)

    async def evaluate(self, expression: str):
        out = await self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return out.get("result", {}).get("value")

    async def screenshot(self, path: Path) -> bytes:
        data = base64.b64decode((await self.call("Page.captureScreenshot", {"format": "png"}))["data"])
        path.write_bytes(data)
        return data

    async def press(self, key: str) -> None:
        code = f"Key{key.upper()}" if key.isalpha() else key
        base = {"key": key, "code": code, "windowsVirtualKeyCode": ord(key.upper())}
        await self.call("Input.dispatchKeyEvent", {"type": "keyDown", "text": key, **base})
        await self.call("Input.dispatchKeyEvent", {"type": "keyUp", **base})

    async def close(self) -> None:
        await self._ws.close()
        await self._http.close()


async def _call(ws, ids, method: str, params: dict, session_id: str | None = None) -> dict:
    msg_id = next(ids)
    msg = {"id": msg_id, "method": method, "params": params}
    if session_id:
        msg["sessionId"] = session_id
    await ws.send_str(json.dumps(msg))
    while True:
        reply = await asyncio.wait_for(ws.receive(), 60)
        if reply.type != aiohttp.WSMsgType.TEXT:
            raise RuntimeError(f"DevTools connection closed ({reply.type})")
        data = json.loads(reply.data)
        if data.get("id") == msg_id:
            if "error" in data:
                raise RuntimeError(f"{method}: {data['error']}")
            return data.get("result", {})
