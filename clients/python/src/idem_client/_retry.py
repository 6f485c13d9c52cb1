"""Retry decisions shared by the sync and async clients (no I/O here)."""

from __future__ import annotations

import email.utils
import math
import random
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

#: Statuses that mean "try again shortly": a proxy that could not reach idem, idem's store
#: unavailable, a gateway timeout. Every other 4xx/5xx is final.
RETRY_STATUSES = frozenset({502, 503, 504})


def parse_retry_after(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """``Retry-After`` as seconds from now: delta-seconds or an HTTP date; ``None`` if absent
    or unparseable."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        current = time.time() if now is None else now
        return max(0.0, when.timestamp() - current)
    if math.isnan(seconds) or math.isinf(seconds) or seconds < 0:
        return None
    return seconds


@dataclass
class RetryPolicy:
    """Exponential backoff with jitter.

    Attempt ``n`` (0-based) waits between ``d/2`` and ``d`` where ``d = min(max_backoff,
    backoff * 2**n)``; a ``Retry-After`` from the server replaces that wait (it is never
    shortened). A ``Retry-After`` longer than ``max_retry_after`` is not waited for: the
    error is raised instead.
    """

    retries: int = 3
    backoff: float = 0.25
    max_backoff: float = 8.0
    max_retry_after: float = 60.0
    rand: Callable[[], float] = field(default=random.random, repr=False)

    def backoff_delay(self, attempt: int) -> float:
        ceiling = min(self.max_backoff, self.backoff * 2.0 ** min(attempt, 30))
        return ceiling / 2 + self.rand() * ceiling / 2

    def delay(self, attempt: int, retry_after: Optional[float]) -> Optional[float]:
        """How long to wait before retry number ``attempt + 1``, or ``None`` to give up."""
        if attempt >= self.retries:
            return None
        if retry_after is not None:
            if retry_after > self.max_retry_after:
                return None
            # Honour the server's wait; add a little jitter on top so clients spread out.
            return retry_after + self.rand() * min(1.0, retry_after * 0.1)
        return self.backoff_delay(attempt)

    def for_status(self, attempt: int, status: int, retry_after: Optional[float]) -> Optional[float]:
        if status not in RETRY_STATUSES:
            return None
        return self.delay(attempt, retry_after)

    def for_connection_error(self, attempt: int) -> Optional[float]:
        return self.delay(attempt, None)


# Waiting for another holder of an operation (operations.run).

#: The most the server will hold a begin request (docs/reference/api.md#operations:
#: wait_seconds 0-30).
MAX_SERVER_WAIT = 30


def server_wait_seconds(remaining: float) -> int:
    """``wait_seconds`` for the next begin: as much of the remaining time as the server
    allows, whole seconds."""
    if remaining < 1:
        return 0
    return int(min(MAX_SERVER_WAIT, remaining))


def in_progress_delay(
    policy: RetryPolicy,
    attempt: int,
    retry_after: Optional[float],
    remaining: float,
    asked: int = 0,
    waited: float = 0.0,
) -> Optional[float]:
    """What to do after a 409 in-progress answer to a begin: ``None`` to give up (the deadline
    has passed), ``0`` to begin again at once, or seconds to sleep first.

    When the server really held the begin for the ``asked`` ``wait_seconds`` (``waited``),
    the next begin goes at once: a begin waiting on the server is woken the moment the holder
    completes, a client asleep is not. Otherwise (no server wait, or a server that answered
    early) the client sleeps, honouring ``Retry-After`` but never past the deadline.
    """
    if remaining <= 0:
        return None
    if asked > 0 and waited >= asked * 0.9:
        return 0.0
    wait = retry_after if retry_after is not None else policy.backoff_delay(attempt)
    return max(0.0, min(wait, remaining))
