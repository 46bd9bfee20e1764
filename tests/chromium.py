"""Headless Chromium for the dashboard's tests, driven over the DevTools protocol (CDP).

    >>> with Chromium.start(tmp_path) as browser:
    ...     browser.open("http://127.0.0.1:8080/")
    ...     browser.text()                    # the page as a person reads it
    ...     png = browser.screenshot()        # the viewport, one pixel per CSS pixel

`chromium_binary()` finds Debian's `chromium`, installing it with apt-get when this runs as root and
it is missing; None (and why, in `missing_reason`) where it cannot be had. The test evaluates its
own expressions through CDP, which the page's Content-Security-Policy does not bind: the page itself
may still run no script but its own.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time

import requests

missing_reason = ""


def chromium_binary() -> str | None:
    """Debian's chromium, installed first if missing and this process may (root, apt-get present)."""
    global missing_reason
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        missing_reason = "chromium is not installed and this user cannot install it (apt-get install chromium, as root)"
        return None
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            missing_reason = f"chromium could not be installed: {' '.join(command)}: {done.stderr.strip()[-300:]}"
            return None
    return shutil.which("chromium")


class Chromium:
    """One headless Chromium process and one page of it, over CDP."""

    def __init__(self, process: subprocess.Popen, profile: str, socket):
        self.process, self.profile, self.socket = process, profile, socket
        self._ids = itertools.count(1)
        self.events: list[dict] = []

    @classmethod
    def start(cls, binary: str, width: int = 1280, height: int = 900) -> "Chromium":
        """Starts Chromium with a fresh profile and connects to its first page."""
        from websockets.sync.client import connect

        profile = tempfile.mkdtemp(prefix="survivor-chromium-")
        process = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                "--no-first-run",
                "--disable-extensions",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = os.path.join(profile, "DevToolsActivePort")
        deadline = time.monotonic() + 30
        while not os.path.exists(port_file) or not open(port_file).read().strip():
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError("chromium did not open its DevTools port within 30 s (or exited)")
            time.sleep(0.05)
        port = int(open(port_file).read().split()[0])
        page = next(
            t for t in requests.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json() if t["type"] == "page"
        )
        browser = cls(process, profile, connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=10))
        browser.call("Page.enable")
        browser.call("Runtime.enable")
        browser.call(
            "Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False
        )
        return browser

    def call(self, method: str, **params) -> dict:
        """One CDP command; its result (events that arrive meanwhile are kept in `events`)."""
        number = next(self._ids)
        self.socket.send(json.dumps({"id": number, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=30))
            if message.get("id") == number:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def open(self, url: str, timeout: float = 20) -> None:
        """Navigates to `url` and waits for its load event."""
        self.events.clear()
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not load in {timeout} s")
            self.events.append(json.loads(self.socket.recv(timeout=timeout)))

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (evaluated by the test, not the page)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def text(self) -> str:
        """The page's text as a person reads it."""
        return self.evaluate("document.body.innerText")

    def wait_for_text(self, needle: str, timeout: float) -> str:
        """The page's text once it holds `needle` (the page changing by itself); TimeoutError after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.text()
            if needle in text:
                return text
            if time.monotonic() > deadline:
                raise TimeoutError(f"{needle!r} did not appear in {timeout} s")
            time.sleep(0.2)

    def screenshot(self) -> bytes:
        """A PNG of the viewport."""
        return base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])

    def close(self) -> None:
        """Ends Chromium (this process's own child) and removes its profile."""
        try:
            self.socket.close()
        finally:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
