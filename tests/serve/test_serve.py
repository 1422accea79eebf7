"""`autokernel-tui serve`: the app in a browser through textual-serve, behind a random token.

The gate is tested over plain HTTP (fast); the whole thing in a real headless Chromium (slow,
skipped with the reason when no Chromium is installed: `apt-get install chromium`, which .ci/run
does): the page loads, the live screen of a headless run arrives, a screenshot is taken, and the
`a` key typed in the browser approves the candidate awaiting approval, as the engine records."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from autokernel_tui.tui.serve import describe, is_loopback

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "engine"))
from subproc import engine_env, start, wait_socket  # noqa: E402

from tests.serve.cdp import Browser, Page, find_browser  # noqa: E402

URL_RE = re.compile(r"(http://127\.0\.0\.1:\d+/[A-Za-z0-9_-]+/)")
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]")


@pytest.fixture
def workspace(tmp_path):
    from autokernel_tui.ledger.workspace import init_workspace

    return init_workspace(tmp_path / "ws", tasks=["rmsnorm"])


def _serve(ws: Path, env: dict | None = None) -> tuple[subprocess.Popen, str, list[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "autokernel_tui", "serve", str(ws), "--port", "0"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: list[str] = []
    url = None
    deadline = time.time() + 60
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        lines.append(line.rstrip("\n"))
        m = URL_RE.search(line)
        url = url or (m.group(1) if m else None)
        if url and "Ctrl+C" in line:  # the description is printed in one go after the URL
            return proc, url, lines
    proc.kill()
    raise AssertionError("serve printed no URL:\n" + "\n".join(lines))


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _status(url: str, headers: dict | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_loopback_and_the_warning_beyond_it(tmp_path):
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.4") and not is_loopback("gpu-box")
    ws = tmp_path
    assert not any("WARNING" in line for line in describe(ws, "127.0.0.1", "http://127.0.0.1:1/t/"))
    wide = "\n".join(describe(ws, "0.0.0.0", "http://0.0.0.0:1/t/"))
    assert "WARNING: bound to 0.0.0.0" in wide and "plain HTTP" in wide and "ssh -L" in wide


def test_only_the_token_opens_anything(workspace):
    proc, url, lines = _serve(workspace)
    try:
        root = url.rsplit("/", 2)[0]  # http://127.0.0.1:PORT
        token = url.rstrip("/").rsplit("/", 1)[1]
        assert len(token) >= 24
        assert _status(url) == 200
        page = urllib.request.urlopen(url, timeout=10).read().decode()
        assert f"/{token}/ws" in page and "googleapis" not in page and "https://" not in page
        assert _status(url + "static/js/textual.js") == 200
        for bad in (root + "/", root + "/ws", root + "/static/js/textual.js", root + "/x" + token + "/",
                    root + "/" + token[:-1] + "/", f"{root}/?token={token}"):
            assert _status(bad) == 403, bad
        # A WebSocket opened by another site's page is refused even with the token.
        ws_headers = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                      "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Origin": "http://evil.example"}
        assert _status(url + "ws", ws_headers) == 403
        assert "Anyone with this address can steer the run" in "\n".join(lines)
    finally:
        _stop(proc)


def test_refuses_a_folder_that_is_not_a_workspace(tmp_path):
    out = subprocess.run([sys.executable, "-m", "autokernel_tui", "serve", str(tmp_path)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and "is not a workspace" in out.stderr


HOOK = """
(() => {
  const Orig = window.WebSocket;
  const decoder = new TextDecoder();
  window.__akText = "";
  function Wrapped(url, protocols) {
    const ws = protocols === undefined ? new Orig(url) : new Orig(url, protocols);
    ws.addEventListener("message", (e) => {
      if (typeof e.data !== "string") {
        window.__akText += decoder.decode(new Uint8Array(e.data), {stream: true});
        if (window.__akText.length > 400000) window.__akText = window.__akText.slice(-200000);
      }
    });
    return ws;
  }
  Wrapped.prototype = Orig.prototype;
  Object.assign(Wrapped, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
  window.WebSocket = Wrapped;
})();
"""


@pytest.mark.slow
def test_approve_from_a_real_browser(workspace, tmp_path):
    browser_bin = find_browser()
    if browser_bin is None:
        pytest.skip("no Chromium installed (apt-get install chromium; .ci/run installs it)")
    from autokernel_tui.ledger.events import read_events

    # A headless run under manual approval: experiment 1 (90 us vs 100) awaits a human.
    env = engine_env(AUTOKERNEL_TEST_SCRIPT="90,95")
    engine = start(workspace, "--policy", "manual", "--tag", "web", env=env)
    events_path = workspace / ".autokernel" / "runs" / "web" / "events.jsonl"
    server = browser = None
    try:
        wait_socket(workspace, engine)
        deadline = time.time() + 60
        while not any(e["type"] == "awaiting_approval" for e in read_events(events_path)):
            assert time.time() < deadline, "the engine never asked for approval"
            time.sleep(0.1)
        serve_env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOKERNEL_")}
        serve_env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")  # a developer's keymap must not change the keys
        server, url, _ = _serve(workspace, env=serve_env)
        browser = Browser(browser_bin, tmp_path / "chromium-profile")
        shot = tmp_path / "serve-live.png"
        artifacts = os.environ.get("AUTOKERNEL_TEST_ARTIFACTS")

        async def drive() -> str:
            page = await Page.open(browser)
            try:
                await page.call("Page.addScriptToEvaluateOnNewDocument", {"source": HOOK})
                await page.call("Page.navigate", {"url": url})
                text = ""
                end = time.time() + 120
                while "AWAITING APPROVAL" not in text:  # the live screen of the attached app
                    assert time.time() < end, f"the app's screen never arrived: {text[-2000:]!r}"
                    await asyncio.sleep(0.5)
                    text = ANSI_RE.sub("", await page.evaluate("window.__akText || ''") or "")
                assert await page.evaluate("document.body.classList.contains('-first-byte')")
                await asyncio.sleep(1.0)  # let xterm paint what arrived
                png = await page.screenshot(shot)
                assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
                if artifacts:
                    Path(artifacts, shot.name).write_bytes(png)
                await page.evaluate("document.querySelector('.xterm-helper-textarea').focus()")
                end = time.time() + 60
                while True:
                    await page.press("a")
                    await asyncio.sleep(1.0)
                    if any(e["type"] == "decision" for e in read_events(events_path)):
                        break
                    assert time.time() < end, "the key typed in the browser never reached the engine"
                return text
            finally:
                await page.close()

        text = asyncio.run(drive())
        assert "exp 1" in text or "latency 90us" in text
        decision = next(e for e in read_events(events_path) if e["type"] == "decision")
        assert (decision["n"], decision["action"], decision["by"]) == (1, "keep", "human")
    finally:
        if browser is not None:
            browser.close()
        if server is not None:
            _stop(server)
        if engine.poll() is None:
            os.killpg(engine.pid, signal.SIGTERM)
            try:
                engine.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(engine.pid, signal.SIGKILL)
