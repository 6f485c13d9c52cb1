"""Stripe's official SDKs (stripe-node and stripe-python, pinned), with their own retries, through a
real idem gateway in front of a Stripe-shaped upstream (contract §2, "Answers in the upstream's
shape").

With `[gateway] errors = "stripe"`, every answer idem makes itself (409 request-in-flight, 422
idempotency-key-reused, 502 upstream-unavailable, 504 upstream-timeout) must make both SDKs raise,
never resolve with an object that has no id. Without it (problem+json), the same answers show why
the setting exists: stripe-node resolves them as if they were the object it asked for (it raises
only on a body with `error`), and stripe-python raises a generic `APIError` ("Invalid response
object"). Either way, no charge or customer is executed twice.

Each test runs for both SDKs on both gateways (4 cases).
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Tuple

import pytest
import stripe

from sdk_harness import HERE, FakeStripe, Gateway

SDKS = ["node", "python"]


def key(name: str) -> str:
    return f"{name}-{uuid.uuid4()}"


def charge(amount: int = 100, delay_ms: int = 0) -> Dict[str, Any]:
    return {"amount": amount, "currency": "usd", "source": "tok_visa", "metadata": {"delay_ms": str(delay_ms)}}


def customer(delay_ms: int) -> Dict[str, Any]:
    return {"email": "ada@example.com", "metadata": {"delay_ms": str(delay_ms)}}


def call(resource: str, params: Dict[str, Any], retries: int, key: Optional[str] = None,
         wait_started: Optional[str] = None) -> Dict[str, Any]:
    """One SDK call: `resource.create(params)` with `retries` of the SDK's own, under `key` (or
    the SDK's own key), once the upstream has begun executing `wait_started`."""
    return {"resource": resource, "params": params, "retries": retries, "key": key, "waitStarted": wait_started}


def run_node(gateway: Gateway, upstream: FakeStripe, calls: List[Dict[str, Any]]) -> Tuple[List[Dict[str, Any]], int]:
    plan = {"host": "127.0.0.1", "port": gateway.port, "upstream": upstream.url, "calls": calls}
    done = subprocess.run(["node", str(HERE / "stripe_node.js")], input=json.dumps(plan), capture_output=True,
                          text=True, timeout=120, cwd=HERE)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    return out["results"], out["attempts"]


def python_call(gateway: Gateway, upstream: FakeStripe, c: Dict[str, Any]) -> Dict[str, Any]:
    if c["waitStarted"]:
        deadline = time.time() + 30
        while upstream.count(c["waitStarted"]) == 0:
            assert time.time() < deadline, f"{c['waitStarted']} never started upstream"
            time.sleep(0.02)
    client = stripe.StripeClient("sk_test_idem", base_addresses={"api": gateway.url}, max_network_retries=c["retries"])
    options = {"idempotency_key": c["key"]} if c["key"] else {}
    try:
        obj = getattr(client.v1, c["resource"]).create(params=c["params"], options=options)
        fields = obj.to_dict()
        return {"outcome": "resolved", "id": fields.get("id"), "fields": sorted(fields)}
    except stripe.StripeError as e:
        # The body's `error` (an APIError has no `code` of its own); None when the body had none.
        error = e.error
        return {"outcome": "raised", "class": type(e).__name__, "status": e.http_status,
                "type": error.type if error else None, "code": error.code if error else e.code, "message": str(e)}


def run_python(gateway: Gateway, upstream: FakeStripe, calls: List[Dict[str, Any]]) -> Tuple[List[Dict[str, Any]], int]:
    before = sum(gateway.outcomes().values())
    with ThreadPoolExecutor(max_workers=max(1, len(calls))) as pool:
        results = list(pool.map(lambda c: python_call(gateway, upstream, c), calls))
    # stripe-python tells no one of its retries: idem counts the requests it answered.
    return results, sum(gateway.outcomes().values()) - before


def run(sdk: str, gateway: Gateway, upstream: FakeStripe, calls: List[Dict[str, Any]]) -> Tuple[List[Dict[str, Any]], int]:
    return (run_node if sdk == "node" else run_python)(gateway, upstream, calls)


def stripe_shaped(gateway: Gateway) -> bool:
    return gateway.errors == "stripe"


def assert_resolved(result: Dict[str, Any]) -> str:
    assert result["outcome"] == "resolved" and result["id"], result
    return str(result["id"])


def assert_idems_answer(sdk: str, gateway: Gateway, result: Dict[str, Any], status: int, code: str) -> None:
    """What the SDK made of idem's own `status` answer of kind `code`: with `errors = "stripe"`, an
    error of the class Stripe's own answer of that status gets, naming the kind; without, what the
    SDKs do with problem+json."""
    if stripe_shaped(gateway):
        expected = "StripeAPIError" if sdk == "node" else "APIError"
        assert (result["outcome"], result["class"], result["status"], result["code"]) == ("raised", expected, status, code), result
        return
    if sdk == "node":
        # The failure this setting exists for: idem's problem, resolved as a created object.
        assert result["outcome"] == "resolved" and result["id"] is None, result
        assert {"type", "title", "status", "detail"} <= set(result["fields"]), result
    else:
        assert (result["outcome"], result["class"], result["status"]) == ("raised", "APIError", status), result
        assert result["code"] is None and "Invalid response object" in result["message"], result


@pytest.mark.parametrize("sdk", SDKS)
def test_a_charge_runs_once_and_its_retry_is_replayed(sdk: str, gateway: Gateway, upstream: FakeStripe) -> None:
    k = key(f"once-{sdk}")
    (first,), _ = run(sdk, gateway, upstream, [call("charges", charge(), 2, k)])
    (again,), _ = run(sdk, gateway, upstream, [call("charges", charge(), 2, k)])
    assert assert_resolved(first) == assert_resolved(again), "the replay is the first charge"
    assert upstream.count(k) == 1


@pytest.mark.parametrize("sdk", SDKS)
def test_a_duplicate_while_the_first_runs_is_409(sdk: str, gateway: Gateway, upstream: FakeStripe) -> None:
    """The duplicate's own two retries (409 is retried by both SDKs) end while the first call's 3 s
    still run."""
    k = key(f"in-flight-{sdk}")
    slow = charge(delay_ms=3000)
    (first, duplicate), attempts = run(sdk, gateway, upstream, [
        call("charges", slow, 0, k),
        call("charges", slow, 2, k, wait_started=k),
    ])
    assert_resolved(first)
    assert_idems_answer(sdk, gateway, duplicate, 409, "request-in-flight")
    assert attempts == 4, "the first call, and the duplicate with its two retries"
    assert upstream.count(k) == 1


@pytest.mark.parametrize("sdk", SDKS)
def test_a_key_reused_with_other_parameters_is_422(sdk: str, gateway: Gateway, upstream: FakeStripe) -> None:
    k = key(f"reused-{sdk}")
    (first,), _ = run(sdk, gateway, upstream, [call("charges", charge(100), 2, k)])
    (other,), attempts = run(sdk, gateway, upstream, [call("charges", charge(250), 2, k)])
    assert_resolved(first)
    assert_idems_answer(sdk, gateway, other, 422, "idempotency-key-reused")
    assert attempts == 1, "a 422 is not retried"
    assert upstream.count(k) == 1


@pytest.mark.parametrize("sdk", SDKS)
def test_an_upstream_that_is_down_is_502(sdk: str, down_gateway: Gateway, upstream: FakeStripe) -> None:
    (result,), attempts = run(sdk, down_gateway, upstream, [call("charges", charge(), 2)])
    assert_idems_answer(sdk, down_gateway, result, 502, "upstream-unavailable")
    assert attempts == 3, "the SDK retried 502 twice: the key was released each time"


@pytest.mark.parametrize("sdk", SDKS)
def test_an_upstream_slower_than_its_timeout_is_504_and_then_replayed(sdk: str, gateway: Gateway,
                                                                      upstream: FakeStripe) -> None:
    k = key(f"slow-{sdk}")
    (timed_out,), _ = run(sdk, gateway, upstream, [call("customers", customer(2000), 0, k)])
    assert_idems_answer(sdk, gateway, timed_out, 504, "upstream-timeout")
    upstream.wait_finished(k)
    # Two retries of its own, in case the answer is not stored yet (409) the moment it is sent.
    (later,), _ = run(sdk, gateway, upstream, [call("customers", customer(2000), 2, k)])
    assert assert_resolved(later).startswith("cus_"), "the call went on, and its answer is replayed"
    assert upstream.count(k) == 1


@pytest.mark.parametrize("sdk", SDKS)
def test_retries_exhausted_against_a_slow_upstream_raise_on_409(sdk: str, gateway: Gateway,
                                                               upstream: FakeStripe) -> None:
    """The SDK's own key: 504 after 1 s, then its two retries meet the call still running (409)."""
    before = upstream.snapshot()
    (result,), attempts = run(sdk, gateway, upstream, [call("customers", customer(4000), 2)])
    assert_idems_answer(sdk, gateway, result, 409, "request-in-flight")
    assert attempts == 3
    new_keys = [k for k, n in upstream.snapshot().items() if n != before.get(k, 0)]
    assert len(new_keys) == 1 and upstream.count(new_keys[0]) == 1, "one key, executed once"
    upstream.wait_finished(new_keys[0])


@pytest.mark.parametrize("sdk", SDKS)
def test_a_storm_of_retrying_calls_executes_nothing_twice(sdk: str, gateway: Gateway, upstream: FakeStripe) -> None:
    """24 calls at once: 12 customers with the SDK's own keys, 0-2.5 s slow behind a 1 s timeout,
    three retries each; 6 pairs of 2.5 s charges sharing a key, the second (one retry) sent while
    the first runs. Tells what each became (`pytest -s` prints it); with errors = "stripe" none
    resolves without an id, and stripe-node without it resolves at least the pairs' 409s so."""
    delays = [0, 400, 1500, 2500]
    calls = [call("customers", customer(delays[i % 4]), 3) for i in range(12)]
    for i in range(6):
        k = key(f"pair-{sdk}-{i}")
        calls += [call("charges", charge(delay_ms=2500), 0, k), call("charges", charge(delay_ms=2500), 1, k, k)]
    before = gateway.outcomes()
    results, attempts = run(sdk, gateway, upstream, calls)
    became: Counter[str] = Counter()
    for r in results:
        if r["outcome"] == "resolved":
            became["resolved with an id" if r["id"] else "resolved WITHOUT an id"] += 1
        else:
            became[f"raised {r['class']} {r['status']} {r['code']}"] += 1
    answered = {k: v - before.get(k, 0) for k, v in gateway.outcomes().items() if v != before.get(k, 0)}
    print(f"\n{sdk} on errors={gateway.errors or 'problem'}: {len(calls)} calls, {attempts} requests; "
          f"{dict(became)}; idem answered {answered}")
    assert upstream.twice() == [], "no key executed twice"
    if stripe_shaped(gateway) or sdk == "python":
        assert became["resolved WITHOUT an id"] == 0, became
    else:
        assert became["resolved WITHOUT an id"] > 0, f"stripe-node reads problem+json as an object: {became}"
