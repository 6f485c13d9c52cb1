"""Client tokens (contract §10): one per logical call, the same on each of its retries.

An in-memory idem answers each call's first attempt 503 ``outcome-unknown`` (the store's answer
lost, the write perhaps made) and records every request's body; the client retries, and the retry
must carry the very token of the first attempt, while two logical calls carry two tokens."""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Dict, List

import httpx
import pytest

from fakes import FakeClock, problem
from idem_client import OUTCOME_UNKNOWN, AsyncIdem, Idem, UnavailableError, claim_id

URL = "http://idem.test"
UUID_V4 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def claimed(parts: List[str]) -> Dict[str, Any]:
    return {
        "claimed": True,
        "namespace": "ns",
        "id": claim_id(parts),
        "parts": parts,
        "data": None,
        "created_at": "2026-01-01T00:00:00Z",
        "expires_at": None,
    }


def started(token: str = "lease-1", fence: int = 17) -> Dict[str, Any]:
    return {"status": "started", "id": claim_id("k"), "token": token, "lease_expires_at": "2030-01-01T00:00:00Z", "fence": fence}


class FirstLost:
    """Answers every odd request (each call's first attempt) 503 outcome-unknown, the others
    from ``answer``, and records the bodies of all of them."""

    def __init__(self, answer: Callable[[httpx.Request, Dict[str, Any]], httpx.Response]) -> None:
        self.answer = answer
        self.bodies: List[Dict[str, Any]] = []
        self.paths: List[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        self.bodies.append(body)
        self.paths.append(request.url.path)
        if len(self.bodies) % 2 == 1:
            return problem(503, "outcome-unknown", "the store's answer was lost", retry_after="1")
        return self.answer(request, body)

    def tokens(self) -> List[Any]:
        return [b.get("client_token") for b in self.bodies]


def answer(request: httpx.Request, body: Dict[str, Any]) -> httpx.Response:
    path = request.url.path
    if path.endswith("/begin"):
        return httpx.Response(201, json=started())
    if path.endswith("/complete"):
        return httpx.Response(200, json={"status": "completed", "id": claim_id("k"), "result": body.get("result")})
    if path.endswith("/batch"):
        return httpx.Response(200, json={"results": [claimed([i["key"]]) for i in body["items"]]})
    return httpx.Response(201, json=claimed([body["key"]]))


def make(handler: Callable[[httpx.Request], httpx.Response], clock: FakeClock, **kw: Any) -> Idem:
    return Idem(URL, transport=httpx.MockTransport(handler), sleep=clock.sleep, clock=clock, **kw)


def make_async(handler: Callable[[httpx.Request], httpx.Response], clock: FakeClock) -> AsyncIdem:
    return AsyncIdem(URL, transport=httpx.MockTransport(handler), sleep=clock.async_sleep, clock=clock)


def assert_retried_with_the_same_token(tokens: List[Any]) -> None:
    """Two logical calls, each sent twice: a, a, b, b with a != b, both UUID v4."""
    a, a_retry, b, b_retry = tokens
    assert isinstance(a, str) and UUID_V4.fullmatch(a), a
    assert isinstance(b, str) and UUID_V4.fullmatch(b), b
    assert a_retry == a, "the retry carries the first attempt's token"
    assert b_retry == b
    assert a != b, "two logical calls, two tokens"


def test_claim_retried_after_outcome_unknown_sends_the_same_token() -> None:
    fake, clock = FirstLost(answer), FakeClock()
    idem = make(fake, clock)
    assert idem.claims.claim("ns", key="k").claimed is True
    assert idem.claims.claim("ns", key="k").claimed is True
    assert_retried_with_the_same_token(fake.tokens())
    assert fake.bodies[1] == fake.bodies[0], "the retry is the same request"
    assert len(clock.sleeps) == 2 and all(1.0 <= s <= 1.1 for s in clock.sleeps)  # Retry-After: 1


def test_claim_batch_has_one_token_the_same_on_its_retry() -> None:
    fake = FirstLost(answer)
    idem = make(fake, FakeClock())
    for _ in range(2):
        assert [r.claimed for r in idem.claims.claim_batch("ns", ["a", "b"])] == [True, True]
    assert_retried_with_the_same_token(fake.tokens())
    assert all("client_token" not in item for b in fake.bodies for item in b["items"])


def test_begin_retried_sends_the_same_token_and_reads_the_fence() -> None:
    fake = FirstLost(answer)
    idem = make(fake, FakeClock())
    begun = idem.operations.begin("ns", key="k")
    assert begun.started and begun.token == "lease-1" and begun.fence == 17
    assert "fence=17" in repr(begun) and "lease-1" not in repr(begun)
    idem.operations.begin("ns", key="k")
    assert_retried_with_the_same_token(fake.tokens())


def test_every_begin_of_one_run_carries_one_token() -> None:
    # The first begin: 503 outcome-unknown; its retry: 409 in progress (someone else holds the
    # key); the next begin, after Retry-After: started. All three are one run: one token.
    answers = iter(
        [
            problem(503, "outcome-unknown", retry_after="1"),
            problem(409, "in-progress", retry_after="1"),
            httpx.Response(201, json=started()),
        ]
    )
    bodies: List[Dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        if request.url.path.endswith("/begin"):
            return next(answers, httpx.Response(201, json=started()))
        return answer(request, body)

    idem = make(handler, FakeClock())
    assert idem.operations.run("ns", lambda: "done", key="k", wait_timeout=10) == "done"
    begins = [b["client_token"] for b in bodies if "key" in b]
    assert len(begins) == 3 and len(set(begins)) == 1 and UUID_V4.fullmatch(begins[0])
    idem.operations.run("ns", lambda: "again", key="k")
    assert bodies[-2]["client_token"] != begins[0], "another run, another token"


def test_a_callers_own_token_is_sent_as_given_on_every_attempt() -> None:
    fake = FirstLost(answer)
    idem = make(fake, FakeClock())
    idem.claims.claim("ns", key="k", client_token="order-7/attempt")
    idem.claims.claim_batch("ns", ["a"], client_token="batch 7")
    idem.operations.begin("ns", key="k", client_token="begin-7")
    idem.operations.run("ns", lambda: 1, key="k", client_token="run-7")
    assert fake.tokens()[:8] == ["order-7/attempt"] * 2 + ["batch 7"] * 2 + ["begin-7"] * 2 + ["run-7"] * 2


def test_a_token_the_server_would_refuse_is_a_value_error_and_nothing_is_sent() -> None:
    fake = FirstLost(answer)
    idem = make(fake, FakeClock())
    for bad in ["", "naïve", "tab\there", "x" * 256]:
        with pytest.raises(ValueError):
            idem.claims.claim("ns", key="k", client_token=bad)
        with pytest.raises(ValueError):
            idem.claims.claim_batch("ns", ["k"], client_token=bad)
        with pytest.raises(ValueError):
            idem.operations.begin("ns", key="k", client_token=bad)
        with pytest.raises(ValueError):
            idem.operations.run("ns", lambda: 1, key="k", client_token=bad)
    assert fake.bodies == []


def test_outcome_unknown_after_every_retry_is_unavailable_with_its_type() -> None:
    bodies: List[Dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return problem(503, "outcome-unknown", "the store's answer was lost", retry_after="1")

    with pytest.raises(UnavailableError) as info:
        make(handler, FakeClock(), retries=2).claims.claim("ns", key="k")
    assert info.value.type == OUTCOME_UNKNOWN == "urn:idem:problem:outcome-unknown"
    assert info.value.status == 503 and info.value.retry_after == 1.0
    assert len(bodies) == 3 and len({b["client_token"] for b in bodies}) == 1


@pytest.mark.anyio
async def test_async_claim_batch_begin_and_run_reuse_their_token_on_retries() -> None:
    fake = FirstLost(answer)
    async with make_async(fake, FakeClock()) as idem:
        assert (await idem.claims.claim("ns", key="k")).claimed
        assert (await idem.claims.claim("ns", key="k")).claimed
        assert_retried_with_the_same_token(fake.tokens())
        fake.bodies.clear()
        await idem.claims.claim_batch("ns", ["a"])
        await idem.claims.claim_batch("ns", ["a"])
        assert_retried_with_the_same_token(fake.tokens())
        fake.bodies.clear()
        begun = await idem.operations.begin("ns", key="k")
        assert begun.fence == 17
        await idem.operations.begin("ns", key="k")
        assert_retried_with_the_same_token(fake.tokens())
        fake.bodies.clear()
        async def work() -> str:
            return "r"

        assert await idem.operations.run("ns", work, key="k", client_token="mine") == "r"
        assert fake.tokens()[:2] == ["mine", "mine"]
