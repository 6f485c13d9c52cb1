"""Unit tests over httpx.MockTransport: request shapes, answers, errors, retries."""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime
from typing import Any, Callable, Dict, List

import socket

import httpx
import pytest

from fakes import FakeClock, problem
from idem_client import (
    AsyncIdem,
    Idem,
    IdemError,
    InProgressError,
    MismatchError,
    UnavailableError,
    claim_id,
)
from idem_client._errors import IdemConnectionError, LeaseLostError
from idem_client._retry import RetryPolicy, parse_retry_after

URL = "http://idem.test"
UUID_V4 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")

Handler = Callable[[httpx.Request], httpx.Response]


def make(handler: Handler, clock: FakeClock, **kw: Any) -> Idem:
    return Idem(URL, transport=httpx.MockTransport(handler), sleep=clock.sleep, clock=clock, **kw)


def make_async(handler: Handler, clock: FakeClock, **kw: Any) -> AsyncIdem:
    return AsyncIdem(URL, transport=httpx.MockTransport(handler), sleep=clock.async_sleep, clock=clock, **kw)


def record(claimed: bool, parts: List[str], ns: str = "survey") -> Dict[str, Any]:
    return {
        "claimed": claimed,
        "namespace": ns,
        "id": claim_id(parts),
        "parts": parts,
        "data": None,
        "created_at": "2026-01-01T00:00:00Z",
        "expires_at": None,
    }


class Recorder:
    """A handler answering from a queue of responses, recording requests."""

    def __init__(self, *responses: Any) -> None:
        self.responses = list(responses)
        self.requests: List[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        item = self.responses.pop(0) if len(self.responses) > 1 else self.responses[0]
        if isinstance(item, Exception):
            raise item
        assert isinstance(item, httpx.Response)
        return item

    def body(self, i: int = -1) -> Any:
        return json.loads(self.requests[i].content)

    def body_without_token(self, i: int = -1) -> Any:
        """The body of request ``i`` without its ``client_token``, after checking that it is a
        fresh UUID v4 (tests/test_unit_client_token.py tests the tokens themselves)."""
        body = self.body(i)
        assert UUID_V4.fullmatch(body.pop("client_token"))
        return body


# Request shapes and answers


def test_claim_sends_parts_data_ttl_and_token() -> None:
    rec = Recorder(httpx.Response(201, json=record(True, ["s", "u", "n"])))
    idem = make(rec, FakeClock(), token="s3cret")
    r = idem.claims.claim("survey", parts=["s", "u", "n"], data={"answer": "A"}, ttl_seconds=60)
    assert r.claimed is True
    assert r.record["id"] == claim_id(["s", "u", "n"])
    assert "claimed" not in r.record
    req = rec.requests[0]
    assert req.method == "POST" and req.url.path == "/v1/claims/survey"
    assert req.headers["authorization"] == "Bearer s3cret"
    assert req.headers["content-type"] == "application/json"
    assert rec.body_without_token() == {"parts": ["s", "u", "n"], "data": {"answer": "A"}, "ttl_seconds": 60}
    assert "s3cret" not in str(req.url)


def test_claim_existing_and_key_form() -> None:
    rec = Recorder(httpx.Response(200, json=record(False, ["k"])))
    r = make(rec, FakeClock()).claims.claim("survey", key="k")
    assert r.claimed is False and r.record["parts"] == ["k"]
    assert rec.body_without_token() == {"key": "k"}


def test_key_arguments_are_checked_locally() -> None:
    idem = make(Recorder(httpx.Response(500)), FakeClock())
    with pytest.raises(ValueError):
        idem.claims.claim("ns")
    with pytest.raises(ValueError):
        idem.claims.claim("ns", key="a", parts=["a"])
    with pytest.raises(TypeError):
        idem.claims.claim("ns", parts="ab")
    with pytest.raises(ValueError):
        idem.claims.get("ns", key="a", id="b")
    with pytest.raises(ValueError):
        idem.claims.exists("ns")


def test_batch_lookup_exists_and_shorthands() -> None:
    results = [record(True, ["a"]), record(False, ["b"]), record(True, ["x", "y"])]
    rec = Recorder(
        httpx.Response(200, json={"results": results}),
        httpx.Response(200, json={"results": [{"id": "1", "exists": True, "record": results[0]}, {"id": "2", "exists": False}]}),
        httpx.Response(200, json={"exists": True}),
    )
    idem = make(rec, FakeClock())
    out = idem.claims.claim_batch("articles", ["a", {"key": "b", "ttl_seconds": 5}, ["x", "y"]])
    assert [r.claimed for r in out] == [True, False, True]
    assert [r.record["parts"] for r in out] == [["a"], ["b"], ["x", "y"]]
    assert rec.body_without_token() == {"items": [{"key": "a"}, {"key": "b", "ttl_seconds": 5}, {"parts": ["x", "y"]}]}
    found = idem.claims.lookup("articles", [{"key": "a"}, "z"])
    assert [f["exists"] for f in found] == [True, False] and "record" not in found[1]
    assert rec.requests[1].url.path == "/v1/claims/articles/lookup"
    assert idem.claims.exists("survey", prefix=["s", "u"]) is True
    assert rec.body() == {"prefix": ["s", "u"]}
    assert rec.requests[2].url.path == "/v1/claims/survey/prefix"


def test_get_and_delete_absent_and_present() -> None:
    rec = Recorder(
        problem(404, "not-found"),
        httpx.Response(200, json={k: v for k, v in record(True, ["a"]).items() if k != "claimed"}),
        problem(404, "not-found"),
        httpx.Response(204),
    )
    idem = make(rec, FakeClock())
    assert idem.claims.get("ns", key="a") is None
    got = idem.claims.get("ns", parts=["a"])
    assert got is not None and got["id"] == claim_id("a")
    assert idem.claims.delete("ns", id="abc") is False
    assert idem.claims.delete("ns", key="a") is True
    assert rec.requests[0].url.path == f"/v1/claims/ns/{claim_id('a')}"
    assert rec.requests[2].method == "DELETE" and rec.requests[2].url.path == "/v1/claims/ns/abc"


def test_path_segments_are_escaped() -> None:
    rec = Recorder(problem(404, "not-found"))
    make(rec, FakeClock()).receipts.get("a/b?c")
    assert rec.requests[0].url.raw_path == b"/v1/receipts/a%2Fb%3Fc"


# Errors


def test_problem_json_becomes_idem_error_with_field() -> None:
    rec = Recorder(problem(400, "invalid-request", "parts[0] must not be empty", field="parts[0]"))
    with pytest.raises(IdemError) as info:
        make(rec, FakeClock()).claims.claim("ns", parts=[""])
    e = info.value
    assert (e.status, e.type, e.field) == (400, "urn:idem:problem:invalid-request", "parts[0]")
    assert "parts[0] must not be empty" in str(e) and type(e) is IdemError
    assert len(rec.requests) == 1  # 4xx is never retried


@pytest.mark.parametrize(
    "response,cls",
    [
        (problem(409, "in-progress", retry_after="3"), InProgressError),
        (problem(409, "lease-lost"), LeaseLostError),
        (problem(409, "conflict"), IdemError),
        (problem(422, "fingerprint-mismatch"), MismatchError),
        (problem(401, "unauthorized"), IdemError),
        (problem(413, "payload-too-large"), IdemError),
        (httpx.Response(500, text="<html>oops</html>"), IdemError),
    ],
)
def test_error_mapping(response: httpx.Response, cls: type) -> None:
    rec = Recorder(response)
    with pytest.raises(IdemError) as info:
        make(rec, FakeClock()).claims.claim("ns", key="k")
    assert type(info.value) is cls
    assert info.value.status == response.status_code
    assert len(rec.requests) == 1
    if cls is InProgressError:
        assert info.value.retry_after == 3.0


def test_non_json_error_keeps_status_and_reason() -> None:
    with pytest.raises(IdemError) as info:
        make(Recorder(httpx.Response(500, text="boom")), FakeClock()).claims.claim("ns", key="k")
    assert info.value.type == "about:blank" and info.value.title == "Internal Server Error"


def test_token_never_in_errors_or_repr() -> None:
    idem = make(Recorder(problem(401, "unauthorized", "a valid bearer token is required")), FakeClock(), token="tok-SECRET")
    with pytest.raises(IdemError) as info:
        idem.claims.claim("ns", key="k")
    assert "tok-SECRET" not in str(info.value) and "tok-SECRET" not in repr(info.value)
    assert "tok-SECRET" not in repr(idem)
    with pytest.raises(ValueError):
        Idem("http://user:pw@idem.test")


# Retries


def test_retries_503_honouring_retry_after_then_succeeds() -> None:
    clock = FakeClock()
    rec = Recorder(
        problem(503, "store-unavailable", retry_after="2"),
        httpx.Response(502, text="bad gateway"),
        httpx.Response(504),
        httpx.Response(201, json=record(True, ["k"])),
    )
    r = make(rec, clock, backoff=0.1).claims.claim("ns", key="k")
    assert r.claimed and len(rec.requests) == 4
    assert 2.0 <= clock.sleeps[0] <= 2.2  # Retry-After honoured, a little jitter on top
    assert 0.1 <= clock.sleeps[1] <= 0.2  # backoff 0.1 * 2**1, half to full
    assert 0.2 <= clock.sleeps[2] <= 0.4


def test_retries_exhausted_raise_unavailable() -> None:
    clock = FakeClock()
    rec = Recorder(problem(503, "store-unavailable", retry_after="1"))
    with pytest.raises(UnavailableError) as info:
        make(rec, clock, retries=2).claims.claim("ns", key="k")
    assert info.value.status == 503 and info.value.retry_after == 1.0
    assert len(rec.requests) == 3 and len(clock.sleeps) == 2


def test_connection_errors_are_retried_then_wrapped() -> None:
    clock = FakeClock()
    rec = Recorder(httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), httpx.Response(201, json=record(True, ["k"])))
    assert make(rec, clock).claims.claim("ns", key="k").claimed
    assert len(clock.sleeps) == 2
    rec = Recorder(httpx.ConnectError("refused"))
    with pytest.raises(IdemConnectionError) as info:
        make(rec, FakeClock(), retries=1).claims.claim("ns", key="k")
    assert isinstance(info.value, UnavailableError) and info.value.status == 0
    assert len(rec.requests) == 2
    message = str(info.value)
    assert f"cannot reach idem at {URL}: connection refused (is idem running there?)" in message, message
    assert "POST /v1/claims/ns, 2 attempts); to point the client elsewhere, give it url= or set IDEM_URL" in message, message


def test_a_real_refused_connection_names_the_host_and_the_cause() -> None:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(IdemConnectionError) as info:
        Idem(f"http://127.0.0.1:{port}/", retries=0).claims.claim("x", key="k")
    message = str(info.value)
    assert f"cannot reach idem at http://127.0.0.1:{port}: connection refused" in message, message
    assert info.value.type == "urn:idem:client:connection-error"


def test_a_404_that_is_not_idems_not_found_raises_instead_of_answering_absent() -> None:
    for answer in (
        httpx.Response(404, json={"type": "urn:idem:problem:no-such-route", "title": "No such route", "status": 404, "detail": "no route"}),
        httpx.Response(404, text="<html>Not Found</html>"),
    ):
        idem = make(Recorder(answer), FakeClock())
        for call in (
            lambda: idem.claims.get("survey", key="k"),
            lambda: idem.claims.delete("survey", key="k"),
            lambda: idem.operations.get("ops", key="k"),
            lambda: idem.receipts.get("rcpt_1"),
        ):
            with pytest.raises(IdemError) as info:
                call()
            assert info.value.status == 404
    absent = httpx.Response(404, json={"type": "urn:idem:problem:not-found", "title": "Not found", "status": 404, "detail": "no claim"})
    assert make(Recorder(absent), FakeClock()).claims.get("survey", key="k") is None


@pytest.mark.parametrize(
    "answer,not_idem",
    [
        (problem(404, "no-such-route", "no route"), False),
        (httpx.Response(404, json={"type": "urn:idem:problem:no-such-route", "title": "T"}), True),
        (httpx.Response(404, json={"type": "https://example.com/probs/gone", "title": "Gone", "detail": "theirs"}, headers={"content-type": "application/problem+json"}), True),
        (httpx.Response(404, text="Not Found"), True),
        (httpx.Response(502, html="<html>Bad Gateway</html>"), True),
    ],
)
def test_only_problem_json_with_an_idem_type_is_idems_own_answer(answer: httpx.Response, not_idem: bool) -> None:
    with pytest.raises(IdemError) as info:
        make(Recorder(answer), FakeClock(), retries=0).claims.get("survey", key="k")
    e = info.value
    assert e.status == answer.status_code and e.not_idem is not_idem
    assert ("does not look like idem" in str(e)) is not_idem, str(e)
    if not_idem:
        assert f"{URL} answered {answer.status_code} to GET /v1/claims/survey/" in str(e), str(e)
    if "theirs" in answer.text:
        assert "[its detail: theirs]" in str(e)


def test_no_url_is_idem_url_else_the_default_and_no_token_is_idem_token(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recorder(httpx.Response(200, json={"exists": True}))
    transport = httpx.MockTransport(rec)
    monkeypatch.setenv("IDEM_URL", "http://from-env.test:9999/")
    monkeypatch.setenv("IDEM_TOKEN", "env-t0ken")
    Idem(transport=transport).claims.exists("ns", ["a"])
    assert str(rec.requests[-1].url) == "http://from-env.test:9999/v1/claims/ns/prefix"
    assert rec.requests[-1].headers["authorization"] == "Bearer env-t0ken"
    Idem(URL, token="given", transport=transport).claims.exists("ns", ["a"])
    assert str(rec.requests[-1].url) == f"{URL}/v1/claims/ns/prefix"
    assert rec.requests[-1].headers["authorization"] == "Bearer given"
    Idem(token="", transport=transport).claims.exists("ns", ["a"])
    assert "authorization" not in rec.requests[-1].headers, 'token="" sends none'
    assert repr(AsyncIdem()) == "AsyncIdem(url='http://from-env.test:9999/')"
    monkeypatch.setenv("IDEM_URL", "127.0.0.1:7070")
    with pytest.raises(ValueError, match="^IDEM_URL must be an http:// or https:// URL"):
        Idem()
    monkeypatch.delenv("IDEM_URL")
    monkeypatch.delenv("IDEM_TOKEN")
    Idem(transport=transport).claims.exists("ns", ["a"])
    assert str(rec.requests[-1].url) == "http://127.0.0.1:7070/v1/claims/ns/prefix"
    assert "authorization" not in rec.requests[-1].headers


def test_retries_zero_means_one_attempt() -> None:
    rec = Recorder(httpx.Response(503))
    with pytest.raises(UnavailableError):
        make(rec, FakeClock(), retries=0).claims.claim("ns", key="k")
    assert len(rec.requests) == 1


def test_retry_after_longer_than_cap_is_not_waited() -> None:
    clock = FakeClock()
    rec = Recorder(problem(503, "store-unavailable", retry_after="3600"))
    with pytest.raises(UnavailableError):
        make(rec, clock, max_retry_after=30).claims.claim("ns", key="k")
    assert clock.sleeps == [] and len(rec.requests) == 1


def test_backoff_grows_exponentially_with_jitter_and_a_cap() -> None:
    p = RetryPolicy(retries=10, backoff=0.5, max_backoff=4.0, rand=lambda: 1.0)
    assert [p.delay(n, None) for n in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    p.rand = lambda: 0.0
    assert [p.delay(n, None) for n in range(4)] == [0.25, 0.5, 1.0, 2.0]
    assert p.delay(10, None) is None


def test_parse_retry_after() -> None:
    assert parse_retry_after("5") == 5.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("-1") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0


def test_timeout_is_per_attempt_and_longer_for_waiting_begins() -> None:
    seen: List[Dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.extensions["timeout"])
        return httpx.Response(201, json={"status": "started", "id": "i", "token": "t", "lease_expires_at": "x"})

    idem = make(handler, FakeClock(), timeout=2.5)
    idem.operations.begin("ns", key="k")
    idem.operations.begin("ns", key="k", wait_seconds=10)
    assert seen[0]["read"] == 2.5 and seen[1]["read"] == 12.5


# Receipts


def test_receipts_list_params_and_paging() -> None:
    pages = {
        None: {"receipts": [{"id": "r3"}, {"id": "r2"}], "next_cursor": "r2"},
        "r2": {"receipts": [{"id": "r1"}], "next_cursor": None},
    }

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=pages[request.url.params.get("cursor")])

    rec = Recorder(httpx.Response(200, json=pages[None]))
    page = make(rec, FakeClock()).receipts.list(source="partner", status="dead", limit=2)
    assert [r["id"] for r in page.items] == ["r3", "r2"] and page.next_cursor == "r2"
    assert dict(rec.requests[0].url.params) == {"source": "partner", "status": "dead", "limit": "2"}
    idem = make(handler, FakeClock())
    last = idem.receipts.list(cursor="r2")
    assert last.next_cursor is None and last.items == [{"id": "r1"}]
    assert [r["id"] for r in idem.receipts.iter(page_size=2)] == ["r3", "r2", "r1"]


def test_claims_list_iter_and_delete_prefix_requests_and_answers() -> None:
    items = [dict(record(False, ["a", "b"]), created_at=t) for t in ("2026-11-18T11:06:40.123000Z", "2026-11-18T11:06:40.9Z", "2026-11-18T11:06:40Z")]
    for item in items:
        item.pop("claimed")
    rec = Recorder(httpx.Response(200, json={"items": items, "next": "YQBiAA"}))
    page = make(rec, FakeClock()).claims.list("survey", ["a b", "c/d"], limit=3, after="YQBhAA")
    assert page.items == items and page.next == "YQBiAA"
    assert [r["created_at"] for r in page.items] == ["2026-11-18T11:06:40.123000Z", "2026-11-18T11:06:40.9Z", "2026-11-18T11:06:40Z"]
    if sys.version_info >= (3, 11):  # as the README says: fromisoformat reads every form from 3.11 on
        micros = [datetime.fromisoformat(r["created_at"]).microsecond for r in page.items]
        assert micros == [123000, 900000, 0]
    assert rec.requests[0].method == "GET"
    assert str(rec.requests[0].url) == f"{URL}/v1/claims/survey?prefix=a+b&prefix=c%2Fd&limit=3&after=YQBhAA"

    pages = {None: {"items": items[:2], "next": "c1"}, "c1": {"items": items[2:], "next": None}}
    sent: List[httpx.Request] = []

    def paging(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json=pages[request.url.params.get("after")])

    seen = list(Idem(URL, transport=httpx.MockTransport(paging)).claims.iter("survey", "a", page_size=2))
    assert seen == items
    assert [str(r.url) for r in sent] == [f"{URL}/v1/claims/survey?prefix=a&limit=2", f"{URL}/v1/claims/survey?prefix=a&limit=2&after=c1"]

    rec = Recorder(httpx.Response(200, json={"deleted": 100000, "more": True}), httpx.Response(200, json={"deleted": 7, "more": False}))
    assert make(rec, FakeClock()).claims.delete_prefix("survey", ["scenario-1", "user-3"]) == 100007
    assert [(r.method, str(r.url)) for r in rec.requests] == [("DELETE", f"{URL}/v1/claims/survey?prefix=scenario-1&prefix=user-3")] * 2
    stuck = Recorder(httpx.Response(200, json={"deleted": 0, "more": True}))
    assert make(stuck, FakeClock()).claims.delete_prefix("survey", ["x"]) == 0
    assert len(stuck.requests) == 1, "an answer that deleted nothing ends the loop"
    with pytest.raises(ValueError):
        make(stuck, FakeClock()).claims.list("survey", [])
    assert len(stuck.requests) == 1, "nothing sent for an empty prefix"


def test_receipts_get_and_replay() -> None:
    rec = Recorder(
        httpx.Response(200, json={"id": "r1", "status": "dead"}),
        problem(404, "not-found"),
        httpx.Response(202, json={"receipt_id": "r1", "status": "accepted", "replayed": True}),
    )
    idem = make(rec, FakeClock())
    got = idem.receipts.get("r1")
    assert got is not None and got["status"] == "dead"
    assert idem.receipts.get("nope") is None
    assert idem.receipts.replay("r1")["receipt_id"] == "r1"
    assert rec.requests[2].method == "POST" and rec.requests[2].url.path == "/v1/receipts/r1/replay"


# The async client shares all of the above; check its own plumbing.


@pytest.mark.anyio
async def test_async_client_calls_retries_and_errors() -> None:
    clock = FakeClock()
    rec = Recorder(
        httpx.ConnectError("refused"),
        problem(503, "store-unavailable", retry_after="1"),
        httpx.Response(201, json=record(True, ["s", "u"])),
        httpx.Response(200, json={"exists": False}),
        problem(404, "not-found"),
        problem(404, "not-found"),
        problem(400, "invalid-request", field="parts[0]"),
        httpx.Response(200, json={"receipts": [{"id": "r1"}], "next_cursor": None}),
    )
    async with make_async(rec, clock, token="tok") as idem:
        r = await idem.claims.claim("survey", parts=["s", "u"])
        assert r.claimed and len(clock.sleeps) == 2 and 1.0 <= clock.sleeps[1] <= 1.1
        assert await idem.claims.exists("survey", prefix=["s"]) is False
        assert await idem.claims.get("survey", key="x") is None
        assert await idem.claims.delete("survey", key="x") is False
        with pytest.raises(IdemError) as info:
            await idem.claims.claim("survey", parts=[""])
        assert info.value.field == "parts[0]"
        assert [x["id"] async for x in idem.receipts.iter()] == ["r1"]
    assert all(req.headers["authorization"] == "Bearer tok" for req in rec.requests)


def test_with_options_sets_timeout_and_retries_for_some_calls() -> None:
    seen: List[Any] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.extensions["timeout"]["read"])
        return httpx.Response(503)

    clock = FakeClock()
    idem = make(handler, clock, timeout=10, retries=2)
    quick = idem.with_options(timeout=1.5, retries=0)
    with pytest.raises(UnavailableError):
        quick.claims.claim("ns", key="k")
    assert seen == [1.5] and clock.sleeps == []
    with pytest.raises(UnavailableError):
        idem.claims.claim("ns", key="k")
    assert seen[1:] == [10, 10, 10] and len(clock.sleeps) == 2
    assert quick._http is idem._http  # shares the connections


@pytest.mark.anyio
async def test_async_with_options() -> None:
    seen: List[Any] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.extensions["timeout"]["read"])
        return httpx.Response(503)

    async with make_async(handler, FakeClock(), timeout=10) as idem:
        with pytest.raises(UnavailableError):
            await idem.with_options(timeout=0.5, retries=0).receipts.list()
    assert seen == [0.5]
