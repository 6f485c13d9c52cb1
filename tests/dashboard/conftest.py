"""Fixtures for the dashboard's browser tests: a real `idem serve` (auth on: an admin token and a
read-only one) with two sources, a
handler that fails until told to succeed, and Debian's headless Chromium driven by Selenium
through Debian's chromedriver (nothing is downloaded).

`IDEM_TEST_BIN` names the binary (default `<repo>/target/debug/idem`); `CHROMIUM` and
`CHROMEDRIVER` override `/usr/bin/chromium` and `/usr/bin/chromedriver`.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

REPO = Path(__file__).resolve().parents[2]
TOKEN = "dash-token-4c1f9e27a6b8"
# A read-only token (docs/security.md): sees every page, gets no action.
VIEWER_TOKEN = "dash-viewer-7e21b0c94d3f"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Handler:
    """The user's event handler: answers 500 until `succeed` is set, then 200; records every
    `webhook-id` it is sent."""

    def __init__(self) -> None:
        self.succeed = False
        self.ids: List[str] = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                outer.ids.append(self.headers.get("webhook-id") or "")
                code = 200 if outer.succeed else 500
                self.send_response(code)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok" if code == 200 else b"no")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()


class Idem:
    """One `idem serve` with auth on."""

    def __init__(self, handler_url: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="idem-ui-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = f"""
[auth]
tokens = ["{TOKEN}"]

[[auth.token]]
name = "dash-viewer"
token = "{VIEWER_TOKEN}"
can = "read"

[[sources]]
name = "partner"
handler_url = "{handler_url}"
event_id = "/event_id"
max_attempts = 1
signing_secret = "{SECRET}"

[[sources]]
name = "bulk"
handler_url = "http://127.0.0.1:9/refused"
event_id = "/event_id"
max_attempts = 1
concurrency = 64
signing_secret = "{SECRET}"
"""
        (self.dir / "idem.toml").write_text(config)
        binary = Path(os.environ.get("IDEM_TEST_BIN") or REPO / "target" / "debug" / "idem")
        if not binary.is_file():
            pytest.fail(f"the idem binary is missing at {binary}: run cargo build -p idem-server", pytrace=False)
        env = {k: v for k, v in os.environ.items() if not k.startswith("IDEM_")}
        self.log_path = self.dir / "idem.log"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [str(binary), "serve", "--config", str(self.dir / "idem.toml"), "--listen", f"127.0.0.1:{self.port}",
             "--data-dir", str(self.dir / "data")],
            stdout=self.log, stderr=subprocess.STDOUT, env=env,
        )
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(self.url + "/healthz", timeout=1)
                return
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("idem did not start:\n" + self.log_path.read_text())
                time.sleep(0.05)

    def api(self, method: str, path: str, body: Optional[Dict[str, Any]] = None) -> Tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("authorization", f"Bearer {TOKEN}")
        if data is not None:
            req.add_header("content-type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                raw = r.read()
                return r.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def send_event(self, source: str, event_id: str, **fields: Any) -> str:
        status, body = self.api("POST", f"/v1/sources/{source}/events", {"event_id": event_id, **fields})
        assert status == 202, body
        return str(body["receipt_id"])

    def wait_for(self, query: str, count: int, timeout: float = 30) -> List[Dict[str, Any]]:
        """Receipts matching `query`, once there are `count` of them."""
        deadline = time.time() + timeout
        while True:
            _, page = self.api("GET", f"/v1/receipts?limit=1000&{query}")
            if len(page["receipts"]) == count:
                return list(page["receipts"])
            assert time.time() < deadline, f"{query}: {len(page['receipts'])} receipts, waiting for {count}"
            time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def handler() -> Iterator[Handler]:
    h = Handler()
    yield h
    h.stop()


@pytest.fixture
def idem(handler: Handler) -> Iterator[Idem]:
    server = Idem(handler.url)
    yield server
    log = server.log_path.read_text(errors="replace")
    assert TOKEN not in log and VIEWER_TOKEN not in log, "a token must never appear in idem's log"
    server.stop()


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    chromium = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    chromedriver = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
    for path in (chromium, chromedriver):
        if not Path(path).is_file():
            pytest.fail(f"{path} is missing: install Debian's chromium and chromium-driver (.ci/run does)", pytrace=False)
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,800"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=chromedriver), options=options)
    driver.set_window_size(1280, 800)
    yield driver
    driver.quit()
