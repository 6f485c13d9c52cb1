"""The SDK tests' fixtures: one Stripe-shaped upstream per module, and gateways in front of it (or
of nothing) with `errors = "stripe"` and without (sdk_harness.py)."""

from __future__ import annotations

from typing import Iterator

import pytest

from sdk_harness import FakeStripe, Gateway, free_port


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeStripe]:
    fake = FakeStripe()
    yield fake
    fake.stop()


@pytest.fixture(scope="module", params=["stripe", None], ids=["errors=stripe", "errors=problem"])
def gateway(request: pytest.FixtureRequest, upstream: FakeStripe) -> Iterator[Gateway]:
    g = Gateway(upstream.url, request.param)
    yield g
    g.stop()


@pytest.fixture(scope="module", params=["stripe", None], ids=["errors=stripe", "errors=problem"])
def down_gateway(request: pytest.FixtureRequest) -> Iterator[Gateway]:
    """A gateway whose upstream is down: nothing listens at its port."""
    g = Gateway(f"http://127.0.0.1:{free_port()}", request.param)
    yield g
    g.stop()
