#!/usr/bin/env python3
"""Seed 001's payments, as a worker does them with idem's Operations API: each order charged once,
even when the worker is killed (SIGKILL) in the middle of a charge and started again.

It starts a stand-in payment provider (provider.py), then runs the worker (worker.py) three times
over the same orders:

1. killed with SIGKILL while the provider is executing the third charge (idem never hears of it);
2. run again: the first two orders are answered by idem without calling the provider; the third
   waits for the dead worker's lease to end (3 s), is charged again under the same Idempotency-Key
   and answered by the provider with the charge it had made; the rest are charged;
3. run a third time: every order is already charged, and the provider receives nothing.

Then it checks the provider's ledger: every order charged exactly once.

Run:  idem serve   (in another terminal), then  python3 examples/payments/demo.py
Needs: the Python client (pip install ./clients/python). IDEM_URL defaults to http://127.0.0.1:7070;
IDEM_TOKEN is the token, when idem has [auth] tokens.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
IDEM_URL = os.environ.get("IDEM_URL", "http://127.0.0.1:7070").rstrip("/")
ORDERS = 6
KILLED = 3  # the order whose charge the first run is killed in the middle of
RUN = uuid.uuid4().hex[:8]  # order ids unique per run: the demo can run again against the same idem


def fail(message):
    raise SystemExit(f"FAILED: {message}")


def read_ledger(path):
    with open(path) as f:  # the provider replaces the file atomically
        return json.load(f)


def check_token():
    """Begins and releases an operation of its own, as the worker will begin real ones: a 401 or
    403 now is a clear message instead of a worker's stack trace later."""
    from idem_client import Idem, IdemError

    token = os.environ.get("IDEM_TOKEN")
    try:
        with Idem(IDEM_URL, token=token, retries=0) as idem:
            begun = idem.operations.begin("payments", key=f"demo-token-check-{RUN}")
            if begun.token:
                idem.operations.release("payments", begun.id, begun.token)
    except IdemError as e:
        if e.status == 401 and not token:
            raise SystemExit(f"idem at {IDEM_URL} wants a token: set IDEM_TOKEN to one of its [auth] tokens "
                             "(`idem token new --can write --namespace payments` makes one)")
        if e.status == 401:
            raise SystemExit(f"idem at {IDEM_URL} does not know the token in IDEM_TOKEN: set it to one of its [auth] tokens")
        if e.status == 403:
            raise SystemExit(f"idem at {IDEM_URL} refused the token in IDEM_TOKEN: {e.detail} "
                             "(the worker needs can = \"write\" on namespace payments)")
        raise


def main():
    try:
        import idem_client  # noqa: F401  (the worker imports it; say so here, before starting anything)
    except ImportError:
        raise SystemExit("this example needs the Python client idem_client: pip install ./clients/python")
    try:
        with urllib.request.urlopen(IDEM_URL + "/healthz", timeout=5) as response:
            response.read()
    except OSError as e:
        raise SystemExit(f"idem is not reachable at {IDEM_URL} ({e}): start it with `idem serve`, or set IDEM_URL")
    check_token()

    orders = [{"id": f"order-{RUN}-{n}", "amount": 1000 + n} for n in range(1, ORDERS + 1)]
    killed_id = orders[KILLED - 1]["id"]
    with tempfile.TemporaryDirectory(prefix="idem-payments-") as tmp:
        orders_path, ledger_path = os.path.join(tmp, "orders.json"), os.path.join(tmp, "ledger.json")
        with open(orders_path, "w") as f:
            json.dump(orders, f)
        provider = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "provider.py"), "--port", "0", "--ledger", ledger_path, "--delay", "0.4"],
            stdout=subprocess.PIPE, text=True,
        )
        first = None
        try:
            line = provider.stdout.readline()  # "provider on http://…": it listens
            if not line.startswith("provider on "):
                fail(f"the provider did not start (exit {provider.wait()})")
            env = dict(os.environ, IDEM_URL=IDEM_URL, PROVIDER_URL=line.split()[-1])
            worker = [sys.executable, os.path.join(HERE, "worker.py"), orders_path]
            print(f"run {RUN}: {ORDERS} orders, provider {env['PROVIDER_URL']}, idem {IDEM_URL}")

            # Run 1: killed with SIGKILL once the provider is executing the third charge.
            first = subprocess.Popen(worker, env=env, stdout=subprocess.PIPE, text=True)
            echo = threading.Thread(target=lambda: [print(f"  run 1: {l.rstrip()}") for l in first.stdout])
            echo.start()
            deadline = time.monotonic() + 30
            while True:
                charges = {c["order_id"]: c for c in read_ledger(ledger_path)["charges"]}
                if charges.get(killed_id, {}).get("status") == "processing":
                    first.send_signal(signal.SIGKILL)
                    break
                if first.poll() is not None or time.monotonic() > deadline:
                    fail(f"run 1 of the worker ended (exit {first.poll()}) before it was charging {killed_id}")
                time.sleep(0.01)
            first.wait()
            echo.join()
            if first.returncode != -signal.SIGKILL:
                fail(f"run 1 was not killed (exit {first.returncode})")
            print(f"run 1: killed with SIGKILL while the provider was executing {killed_id}'s charge")

            # Runs 2 and 3 complete; run 3 finds every order done and calls the provider for none.
            sent = {}
            for run in (2, 3):
                before = len(read_ledger(ledger_path)["requests"])
                started = time.monotonic()
                done = subprocess.run(worker, env=env, stdout=subprocess.PIPE, text=True, timeout=120)
                for out in done.stdout.splitlines():
                    print(f"  run {run}: {out}")
                if done.returncode != 0:
                    fail(f"run {run} of the worker failed (exit {done.returncode})")
                sent[run] = len(read_ledger(ledger_path)["requests"]) - before
                print(f"run {run}: {time.monotonic() - started:.1f} s, {sent[run]} requests to the provider")

            # The provider's ledger: each order charged exactly once.
            ledger = read_ledger(ledger_path)
            mine = [c for c in ledger["charges"] if c["order_id"].startswith(f"order-{RUN}-")]
            counts = Counter(c["order_id"] for c in mine)
            twice = {o: n for o, n in counts.items() if n > 1}
            never = [o["id"] for o in orders if o["id"] not in counts]
            if twice:
                fail(f"charged more than once at the provider: {twice}")
            if never:
                fail(f"never charged: {never}")
            amounts = {o["id"]: o["amount"] for o in orders}
            wrong = [c for c in mine if c["status"] != "succeeded" or c["amount"] != amounts[c["order_id"]]]
            if wrong:
                fail(f"charges not as ordered: {wrong}")
            if sent[3]:
                fail(f"run 3 sent {sent[3]} requests to the provider: every order was done, it should have sent none")
            requests = [r for r in ledger["requests"] if r["order_id"].startswith(f"order-{RUN}-")]
            replayed = [r["order_id"] for r in requests if r["outcome"] == "replayed"]
            if replayed != [killed_id]:
                fail(f"expected the provider to answer {killed_id}'s retried charge from its ledger, once; it replayed {replayed}")
            print(
                f"summary: {ORDERS} orders, {len(requests)} requests to the provider, {len(mine)} charges executed "
                f"({killed_id}: 2 requests, 1 charge): each order charged exactly once"
            )
            print("ok")
        finally:
            if first is not None and first.poll() is None:
                first.kill()
                first.wait()
            provider.kill()
            provider.wait()


if __name__ == "__main__":
    main()
