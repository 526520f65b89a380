"""Headless Chromium for tests, driven over the Chrome DevTools Protocol (CDP).

Debian's ``chromium`` (``apt-get install chromium``) is started with
``--remote-debugging-port=0`` in a temporary profile; the port it chose is read from the
``DevToolsActivePort`` file it writes (polled: readiness, not a blind sleep). One page target
is attached (flat session), and the helper offers what UI tests need: set a cookie, open a
URL and wait for its document, evaluate JavaScript, wait for a condition, take a screenshot.

The browser runs in its own process group; :meth:`HeadlessChromium.stop` ends that group.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from barrierflow.errors import BarrierflowError

#: Names the Chromium binary goes by (Debian: chromium).
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


class BrowserError(BarrierflowError):
    """Chromium could not be started, or a DevTools command failed."""


def find_chromium() -> str | None:
    """Path of the Chromium binary (``$BARRIERFLOW_CHROMIUM`` first), or None."""
    configured = os.environ.get("BARRIERFLOW_CHROMIUM")
    if configured:
        return shutil.which(configured)
    return next((path for name in CHROMIUM_NAMES if (path := shutil.which(name))), None)


class HeadlessChromium:
    """Start with :meth:`start`, stop with :meth:`stop` (also a context manager)."""

    def __init__(self, binary: str | None = None, *, width: int = 1440, height: int = 1000) -> None:
        found = binary or find_chromium()
        if found is None:
            raise BrowserError("no Chromium binary on PATH; install it (Debian: apt-get install chromium)")
        self.binary = found
        self.width, self.height = width, height
        self.profile = Path(tempfile.mkdtemp(prefix="barrierflow-chromium-"))
        self.proc: subprocess.Popen[bytes] | None = None
        self._ws: Any = None
        self._session: str | None = None
        self._ids = itertools.count(1)

    # -- life cycle ---------------------------------------------------------------------

    def start(self, timeout: float = 60) -> HeadlessChromium:
        from websockets.sync.client import connect

        args = [self.binary, "--headless", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
                "--disable-dev-shm-usage", "--disable-extensions", "--remote-debugging-port=0",
                "--remote-allow-origins=*", f"--user-data-dir={self.profile}",
                f"--window-size={self.width},{self.height}", "about:blank"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
        with open(self.profile / "chromium.log", "wb") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        active = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not (active.exists() and len(active.read_text().splitlines()) >= 2):
            if self.proc.poll() is not None:
                raise BrowserError(f"chromium exited with {self.proc.returncode}: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise BrowserError(f"chromium did not open its DevTools port within {timeout:.0f}s: {self.log_tail()}")
            time.sleep(0.1)
        port, path = active.read_text().splitlines()[:2]
        self._ws = connect(f"ws://127.0.0.1:{port}{path}", max_size=None, open_timeout=timeout)
        target = self.command("Target.createTarget", {"url": "about:blank"}, browser=True)["targetId"]
        self._session = self.command("Target.attachToTarget", {"targetId": target, "flatten": True},
                                     browser=True)["sessionId"]
        self.command("Page.enable")
        self.command("Emulation.setDeviceMetricsOverride",
                     {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False})
        return self

    def stop(self) -> None:
        if self._ws is not None:
            self._ws.close()
            self._ws = None
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> HeadlessChromium:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, limit: int = 2000) -> str:
        try:
            return (self.profile / "chromium.log").read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    # -- DevTools -----------------------------------------------------------------------

    def command(self, method: str, params: dict[str, Any] | None = None, *, browser: bool = False,
                timeout: float = 60) -> dict[str, Any]:
        """Send one CDP command (to the page, or to the browser) and return its result."""
        if self._ws is None:
            raise BrowserError("the browser is not started")
        message: dict[str, Any] = {"id": next(self._ids), "method": method, "params": params or {}}
        if not browser:
            message["sessionId"] = self._session
        self._ws.send(json.dumps(message))
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(self._ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if reply.get("id") != message["id"]:
                continue  # an event, or a reply to nobody
            if "error" in reply:
                raise BrowserError(f"{method} failed: {reply['error']}")
            return dict(reply.get("result", {}))

    def set_cookie(self, name: str, value: str, url: str) -> None:
        """Set a cookie for ``url`` (e.g. a session cookie obtained from a login endpoint)."""
        self.command("Storage.setCookies", {"cookies": [{"name": name, "value": value, "url": url}]}, browser=True)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable values only)."""
        result = self.command("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r} raised: {result['exceptionDetails'].get('text')}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float, what: str) -> Any:
        """Poll ``expression`` until it is truthy; returns its value, or raises naming ``what``."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out after {timeout:.0f}s waiting for {what}; page: "
                                   f"{str(self.evaluate('document.documentElement.outerHTML'))[:2000]}")
            time.sleep(0.2)

    def open(self, url: str, timeout: float = 60) -> None:
        """Navigate to ``url`` and wait until its document (not a previous one) finished loading."""
        result = self.command("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise BrowserError(f"opening {url} failed: {result['errorText']}")
        self.wait_for(f"document.readyState === 'complete' && location.href.startsWith({json.dumps(url)})",
                      timeout, f"{url} to load")

    def html(self) -> str:
        return str(self.evaluate("document.documentElement.outerHTML"))

    def screenshot(self, path: Path) -> Path:
        """Save a PNG of the viewport to ``path``."""
        data = self.command("Page.captureScreenshot", {"format": "png"})["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path
