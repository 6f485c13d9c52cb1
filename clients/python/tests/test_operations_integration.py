"""The Operations API (docs/reference/api.md#operations) through the client, against a real
`idem serve`.

Marked `operations` and deselected by default until the server has the API; run with
`python -m pytest -m operations` (or `-m ""` for everything).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Dict, Iterator, List

import pytest

from conftest import IdemServer
from fakes import LosingTransport
from idem_client import (
    AsyncIdem,
    Idem,
    IdemError,
    InProgressError,
    LeaseLostError,
    MismatchError,
    claim_id,
)

pytestmark = pytest.mark.operations


@pytest.fixture
def idem(server: IdemServer) -> Iterator[Idem]:
    with Idem(server.url, timeout=10) as client:
        yield client


class Counter:
    def __init__(self) -> None:
        self.n = 0
        self.lock = threading.Lock()

    def __call__(self) -> int:
        with self.lock:
            self.n += 1
            return self.n


def test_run_started_then_completed(idem: Idem, ns: str) -> None:
    calls = Counter()

    def create_order() -> Dict[str, Any]:
        calls()
        return {"order_id": "o-1", "total": 120}

    assert idem.operations.run(ns, create_order, key="k", request={"sku": "a"}) == {"order_id": "o-1", "total": 120}
    assert idem.operations.run(ns, create_order, key="k", request={"sku": "a"}) == {"order_id": "o-1", "total": 120}
    assert idem.operations.run(ns, create_order, key="k") == {"order_id": "o-1", "total": 120}  # no request matches any
    assert calls.n == 1
    op = idem.operations.get(ns, key="k")
    assert op is not None and op["status"] == "completed" and "token" not in op
    assert op["result"] == {"order_id": "o-1", "total": 120}
    with pytest.raises(MismatchError) as info:
        idem.operations.run(ns, create_order, key="k", request={"sku": "b"})
    assert info.value.status == 422 and info.value.type == "urn:idem:problem:fingerprint-mismatch"
    assert idem.operations.delete(ns, key="k") is True
    assert idem.operations.delete(ns, key="k") is False
    assert idem.operations.get(ns, key="k") is None
    idem.operations.run(ns, create_order, key="k")
    assert calls.n == 2


def test_a_claim_and_an_operation_with_one_key_do_not_see_each_other(idem: Idem, ns: str) -> None:
    idem.claims.claim(ns, key="shared")
    assert idem.operations.run(ns, lambda: "ran", key="shared") == "ran"
    assert idem.claims.claim(ns, key="other").claimed
    assert idem.operations.get(ns, key="other") is None


def test_raising_fn_releases_so_the_work_runs_again(idem: Idem, ns: str) -> None:
    class Declined(Exception):
        pass

    def fail() -> None:
        raise Declined()

    with pytest.raises(Declined):
        idem.operations.run(ns, fail, parts=["pay", "o-1"])
    assert idem.operations.get(ns, parts=["pay", "o-1"]) is None  # released: absent
    assert idem.operations.run(ns, lambda: "paid", parts=["pay", "o-1"]) == "paid"


def test_low_level_begin_extend_complete_release(idem: Idem, ns: str) -> None:
    b = idem.operations.begin(ns, parts=["job", "1"], request={"a": 1, "b": 2}, lease_seconds=30)
    assert b.started and b.token and b.id == claim_id(["job", "1"]) and b.lease_expires_at
    # Canonical JSON: key order does not matter for the fingerprint.
    with pytest.raises(InProgressError) as held:
        idem.operations.begin(ns, parts=["job", "1"], request={"b": 2, "a": 1})
    assert held.value.status == 409 and held.value.type == "urn:idem:problem:in-progress"
    with pytest.raises(MismatchError):
        idem.operations.begin(ns, parts=["job", "1"], request={"a": 2})
    op = idem.operations.get(ns, id=b.id)
    assert op is not None and op["status"] == "in_progress" and "token" not in op
    with pytest.raises(InProgressError):
        idem.operations.delete(ns, id=b.id)  # a held key cannot be deleted
    assert "lease_expires_at" in idem.operations.extend(ns, b.id, b.token, 60)
    with pytest.raises(LeaseLostError) as lost:
        idem.operations.complete(ns, b.id, "0" * 32, {"x": 1})
    assert lost.value.status == 409
    done = idem.operations.complete(ns, b.id, b.token, {"x": 1})
    assert done["status"] == "completed"
    assert idem.operations.complete(ns, b.id, b.token, {"x": 2})["result"] == {"x": 1}  # unchanged
    again = idem.operations.begin(ns, parts=["job", "1"])
    assert again.completed and again.result == {"x": 1} and again.token is None
    with pytest.raises(LeaseLostError):
        idem.operations.extend(ns, b.id, b.token, 60)

    r = idem.operations.begin(ns, key="release-me")
    assert r.token is not None
    idem.operations.release(ns, r.id, r.token)
    assert idem.operations.get(ns, key="release-me") is None
    with pytest.raises(LeaseLostError):
        idem.operations.release(ns, r.id, r.token)


def test_a_begin_whose_answer_was_lost_gets_its_lease_back_same_token_and_fence(server: IdemServer, ns: str) -> None:
    lossy = LosingTransport(lose=1)
    with Idem(server.url, timeout=5, retries=1, backoff=0.01, transport=lossy) as client:
        begun = client.operations.begin(ns, key="lost", request={"n": 1})
    status, body = lossy.lost[0]
    assert status == 201 and body["status"] == "started"  # the first attempt took the key
    assert begun.started  # and its retry is handed the lease, not a 409
    assert (begun.token, begun.fence) == (body["token"], body["fence"])
    assert isinstance(begun.fence, int) and begun.fence > 0
    assert lossy.sent[1]["client_token"] == lossy.sent[0]["client_token"]
    with Idem(server.url, timeout=5) as other:
        with pytest.raises(InProgressError):
            other.operations.begin(ns, key="lost", request={"n": 1})
        other.operations.complete(ns, begun.id, begun.token or "", "done")


def test_begin_with_a_client_token_same_lease_again_and_fences_grow(idem: Idem, ns: str) -> None:
    first = idem.operations.begin(ns, key="mine", client_token="worker-7/job-42")
    again = idem.operations.begin(ns, key="mine", client_token="worker-7/job-42")
    assert again.started and (again.token, again.fence) == (first.token, first.fence)
    # the retry renews the lease from its own ask, never shortening it
    assert again.lease_expires_at and first.lease_expires_at
    assert again.lease_expires_at >= first.lease_expires_at
    with pytest.raises(InProgressError):
        idem.operations.begin(ns, key="mine", client_token="worker-8")
    idem.operations.release(ns, first.id, first.token or "")
    taken = idem.operations.begin(ns, key="mine", client_token="worker-8")
    assert taken.started and taken.fence is not None and first.fence is not None
    assert taken.fence > first.fence  # every take of a key gets a greater fence
    idem.operations.complete(ns, taken.id, taken.token or "", 1)
    done = idem.operations.begin(ns, key="mine", client_token="worker-7/job-42")
    assert done.completed and done.fence is None


def test_run_whose_begin_answer_was_lost_runs_fn_once(server: IdemServer, ns: str) -> None:
    lossy = LosingTransport(lose=1)
    calls = Counter()
    with Idem(server.url, timeout=5, retries=1, backoff=0.01, transport=lossy) as client:
        assert client.operations.run(ns, calls, key="run-lost", wait_timeout=5) == 1
    assert calls.n == 1 and lossy.lost[0][1]["status"] == "started"
    with Idem(server.url, timeout=5) as other:
        op = other.operations.get(ns, key="run-lost")
        assert op is not None and op["status"] == "completed"


def test_bad_input_is_a_400_naming_the_field(idem: Idem, ns: str) -> None:
    with pytest.raises(IdemError) as info:
        idem.operations.begin(ns, parts=[""])
    assert info.value.status == 400 and info.value.field == "parts[0]"
    with pytest.raises(IdemError) as info:
        idem.operations.begin(ns, key="k", lease_seconds=0)
    assert info.value.status == 400 and info.value.field == "lease_seconds"


def test_waits_for_a_running_holder_then_returns_its_result(idem: Idem, ns: str) -> None:
    b = idem.operations.begin(ns, key="slow", lease_seconds=30)
    assert b.token is not None

    def finish_later() -> None:
        time.sleep(0.5)
        idem.operations.complete(ns, b.id, b.token or "", "theirs")

    t = threading.Thread(target=finish_later)
    t.start()
    started = time.monotonic()
    called: List[int] = []
    assert idem.operations.run(ns, lambda: called.append(1), key="slow") == "theirs"
    t.join()
    assert called == [] and time.monotonic() - started < 5


def test_gives_up_waiting_at_the_deadline(idem: Idem, ns: str) -> None:
    idem.operations.begin(ns, key="stuck", lease_seconds=60)
    started = time.monotonic()
    with pytest.raises(InProgressError):
        idem.operations.run(ns, lambda: 1, key="stuck", wait_timeout=1.5)
    assert 1.0 <= time.monotonic() - started < 6


def test_an_ended_lease_frees_the_key_for_a_waiter(idem: Idem, ns: str) -> None:
    idem.operations.begin(ns, key="crashed", lease_seconds=1)  # and never completes
    assert idem.operations.run(ns, lambda: "mine", key="crashed", wait_timeout=10) == "mine"


def test_long_work_keeps_its_lease_by_heartbeat(idem: Idem, server: IdemServer, ns: str) -> None:
    seen: List[str] = []

    def long_work() -> str:
        time.sleep(2.5)  # longer than the 1 s lease: only extensions keep it
        return "done"

    def probe() -> None:
        time.sleep(1.8)
        with Idem(server.url) as other:
            try:
                other.operations.begin(ns, key="long")
                seen.append("taken")
            except InProgressError:
                seen.append("held")

    t = threading.Thread(target=probe)
    t.start()
    assert idem.operations.run(ns, long_work, key="long", lease_seconds=1) == "done"
    t.join()
    assert seen == ["held"]


def test_ttl_counts_from_completion(idem: Idem, ns: str) -> None:
    idem.operations.run(ns, lambda: 1, key="short", ttl_seconds=1)
    op = idem.operations.get(ns, key="short")
    assert op is not None and op["status"] == "completed" and op.get("expires_at")
    deadline = time.monotonic() + 5
    while idem.operations.get(ns, key="short") is not None:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert idem.operations.run(ns, lambda: 2, key="short") == 2


def test_idempotent_decorator(idem: Idem, ns: str) -> None:
    calls = Counter()

    @idem.idempotent(ns, key=lambda order: order["id"], request=lambda order: order)
    def create_order(order: Dict[str, Any]) -> Dict[str, Any]:
        return {"order_id": f"o-{order['id']}", "n": calls()}

    assert create_order({"id": 1, "sku": "a"}) == {"order_id": "o-1", "n": 1}
    assert create_order({"id": 1, "sku": "a"}) == {"order_id": "o-1", "n": 1}
    assert create_order({"id": 2, "sku": "a"}) == {"order_id": "o-2", "n": 2}
    with pytest.raises(MismatchError):
        create_order({"id": 1, "sku": "b"})


def test_200_concurrent_runs_of_one_key_run_once(server: IdemServer, ns: str) -> None:
    calls = Counter()

    def work() -> Dict[str, Any]:
        n = calls()
        time.sleep(0.3)
        return {"ran": n}

    results: List[Any] = []
    errors: List[BaseException] = []
    lock = threading.Lock()
    with Idem(server.url, timeout=30) as idem:

        def one() -> None:
            try:
                r = idem.operations.run(ns, work, key="hot", request={"q": 1}, wait_timeout=30)
                with lock:
                    results.append(r)
            except BaseException as e:  # noqa: BLE001 - collected and asserted below
                with lock:
                    errors.append(e)

        threads = [threading.Thread(target=one) for _ in range(200)]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
    assert errors == []
    assert calls.n == 1
    assert results == [{"ran": 1}] * 200
    # Waiters are woken by the completion; they never starve the holder's own calls.
    assert elapsed < 15


@pytest.mark.anyio
async def test_async_200_concurrent_runs_of_one_key_run_once(server: IdemServer, ns: str) -> None:
    calls = Counter()

    async def work() -> Dict[str, Any]:
        n = calls()
        await asyncio.sleep(0.3)
        return {"ran": n}

    async with AsyncIdem(server.url, timeout=30) as idem:
        started = time.monotonic()
        results = await asyncio.gather(
            *(idem.operations.run(ns, work, key="hot", wait_timeout=30) for _ in range(200))
        )
        elapsed = time.monotonic() - started
    assert elapsed < 15
    assert calls.n == 1
    assert results == [{"ran": 1}] * 200


@pytest.mark.anyio
async def test_async_run_release_heartbeat_and_decorator(server: IdemServer, ns: str) -> None:
    async with AsyncIdem(server.url) as idem:
        async def fail() -> None:
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError):
            await idem.operations.run(ns, fail, key="f")
        assert await idem.operations.get(ns, key="f") is None

        async def slow() -> str:
            await asyncio.sleep(2.2)
            return "slow"

        async def probe() -> str:
            await asyncio.sleep(1.6)
            try:
                await idem.operations.begin(ns, key="long")
                return "taken"
            except InProgressError:
                return "held"

        result, seen = await asyncio.gather(idem.operations.run(ns, slow, key="long", lease_seconds=1), probe())
        assert (result, seen) == ("slow", "held")

        calls = Counter()

        @idem.idempotent(ns, key=lambda user, cart: [user, cart])
        async def checkout(user: str, cart: str) -> Dict[str, Any]:
            return {"n": calls()}

        assert [await checkout("u", "c") for _ in range(3)] == [{"n": 1}] * 3
        b = await idem.operations.begin(ns, parts=["u", "c"])
        assert b.completed and b.result == {"n": 1}
