"""redis-py, sync and asyncio, RESP2 and RESP3, against idem's Redis protocol (`[resp]`): what
Python idempotency code does with Redis (`SET … NX EX`, `GET`, `DEL`, a pipeline), idem's tokens
as the Redis password, plain SET and the EXPIRE family, and what idem does not run refused as an
error, not answered."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from typing import List

import pytest
import redis
import redis.asyncio

from conftest import READER, WRITER, Idem, unique


def test_set_nx_get_ttl_delete(idem: Idem, protocol: int) -> None:
    r = redis.Redis(port=idem.port, protocol=protocol)
    assert r.ping()
    key = unique("order", protocol)
    assert r.set(key, '{"status":"INPROGRESS"}', nx=True, ex=60) is True
    assert r.set(key, "again", nx=True, ex=60) is None
    assert r.get(key) == b'{"status":"INPROGRESS"}'
    assert 59 <= r.ttl(key) <= 60
    assert r.exists(key, unique("absent")) == 1
    assert r.setnx(key, "x") is False
    assert r.mget([key, unique("absent")]) == [b'{"status":"INPROGRESS"}', None]
    assert r.delete(key) == 1
    assert r.get(key) is None


def test_the_http_api_sees_the_same_key(idem: Idem) -> None:
    r = redis.Redis(port=idem.port)
    key = unique("shared")
    assert r.set(key, "from redis", nx=True)
    body = json.dumps({"items": [{"key": key}]}).encode()
    request = urllib.request.Request(
        f"{idem.http}/v1/claims/redis/lookup", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request) as answer:
        found = json.load(answer)
    assert found["results"][0]["record"]["data"] == "from redis"


def test_binary_values_and_a_pipeline(idem: Idem, protocol: int) -> None:
    r = redis.Redis(port=idem.port, protocol=protocol)
    key = unique("binary", protocol)
    value = b"\x00\r\n\xff\xfe end"
    pipe = r.pipeline(transaction=False)
    pipe.set(key, value, nx=True)
    pipe.get(key)
    pipe.set(key, b"other", nx=True)
    pipe.delete(key)
    assert pipe.execute() == [True, value, None, 1]


def test_one_of_50_threads_wins(idem: Idem) -> None:
    key = unique("contested")
    results: List[object] = []
    lock = threading.Lock()

    def claim(i: int) -> None:
        outcome = redis.Redis(port=idem.port).set(key, f"thread-{i}", nx=True, px=60000)
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 1 and results.count(None) == 49


def test_asyncio(idem: Idem, protocol: int) -> None:
    async def run() -> None:
        r = redis.asyncio.Redis(port=idem.port, protocol=protocol)
        key = unique("async", protocol)
        outcomes = await asyncio.gather(*(r.set(key, str(i), nx=True, ex=30) for i in range(20)))
        assert outcomes.count(True) == 1
        assert await r.get(key) is not None
        assert await r.delete(key) == 1
        await r.aclose()

    asyncio.run(run())


def test_replacing_and_expiring_as_redis_does(idem: Idem, protocol: int) -> None:
    r = redis.Redis(port=idem.port, protocol=protocol)
    key = unique("update")
    assert r.set(key, "first")
    assert r.set(key, "second", get=True) == b"first"
    assert r.set(unique("absent"), "v", xx=True) is None
    assert r.set(key, "third", xx=True, px=50_000)
    assert 49_000 <= r.pttl(key) <= 50_000
    assert r.set(key, "fourth", keepttl=True) and r.ttl(key) > 0
    assert r.expire(key, 100, gt=True) and 99 <= r.ttl(key) <= 100
    assert not r.expire(key, 10, gt=True)
    assert r.persist(key) and r.ttl(key) == -1
    assert r.execute_command("SETEX", key, 60, "fifth") and 59 <= r.ttl(key) <= 60
    assert r.getdel(key) == b"fifth"
    assert r.get(key) is None


def test_what_idem_does_not_run_is_refused(idem: Idem) -> None:
    r = redis.Redis(port=idem.port)
    key = unique("refused")
    assert r.set(key, "first", nx=True)
    with pytest.raises(redis.ResponseError, match="'incrby' is not one of them"):
        r.incr(key)
    with pytest.raises(redis.ResponseError, match="runs only the scripts of the libraries it supports"):
        r.eval("return redis.call('del', KEYS[1])", 1, key)
    with pytest.raises(redis.ResponseError, match="unknown command 'HSET'"):
        r.hset(key + "h", "f", "v")
    assert r.get(key) == b"first"


def test_tokens_are_the_password(idem_with_tokens: Idem, protocol: int) -> None:
    port = idem_with_tokens.port
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=port, protocol=protocol, password="wrong").ping()
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=port, protocol=protocol).get("k")
    writer = redis.Redis(port=port, protocol=protocol, password=WRITER)
    key = unique("authed", protocol)
    assert writer.set(key, "v", nx=True)
    reader = redis.Redis(port=port, protocol=protocol, username="default", password=READER)
    assert reader.get(key) == b"v"
    # NOPERM, which redis-py raises as its own exception.
    with pytest.raises(redis.exceptions.NoPermissionError, match='token reader has can = "read"'):
        reader.set(unique("nope"), "v", nx=True)
