"""A headless Chromium driven over the DevTools protocol (no browser download: Debian's package)."""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import websocket

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


class Browser:
    """One Chromium process and one page; ``evaluate`` runs JavaScript in it."""

    def __init__(self, port: int) -> None:
        executable = shutil.which("chromium")
        assert executable, "chromium is not installed: .ci/run installs Debian's chromium package"
        self.profile = Path(tempfile.mkdtemp(prefix="calmon-chromium-"))
        self.process = subprocess.Popen(
            [
                executable,
                *FLAGS,
                f"--remote-debugging-port={port}",
                f"--user-data-dir={self.profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._ids = itertools.count(1)
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/json/list", timeout=2
                ) as reply:
                    pages = [p for p in json.loads(reply.read()) if p["type"] == "page"]
                if pages:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError("chromium did not start")
            time.sleep(0.2)
        self.socket = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=30)
        self.send("Page.enable")

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        message_id = next(self._ids)
        self.socket.send(json.dumps({"id": message_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == message_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def goto(self, url: str) -> None:
        self.send("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'")

    def evaluate(self, expression: str) -> Any:
        result = self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        return result.get("result", {}).get("value")

    def wait_for(self, condition: str, seconds: float = 20) -> None:
        deadline = time.monotonic() + seconds
        while not self.evaluate(f"Boolean({condition})"):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {condition}")
            time.sleep(0.1)

    def screenshot(self, path: Path) -> None:
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=1280,
            height=2000,
            deviceScaleFactor=1,
            mobile=False,
        )
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(data["data"]))

    def close(self) -> None:
        sock = getattr(self, "socket", None)
        if sock is not None:
            sock.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.profile, ignore_errors=True)
