#!/usr/bin/env python3
"""The payments worker: charges each order once, however often it is run, retried or restarted.

`charge(order)` is decorated with `@idem.idempotent("payments", key=order id)`: the first call for
an order begins an operation in idem, calls the provider and stores the result; any later call (a
redelivered queue message, a rerun, another worker) gets the stored result without charging.

If the worker dies mid-charge, idem never hears the result: the operation's lease ends and the next
run charges again. The provider may already have executed that charge, so the call to it carries the
operation's key as its own `Idempotency-Key`, and the provider answers the charge it made instead of
making another. That is the whole pattern: idem makes the work happen once; the key carried to the
provider covers the one window idem cannot see into (after the provider charged, before idem heard).

Run:  python3 examples/payments/worker.py ORDERS.json      (a JSON list of {"id", "amount"})
Environment: IDEM_URL (default http://127.0.0.1:7070), IDEM_TOKEN, PROVIDER_URL (default
http://127.0.0.1:9100). It prints one line per order: charged, or already charged.
"""

import json
import os
import sys
import urllib.request

try:
    from idem_client import Idem, IdemError
except ImportError:
    raise SystemExit("this example needs the Python client: pip install ./clients/python")

IDEM_URL = os.environ.get("IDEM_URL", "http://127.0.0.1:7070")
PROVIDER = os.environ.get("PROVIDER_URL", "http://127.0.0.1:9100")
idem = Idem(IDEM_URL, token=os.environ.get("IDEM_TOKEN"))

charged_here = {}  # order id -> how the provider answered, for the charges this process ran


# The lease is how long idem lets this worker hold an order before deciding it died. It is short
# (3 s) so that a restart after a kill -9 waits at most 3 s for the dead worker's orders. The
# trade-off: a lease must outlast the work, or a second worker could begin the same order while the
# first still runs. The client's heartbeat extends the lease every half lease (1.5 s) for as long
# as this process lives, so slow charges keep their key; what a short lease risks is a live worker
# that cannot reach idem for longer than the lease (a long GC pause, a partition), and then the
# provider's Idempotency-Key is what still keeps the charge single. Longer leases make that window
# rarer and make recovery after a crash slower.
#
# `request=` makes the order's content part of the key's identity: the same order id with another
# amount is refused (MismatchError) instead of being answered with the first charge.
@idem.idempotent("payments", key=lambda order: order["id"], request=lambda order: order, lease_seconds=3)
def charge(order):
    request = urllib.request.Request(
        f"{PROVIDER}/charges",
        data=json.dumps(order).encode(),
        method="POST",
        # The operation key, carried to the provider: a re-run of this charge is the same charge.
        headers={"Content-Type": "application/json", "Idempotency-Key": order["id"]},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        charged_here[order["id"]] = response.status  # 201: charged now; 200: the provider had it
        return json.loads(response.read())


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: worker.py ORDERS.json")
    with open(sys.argv[1]) as f:
        orders = json.load(f)
    for order in orders:
        result = charge(order)
        status = charged_here.get(order["id"])
        if status is None:
            line = f"already charged {result['charge_id']} (idem's stored result: the provider was not called)"
        elif status == 200:
            line = f"charged {result['charge_id']} (the provider had executed it before a crash and answered that charge)"
        else:
            line = f"charged {result['charge_id']}"
        print(f"{order['id']} ({order['amount']} cents): {line}", flush=True)

if __name__ == "__main__":
    try:
        main()
    except IdemError as e:
        if e.status in (401, 403):  # a token problem is the user's to fix, not a bug: no traceback
            raise SystemExit(f"idem at {IDEM_URL} answered {e.status}: {e.detail} (IDEM_TOKEN: a token that may write to payments)")
        raise
