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
    kwargs: Dict[str, Any] = {"timeout": options.timeout + call.extra_timeout}
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


def heartbeat_interval(lease_seconds: int) -> float:
    """Extend the lease every half lease while the work runs."""
    return max(0.5, lease_seconds / 2)


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
