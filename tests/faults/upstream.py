"""The gateway's upstream: an HTTP server that records every execution it sees and answers 201.

Each idem node's gateway points at its own base path (`http://127.0.0.1:PORT/n1`), so the path
says which node forwarded the request. Every request is one line of JSON in the log, written and
flushed before the answer is sent (an execution that happened is on disk even if the answer is
lost):

    {"n": 17, "t": 1712345678.123, "node": "n1", "method": "POST", "path": "/n1/orders",
     "key": "\"g-...\"", "fence": "12" or null}

The answer is `201 {"execution": 17, "key": ..., "node": "n1"}`.
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FENCING_HEADER = "Idem-Fencing-Token"


class Recorder:
    def __init__(self, path: str, max_delay: float) -> None:
        self.file = open(path, "a", buffering=1)
        self.lock = threading.Lock()
        self.n = 0
        self.max_delay = max_delay

    def record(self, entry: dict) -> int:
        with self.lock:
            self.n += 1
            entry["n"] = self.n
            self.file.write(json.dumps(entry) + "\n")
            self.file.flush()
            return self.n


def handler(recorder: Recorder):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            body = b'{"ok":true}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            node = self.path.strip("/").split("/")[0]
            key = self.headers.get("Idempotency-Key")
            if recorder.max_delay:
                time.sleep(random.uniform(0, recorder.max_delay))
            n = recorder.record(
                {
                    "t": time.time(),
                    "node": node,
                    "method": "POST",
                    "path": self.path,
                    "key": key,
                    "fence": self.headers.get(FENCING_HEADER),
                }
            )
            body = json.dumps({"execution": n, "key": key, "node": node}).encode()
            self.send_response(201)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--max-delay", type=float, default=0.02, help="seconds of random work per execution")
    args = ap.parse_args()
    recorder = Recorder(args.log, args.max_delay)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(recorder))
    server.daemon_threads = True
    print(f"upstream listening on {args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
