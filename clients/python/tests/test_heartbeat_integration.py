"""operations.run's heartbeat against a real idem behind a proxy (tests/proxy.py): the gateway's
rule. The lease counts from before the begin was sent; it is extended every third of it; a failed
extension is tried again within 250 ms, so a store outage of a few seconds at the beat costs
nothing."""

from __future__ import annotations

import asyncio
import time
from typing import Iterator, List, Optional, Tuple

import pytest

from conftest import IdemServer
from idem_client import AsyncIdem, Idem
from proxy import STORE_UNAVAILABLE, Entry, Plan, Proxy

pytestmark = pytest.mark.operations

LEASE = 6  # seconds; the first beat is due 2 s after the begin was sent
WORK = 9.0  # longer than the lease: only the heartbeat keeps the key
OUTAGE = (1.8, 4.8)  # seconds after the begin arrived: every extend is answered 503, Retry-After: 1


def outage_proxy(server: IdemServer) -> Proxy:
    began: List[float] = []

    def decide(entry: Entry) -> Optional[Plan]:
        if entry.path.endswith("/begin") and not began:
            began.append(entry.at)
        if entry.path.endswith("/extend") and began and OUTAGE[0] <= entry.at - began[0] < OUTAGE[1]:
            return STORE_UNAVAILABLE
        return None

    return Proxy(server.url, decide)


@pytest.fixture
def outage(server: IdemServer) -> Iterator[Proxy]:
    px = outage_proxy(server)
    yield px
    px.close()


def check_beats(px: Proxy) -> None:
    """The refused beats were tried again every 250 ms (never a whole interval, nor Retry-After),
    and the first after the outage got through at once."""
    begun = px.entries("/begin")[0].at
    beats: List[Tuple[float, int]] = [(round(e.at - begun, 3), e.status) for e in px.entries("/extend")]
    refused = [t for t, status in beats if status == 503]
    assert len(refused) >= 8, beats
    assert refused[0] < 2.5, f"the first beat is due a third of the lease after the begin was sent: {beats}"
    assert all(b - a < 0.7 for a, b in zip(refused, refused[1:])), beats
    through = [t for t, status in beats if status == 200 and t >= OUTAGE[1]]
    assert through and through[0] < OUTAGE[1] + 0.7, beats
    assert len([t for t, status in beats if status == 200]) >= 2, beats


def test_a_heartbeat_across_a_3s_store_outage_at_the_beat_keeps_its_lease(server: IdemServer, outage: Proxy, ns: str) -> None:
    runs: List[int] = []

    def work() -> str:
        runs.append(1)
        time.sleep(WORK)
        return "done"

    with Idem(outage.url, retries=2) as idem:
        assert idem.operations.run(ns, work, key="k", lease_seconds=LEASE) == "done"
    assert runs == [1]
    with Idem(server.url) as direct:
        record = direct.operations.get(ns, key="k")
    assert record is not None and record["status"] == "completed" and record["result"] == "done"
    check_beats(outage)


@pytest.mark.anyio
async def test_an_async_heartbeat_across_a_3s_store_outage_at_the_beat_keeps_its_lease(
    server: IdemServer, outage: Proxy, ns: str
) -> None:
    runs: List[int] = []

    async def work() -> str:
        runs.append(1)
        await asyncio.sleep(WORK)
        return "done"

    async with AsyncIdem(outage.url, retries=2) as idem:
        assert await idem.operations.run(ns, work, key="k", lease_seconds=LEASE) == "done"
    assert runs == [1]
    async with AsyncIdem(server.url) as direct:
        record = await direct.operations.get(ns, key="k")
    assert record is not None and record["status"] == "completed" and record["result"] == "done"
    check_beats(outage)


def test_the_lease_counts_from_before_the_begin_was_sent(server: IdemServer, ns: str) -> None:
    # A 3 s lease whose begin's answer is held back 750 ms: the first beat is due 1 s after the
    # begin was sent, not 1 s after its answer.
    px = Proxy(server.url, lambda e: Plan(delay=0.75) if e.path.endswith("/begin") else None)
    try:

        def work() -> str:
            time.sleep(1.3)
            return "ok"

        with Idem(px.url) as idem:
            assert idem.operations.run(ns, work, key="k", lease_seconds=3) == "ok"
        begun = px.entries("/begin")[0].at
        beats = px.entries("/extend")
        assert beats, "a beat was sent"
        first = beats[0].at - begun
        assert 0.8 <= first < 1.45, f"the first beat {first:.3f} s after the begin was sent, want 1 s"
        assert beats[0].status == 200
    finally:
        px.close()
