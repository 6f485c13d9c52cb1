"""operations.run and @idempotent, sync and async, against an in-memory Operations API."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Dict, List, Tuple, cast

import httpx
import pytest

from fakes import FakeClock, FakeIdem, problem
from idem_client import AsyncIdem, Idem, InProgressError, MismatchError, claim_id
from idem_client._errors import LeaseLostError

URL = "http://idem.test"


def client(fake: FakeIdem, clock: FakeClock, **kw: Any) -> Idem:
    return Idem(URL, transport=httpx.MockTransport(fake.handler), sleep=clock.sleep, clock=clock, **kw)


def aclient(fake: FakeIdem, clock: FakeClock, **kw: Any) -> AsyncIdem:
    return AsyncIdem(URL, transport=httpx.MockTransport(fake.handler), sleep=clock.async_sleep, clock=clock, **kw)


class Boom(Exception):
    pass


# Sync


def test_started_runs_fn_and_completes() -> None:
    fake, calls = FakeIdem(), []
    idem = client(fake, FakeClock())

    def work() -> Dict[str, Any]:
        calls.append(1)
        return {"order": 7}

    assert idem.operations.run("orders", work, key="k1", request={"sku": "a"}, ttl_seconds=3600) == {"order": 7}
    assert calls == [1]
    begin = fake.log[0]
    assert begin[1] == "/v1/operations/orders/begin"
    assert begin[2]["key"] == "k1" and begin[2]["request"] == {"sku": "a"} and begin[2]["ttl_seconds"] == 3600
    complete = fake.log[1]
    assert complete[1] == f"/v1/operations/orders/{claim_id('k1')}/complete"
    assert complete[2]["result"] == {"order": 7} and complete[2]["token"]
    # Completed: the stored result, fn not called.
    assert idem.operations.run("orders", work, key="k1") == {"order": 7}
    assert calls == [1] and fake.count("/complete") == 1


def test_result_is_returned_as_stored_json() -> None:
    idem = client(FakeIdem(), FakeClock())
    pair: Any = idem.operations.run("ns", lambda: (1, 2), parts=["a", "b"])
    assert pair == [1, 2]  # what the server stores and later calls get: JSON
    assert idem.operations.run("ns", lambda: None, key="none") is None


def test_raising_fn_releases_and_reraises_then_runs_again() -> None:
    fake = FakeIdem()
    idem = client(fake, FakeClock())

    def fail() -> None:
        raise Boom("card declined")

    with pytest.raises(Boom, match="card declined"):
        idem.operations.run("ns", fail, key="k")
    assert fake.count("/release") == 1 and fake.count("/complete") == 0
    assert fake.ops == {}
    assert idem.operations.run("ns", lambda: "ok", key="k") == "ok"


def test_unserializable_result_releases_and_raises_type_error() -> None:
    fake = FakeIdem()
    with pytest.raises(TypeError):
        client(fake, FakeClock()).operations.run("ns", lambda: object(), key="k")
    assert fake.count("/release") == 1 and fake.ops == {}


def test_in_progress_waits_on_the_server_then_returns_the_result() -> None:
    fake, clock = FakeIdem(), FakeClock()
    id = claim_id("k")
    fake.hold(id)
    waits: List[Any] = []

    def holder_finishes(op_id: str, body: Dict[str, Any]) -> None:
        waits.append(body.get("wait_seconds"))
        fake.finish(op_id, {"done": True})

    fake.on_held = holder_finishes
    called: List[int] = []
    result = client(fake, clock, wait_timeout=20).operations.run("ns", lambda: called.append(1), key="k")
    assert result == {"done": True} and called == []
    assert waits == [20]  # the wait happened server-side: wait_seconds, no client sleep
    assert clock.sleeps == []


def test_in_progress_retries_honouring_retry_after_until_done() -> None:
    fake, clock = FakeIdem(), FakeClock()
    id = claim_id("k")
    fake.hold(id)
    seen: List[int] = []

    def finish_on_third(op_id: str, body: Dict[str, Any]) -> None:
        seen.append(body.get("wait_seconds", 0))
        if len(seen) == 3:
            fake.finish(op_id, 42)

    fake.on_held = finish_on_third
    assert client(fake, clock).operations.run("ns", lambda: 0, key="k") == 42
    assert clock.sleeps == [2.0, 2.0]  # the fake answers Retry-After: 2
    assert seen[0] == 30  # at most 30 s per begin, the server's limit


def test_after_a_full_server_wait_the_next_begin_goes_at_once() -> None:
    # A begin waiting on the server is woken by the completion; a sleeping client is not. So
    # after the server held a begin for its whole wait_seconds, the client begins again at
    # once (Retry-After, here 2 s, is for clients that do not wait on the server).
    fake, clock = FakeIdem(), FakeClock()
    fake.hold(claim_id("k"))
    asked: List[int] = []

    def server_waits(op_id: str, body: Dict[str, Any]) -> None:
        asked.append(body.get("wait_seconds", 0))
        clock.now += body.get("wait_seconds", 0)  # the server held the request this long
        if len(asked) == 3:
            fake.finish(op_id, "done")

    fake.on_held = server_waits
    done: Any = client(fake, clock, wait_timeout=90).operations.run("ns", lambda: 0, key="k")
    assert done == "done"
    assert asked == [30, 30, 30] and clock.sleeps == []

    fake.hold(claim_id("k2"))
    asked.clear()
    with pytest.raises(InProgressError):
        client(fake, clock).operations.run("ns", lambda: 0, key="k2", wait_timeout=45)
    assert asked == [30, 15] and clock.sleeps == []


def test_in_progress_until_deadline_raises() -> None:
    fake, clock = FakeIdem(), FakeClock()
    fake.hold(claim_id("k"))
    with pytest.raises(InProgressError) as info:
        client(fake, clock).operations.run("ns", lambda: 0, key="k", wait_timeout=5)
    assert info.value.status == 409 and info.value.type == "urn:idem:problem:in-progress"
    assert sum(clock.sleeps) == pytest.approx(5.0)
    assert fake.count("/begin") == 4  # at 0, 2, 4 and 5 s


def test_mismatch_raises() -> None:
    fake = FakeIdem()
    idem = client(fake, FakeClock())
    idem.operations.run("ns", lambda: 1, key="k", request={"amount": 1})
    with pytest.raises(MismatchError) as info:
        idem.operations.run("ns", lambda: 1, key="k", request={"amount": 2})
    assert info.value.status == 422


def test_lease_is_extended_while_fn_runs_long() -> None:
    fake = FakeIdem()
    idem = client(fake, FakeClock())
    def slow() -> str:
        time.sleep(0.8)
        return "slow"

    assert idem.operations.run("ns", slow, key="k", lease_seconds=1) == "slow"
    extends = [body for _, path, body in fake.log if path.endswith("/extend")]
    assert len(extends) >= 1 and extends[0]["lease_seconds"] == 1
    # A quick fn is not extended.
    idem.operations.run("ns", lambda: "fast", key="k2", lease_seconds=1)
    assert fake.count("/extend") == len(extends)


def test_lost_lease_surfaces_on_complete() -> None:
    fake = FakeIdem()
    idem = client(fake, FakeClock())

    def work() -> str:
        fake.ops[claim_id("k")]["token"] = "stolen"
        return "x"

    with pytest.raises(LeaseLostError):
        idem.operations.run("ns", work, key="k")


def test_low_level_calls() -> None:
    fake = FakeIdem()
    idem = client(fake, FakeClock())
    b = idem.operations.begin("ns", parts=["a", "b"], lease_seconds=5)
    assert b.started and b.token and b.id == claim_id(["a", "b"])
    assert b.token not in repr(b)
    assert idem.operations.extend("ns", b.id, b.token, 10) == {"lease_expires_at": "2030-01-01T00:00:00Z"}
    got = idem.operations.get("ns", parts=["a", "b"])
    assert got is not None and got["status"] == "in_progress" and "token" not in got
    with pytest.raises(LeaseLostError):
        idem.operations.complete("ns", b.id, "wrong", 1)
    assert idem.operations.complete("ns", b.id, b.token, {"r": 1})["status"] == "completed"
    again = idem.operations.begin("ns", parts=["a", "b"])
    assert again.completed and again.result == {"r": 1} and again.token is None
    assert idem.operations.delete("ns", parts=["a", "b"]) is True
    assert idem.operations.delete("ns", parts=["a", "b"]) is False
    assert idem.operations.get("ns", id=b.id) is None
    b2 = idem.operations.begin("ns", key="z")
    assert b2.token is not None
    idem.operations.release("ns", b2.id, b2.token)
    assert fake.ops == {}


def test_idempotent_decorator_sync() -> None:
    fake = FakeIdem()
    idem = client(fake, FakeClock())
    calls: List[Dict[str, Any]] = []

    @idem.idempotent("payments", key=lambda order: order["id"], request=lambda order: order)
    def charge(order: Dict[str, Any]) -> Dict[str, Any]:
        calls.append(order)
        return {"charged": order["amount"]}

    assert charge.__name__ == "charge"
    assert charge({"id": 7, "amount": 5}) == {"charged": 5}
    assert charge({"id": 7, "amount": 5}) == {"charged": 5}
    assert len(calls) == 1
    assert fake.log[0][2]["key"] == "7"  # an int key becomes its string
    with pytest.raises(MismatchError):
        charge({"id": 7, "amount": 6})
    assert charge({"id": 8, "amount": 1}) == {"charged": 1} and len(calls) == 2

    @idem.idempotent("jobs", key=lambda a, b=0: ["job", a, b])
    def add(a: int, b: int = 0) -> int:
        return a + b

    assert add(1, b=2) == 3 and fake.log[-2][2]["parts"] == ["job", "1", "2"]

    with pytest.raises(TypeError):

        @idem.idempotent("x", key=lambda: "k")
        async def nope() -> None: ...


def test_idempotent_reraises_and_releases() -> None:
    fake = FakeIdem()
    idem = client(fake, FakeClock())
    n: List[int] = []

    @idem.idempotent("ns", key=lambda: "once")
    def flaky() -> str:
        n.append(1)
        if len(n) == 1:
            raise Boom()
        return "second time lucky"

    with pytest.raises(Boom):
        flaky()
    assert flaky() == "second time lucky" and flaky() == "second time lucky" and len(n) == 2


def test_idempotent_function_keeps_its_lease_while_it_runs_long() -> None:
    fake = FakeIdem()
    idem = client(fake, FakeClock())

    @idem.idempotent("ns", key=lambda n: f"slow-{n}", lease_seconds=1)
    def slow(n: int) -> int:
        time.sleep(0.8)  # longer than half the 1 s lease: only a heartbeat keeps the key
        return n

    assert slow(7) == 7
    extends = [body for _, path, body in fake.log if path.endswith("/extend")]
    assert len(extends) >= 1 and extends[0]["lease_seconds"] == 1
    assert slow(7) == 7 and fake.count("/extend") == len(extends), "a replay runs nothing, extends nothing"


# Async


@pytest.mark.anyio
async def test_async_run_started_completed_and_release() -> None:
    fake = FakeIdem()
    calls: List[int] = []

    async def work() -> Dict[str, int]:
        calls.append(1)
        await asyncio.sleep(0)
        return {"n": len(calls)}

    async def fail() -> None:
        raise Boom()

    async with aclient(fake, FakeClock()) as idem:
        assert await idem.operations.run("ns", work, key="k") == {"n": 1}
        assert await idem.operations.run("ns", work, key="k") == {"n": 1}
        assert calls == [1]
        with pytest.raises(Boom):
            await idem.operations.run("ns", fail, key="f")
        assert fake.count("/release") == 1 and claim_id("f") not in fake.ops
        with pytest.raises(MismatchError):
            await idem.operations.run("ns", work, key="m", request=1)
            await idem.operations.run("ns", work, key="m", request=2)


@pytest.mark.anyio
async def test_async_in_progress_waits_then_result_or_deadline() -> None:
    fake, clock = FakeIdem(), FakeClock()
    fake.hold(claim_id("k"))
    seen: List[int] = []

    def finish_on_second(op_id: str, body: Dict[str, Any]) -> None:
        seen.append(1)
        if len(seen) == 2:
            fake.finish(op_id, "theirs")

    fake.on_held = finish_on_second
    async with aclient(fake, clock) as idem:
        theirs: Any = await idem.operations.run("ns", lambda: asyncio.sleep(0), key="k")
        assert theirs == "theirs"
        assert clock.sleeps == [2.0]
        fake.hold(claim_id("held"))
        fake.on_held = None
        with pytest.raises(InProgressError):
            await idem.operations.run("ns", lambda: asyncio.sleep(0), key="held", wait_timeout=3)


@pytest.mark.anyio
async def test_async_lease_is_extended_by_a_task() -> None:
    fake = FakeIdem()

    async def slow() -> str:
        await asyncio.sleep(0.8)
        return "slow"

    async with aclient(fake, FakeClock()) as idem:
        assert await idem.operations.run("ns", slow, key="k", lease_seconds=1) == "slow"
    assert fake.count("/extend") >= 1


@pytest.mark.anyio
async def test_async_cancellation_releases_and_propagates() -> None:
    fake = FakeIdem()
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.sleep(3600)

    async with aclient(fake, FakeClock()) as idem:
        task = asyncio.ensure_future(idem.operations.run("ns", forever, key="k"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert fake.count("/release") == 1


@pytest.mark.anyio
async def test_async_idempotent_function_keeps_its_lease_while_it_runs_long() -> None:
    fake = FakeIdem()
    async with aclient(fake, FakeClock()) as idem:

        @idem.idempotent("ns", key=lambda: "slow", lease_seconds=1)
        async def slow() -> str:
            await asyncio.sleep(0.8)
            return "slow"

        assert await slow() == "slow"
    assert fake.count("/extend") >= 1


@pytest.mark.anyio
async def test_idempotent_decorator_async() -> None:
    fake = FakeIdem()
    async with aclient(fake, FakeClock()) as idem:
        calls: List[str] = []

        @idem.idempotent("orders", key=lambda user, cart: [user, cart["id"]], request=lambda user, cart: cart)
        async def create_order(user: str, cart: Dict[str, Any]) -> Dict[str, Any]:
            calls.append(user)
            return {"order_id": f"o-{cart['id']}"}

        results = [await create_order("u1", {"id": "c1"}) for _ in range(3)]
        assert results == [{"order_id": "o-c1"}] * 3 and calls == ["u1"]

        with pytest.raises(TypeError):

            @idem.idempotent("x", key=lambda: "k")
            def sync_fn() -> None: ...


# The heartbeat: the gateway's rule (real time; the fake answers at once).


def timed(fake: FakeIdem, extend: Any = None, begin_delay: float = 0.0) -> Tuple[Any, List[Tuple[str, float]]]:
    """A handler in front of ``fake`` that logs ``(what, time.monotonic())`` of each call, answers
    extends with ``extend(n)`` when it gives a response, and holds a begin's answer back."""
    log: List[Tuple[str, float]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        what = request.url.path.rsplit("/", 1)[-1]
        log.append((what, time.monotonic()))
        if what == "extend" and extend is not None:
            answer = extend(sum(1 for w, _ in log if w == "extend"))
            if answer is not None:
                return cast(httpx.Response, answer)
        response = fake.handler(request)
        if what == "begin":
            time.sleep(begin_delay)
        return response

    return handler, log


def work(seconds: float, result: str) -> Callable[[], str]:
    def fn() -> str:
        time.sleep(seconds)
        return result

    return fn


def at(log: List[Tuple[str, float]], what: str) -> List[float]:
    begun = next(t for w, t in log if w == "begin")
    return [round(t - begun, 3) for w, t in log if w == what]


def test_the_heartbeat_is_every_third_of_the_lease_counted_from_before_the_begin() -> None:
    # The begin's answer comes 200 ms late: the first beat is due a third of the lease (333 ms)
    # after the begin was sent, so 133 ms after its answer; the next 333 ms after that one.
    handler, log = timed(FakeIdem(), begin_delay=0.2)
    idem = Idem(URL, transport=httpx.MockTransport(handler))
    assert idem.operations.run("ns", work(0.6, "ok"), key="k", lease_seconds=1) == "ok"
    beats = at(log, "extend")
    assert len(beats) >= 2, beats
    assert 0.3 <= beats[0] < 0.5 and 0.3 <= beats[1] - beats[0] < 0.5, beats


def test_a_failed_heartbeat_is_tried_again_within_250_ms_one_attempt_each() -> None:
    # Three extends answered 503 with Retry-After: 1: each is one attempt (no transport retry, no
    # Retry-After wait), tried again 250 ms later, not a whole interval later.
    unavailable = lambda n: problem(503, "store-unavailable", retry_after="1") if n <= 3 else None  # noqa: E731
    handler, log = timed(FakeIdem(), extend=unavailable)
    clock = FakeClock()
    idem = Idem(URL, transport=httpx.MockTransport(handler), sleep=clock.sleep, clock=clock)
    assert idem.operations.run("ns", work(1.9, "kept"), key="k", lease_seconds=2) == "kept"
    beats = at(log, "extend")
    assert len(beats) >= 4 and 0.6 <= beats[0] < 0.8, beats
    gaps = [b - a for a, b in zip(beats[:4], beats[1:4])]
    assert all(0.2 <= g < 0.55 for g in gaps), beats
    assert clock.sleeps == [], "the heartbeat never sat in the transport's Retry-After wait"


def test_a_heartbeat_goes_on_past_the_lease_end_until_one_gets_through() -> None:
    # A lease that ran out is still this caller's until another takes the key: the beats go on every
    # 250 ms, and the one that gets through keeps the work's lease.
    down = lambda n: httpx.Response(502, text="bad gateway") if n <= 5 else None  # noqa: E731
    fake = FakeIdem()
    handler, log = timed(fake, extend=down)
    idem = Idem(URL, transport=httpx.MockTransport(handler))
    assert idem.operations.run("ns", work(1.9, "late"), key="k", lease_seconds=1) == "late"
    beats = at(log, "extend")
    assert len(beats) >= 6 and beats[5] > 1.0, beats
    assert all(b - a < 0.55 for a, b in zip(beats[:6], beats[1:6])), beats
    assert fake.count("/complete") == 1 and fake.count("/release") == 0


def test_lease_lost_stops_the_heartbeat() -> None:
    fake = FakeIdem()

    def taken(n: int) -> httpx.Response:
        fake.ops[claim_id("k")]["token"] = "another caller's"
        return problem(409, "lease-lost")

    handler, log = timed(fake, extend=taken)
    idem = Idem(URL, transport=httpx.MockTransport(handler))
    with pytest.raises(LeaseLostError):
        idem.operations.run("ns", work(1.0, "lost"), key="k", lease_seconds=1)
    assert len(at(log, "extend")) == 1 and fake.count("/release") == 0


@pytest.mark.anyio
async def test_async_a_failed_heartbeat_is_tried_again_within_250_ms() -> None:
    unavailable = lambda n: problem(503, "store-unavailable", retry_after="1") if n <= 3 else None  # noqa: E731
    handler, log = timed(FakeIdem(), extend=unavailable)

    async def slow() -> str:
        await asyncio.sleep(1.9)
        return "kept"

    clock = FakeClock()
    async with AsyncIdem(URL, transport=httpx.MockTransport(handler), sleep=clock.async_sleep, clock=clock) as idem:
        assert await idem.operations.run("ns", slow, key="k", lease_seconds=2) == "kept"
    beats = at(log, "extend")
    assert len(beats) >= 4 and 0.6 <= beats[0] < 0.8, beats
    assert all(0.2 <= b - a < 0.55 for a, b in zip(beats[:4], beats[1:4])), beats
    assert clock.sleeps == []
