"""Events against a real `idem serve`: a delivery verified with verify_webhook (and with the
reference `standardwebhooks`), then receipts list / get / replay, dead letters included."""

from __future__ import annotations

import base64
import os
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Iterator, List, Tuple

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from conftest import IdemServer
from idem_client import AsyncIdem, Idem, IdemError, WebhookVerificationError, verify_webhook

SECRET = "whsec_" + base64.b64encode(os.urandom(32)).decode()

Delivery = Tuple[str, Dict[str, str], bytes]


class Handler:
    """The user's event handler: records every delivery; answers 500 to bodies saying "fail"."""

    def __init__(self) -> None:
        self.deliveries: List[Delivery] = []
        self.cond = threading.Condition()
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with outer.cond:
                    outer.deliveries.append((self.path, {k: v for k, v in self.headers.items()}, body))
                    outer.cond.notify_all()
                failing = self.path == "/handle" and b'"fail"' in body
                self.send_response(500 if failing else 200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.http.server_address[1]
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def wait_for(self, pred: Callable[[Delivery], bool], count: int = 1, timeout: float = 15) -> List[Delivery]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                found = [d for d in self.deliveries if pred(d)]
                if len(found) >= count:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"expected {count} deliveries, got {len(found)}")
                self.cond.wait(left)


@pytest.fixture(scope="module")
def events() -> Iterator[Tuple[IdemServer, Handler]]:
    handler = Handler()
    config = f"""
[[sources]]
name = "partner"
handler_url = "http://127.0.0.1:{handler.port}/handle"
event_id = "/external_event_id"
max_attempts = 2
attempt_timeout = "5s"
backoff = ["100ms"]
signing_secret = "{SECRET}"
result_webhook_url = "http://127.0.0.1:{handler.port}/results"
result_backoff = ["100ms"]
"""
    server = IdemServer(config).start()
    yield server, handler
    server.close()
    handler.http.shutdown()


def send(server: IdemServer, payload: Dict[str, Any]) -> Dict[str, Any]:
    r = httpx.post(f"{server.url}/v1/sources/partner/events", json=payload, timeout=5)
    assert r.status_code in (200, 202), r.text
    body: Dict[str, Any] = r.json()
    return body


def wait_status(idem: Idem, receipt_id: str, status: str, timeout: float = 15) -> Dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        got = idem.receipts.get(receipt_id)
        assert got is not None
        if got["status"] == status:
            return got
        assert time.monotonic() < deadline, f"receipt stayed {got['status']}"
        time.sleep(0.05)


def test_delivery_is_signed_and_receipts_list_get_replay(events: Tuple[IdemServer, Handler]) -> None:
    server, handler = events
    event_id = "evt-" + uuid.uuid4().hex
    accepted = send(server, {"external_event_id": event_id, "amount": 120})
    rid = accepted["receipt_id"]
    assert accepted["replay"] is False
    assert send(server, {"external_event_id": event_id, "amount": 120})["receipt_id"] == rid  # dedup

    (path, headers, body), = handler.wait_for(lambda d: d[0] == "/handle" and d[1].get("webhook-id") == rid)
    # The delivery, verified by this library and by the reference implementation.
    payload = verify_webhook(SECRET, headers, body)
    assert payload == {"external_event_id": event_id, "amount": 120}
    assert Webhook(SECRET).verify(body, dict(headers)) == payload
    assert headers["idem-attempt"] == "1"
    with pytest.raises(WebhookVerificationError):
        verify_webhook(SECRET, headers, body.replace(b"120", b"121"))
    with pytest.raises(WebhookVerificationError):
        verify_webhook("whsec_" + base64.b64encode(os.urandom(32)).decode(), headers, body)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(SECRET, headers, body, now=int(headers["webhook-timestamp"]) + 301)

    with Idem(server.url) as idem:
        receipt = wait_status(idem, rid, "completed")
        assert receipt["source"] == "partner" and receipt["event_id"] == event_id
        assert receipt["attempts"][0]["status_code"] == 200
        page = idem.receipts.list(source="partner", status="completed", limit=100)
        assert rid in [r["id"] for r in page.items]
        assert idem.receipts.get("rcpt_" + "0" * 36) is None

        # The result webhook is signed the same way.
        (_, rh, rbody), = handler.wait_for(lambda d: d[0] == "/results" and rid.encode() in d[2])
        result = verify_webhook(SECRET, rh, rbody)
        assert result["type"] == "receipt.completed" and result["receipt_id"] == rid

        # Replay: delivered again, same webhook-id.
        replayed = idem.receipts.replay(rid)
        assert replayed["receipt_id"] == rid
        again = handler.wait_for(lambda d: d[0] == "/handle" and d[1].get("webhook-id") == rid, count=2)
        assert verify_webhook(SECRET, again[1][1], again[1][2]) == payload


def test_dead_letters_listed_paged_and_replayed(events: Tuple[IdemServer, Handler]) -> None:
    server, handler = events
    ids = []
    for _ in range(3):
        ids.append(send(server, {"external_event_id": "evt-" + uuid.uuid4().hex, "do": "fail"})["receipt_id"])
    with Idem(server.url) as idem:
        for rid in ids:
            dead = wait_status(idem, rid, "dead")
            assert len(dead["attempts"]) == 2 and dead["attempts"][-1]["status_code"] == 500
        # Page through the dead letters two at a time, newest first.
        first = idem.receipts.list(source="partner", status="dead", limit=2)
        assert len(first.items) == 2 and first.next_cursor is not None
        seen = [r["id"] for r in idem.receipts.iter(source="partner", status="dead", page_size=2)]
        assert set(ids) <= set(seen) and len(seen) == len(set(seen))
        assert seen[:2] == [r["id"] for r in first.items]
        assert all(r["status"] == "dead" for r in idem.receipts.iter(status="dead"))
        # Replay one: it is delivered again (and dies again, the handler still fails).
        before = len([d for d in handler.deliveries if d[1].get("webhook-id") == ids[0]])
        idem.receipts.replay(ids[0])
        handler.wait_for(lambda d: d[0] == "/handle" and d[1].get("webhook-id") == ids[0], count=before + 1)


def test_bulk_replay_counts_first_then_replays_and_discard(events: Tuple[IdemServer, Handler]) -> None:
    server, _ = events
    tag = uuid.uuid4().hex
    ids = [send(server, {"external_event_id": f"bulk-{tag}-{n}", "do": "fail", "n": n})["receipt_id"] for n in (1, 2)]
    with Idem(server.url) as idem:
        for rid in ids:
            wait_status(idem, rid, "dead")
        got = idem.receipts.get(ids[0])
        assert got is not None and got["body"]["n"] == 1 and got["content_type"] == "application/json"
        assert idem.receipts.count_matching(event_id=f"bulk-{tag}-1") == 1
        assert idem.receipts.replay_matching(event_id=f"bulk-{tag}-1") == 1
        deadline = time.time() + 15
        while (r := idem.receipts.get(ids[0])) is not None and not (r["status"] == "dead" and r["round"] == 2):
            assert time.time() < deadline, r
            time.sleep(0.05)
        assert idem.receipts.discard(ids[1]) == {"receipt_id": ids[1], "status": "discarded"}
        assert idem.receipts.count_matching(event_id=f"bulk-{tag}-2") == 0
        assert idem.receipts.count_matching(event_id=f"bulk-{tag}-2", status="discarded") == 1
        with pytest.raises(IdemError) as err:
            idem.receipts.replay_matching(status="processing")
        assert err.value.status == 400


@pytest.mark.anyio
async def test_async_receipts(events: Tuple[IdemServer, Handler]) -> None:
    server, handler = events
    rid = send(server, {"external_event_id": "evt-" + uuid.uuid4().hex})["receipt_id"]
    handler.wait_for(lambda d: d[1].get("webhook-id") == rid)
    async with AsyncIdem(server.url) as idem:
        page = await idem.receipts.list(source="partner", limit=1000)
        assert rid in [r["id"] for r in page.items]
        got = await idem.receipts.get(rid)
        assert got is not None and got["id"] == rid
        assert await idem.receipts.get("rcpt_" + "0" * 36) is None
        ids = [r["id"] async for r in idem.receipts.iter(source="partner", page_size=1)]
        assert rid in ids and len(ids) == len(set(ids))
        assert await idem.receipts.count_matching(source="partner", status="completed") >= 1
        with pytest.raises(IdemError) as err:
            await idem.receipts.discard(rid)
        assert err.value.status == 409
