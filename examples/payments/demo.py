#!/usr/bin/env python3
"""Seed 001's payments, as a worker would do them with idem's Operations API: charge each order
once, even when the worker is killed (SIGKILL) in the middle of a charge and started again.

It starts a stand-in payment provider (provider.py), runs the worker (worker.py), kills it while a
charge is in flight, runs it again (it finishes the orders, redoing the interrupted one under the
same key), runs it a third time (everything is already charged: nothing is called), and then
checks the provider's ledger: every order charged exactly once.

Run:  idem serve   (in another terminal), then  python3 examples/payments/demo.py
Needs: the Python client (pip install ./clients/python). IDEM_URL defaults to http://127.0.0.1:7070.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
IDEM_URL = os.environ.get("IDEM_URL", "http://127.0.0.1:7070")
ORDERS = 6
RUN = f"{int(time.time() * 1000):x}{os.getpid():x}"  # unique per run: the demo can run again


def fail(message):
    raise SystemExit(f"FAILED: {message}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url):
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def main():
    try:
        import idem_client  # noqa: F401
    except ImportError:
        raise SystemExit("this example needs the Python client: pip install ./clients/python")
    try:
        get(IDEM_URL + "/healthz")
    except OSError:
        raise SystemExit(f"idem is not reachable at {IDEM_URL}: start it with `idem serve` (or set IDEM_URL)")

    port = free_port()
    provider = subprocess.Popen([sys.executable, os.path.join(HERE, "provider.py"), str(port), "0.4"], stdout=subprocess.PIPE, text=True)
    try:
        provider.stdout.readline()  # "provider on …": it is listening
        provider_url = f"http://127.0.0.1:{port}"
        env = dict(os.environ, IDEM_URL=IDEM_URL, PROVIDER_URL=provider_url)
        worker = [sys.executable, os.path.join(HERE, "worker.py"), RUN, str(ORDERS)]

        # Run 1: killed with SIGKILL while its third charge is at the provider.
        first = subprocess.Popen(worker, env=env, stdout=subprocess.PIPE, text=True)
        for line in first.stdout:
            print(f"  run 1: {line.rstrip()}")
            if line.startswith(f"charging order-{RUN}-3"):
                time.sleep(0.1)  # the request is at the provider now
                first.send_signal(signal.SIGKILL)
                break
        first.wait()
        print(f"run 1 killed mid-charge (exit {first.returncode})")

        # Run 2: the interrupted order's lease ends (3 s), then it is charged again under its key.
        for run in (2, 3):
            done = subprocess.run(worker, env=env, stdout=subprocess.PIPE, text=True, timeout=120)
            for line in done.stdout.splitlines():
                print(f"  run {run}: {line}")
            if done.returncode != 0:
                fail(f"run {run} of the worker failed")
            charged_now = [l for l in done.stdout.splitlines() if l.startswith("charging")]
            if run == 3 and charged_now:
                fail(f"run 3 called the provider again: {charged_now}")

        ledger = get(provider_url + "/ledger")
        mine = {k: c for k, c in ledger["charges"].items() if k.startswith(f"order-{RUN}-")}
        if len(mine) != ORDERS:
            fail(f"expected {ORDERS} charges, the provider executed {len(mine)}: {sorted(mine)}")
        if any(c["status"] != "succeeded" for c in mine.values()):
            fail(f"not every charge succeeded: {mine}")
        print(f"{ORDERS} orders, {ledger['requests']} provider requests, {len(mine)} charges executed: each order charged exactly once")
        print("ok")
    finally:
        provider.kill()
        provider.wait()


if __name__ == "__main__":
    main()
