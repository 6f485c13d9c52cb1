"""A 2xx answer without the fields a call needs (a server that answers ``200 {}`` or an HTML page
to anything) is the not-idem error naming the URL, never a result: ``claimed`` missing is not
``claimed=False`` (code that skips the work when not claimed would silently lose it)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Awaitable, Callable, Dict, Iterator, List, Tuple

import httpx
import pytest

from idem_client import AsyncIdem, Idem, IdemError

URL = "http://idem.test"

ANSWERS: Dict[str, Callable[[], httpx.Response]] = {
    "200 {}": lambda: httpx.Response(200, json={}),
    "200 text/html": lambda: httpx.Response(
        200, text="<html><body>Welcome</body></html>", headers={"content-type": "text/html"}
    ),
    "200 with the wrong types": lambda: httpx.Response(
        200,
        json={
            "claimed": "yes", "id": 7, "results": [{}], "exists": "no", "status": "started", "token": "",
            "items": {}, "deleted": "1", "lease_expires_at": None, "receipts": None, "receipt_id": 1,
            "matching": "2", "queued": 1.5,
        },
    ),
}


def sync_calls(idem: Idem) -> List[Tuple[str, Callable[[], Any]]]:
    return [
        ("POST /v1/claims/survey", lambda: idem.claims.claim("survey", key="k")),
        ("POST /v1/claims/survey/batch", lambda: idem.claims.claim_batch("survey", ["k"])),
        ("POST /v1/claims/survey/lookup", lambda: idem.claims.lookup("survey", ["k"])),
        ("POST /v1/claims/survey/lookup", lambda: idem.claims.exists("survey", key="k")),
        ("POST /v1/claims/survey/prefix", lambda: idem.claims.exists("survey", ["a"])),
        ("GET /v1/claims/survey/", lambda: idem.claims.get("survey", key="k")),
        ("GET /v1/claims/survey", lambda: idem.claims.list("survey", ["a"])),
        ("DELETE /v1/claims/survey", lambda: idem.claims.delete_prefix("survey", ["a"])),
        ("POST /v1/operations/orders/begin", lambda: idem.operations.begin("orders", key="k")),
        ("POST /v1/operations/orders/begin", lambda: idem.operations.run("orders", lambda: "never", key="k")),
        ("POST /v1/operations/orders/op1/complete", lambda: idem.operations.complete("orders", "op1", "t", 1)),
        ("POST /v1/operations/orders/op1/extend", lambda: idem.operations.extend("orders", "op1", "t", 60)),
        ("GET /v1/operations/orders/", lambda: idem.operations.get("orders", key="k")),
        ("GET /v1/receipts", lambda: idem.receipts.list()),
        ("GET /v1/receipts/rcpt_1", lambda: idem.receipts.get("rcpt_1")),
        ("POST /v1/receipts/rcpt_1/replay", lambda: idem.receipts.replay("rcpt_1")),
        ("POST /v1/receipts/rcpt_1/discard", lambda: idem.receipts.discard("rcpt_1")),
        ("POST /v1/receipts/replay", lambda: idem.receipts.count_matching()),
        ("POST /v1/receipts/replay", lambda: idem.receipts.replay_matching()),
    ]


def async_calls(idem: AsyncIdem) -> List[Tuple[str, Callable[[], Awaitable[Any]]]]:
    async def never() -> str:
        return "never"

    return [
        ("POST /v1/claims/survey", lambda: idem.claims.claim("survey", key="k")),
        ("POST /v1/claims/survey/batch", lambda: idem.claims.claim_batch("survey", ["k"])),
        ("POST /v1/claims/survey/lookup", lambda: idem.claims.lookup("survey", ["k"])),
        ("POST /v1/claims/survey/prefix", lambda: idem.claims.exists("survey", ["a"])),
        ("GET /v1/claims/survey/", lambda: idem.claims.get("survey", key="k")),
        ("GET /v1/claims/survey", lambda: idem.claims.list("survey", ["a"])),
        ("DELETE /v1/claims/survey", lambda: idem.claims.delete_prefix("survey", ["a"])),
        ("POST /v1/operations/orders/begin", lambda: idem.operations.begin("orders", key="k")),
        ("POST /v1/operations/orders/begin", lambda: idem.operations.run("orders", never, key="k")),
        ("POST /v1/operations/orders/op1/complete", lambda: idem.operations.complete("orders", "op1", "t", 1)),
        ("POST /v1/operations/orders/op1/extend", lambda: idem.operations.extend("orders", "op1", "t", 60)),
        ("GET /v1/operations/orders/", lambda: idem.operations.get("orders", key="k")),
        ("GET /v1/receipts", lambda: idem.receipts.list()),
        ("GET /v1/receipts/rcpt_1", lambda: idem.receipts.get("rcpt_1")),
        ("POST /v1/receipts/rcpt_1/replay", lambda: idem.receipts.replay("rcpt_1")),
        ("POST /v1/receipts/replay", lambda: idem.receipts.count_matching()),
    ]


def check(err: BaseException, what: str, base: str = URL) -> None:
    assert isinstance(err, IdemError), f"{what}: {err!r}"
    assert err.not_idem and err.status == 200, str(err)
    assert f"{base} answered 200 to {what}" in str(err), str(err)
    assert str(err).endswith("it does not look like idem (check the client's url= or IDEM_URL)"), str(err)


@pytest.mark.parametrize("answer", list(ANSWERS))
def test_every_call_refuses_a_2xx_without_its_fields(answer: str) -> None:
    with Idem(URL, transport=httpx.MockTransport(lambda r: ANSWERS[answer]()), retries=0) as idem:
        for what, call in sync_calls(idem):
            with pytest.raises(IdemError) as info:
                call()
            check(info.value, what)
            assert ("not JSON (text/html)" in str(info.value)) is (answer == "200 text/html")


@pytest.mark.anyio
@pytest.mark.parametrize("answer", list(ANSWERS))
async def test_every_async_call_refuses_a_2xx_without_its_fields(answer: str) -> None:
    async with AsyncIdem(URL, transport=httpx.MockTransport(lambda r: ANSWERS[answer]()), retries=0) as idem:
        for what, call in async_calls(idem):
            with pytest.raises(IdemError) as info:
                await call()
            check(info.value, what)


def test_a_record_without_claimed_is_not_claimed_false() -> None:
    answer = httpx.Response(200, json={"id": "x", "namespace": "survey", "parts": ["a"], "data": None})
    with Idem(URL, transport=httpx.MockTransport(lambda r: answer), retries=0) as idem:
        with pytest.raises(IdemError, match=r"expected \{ claimed: boolean, id: string \}") as info:
            idem.claims.claim("survey", parts=["a"])
    assert info.value.not_idem


# Against a real HTTP server that answers 200 to anything.


class _Anything(BaseHTTPRequestHandler):
    content_type = "application/json"
    body = b"{}"

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", self.content_type)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(params=[("application/json", b"{}"), ("text/html", b"<html><body>Welcome</body></html>")], ids=["200 {}", "200 text/html"])
def anything(request: pytest.FixtureRequest) -> Iterator[str]:
    content_type, body = request.param
    handler = type("Handler", (_Anything,), {"content_type": content_type, "body": body})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_claim_from_a_server_that_answers_anything_is_the_not_idem_error(anything: str) -> None:
    with Idem(anything, retries=0) as idem:
        with pytest.raises(IdemError) as info:
            idem.claims.claim("survey", parts=["scenario-1", "user-3"])
        check(info.value, "POST /v1/claims/survey", anything)
        assert str(info.value).startswith(f"200 Invalid response: {anything} answered 200 to POST /v1/claims/survey ")
        with pytest.raises(IdemError) as info:
            idem.operations.run("orders", lambda: "never", key="k")
        check(info.value, "POST /v1/operations/orders/begin", anything)


@pytest.mark.anyio
async def test_an_async_claim_from_a_server_that_answers_anything_is_the_not_idem_error(anything: str) -> None:
    async with AsyncIdem(anything, retries=0) as idem:
        with pytest.raises(IdemError) as info:
            await idem.claims.claim("survey", parts=["scenario-1", "user-3"])
        check(info.value, "POST /v1/claims/survey", anything)
