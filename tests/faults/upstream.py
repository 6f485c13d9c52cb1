"""The gateway's upstream: an HTTP server that records every execution it sees and answers 201.

Each idem node's gateway points at its own base path (`http://127.0.0.1:PORT/n1`), so the path
says which node forwarded the request. Every execution is one line of JSON in the log, written
and flushed when the request arrives, before any work (an execution that happened is on disk
even if its answer is lost, or its node dies while it runs):

    {"n": 17, "t": 1712345678.123, "node": "n1", "method": "POST", "path": "/n1/orders",
     "key": "\"g-...\"", "fence": "12" or null, "attempt": "r001-g-5@n1/0" or null, "work": 7.3}

`attempt` is the load's `X-Faults-Attempt` header (which client attempt caused the execution,
so the checker knows when its lease can have begun, and can tell a 504'd call's execution from
its retries). `work` is how long this execution takes: the order's `"work"` field (the load
picks a seeded share of keys to be slow, 0.5–20 s, and the same key is as slow on every node and
retry), else a random moment up to `--max-delay`. Slow calls outlive the route's
`upstream_timeout` (a 504, then the answer stored in the background) and its lease (extended
while they run), so both paths run under the faults.

When the answer has been written (or the node hung up first), a second line says so:

    {"done": 17, "t": 1712345685.4, "answered": true}

The answer is `201 {"execution": 17, "key": ..., "node": "n1"}`.
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

FENCING_HEADER = "Idem-Fencing-Token"
ATTEMPT_HEADER = "X-Faults-Attempt"
LONGEST_WORK = 60.0  # a bound on what a request may ask for, whatever its body says


class Recorder:
    def __init__(self, path: str, max_delay: float) -> None:
        self.file = open(path, "a", buffering=1)
        self.lock = threading.Lock()
        self.n = 0
        self.max_delay = max_delay

    def record(self, entry: dict) -> int:
        """Numbers and writes one execution; on disk when this returns."""
        with self.lock:
            self.n += 1
            entry["n"] = self.n
            self._write(entry)
            return self.n

    def done(self, n: int, answered: bool) -> None:
        with self.lock:
            self._write({"done": n, "t": time.time(), "answered": answered})

    def _write(self, entry: dict) -> None:
        self.file.write(json.dumps(entry) + "\n")
        self.file.flush()


def work_of(body: bytes, max_delay: float) -> float:
    """Seconds of work this execution takes: what the order asks for, else a random moment."""
    try:
        asked = json.loads(body).get("work")
    except (ValueError, AttributeError):
        asked = None
    if isinstance(asked, (int, float)) and asked >= 0:
        return min(float(asked), LONGEST_WORK)
    return random.uniform(0, max_delay) if max_delay else 0.0


def handler(recorder: Recorder):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            self.answer(200, b'{"ok":true}')

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            node = self.path.strip("/").split("/")[0]
            key = self.headers.get("Idempotency-Key")
            work = work_of(body, recorder.max_delay)
            n = recorder.record(
                {
                    "t": time.time(),
                    "node": node,
                    "method": "POST",
                    "path": self.path,
                    "key": key,
                    "fence": self.headers.get(FENCING_HEADER),
                    "attempt": self.headers.get(ATTEMPT_HEADER),
                    "work": round(work, 3),
                }
            )
            time.sleep(work)
            answered = self.answer(201, json.dumps({"execution": n, "key": key, "node": node}).encode())
            recorder.done(n, answered)

        def answer(self, status: int, body: bytes) -> Optional[bool]:
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()
                return True
            except OSError:  # the node hung up (killed, or gave the call up)
                self.close_connection = True
                return False

    return Handler


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # slow calls hold their connections: room for bursts of new ones


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--max-delay", type=float, default=0.02,
                    help="seconds of random work per execution whose order does not say")
    args = ap.parse_args()
    recorder = Recorder(args.log, args.max_delay)
    server = Server(("127.0.0.1", args.port), handler(recorder))
    print(f"upstream listening on {args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
