"""An HTTP proxy in front of a real idem, for tests of what a client does when the path to idem
fails: it forwards every request unless ``decide(entry)`` says otherwise, and logs each one."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional

import httpx


@dataclass
class Entry:
    """One request as the proxy saw it: ``at`` is when it arrived (``time.monotonic()``),
    ``status`` what the client was answered."""

    method: str
    path: str
    at: float
    status: int = 0


@dataclass
class Plan:
    """What to do with a request: answer it instead (``status``, ``headers``, ``body``: it never
    reaches idem), or forward it and hold the answer back ``delay`` seconds."""

    status: Optional[int] = None
    headers: Dict[str, str] = field(default_factory=dict)
    body: Any = None
    delay: float = 0.0


#: idem's answer while its store is away: 503 store-unavailable with Retry-After: 1.
STORE_UNAVAILABLE = Plan(
    status=503,
    headers={"Content-Type": "application/problem+json", "Retry-After": "1"},
    body={
        "type": "urn:idem:problem:store-unavailable",
        "title": "Store unavailable",
        "status": 503,
        "detail": "the store did not answer (test outage)",
    },
)


class Proxy:
    def __init__(self, target: str, decide: Callable[[Entry], Optional[Plan]] = lambda e: None) -> None:
        self.log: List[Entry] = []
        self._lock = threading.Lock()
        upstream = httpx.Client(base_url=target, timeout=30.0)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                entry = Entry(self.command, self.path, time.monotonic())
                with proxy._lock:
                    proxy.log.append(entry)
                plan = decide(entry) or Plan()
                if plan.status is not None:
                    out = b"" if plan.body is None else json.dumps(plan.body).encode()
                    self._answer(entry, plan.status, plan.headers, out)
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization", "accept")}
                got = upstream.request(self.command, self.path, content=body or None, headers=headers)
                if plan.delay:
                    time.sleep(plan.delay)
                kept = {k: v for k, v in got.headers.items() if k.lower() in ("content-type", "retry-after")}
                self._answer(entry, got.status_code, kept, got.content)

            def _answer(self, entry: Entry, status: int, headers: Dict[str, str], body: bytes) -> None:
                entry.status = status
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = _handle

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._upstream = upstream
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def entries(self, suffix: str) -> List[Entry]:
        with self._lock:
            return [e for e in self.log if e.path.endswith(suffix)]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._upstream.close()
