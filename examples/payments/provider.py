#!/usr/bin/env python3
"""A stand-in payment provider for the payments example (standard library only).

POST /charges with a JSON order ({"id", "amount"}) executes a charge, slowly, as card networks do
(--delay seconds). Like Stripe, it deduplicates by the request's `Idempotency-Key` header: a request
with a key it has seen is answered with the charge that key already made (200, and it waits for that
charge to finish if it is still running), not charged again; the same key with another body is
refused (422). A new charge is answered 201.

Its ledger, written to the --ledger JSON file (atomically, on every change) for whoever wants to
check it, holds every request it received and every charge it actually executed:

    {"requests": [{"at", "idempotency_key", "order_id", "amount", "outcome": "charged" | "replayed" | "refused"}],
     "charges":  [{"charge_id", "idempotency_key", "order_id", "amount", "status": "processing" | "succeeded"}]}

A charge is in the ledger, "processing", from the moment its request arrives: a worker killed
during the delay leaves a charge the provider executed but the worker never heard about.

Run:  python3 examples/payments/provider.py --ledger /tmp/ledger.json [--port 9100] [--delay 0.4]
It prints `provider on http://127.0.0.1:PORT` once it listens (--port 0: any free port).
"""

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock = threading.Lock()
ledger = {"requests": [], "charges": []}
by_key = {}  # idempotency key -> (the charge, its body, an Event set when it has finished)
LEDGER_PATH = ""
DELAY = 0.4


def save():
    """Writes the ledger (the caller holds the lock); a reader never sees half a file."""
    tmp = LEDGER_PATH + ".tmp"
    with open(tmp, "w") as f:
        json.dump(ledger, f, indent=1)
    os.replace(tmp, LEDGER_PATH)


class Provider(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def reply(self, status, body):
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the caller is gone (killed mid-charge): the charge stands, nobody hears of it

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        key = self.headers.get("Idempotency-Key")
        try:
            order = json.loads(raw)
            order_id, amount = order["id"], order["amount"]
        except (ValueError, KeyError, TypeError):
            return self.reply(400, {"error": 'a JSON body {"id", "amount"}'})
        if self.path != "/charges" or not key:
            return self.reply(400, {"error": "POST /charges with an Idempotency-Key header"})

        request = {"at": time.time(), "idempotency_key": key, "order_id": order_id, "amount": amount}
        with lock:
            ledger["requests"].append(request)
            seen = by_key.get(key)
            if seen is None:
                charge = {"charge_id": f"ch_{len(ledger['charges']) + 1}", "idempotency_key": key,
                          "order_id": order_id, "amount": amount, "status": "processing"}
                done = threading.Event()
                by_key[key] = (charge, raw, done)
                ledger["charges"].append(charge)
            request["outcome"] = "charged" if seen is None else ("replayed" if seen[1] == raw else "refused")
            save()

        if seen is not None:
            charge, body, done = seen
            if body != raw:
                return self.reply(422, {"error": "this Idempotency-Key was used with another request"})
            done.wait()
            return self.reply(200, charge)  # the charge this key made: not another one

        time.sleep(DELAY)  # the card network
        with lock:
            charge["status"] = "succeeded"
            save()
        done.set()
        self.reply(201, charge)

    def log_message(self, *args):
        pass


def main():
    global LEDGER_PATH, DELAY
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ledger", required=True, help="the JSON file the ledger is written to")
    parser.add_argument("--port", type=int, default=9100, help="0: any free port")
    parser.add_argument("--delay", type=float, default=0.4, help="seconds each new charge takes")
    args = parser.parse_args()
    LEDGER_PATH, DELAY = os.path.abspath(args.ledger), args.delay
    with lock:
        save()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Provider)
    server.daemon_threads = True
    print(f"provider on http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
