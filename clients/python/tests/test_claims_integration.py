"""The client against a real `idem serve`: claims, errors, auth; sync and async."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest

from conftest import IdemServer
from fakes import LosingTransport
from idem_client import AsyncIdem, Idem, IdemError, claim_id

VECTORS: List[Dict[str, Any]] = json.loads((Path(__file__).parents[2] / "testdata" / "claim_ids.json").read_text("utf-8"))["vectors"]


@pytest.fixture
def idem(server: IdemServer) -> Iterator[Idem]:
    with Idem(server.url, timeout=5) as client:
        yield client


def test_claim_new_then_existing(idem: Idem, ns: str) -> None:
    parts = ["scenario-1", "user-3", "node-2"]
    first = idem.claims.claim(ns, parts=parts, data={"answer": "A"}, ttl_seconds=3600)
    assert first.claimed is True
    rec = first.record
    assert set(rec) == {"namespace", "id", "parts", "data", "created_at", "expires_at"}
    assert rec["namespace"] == ns and rec["parts"] == parts and rec["data"] == {"answer": "A"}
    assert rec["id"] == claim_id(parts) and rec["expires_at"] is not None
    again = idem.claims.claim(ns, parts=parts, data={"answer": "B"})
    assert again.claimed is False and again.record == rec  # the first record, unchanged
    never = idem.claims.claim(ns, key="no-ttl")
    assert never.claimed and never.record["expires_at"] is None and never.record["parts"] == ["no-ttl"]


def test_claim_id_equals_the_servers_id(idem: Idem, ns: str) -> None:
    keyed = [v for v in VECTORS if "key" in v]
    assert keyed, "no single-key vectors"
    # Every vector in its parts form, then the one-part ones again in their key form.
    items = [{"parts": v["parts"]} for v in VECTORS] + [{"key": v["key"]} for v in keyed]
    results = idem.claims.claim_batch(ns, items)
    assert len(results) == len(items)
    for vector, result in zip([*VECTORS, *keyed], results):
        assert result.record["id"] == vector["id"] == claim_id(vector["parts"])


def test_batch_in_request_order_first_of_equal_keys_wins(idem: Idem, ns: str) -> None:
    idem.claims.claim(ns, key="u2")
    urls = [f"u{i}" for i in range(500)]
    results = idem.claims.claim_batch(ns, [*urls[:10], {"key": "u3", "data": 1}, *urls[10:]])
    assert len(results) == 501
    assert [r.record["parts"][0] for r in results] == [*urls[:10], "u3", *urls[10:]]
    claimed = [r.claimed for r in results]
    assert claimed[2] is False  # claimed before the batch
    assert claimed[3] is True and claimed[10] is False  # u3 twice: the first wins
    assert claimed.count(True) == 499


def test_a_claim_whose_answer_was_lost_is_told_claimed_on_its_retry(server: IdemServer, ns: str) -> None:
    lossy = LosingTransport(lose=1)
    with Idem(server.url, timeout=5, retries=1, backoff=0.01, transport=lossy) as client:
        r = client.claims.claim(ns, key="lost-answer", data={"n": 1})
    status, body = lossy.lost[0]
    assert status == 201 and body["claimed"] is True  # the first attempt made the claim
    assert r.claimed is True  # and its retry, with the same client token, is told so
    assert r.record == {k: v for k, v in body.items() if k != "claimed"}
    assert len(lossy.sent) == 2 and lossy.sent[1]["client_token"] == lossy.sent[0]["client_token"]
    with Idem(server.url, timeout=5) as other:
        assert other.claims.claim(ns, key="lost-answer").claimed is False  # another call did not win


def test_claim_with_a_client_token_same_token_claimed_again_other_or_none_not(idem: Idem, ns: str) -> None:
    first = idem.claims.claim(ns, key="k", data="A", client_token="c7a1e5f0-retry")
    assert first.claimed is True
    again = idem.claims.claim(ns, key="k", data="A", client_token="c7a1e5f0-retry")
    assert again.claimed is True and again.record == first.record
    assert idem.claims.claim(ns, key="k", client_token="someone-else").claimed is False
    assert idem.claims.claim(ns, key="k").claimed is False


def test_claim_batch_with_a_client_token_retry_is_told_each_item_as_decided(idem: Idem, ns: str) -> None:
    idem.claims.claim(ns, key="old")
    items = ["b-1", "old", "b-1", "b-2"]
    decided = [True, False, False, True]
    assert [r.claimed for r in idem.claims.claim_batch(ns, items, client_token="batch-1")] == decided
    assert [r.claimed for r in idem.claims.claim_batch(ns, items, client_token="batch-1")] == decided
    assert [r.claimed for r in idem.claims.claim_batch(ns, items, client_token="batch-2")] == [False] * 4
    assert [r.claimed for r in idem.claims.claim_batch(ns, items)] == [False] * 4


def test_lookup_and_exists_by_prefix(idem: Idem, ns: str) -> None:
    idem.claims.claim(ns, parts=["scenario-1", "user-3", "node-2"], data={"answer": "A"})
    found = idem.claims.lookup(ns, [["scenario-1", "user-3", "node-2"], {"key": "absent"}, "absent-2"])
    assert [f["exists"] for f in found] == [True, False, False]
    assert found[0]["id"] == claim_id(["scenario-1", "user-3", "node-2"])
    assert found[0]["record"]["data"] == {"answer": "A"}
    assert "record" not in found[1] and found[1]["id"] == claim_id("absent")
    assert idem.claims.exists(ns, prefix=["scenario-1", "user-3"]) is True
    assert idem.claims.exists(ns, prefix=["scenario-1"]) is True
    assert idem.claims.exists(ns, prefix=["scenario-1", "user-4"]) is False
    assert idem.claims.exists(ns, prefix="scenario-2") is False
    assert idem.claims.exists(ns, parts=["scenario-1", "user-3", "node-2"]) is True
    assert idem.claims.exists(ns, key="scenario-1") is False


def test_get_and_delete(idem: Idem, ns: str) -> None:
    assert idem.claims.get(ns, key="absent") is None
    assert idem.claims.get(ns, id="0" * 64) is None
    assert idem.claims.delete(ns, parts=["absent", "x"]) is False
    rec = idem.claims.claim(ns, parts=["a", "b"], data=[1, 2]).record
    assert idem.claims.get(ns, parts=["a", "b"]) == rec
    assert idem.claims.get(ns, id=rec["id"]) == rec
    assert idem.claims.delete(ns, id=rec["id"]) is True
    assert idem.claims.get(ns, parts=["a", "b"]) is None
    assert idem.claims.delete(ns, parts=["a", "b"]) is False
    assert idem.claims.claim(ns, parts=["a", "b"]).claimed is True


def test_problem_json_becomes_idem_error_with_field(idem: Idem, ns: str) -> None:
    with pytest.raises(IdemError) as info:
        idem.claims.claim(ns, parts=[""])
    e = info.value
    assert e.status == 400 and e.field == "parts[0]" and e.type.startswith("urn:idem:problem:")
    assert e.title and e.detail
    with pytest.raises(IdemError) as info:
        idem.claims.claim_batch(ns, [{"key": "ok"}, {"key": "ok2"}, {"parts": ["x", ""]}])
    assert info.value.status == 400 and info.value.field == "items[2].parts[1]"
    assert idem.claims.get(ns, key="ok") is None  # a batch with one bad item is refused whole
    with pytest.raises(IdemError) as info:
        idem.claims.claim("Bad Namespace!", key="k")
    assert info.value.status == 400
    with pytest.raises(IdemError) as info:
        idem.claims.claim_batch(ns, [])
    assert info.value.status == 400 and info.value.field


def test_concurrent_claims_of_one_key_one_winner(idem: Idem, ns: str) -> None:
    results: List[bool] = []
    lock = threading.Lock()

    def claim() -> None:
        r = idem.claims.claim(ns, key="tap")
        with lock:
            results.append(r.claimed)

    threads = [threading.Thread(target=claim) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 1 and len(results) == 20


def test_auth(auth_server: IdemServer, ns: str) -> None:
    with Idem(auth_server.url, retries=0) as anonymous:
        with pytest.raises(IdemError) as info:
            anonymous.claims.claim(ns, key="k")
        assert info.value.status == 401
    with Idem(auth_server.url, token="wrong") as wrong:
        with pytest.raises(IdemError) as info:
            wrong.claims.get(ns, key="k")
        assert info.value.status == 401 and "wrong" not in str(info.value)
    with Idem(auth_server.url, token="t0k") as ok:
        assert ok.claims.claim(ns, key="k").claimed is True
        assert ok.claims.exists(ns, prefix=["k"]) is True


def test_a_read_token_reads_and_its_writes_say_why_they_are_refused(auth_server: IdemServer, ns: str) -> None:
    from idem_client import ForbiddenError

    with Idem(auth_server.url, token="t0k") as admin:
        admin.claims.claim(ns, key="k")
    with Idem(auth_server.url, token="v13w", retries=0) as viewer:
        assert viewer.claims.exists(ns, prefix=["k"]) is True
        with pytest.raises(ForbiddenError) as info:
            viewer.claims.claim(ns, key="k2")
        error = info.value
        assert error.status == 403 and error.type == "urn:idem:problem:forbidden"
        assert 'can = "read"' in str(error) and "claiming" in str(error) and "v13w" not in str(error)
        with pytest.raises(ForbiddenError, match="replaying"):
            viewer.receipts.replay("rcpt_000000000000000000000000000000000000")
        assert viewer.claims.get(ns, key="k2") is None, "nothing was claimed"


def test_unreachable_server_raises_after_retries(ns: str) -> None:
    from conftest import free_port
    from idem_client import UnavailableError

    sleeps: List[float] = []
    with Idem(f"http://127.0.0.1:{free_port()}", retries=2, sleep=sleeps.append) as idem:
        with pytest.raises(UnavailableError) as info:
            idem.claims.claim(ns, key="k")
    assert info.value.status == 0 and len(sleeps) == 2


@pytest.mark.anyio
async def test_async_client_against_the_real_server(server: IdemServer, auth_server: IdemServer, ns: str) -> None:
    async with AsyncIdem(server.url) as idem:
        results = await asyncio.gather(*(idem.claims.claim(ns, key="tap") for _ in range(50)))
        assert [r.claimed for r in results].count(True) == 1
        parts = ["scenario-1", "user-3", "node-2"]
        r = await idem.claims.claim(ns, parts=parts, data={"answer": "A"})
        assert r.claimed and r.record["id"] == claim_id(parts)
        batch = await idem.claims.claim_batch(ns, ["x", "tap", "y"])
        assert [b.claimed for b in batch] == [True, False, True]
        found = await idem.claims.lookup(ns, ["x", "nope"])
        assert [f["exists"] for f in found] == [True, False]
        assert await idem.claims.exists(ns, prefix=["scenario-1", "user-3"]) is True
        assert await idem.claims.exists(ns, prefix=["scenario-9"]) is False
        assert await idem.claims.get(ns, parts=parts) == r.record
        assert await idem.claims.delete(ns, parts=parts) is True
        assert await idem.claims.get(ns, parts=parts) is None
        assert await idem.claims.delete(ns, parts=parts) is False
        with pytest.raises(IdemError) as info:
            await idem.claims.claim(ns, parts=["ok", ""])
        assert info.value.status == 400 and info.value.field == "parts[1]"
    async with AsyncIdem(auth_server.url) as anonymous:
        with pytest.raises(IdemError) as info:
            await anonymous.claims.claim(ns, key="k")
        assert info.value.status == 401
    async with AsyncIdem(auth_server.url, token="t0k") as authed:
        assert (await authed.claims.claim(ns, key="k")).claimed
