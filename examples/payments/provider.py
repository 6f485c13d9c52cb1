#!/usr/bin/env python3
"""A stand-in payment provider for the payments example: POST /charges executes a charge, slowly
(as card networks are), and, like Stripe, deduplicates by the request's `Idempotency-Key`: a second
request with a key it has seen answers the first charge instead of charging again. GET /ledger
says what it received and what it executed. The ledger is kept in memory.

Run:  python3 examples/payments/provider.py PORT [DELAY_SECONDS]
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock = threading.Lock()
ledger = {"requests": 0, "charges": {}}  # charges: idempotency key -> the charge
DELAY = 0.0


class Provider(BaseHTTPRequestHandler):
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
        with lock:
            self.reply(200, {"requests": ledger["requests"], "charges": ledger["charges"]})

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        key = self.headers.get("Idempotency-Key")
        if self.path != "/charges" or not key:
            return self.reply(400, {"error": "POST /charges with an Idempotency-Key"})
        order = json.loads(raw or b"{}")
        with lock:
            ledger["requests"] += 1
            if key in ledger["charges"]:
                return self.reply(200, ledger["charges"][key])  # seen: the first charge, not another
            charge = {"charge_id": f"ch_{len(ledger['charges']) + 1}", "order_id": order["id"], "amount": order["amount"], "status": "pending"}
            ledger["charges"][key] = charge
        time.sleep(DELAY)  # the card network
        with lock:
            charge["status"] = "succeeded"
        self.reply(201, charge)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    port = int(sys.argv[1])
    DELAY = float(sys.argv[2]) if len(sys.argv) > 2 else 0.3
    server = ThreadingHTTPServer(("127.0.0.1", port), Provider)
    print(f"provider on http://127.0.0.1:{port}", flush=True)
    server.serve_forever()
