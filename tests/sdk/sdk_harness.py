"""What the SDK tests run against: a Stripe-shaped upstream that counts what it executes, and a real
`idem serve` gateway in front of it (or in front of nothing: an upstream that is down). The
fixtures that start them are in conftest.py.

`IDEM_TEST_BIN` names the binary (default `<repo>/target/debug/idem`). Stripe's Node SDK is run
from `node_modules` beside this file (`npm ci`), its Python SDK from the environment
(`pip install -r requirements.txt`).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

# /v1/charges answers within its upstream_timeout (a duplicate meets 409 while it runs);
# /v1/customers has upstream_timeout = 1s (a slower call is 504, and goes on with its key held).
ROUTES = """
[[gateway.routes]]
path = "/v1/charges"
methods = ["POST"]
key = "required"
upstream_timeout = "10s"
lease = "30s"

[[gateway.routes]]
path = "/v1/customers"
methods = ["POST"]
key = "required"
upstream_timeout = "1s"
lease = "5s"
"""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # idem's kept-alive connections reset as a gateway stops: not a failure of the upstream.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeStripe:
    """`POST /v1/charges` and `POST /v1/customers` as Stripe answers them: 200 with a new object
    (`ch_1`, `cus_2`, …) after `metadata[delay_ms]` ms. Every execution is counted by its
    `Idempotency-Key`. `GET /__started?key=K` is 200 once an execution of K began (404 before),
    so that a test can send a duplicate while the first runs without guessing how long to wait."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.executions: Counter[str] = Counter()
        self.finished: Counter[str] = Counter()
        self.serial = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
                key = query.get("key", [""])[0]
                with outer.lock:
                    started = outer.executions[key] > 0
                self.reply(200 if started else 404, {"started": started})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                form = urllib.parse.parse_qs(self.rfile.read(length).decode())
                key = self.headers.get("idempotency-key") or ""
                resource = self.path.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
                prefix = {"charges": "ch", "customers": "cus"}.get(resource)
                if prefix is None:
                    self.reply(404, {"error": {"type": "invalid_request_error", "message": "no such route"}})
                    return
                with outer.lock:
                    outer.executions[key] += 1
                    outer.serial += 1
                    serial = outer.serial
                time.sleep(int(form.get("metadata[delay_ms]", ["0"])[0]) / 1000)
                obj: Dict[str, Any] = {"id": f"{prefix}_{serial}", "object": resource[:-1], "livemode": False}
                if "amount" in form:
                    obj.update(amount=int(form["amount"][0]), currency=form.get("currency", ["usd"])[0])
                self.reply(200, obj)
                with outer.lock:
                    outer.finished[key] += 1

            def reply(self, status: int, body: Dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count(self, key: str) -> int:
        with self.lock:
            return self.executions[key]

    def snapshot(self) -> Dict[str, int]:
        with self.lock:
            return dict(self.executions)

    def twice(self) -> List[str]:
        """Every key executed more than once."""
        with self.lock:
            return [key for key, n in self.executions.items() if n > 1]

    def wait_finished(self, key: str, timeout: float = 30) -> None:
        deadline = time.time() + timeout
        while True:
            with self.lock:
                if self.finished[key] >= 1:
                    return
            assert time.time() < deadline, f"{key} never finished upstream"
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.shutdown()


class Gateway:
    """One `idem serve` whose gateway forwards to `upstream`; `errors` is `[gateway] errors`
    (`None`: not set, problem+json)."""

    def __init__(self, upstream: str, errors: Optional[str]) -> None:
        self.errors = errors
        self.dir = Path(tempfile.mkdtemp(prefix="idem-sdk-"))
        self.api_port, self.port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        shape = f'errors = "{errors}"\n' if errors else ""
        config = f'[gateway]\nlisten = "127.0.0.1:{self.port}"\nupstream = "{upstream}"\n{shape}{ROUTES}'
        (self.dir / "idem.toml").write_text(config)
        binary = Path(os.environ.get("IDEM_TEST_BIN") or REPO / "target" / "debug" / "idem")
        if not binary.is_file():
            pytest.fail(f"the idem binary is missing at {binary}: run cargo build -p idem-server", pytrace=False)
        env = {k: v for k, v in os.environ.items() if not k.startswith("IDEM_")}
        self.log_path = self.dir / "idem.log"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [str(binary), "serve", "--config", str(self.dir / "idem.toml"),
             "--listen", f"127.0.0.1:{self.api_port}", "--data-dir", str(self.dir / "data")],
            stdout=self.log, stderr=subprocess.STDOUT, env=env,
        )
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.api_port}/healthz", timeout=1)
                socket.create_connection(("127.0.0.1", self.port), 1).close()
                return
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("idem did not start:\n" + self.log_path.read_text())
                time.sleep(0.05)

    def outcomes(self) -> Dict[str, int]:
        """`idem_gateway_requests_total` by outcome, over every route: what idem answered."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.api_port}/metrics", timeout=5).read().decode()
        counts: Counter[str] = Counter()
        for line in text.splitlines():
            if line.startswith("idem_gateway_requests_total{"):
                labels, value = line.rsplit(" ", 1)
                outcome = labels.split('outcome="', 1)[1].split('"', 1)[0]
                counts[outcome] += int(float(value))
        return {k: v for k, v in counts.items() if v}

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
