"""What the sync and async clients share: configuration, request options and the pieces of
``operations.run`` / ``idempotent`` that involve no I/O."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

import httpx

from ._version import __version__
from ._api import Call
from ._keys import split_key
from ._retry import RetryPolicy

logger = logging.getLogger("idem_client")

#: The server's default lease (docs/reference/api.md#operations), used to pace heartbeats when
#: none is given.
DEFAULT_LEASE_SECONDS = 60

#: How long operations.run waits for another holder before raising InProgressError.
DEFAULT_WAIT_TIMEOUT = 90.0


#: Where the client looks for idem when neither ``url`` nor ``IDEM_URL`` says.
DEFAULT_URL = "http://127.0.0.1:7070"


def resolve_url(url: Optional[str]) -> str:
    """``url``, else the ``IDEM_URL`` environment variable, else :data:`DEFAULT_URL`; checked."""
    if url is not None:
        return check_url(url)
    from_env = os.environ.get("IDEM_URL")
    return check_url(from_env, "IDEM_URL") if from_env else DEFAULT_URL


def resolve_token(token: Optional[str]) -> Optional[str]:
    """``token``, else the ``IDEM_TOKEN`` environment variable; ``""`` means none at all."""
    return token if token is not None else (os.environ.get("IDEM_TOKEN") or None)


def base_headers(token: Optional[str], extra: Optional[Dict[str, str]]) -> Dict[str, str]:
    headers = {"Accept": "application/json", "User-Agent": f"idem-client-python/{__version__}"}
    if extra:
        headers.update(extra)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def check_url(url: str, name: str = "url") -> str:
    parsed = httpx.URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"{name} must be an http:// or https:// URL such as http://127.0.0.1:7070")
    if parsed.userinfo:
        # Credentials belong in token=, never in a URL that may be logged.
        raise ValueError("put credentials in token=, not in the URL")
    return url


@dataclass(frozen=True)
class Options:
    """Per-client settings (the token lives only in the HTTP client's headers)."""

    url: str
    timeout: float
    policy: RetryPolicy
    wait_timeout: float


def replace_options(
    options: Options,
    timeout: Optional[float],
    retries: Optional[int],
    wait_timeout: Optional[float],
) -> Options:
    policy = options.policy if retries is None else dataclasses.replace(options.policy, retries=retries)
    return dataclasses.replace(
        options,
        timeout=options.timeout if timeout is None else timeout,
        policy=policy,
        wait_timeout=options.wait_timeout if wait_timeout is None else wait_timeout,
    )


def request_kwargs(options: Options, call: Call[Any]) -> Dict[str, Any]:
    timeout = options.timeout if call.timeout is None else call.timeout
    kwargs: Dict[str, Any] = {"timeout": timeout + call.extra_timeout}
    if call.body is not None:
        kwargs["content"] = call.body
        kwargs["headers"] = {"Content-Type": "application/json"}
    if call.params:
        kwargs["params"] = list(call.params)
    return kwargs


def roundtrip(value: Any) -> Any:
    """``value`` as it will come back from the server once stored: JSON in, JSON out.
    Raises ``TypeError``/``ValueError`` when ``value`` is not JSON-serializable."""
    return json.loads(json.dumps(value, allow_nan=False))


def policy_of(options: Options, call: Call[Any]) -> RetryPolicy:
    """The retry policy of one call: the client's, or with the call's own ``retries``."""
    if call.retries is None:
        return options.policy
    return dataclasses.replace(options.policy, retries=call.retries)


#: How soon a heartbeat that failed (no answer, a 5xx, a timeout) is tried again.
RETRY_BEAT = 0.25


@dataclass
class Beats:
    """The heartbeat of ``operations.run``, as the gateway beats: the lease counted from before
    the begin was sent (``leased_at``, ``time.monotonic()``), extended every third of the lease,
    each extension's lease counted again from before it was sent; a failed extension (one attempt,
    its timeout at most a third of the lease) tried again ``RETRY_BEAT`` later until one gets
    through, past the lease's end too (idem keeps a lease that ran out for its holder until another
    begin takes the key). The sync and async clients run this schedule with a thread or a task."""

    lease: float
    leased_at: float
    timeout: float
    beat_at: float = 0.0
    failing_since: Optional[float] = None

    def __post_init__(self) -> None:
        self.beat_at = self.leased_at + self.every

    @property
    def every(self) -> float:
        return self.lease / 3

    @property
    def attempt_timeout(self) -> float:
        """One attempt's timeout: the client's, at most a third of the lease."""
        return min(self.timeout, self.every)

    def extended(self, asked_at: float) -> None:
        self.leased_at = asked_at
        self.beat_at = asked_at + self.every
        self.failing_since = None

    def failed(self, now: float) -> None:
        """Soon again, not a whole interval later: the lease was not extended."""
        if self.failing_since is None:
            self.failing_since = now
        self.beat_at = now + RETRY_BEAT

    def ran_out(self, now: float) -> bool:
        """Whether the lease, as counted here, has ended without an extension getting through."""
        return now >= self.leased_at + self.lease


def decorator_args(
    key: Callable[..., Any],
    request: Optional[Callable[..., Any]],
    args: Tuple[Any, ...],
    kwargs: Dict[str, Any],
) -> Tuple[Optional[str], Optional[List[str]], Any]:
    """The ``(key, parts, request)`` of one call of an ``@idempotent`` function."""
    k, parts = split_key(key(*args, **kwargs))
    req = request(*args, **kwargs) if request is not None else None
    return k, parts, req


def client_repr(name: str, options: Options) -> str:
    return f"{name}(url={options.url!r})"
