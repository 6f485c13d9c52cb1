#!/usr/bin/env python3
"""The payments worker: charges each order once, however often it is run, retried or restarted.

`charge(order)` is decorated with `@idem.idempotent("payments", key=order id)`: the first call for
an order begins an operation, calls the provider, and stores the result in idem; any later call
(a redelivered queue message, a rerun, another worker) gets the stored result without charging.
If the worker dies mid-charge, its lease ends and the next run charges again, so the provider call
carries the same key as its own Idempotency-Key: a charge the provider already executed is answered,
not repeated. That is the whole pattern: idem makes the work happen once; the key carried to the
provider covers the one window idem cannot see into (after the provider charged, before idem heard).

The lease is short (3 s) so that a restart after a crash does not wait long; a lease must outlast
the work, and the client extends it (a heartbeat every half lease) for as long as the worker lives.

Run:  python3 examples/payments/worker.py RUN_ID COUNT
Environment: IDEM_URL (default http://127.0.0.1:7070), PROVIDER_URL (default http://127.0.0.1:9100).
"""

import json
import os
import sys
import urllib.request

try:
    from idem_client import Idem
except ImportError:
    raise SystemExit("this example needs the Python client: pip install ./clients/python")

IDEM_URL = os.environ.get("IDEM_URL", "http://127.0.0.1:7070")
PROVIDER = os.environ.get("PROVIDER_URL", "http://127.0.0.1:9100")
idem = Idem(IDEM_URL, token=os.environ.get("IDEM_TOKEN"))


@idem.idempotent("payments", key=lambda order: order["id"], lease_seconds=3)
def charge(order):
    print(f"charging {order['id']} ({order['amount']} cents)", flush=True)
    body = json.dumps(order).encode()
    request = urllib.request.Request(
        f"{PROVIDER}/charges", data=body, method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": order["id"]},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def main():
    run, count = sys.argv[1], int(sys.argv[2])
    for n in range(1, count + 1):
        order = {"id": f"order-{run}-{n}", "amount": 1000 + n}
        result = charge(order)
        print(f"{order['id']}: {result['charge_id']} {result['status']}", flush=True)


if __name__ == "__main__":
    main()
