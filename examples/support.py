"""A tiny idem client for the examples: standard library only, retries with backoff.

Transient failures (connection refused or reset, 503 from a store that is briefly unavailable) are
retried with exponential backoff, as seed 002 asks of its store calls; anything else is returned to
the caller or raised.
"""

import json
import os
import time
import urllib.error
import urllib.request

BASE = os.environ.get("IDEM_URL", "http://127.0.0.1:7070").rstrip("/")
TOKEN = os.environ.get("IDEM_TOKEN")


def call(method, path, body=None, attempts=5):
    """Sends one request; returns (status, parsed JSON body or None)."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if TOKEN:
        headers["Authorization"] = f"Bearer {TOKEN}"
    delay = 0.1
    for attempt in range(1, attempts + 1):
        request = urllib.request.Request(BASE + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
                return response.status, (json.loads(raw) if raw else None)
        except urllib.error.HTTPError as error:
            raw = error.read()
            if error.code != 503 or attempt == attempts:
                return error.code, (json.loads(raw) if raw else None)
        except (ConnectionError, urllib.error.URLError):
            if attempt == attempts:
                raise
        time.sleep(delay)
        delay *= 2
    raise RuntimeError("unreachable")


def expect(condition, message):
    if not condition:
        raise SystemExit(f"FAILED: {message}")


def require_server(start="idem serve"):
    """Exits with a plain message when idem is not reachable at IDEM_URL; `start` is the command
    that starts idem the way the example needs it."""
    try:
        with urllib.request.urlopen(BASE + "/healthz", timeout=5) as response:
            if response.status == 200:
                return
    except (OSError, urllib.error.URLError):
        pass
    raise SystemExit(f"idem is not reachable at {BASE}: start it with `{start}` (or set IDEM_URL)")
