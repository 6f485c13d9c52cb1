"""AWS Lambda Powertools for Python's idempotency utility with its Redis persistence layer
(`CachePersistenceLayer`, formerly `RedisCachePersistenceLayer`), unchanged, pointed at idem's Redis protocol, on the embedded store
and on PostgreSQL: duplicate invocations run the handler once and get its result; concurrent
duplicates run it once; a failed invocation frees its key; an invocation that died in flight
(its in-progress record past its in-progress expiry) is taken over by the next, as Powertools
does on Redis: a lock key claimed with SET NX, the record replaced with a plain SET."""

from __future__ import annotations

import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis

os.environ.setdefault("AWS_LAMBDA_FUNCTION_NAME", "orders")
os.environ.setdefault("POWERTOOLS_IDEMPOTENCY_DISABLED", "false")

from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent  # noqa: E402
from aws_lambda_powertools.utilities.idempotency.exceptions import (  # noqa: E402
    IdempotencyAlreadyInProgressError,
)
from aws_lambda_powertools.utilities.idempotency.persistence.cache import CachePersistenceLayer  # noqa: E402

from conftest import Idem  # noqa: E402

# Powertools 3 warns at every layer made that its Redis class gets a new name in 4.
pytestmark = pytest.mark.filterwarnings("ignore:RedisCachePersistenceLayer:DeprecationWarning")


class Context:
    """The part of a Lambda context Powertools reads: how long the invocation has left."""

    function_name = "orders"
    memory_limit_in_mb = 128
    invoked_function_arn = "arn:aws:lambda:eu-west-1:000000000000:function:orders"
    aws_request_id = "req"

    def __init__(self, remaining_ms: int = 30_000) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


class Died(BaseException):
    """What a Lambda that timed out or ran out of memory looks like to Powertools: not an
    Exception, so it does not delete its in-progress record."""


def handler_on(idem: Idem, runs: list, work=None):
    client = redis.Redis(port=idem.port)
    layer = CachePersistenceLayer(client=client)
    config = IdempotencyConfig(event_key_jmespath="order_id", expires_after_seconds=3600)

    @idempotent(persistence_store=layer, config=config)
    def handler(event: dict, context: Any) -> dict:
        runs.append(event["order_id"])
        if work:
            work(event)
        return {"charged": event["amount"], "run": len(runs)}

    return handler, client


def order() -> dict:
    return {"order_id": f"order-{uuid.uuid4()}", "amount": 1200}


def test_a_duplicate_invocation_runs_once(idem_on_each_store: Idem) -> None:
    runs: list = []
    handler, _ = handler_on(idem_on_each_store, runs)
    event = order()
    first = handler(event, Context())
    assert handler(event, Context()) == first
    assert handler(dict(event), Context()) == first, "the same payload, another object"
    assert len(runs) == 1
    other = order()
    assert handler(other, Context())["charged"] == 1200
    assert len(runs) == 2


def test_concurrent_duplicates_run_once(idem_on_each_store: Idem) -> None:
    runs: list = []
    gate = threading.Event()
    handler, _ = handler_on(idem_on_each_store, runs, work=lambda e: gate.wait(5))
    event = order()

    def invoke(_: int) -> Any:
        try:
            return handler(event, Context())
        except IdempotencyAlreadyInProgressError:
            return "in progress"

    with ThreadPoolExecutor(max_workers=10) as pool:
        futures = [pool.submit(invoke, i) for i in range(10)]
        time.sleep(0.5)
        gate.set()
        answers = [f.result() for f in futures]
    assert len(runs) == 1, f"the handler ran {len(runs)} times"
    done = [a for a in answers if a != "in progress"]
    assert len(done) >= 1 and all(a == done[0] for a in done), answers
    assert handler(event, Context()) == done[0], "and a later duplicate gets its result"


def test_a_failed_invocation_frees_its_key(idem_on_each_store: Idem) -> None:
    runs: list = []
    fail = {"now": True}

    def work(_: dict) -> None:
        if fail["now"]:
            raise RuntimeError("the payment provider is down")

    handler, _ = handler_on(idem_on_each_store, runs, work=work)
    event = order()
    with pytest.raises(RuntimeError):
        handler(event, Context())
    fail["now"] = False
    assert handler(event, Context())["charged"] == 1200, "the retry runs: the failure deleted the record"
    assert len(runs) == 2


def test_an_invocation_that_died_in_flight_is_taken_over(idem_on_each_store: Idem) -> None:
    runs: list = []
    die = {"now": True}

    def work(_: dict) -> None:
        if die["now"]:
            raise Died()

    handler, _ = handler_on(idem_on_each_store, runs, work=work)
    event = order()
    with pytest.raises(Died):
        handler(event, Context(remaining_ms=300))
    die["now"] = False
    with pytest.raises(IdempotencyAlreadyInProgressError):
        handler(event, Context())
    time.sleep(0.5)
    result = handler(event, Context())
    assert result["charged"] == 1200 and len(runs) == 2, "taken over once its in-progress expiry passed"
    assert handler(event, Context()) == result, "and completed: a duplicate gets the result"
    assert len(runs) == 2
