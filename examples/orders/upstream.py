#!/usr/bin/env python3
"""Seed 001's upstream: a tiny orders API that knows nothing about idempotency.

POST /orders creates an order every time it is called (that is the problem); GET /orders lists
them. Every POST is slow, as a busy payment step would be, so that a client with a short timeout
gives up and retries while it is still running.

Run:  python3 examples/orders/upstream.py [PORT]        (default 3000)
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

orders = []
lock = threading.Lock()


class Orders(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/orders":
            return self.reply(404, {"error": "not found"})
        with lock:
            self.reply(200, {"orders": list(orders)})

    def do_POST(self):
        # Read the body on every path: left unread, it would be taken for the next request on this
        # kept-alive connection.
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/orders":
            return self.reply(404, {"error": "not found"})
        request = json.loads(raw or b"{}")
        time.sleep(1.0)  # a slow order step: a client with a short timeout gives up and retries meanwhile
        with lock:
            order = {"order_id": len(orders) + 1, "item": request.get("item"), "qty": request.get("qty", 1)}
            orders.append(order)
        self.reply(201, order)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    try:
        server = ThreadingHTTPServer(("127.0.0.1", port), Orders)
    except OSError as error:
        raise SystemExit(f"cannot listen on 127.0.0.1:{port}: {error} (pass another port: upstream.py PORT)")
    print(f"orders upstream on http://127.0.0.1:{port}", flush=True)
    server.serve_forever()
