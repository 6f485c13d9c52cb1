#!/usr/bin/env python3
"""Seed 001's client: creates one order through the idem gateway, retrying with the same
Idempotency-Key until it gets an answer — after timeouts, while the first attempt is still
running (409), and a few more times for good measure. The upstream must end with one order.

Run (with upstream.py and `idem serve --config examples/orders/idem.toml` running):
    python3 examples/orders/client.py
It can run again against the same gateway and upstream: each run uses a new key and counts only the
orders created during the run.
Environment: GATEWAY_URL (default http://127.0.0.1:8080), UPSTREAM_URL (default http://127.0.0.1:3000),
USER_TOKEN (the user's bearer token, default demo-user-token: the gateway keeps each user's keys apart
by it, and refuses a keyed request that has none).
"""

import json
import os
import socket
import time
import urllib.error
import urllib.request
import uuid

GATEWAY = os.environ.get("GATEWAY_URL", "http://127.0.0.1:8080")
UPSTREAM = os.environ.get("UPSTREAM_URL", "http://127.0.0.1:3000")
TOKEN = os.environ.get("USER_TOKEN", "demo-user-token")


def create_order(key, body, timeout):
    request = urllib.request.Request(
        GATEWAY + "/orders",
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Idempotency-Key": f'"{key}"',
            "Authorization": f"Bearer {TOKEN}",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read()), response.headers.get("Idempotent-Replayed")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}"), None
    except (TimeoutError, socket.timeout, urllib.error.URLError):
        return None, None, None


def order_count():
    try:
        with urllib.request.urlopen(UPSTREAM + "/orders", timeout=5) as response:
            return len(json.loads(response.read())["orders"])
    except (OSError, urllib.error.URLError):
        raise SystemExit(f"the orders upstream is not reachable at {UPSTREAM}: start examples/orders/upstream.py")


def require_gateway():
    """Exits with a plain message when nothing answers at GATEWAY_URL."""
    try:
        with urllib.request.urlopen(GATEWAY + "/orders", timeout=5):
            return
    except urllib.error.HTTPError:
        return  # the gateway answered (whatever the upstream made of a GET)
    except (OSError, urllib.error.URLError):
        raise SystemExit(
            f"idem's gateway is not reachable at {GATEWAY}: start idem with "
            "`idem serve --config examples/orders/idem.toml` (or set GATEWAY_URL)"
        )


def main():
    before = order_count()
    require_gateway()
    key = uuid.uuid4()  # one key per order the user means to place
    body = {"item": "book", "qty": 1}
    delay, answers = 0.1, []
    for attempt in range(1, 30):
        status, order, replayed = create_order(key, body, timeout=0.3)
        if status is None:
            print(f"attempt {attempt}: timed out; retrying with the same key")
        elif status == 409:
            print(f"attempt {attempt}: 409, the first attempt is still running; retrying")
        else:
            print(f"attempt {attempt}: {status} {order} replayed={replayed}")
            answers.append(order)
            if len(answers) == 3:
                break
        time.sleep(delay)
        delay = min(delay * 2, 0.5)

    created = order_count() - before
    print(f"the upstream holds {created} new order(s)")
    if created != 1 or not answers or any(a != answers[0] for a in answers):
        raise SystemExit("FAILED: expected exactly one new order and the same answer every time")
    print("ok")


if __name__ == "__main__":
    main()
