"""Headless Chromium driven over its DevTools protocol, with a stdlib WebSocket client.

Enough of RFC 6455 for one local DevTools connection (text frames, fragmentation, ping) and of
the protocol to open a page, evaluate script in it or in one of its frames, take screenshots,
and collect every console error, uncaught exception and browser log error the page produced.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def chromium_binary() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


class WebSocket:
    def __init__(self, url: str, timeout: float = 60.0):
        u = urllib.parse.urlsplit(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while not head.endswith(b"\r\n\r\n"):  # byte by byte: the first frame may follow at once
            head += self._exact(1)
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        if b" 101 " not in head.split(b"\r\n", 1)[0] or accept.encode() not in head:
            raise ConnectionError(f"websocket handshake refused: {head[:200]!r}")

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("websocket closed")
            buf += chunk
        return bytes(buf)

    def _frame(self, opcode: int, payload: bytes) -> None:
        n, mask = len(payload), os.urandom(4)
        size = (
            bytes([0x80 | n])
            if n < 126
            else bytes([0x80 | 126]) + n.to_bytes(2, "big")
            if n < 1 << 16
            else bytes([0x80 | 127]) + n.to_bytes(8, "big")
        )
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))  # client frames are always masked
        self.sock.sendall(bytes([0x80 | opcode]) + size + mask + masked)

    def send(self, text: str) -> None:
        self._frame(0x1, text.encode())

    def recv(self) -> str:
        message = bytearray()
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n >= 126:
                n = int.from_bytes(self._exact(2 if n == 126 else 8), "big")
            data = self._exact(n)
            opcode = b0 & 0x0F
            if opcode == 0x9:
                self._frame(0xA, data)
            elif opcode == 0x8:
                raise ConnectionError("websocket closed by the browser")
            elif opcode in (0x0, 0x1, 0x2):
                message += data
                if b0 & 0x80:
                    return message.decode()

    def close(self) -> None:
        self.sock.close()


class Browser:
    """One headless Chromium with one page target; `errors()` lists what the page reported."""

    def __init__(self, binary: str, profile: Path, width: int = 1500, height: int = 1000):
        profile.mkdir(parents=True, exist_ok=True)
        (profile / "DevToolsActivePort").unlink(missing_ok=True)  # a reused profile's would name a dead port
        self.log = profile / "chromium.stderr"
        with open(self.log, "w") as err:  # a file, not a pipe: a full pipe would stall the browser
            self.proc = subprocess.Popen(
                [
                    binary,
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--no-first-run",
                    "--no-default-browser-check",
                    f"--user-data-dir={profile}",
                    "--remote-debugging-port=0",
                    f"--window-size={width},{height}",
                    # data: iframes stay in the page's process, so their frames are reachable from this target
                    "--disable-features=IsolateOrigins,site-per-process",
                    "--disable-site-isolation-trials",
                    "about:blank",
                ],
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        self.events: list[dict] = []
        self._id = 0
        try:
            port = self._devtools_port(profile / "DevToolsActivePort", time.monotonic() + 60)
            pages = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30))
            self.ws = WebSocket(next(p for p in pages if p["type"] == "page")["webSocketDebuggerUrl"])
            for domain in ("Page", "Runtime", "Log"):
                self.call(f"{domain}.enable")
        except BaseException:
            self._stop()
            raise

    def _devtools_port(self, active_port: Path, deadline: float) -> int:
        """The port Chromium chose, from the file it writes into its profile once DevTools listens."""
        while time.monotonic() < deadline and self.proc.poll() is None:
            lines = active_port.read_text().splitlines() if active_port.is_file() else []
            if lines and lines[0].strip().isdigit():
                return int(lines[0])
            time.sleep(0.1)
        raise RuntimeError("chromium did not start its DevTools endpoint:\n" + self.log.read_text()[-2000:])

    def call(self, method: str, **params) -> dict:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]
            self.events.append(msg)

    def evaluate(self, expression: str, context_id: int | None = None):
        params = {"expression": expression, "returnByValue": True, "awaitPromise": True}
        if context_id is not None:
            params["contextId"] = context_id
        out = self.call("Runtime.evaluate", **params)
        if "exceptionDetails" in out:
            raise RuntimeError(
                f"{expression[:80]}: {out['exceptionDetails'].get('text')} "
                f"{out['exceptionDetails'].get('exception', {}).get('description', '')}"
            )
        return out["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0, context_id: int | None = None):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression, context_id)
            if value:
                return value
            time.sleep(0.2)
        raise TimeoutError(f"still false after {timeout:.0f} s: {expression}")

    def navigate(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete'")

    def frame_context(self, url_prefix: str, ready: str = "true", timeout: float = 30.0) -> int:
        """An execution context inside the child frame whose URL starts with `url_prefix`, once it
        has loaded and `ready` holds in it (so a frame being replaced is not mistaken for the new one)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            tree = self.call("Page.getFrameTree")["frameTree"]
            frame = next(
                (c["frame"] for c in tree.get("childFrames", []) if c["frame"]["url"].startswith(url_prefix)), None
            )
            if frame is not None:
                ctx = self.call("Page.createIsolatedWorld", frameId=frame["id"], worldName="check")[
                    "executionContextId"
                ]
                if self.evaluate(f"document.readyState === 'complete' && ({ready})", ctx):
                    return ctx
            time.sleep(0.2)
        raise TimeoutError(f"no loaded frame at {url_prefix}…")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def errors(self) -> list[str]:
        """Console errors and assertions, uncaught exceptions, and error entries of the browser log."""
        self.evaluate("0")  # drain events sent before this point
        out = []
        for ev in self.events:
            p = ev.get("params", {})
            if ev.get("method") == "Runtime.exceptionThrown":
                d = p["exceptionDetails"]
                out.append(f"exception: {d.get('text')} {d.get('exception', {}).get('description', '')}".strip())
            elif ev.get("method") == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(
                    "console."
                    + p["type"]
                    + ": "
                    + " ".join(str(a.get("value", a.get("description"))) for a in p["args"])
                )
            elif ev.get("method") == "Log.entryAdded" and p["entry"]["level"] == "error":
                out.append(f"log ({p['entry']['source']}): {p['entry']['text']} {p['entry'].get('url', '')}".strip())
        return out

    def close(self) -> None:
        self.ws.close()
        self._stop()

    def _stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
