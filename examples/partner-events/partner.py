#!/usr/bin/env python3
"""Seed 003's partner: sends events to idem the way partners do — with resends (20 % of events
are sent twice) and the occasional reuse of an event id for a different payload (5 %), which idem
must refuse. Then it waits until every receipt has ended and checks, from the handler's side, that
every distinct event was processed exactly once, that dead letters are exactly the events the
handler never accepted, and that replaying them after the handler is fixed completes them.

Run (three terminals; pip install standardwebhooks first):
    idem serve --config examples/partner-events/idem.toml
    python3 examples/partner-events/handler.py 9000 whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
    python3 examples/partner-events/partner.py
It can run again against the same idem and handler: its event ids are unique per run, it resets the
handler's counts first, and it counts only its own receipts.

Environment: IDEM_URL (default http://127.0.0.1:7070), HANDLER_URL (default http://127.0.0.1:9000),
EVENTS (default 1000), SOURCE (default partner).
"""

import json
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

IDEM = os.environ.get("IDEM_URL", "http://127.0.0.1:7070")
HANDLER = os.environ.get("HANDLER_URL", "http://127.0.0.1:9000")
EVENTS = int(os.environ.get("EVENTS", "1000"))
SOURCE = os.environ.get("SOURCE", "partner")
# Event ids are unique per run, so the example can run again against the same idem and handler.
RUN = os.environ.get("RUN_ID") or time.strftime("%Y%m%d%H%M%S") + f"{time.time_ns() % 1_000_000:06d}"


def call(method, url, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    for attempt in range(5):
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")
        except OSError:
            time.sleep(0.2 * (attempt + 1))  # idem restarting: the partner retries, as partners do
    raise SystemExit(f"FAILED: {url} unreachable")


def send(number, variant=""):
    event = {"external_event_id": f"evt-{RUN}-{number}", "amount": number * 100, "note": variant}
    return call("POST", f"{IDEM}/v1/sources/{SOURCE}/events", event)


def expect(condition, message):
    if not condition:
        raise SystemExit(f"FAILED: {message}")


def reachable(url):
    """Whether anything answers HTTP at `url` (one try, no retries)."""
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def require_setup():
    """Exits with a plain message when idem, its `partner` source or the handler is missing."""
    if not reachable(f"{IDEM}/healthz"):
        raise SystemExit(
            f"idem is not reachable at {IDEM}: start it with "
            "`idem serve --config examples/partner-events/idem.toml` (or set IDEM_URL)"
        )
    # An event without an id: a configured source refuses it with 400, an unknown one with 404.
    status, body = call("POST", f"{IDEM}/v1/sources/{SOURCE}/events", {})
    if status == 404:
        raise SystemExit(
            f"idem at {IDEM} has no source named {SOURCE!r}: start it with "
            f"`idem serve --config examples/partner-events/idem.toml` ({body.get('detail')})"
        )
    if not reachable(f"{HANDLER}/stats"):
        raise SystemExit(
            f"the handler is not reachable at {HANDLER}: start it with "
            "`python3 examples/partner-events/handler.py 9000 whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw` "
            "(it needs `pip install standardwebhooks`), or set HANDLER_URL"
        )


def main():
    require_setup()
    status, _ = call("POST", f"{HANDLER}/reset")
    expect(status == 200, f"the handler at {HANDLER} resets")
    plan = [(n, "") for n in range(1, EVENTS + 1)]
    plan += [(n, "") for n in range(1, EVENTS + 1) if n % 5 == 1]            # 20 % resent as is
    plan += [(n, "changed") for n in range(1, EVENTS + 1) if n % 20 == 2]    # 5 % reused for another payload
    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(lambda p: (p, send(*p)), plan))
    counts = {}
    for (_, variant), (status, _) in answers:
        counts[(status, variant)] = counts.get((status, variant), 0) + 1
    print("intake answers:", {f"{s}{'/' + v if v else ''}": c for (s, v), c in sorted(counts.items())})
    mismatches = sum(1 for (n, v) in plan if v)
    expect(counts.get((409, "changed"), 0) == mismatches, "every reused id with another payload is refused with 409")
    receipts = {n: body["receipt_id"] for (n, v), (status, body) in answers if status in (200, 202) and not v}
    expect(len(receipts) == EVENTS, f"every distinct event has a receipt ({len(receipts)})")

    dead = wait_until_all_end()
    poison = {n for n in range(1, EVENTS + 1) if n % 50 == 0}
    dead_numbers = {int(r["event_id"].rsplit("-", 1)[1]) for r in dead}
    for r in dead:
        if int(r["event_id"].rsplit("-", 1)[1]) not in poison:
            print("unexpected dead letter:", call("GET", f"{IDEM}/v1/receipts/{r['id']}")[1])
            break
    expect(dead_numbers == poison, f"dead letters are exactly the poison events: extra {sorted(dead_numbers - poison)}, missing {sorted(poison - dead_numbers)}")
    stats = call("GET", f"{HANDLER}/stats")[1]
    print(f"handler: {stats['processed']} processed, {stats['duplicates']} duplicate deliveries ignored, {stats['bad_signatures']} bad signatures")
    expect(stats["bad_signatures"] == 0, "every delivery carried a valid signature")
    expect(stats["processed"] == EVENTS - len(poison), "every other event was processed exactly once")

    call("POST", f"{HANDLER}/heal")
    # Every dead letter of this run at once (docs/reference/api.md#dead-letters-and-retention):
    # count first, then replay by filter.
    status, counted = call("POST", f"{IDEM}/v1/receipts/replay", {"source": "partner", "dry_run": True})
    expect(status == 200 and counted["matching"] >= len(dead), f"the dry run counts the dead letters: {counted}")
    status, queued = call("POST", f"{IDEM}/v1/receipts/replay", {"source": "partner"})
    expect(status == 202 and queued["queued"] == counted["matching"], f"every dead letter queued again: {queued}")
    expect(not wait_until_all_end(), "replayed receipts complete")
    stats = call("GET", f"{HANDLER}/stats")[1]
    expect(stats["processed"] == EVENTS, "after the replay every event was processed exactly once")
    deadline = time.time() + 60
    while len(stats["results"]) < EVENTS and time.time() < deadline:  # result webhooks follow the receipts
        time.sleep(0.2)
        stats = call("GET", f"{HANDLER}/stats")[1]
    results = stats["results"]
    expect(len(results) == EVENTS, f"a signed result webhook for every receipt ({len(results)})")
    print(f"replayed {len(dead)} dead letters; all {EVENTS} events processed once; {len(results)} result webhooks")
    print("ok")


def wait_until_all_end(timeout=120):
    """Waits until every receipt is completed or dead (states that only a replay leaves), and
    returns the dead ones."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        dead = page("dead")
        if len(page("completed")) + len(dead) == EVENTS:
            return dead
        time.sleep(0.2)
    raise SystemExit("FAILED: receipts did not all end in time")


def page(status):
    found, cursor = [], None
    while True:
        url = f"{IDEM}/v1/receipts?source={SOURCE}&status={status}&limit=1000" + (f"&cursor={cursor}" if cursor else "")
        body = call("GET", url)[1]
        found += [r for r in body["receipts"] if r["event_id"].startswith(f"evt-{RUN}-")]
        cursor = body.get("next_cursor")
        if not cursor:
            return found


if __name__ == "__main__":
    main()
