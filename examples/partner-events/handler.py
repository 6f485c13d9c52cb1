#!/usr/bin/env python3
"""Seed 003's handler: receives events from idem and processes each once.

Every delivery is verified with the `standardwebhooks` package (pip install standardwebhooks), an
implementation independent of idem. Events are deduplicated by `webhook-id`, as idem delivers at
least once. The handler fails on purpose: an event's first attempt fails when its number is a
multiple of 4, and "poison" events (numbers that are multiples of 50) fail every time until
`POST /heal`. `POST /results` receives idem's signed result webhooks. `GET /stats` reports.

Run:  python3 examples/partner-events/handler.py PORT SECRET
      (with examples/partner-events/idem.toml: PORT 9000, SECRET that file's signing_secret)
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

try:
    from standardwebhooks.webhooks import Webhook, WebhookVerificationError
except ImportError:
    raise SystemExit("this handler needs the Python package standardwebhooks: pip install standardwebhooks")

lock = threading.Lock()
state = {"processed": {}, "attempts": {}, "duplicates": 0, "bad_signatures": 0, "results": {}, "healed": False}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def reply(self, status, body=None):
        if status == 204:
            # No body, and no Content-Length: HTTP forbids a body on 204, and bytes sent after
            # it would be read as the next answer on this kept-alive connection.
            self.send_response(204)
            self.end_headers()
            return
        data = json.dumps(body or {}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        with lock:
            self.reply(200, {
                "processed": len(state["processed"]),
                "processed_ids": sorted(state["processed"].values()),
                "duplicates": state["duplicates"],
                "bad_signatures": state["bad_signatures"],
                "results": state["results"],
            })

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/heal":
            with lock:
                state["healed"] = True
            return self.reply(200)
        if self.path == "/reset":  # a new run of partner.py starts from nothing
            with lock:
                state.update({"processed": {}, "attempts": {}, "duplicates": 0, "bad_signatures": 0, "results": {}, "healed": False})
            return self.reply(200)
        try:
            WEBHOOK.verify(body, dict(self.headers.items()))
        except WebhookVerificationError:
            with lock:
                state["bad_signatures"] += 1
            return self.reply(401, {"error": "bad signature"})
        webhook_id = self.headers["webhook-id"]
        if self.path == "/results":
            result = json.loads(body)
            with lock:
                state["results"][result["receipt_id"]] = result["type"]
            return self.reply(204)
        event = json.loads(body)
        number = int(event["external_event_id"].rsplit("-", 1)[1])
        attempt = int(self.headers.get("idem-attempt", "1"))
        with lock:
            if webhook_id in state["processed"]:
                state["duplicates"] += 1
                return self.reply(200, {"duplicate": True})
            poison = number % 50 == 0 and not state["healed"]
            if poison or (number % 4 == 0 and attempt == 1):
                return self.reply(503, {"error": "try again"})
            state["processed"][webhook_id] = event["external_event_id"]
        self.reply(200, {"processed": True})

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: handler.py PORT SECRET   (the source's signing_secret in examples/partner-events/idem.toml)")
    port, secret = int(sys.argv[1]), sys.argv[2]
    WEBHOOK = Webhook(secret)
    ThreadingHTTPServer.request_queue_size = 256  # idem delivers many at once; the default backlog is 5
    try:
        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    except OSError as error:
        raise SystemExit(f"cannot listen on 127.0.0.1:{port}: {error}")
    print(f"handler on http://127.0.0.1:{port}", flush=True)
    server.serve_forever()
