"""The asynchronous client, :class:`AsyncIdem` (asyncio). The same methods as :class:`Idem`,
awaitable; requests and answers are built and read by the same code (``_api.py``)."""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import time
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    List,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
    cast,
)

import httpx

from . import _api
from ._api import Call, Item
from ._base import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_WAIT_TIMEOUT,
    Options,
    base_headers,
    resolve_token,
    resolve_url,
    client_repr,
    decorator_args,
    Beats,
    logger,
    policy_of,
    replace_options,
    request_kwargs,
    roundtrip,
)
from ._client_token import client_token as _client_token
from ._errors import InProgressError, LeaseLostError, connection_error
from ._keys import resolve_id
from ._models import BeginResult, ClaimPage, ClaimRecord, ClaimResult, LookupResult, ReceiptPage
from ._retry import RetryPolicy, in_progress_delay, parse_retry_after, server_wait_seconds

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class AsyncIdem:
    """An asyncio idem client; the same arguments and methods as :class:`Idem`, awaitable.

    ``sleep`` is an ``async`` function (default ``asyncio.sleep``); ``transport`` an
    ``httpx.AsyncBaseTransport``. Use ``async with AsyncIdem(...) as idem:`` or ``await
    idem.aclose()``.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        token: Optional[str] = None,
        timeout: float = 10.0,
        retries: int = 3,
        *,
        backoff: float = 0.25,
        max_backoff: float = 8.0,
        max_retry_after: float = 60.0,
        wait_timeout: float = DEFAULT_WAIT_TIMEOUT,
        headers: Optional[Dict[str, str]] = None,
        transport: Optional[httpx.AsyncBaseTransport] = None,
        limits: Optional[httpx.Limits] = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        url = resolve_url(url)
        token = resolve_token(token)
        self._options = Options(
            url=url,
            timeout=timeout,
            policy=RetryPolicy(
                retries=retries, backoff=backoff, max_backoff=max_backoff, max_retry_after=max_retry_after
            ),
            wait_timeout=wait_timeout,
        )
        self._sleep = sleep
        self._clock = clock
        extra: Dict[str, Any] = {}
        if limits is not None:
            extra["limits"] = limits

        def make_client() -> httpx.AsyncClient:
            return httpx.AsyncClient(
                base_url=url,
                headers=base_headers(token, headers),
                timeout=timeout,
                transport=transport,
                follow_redirects=False,
                **extra,
            )

        self._http = make_client()
        # Begins that wait on the server (operations.run) use connections of their own, so
        # that many waiters can never starve the holder's complete / extend / release calls.
        self._waiting_http = make_client()
        self.claims = AsyncClaims(self)
        self.operations = AsyncOperations(self)
        self.receipts = AsyncReceipts(self)

    def with_options(
        self,
        *,
        timeout: Optional[float] = None,
        retries: Optional[int] = None,
        wait_timeout: Optional[float] = None,
    ) -> AsyncIdem:
        """A view of this client with other settings for some calls, sharing its connections:
        ``idem.with_options(timeout=2, retries=0).claims.claim(...)``. Close the original."""
        clone = copy.copy(self)
        clone._options = replace_options(self._options, timeout, retries, wait_timeout)
        clone.claims = AsyncClaims(clone)
        clone.operations = AsyncOperations(clone)
        clone.receipts = AsyncReceipts(clone)
        return clone

    def __repr__(self) -> str:
        return client_repr("AsyncIdem", self._options)

    async def aclose(self) -> None:
        await self._http.aclose()
        await self._waiting_http.aclose()

    async def __aenter__(self) -> AsyncIdem:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _call(self, call: Call[T]) -> T:
        policy = policy_of(self._options, call)
        attempt = 0
        while True:
            try:
                http = self._waiting_http if call.extra_timeout else self._http
                response = await http.request(
                    call.method, call.path, **request_kwargs(self._options, call)
                )
            except httpx.TransportError as exc:
                delay = policy.for_connection_error(attempt)
                if delay is None:
                    raise connection_error(exc, http.base_url, call.method, call.path, attempt + 1) from exc
            else:
                delay = policy.for_status(
                    attempt, response.status_code, parse_retry_after(response.headers.get("retry-after"))
                )
                if delay is None:
                    return call.finish(response, http.base_url)
                await response.aclose()
            logger.debug("idem: retrying %s %s in %.2fs", call.method, call.path, delay)
            await self._sleep(delay)
            attempt += 1

    def idempotent(
        self,
        ns: str,
        *,
        key: Callable[..., Any],
        request: Optional[Callable[..., Any]] = None,
        lease_seconds: Optional[int] = None,
        ttl_seconds: Optional[int] = None,
        wait_timeout: Optional[float] = None,
    ) -> Callable[[F], F]:
        """Decorate an ``async`` function so it runs once per key (see
        :meth:`AsyncOperations.run`); later calls return the stored result."""

        def decorate(fn: F) -> F:
            if not inspect.iscoroutinefunction(fn):
                raise TypeError("AsyncIdem.idempotent decorates async functions; use Idem for sync ones")

            @functools.wraps(fn)
            async def wrapper(*args: Any, **kwargs: Any) -> Any:
                k, parts, req = decorator_args(key, request, args, kwargs)
                return await self.operations.run(
                    ns,
                    lambda: fn(*args, **kwargs),
                    key=k,
                    parts=parts,
                    request=req,
                    lease_seconds=lease_seconds,
                    ttl_seconds=ttl_seconds,
                    wait_timeout=wait_timeout,
                )

            return cast(F, wrapper)

        return decorate


class AsyncClaims:
    """``idem.claims`` of :class:`AsyncIdem`; see :class:`idem_client.Idem`'s ``Claims``."""

    def __init__(self, client: AsyncIdem) -> None:
        self._c = client

    async def claim(
        self,
        ns: str,
        *,
        key: Optional[str] = None,
        parts: Optional[Sequence[str]] = None,
        data: Any = None,
        ttl_seconds: Optional[int] = None,
        client_token: Optional[str] = None,
    ) -> ClaimResult:
        return await self._c._call(_api.claim(ns, key, parts, data, ttl_seconds, client_token))

    async def claim_batch(
        self, ns: str, items: Sequence[Item], *, client_token: Optional[str] = None
    ) -> List[ClaimResult]:
        return await self._c._call(_api.claim_batch(ns, items, client_token))

    async def lookup(self, ns: str, items: Sequence[Item]) -> List[LookupResult]:
        return await self._c._call(_api.lookup(ns, items))

    async def exists(
        self,
        ns: str,
        prefix: Union[str, Sequence[str], None] = None,
        *,
        key: Optional[str] = None,
        parts: Optional[Sequence[str]] = None,
    ) -> bool:
        if prefix is not None:
            if key is not None or parts is not None:
                raise ValueError("give prefix=, or key= / parts=, not both")
            return await self._c._call(_api.exists_prefix(ns, prefix))
        if (key is None) == (parts is None):
            raise ValueError("give exactly one of prefix=, key= or parts=")
        item: Item = {"key": key} if key is not None else {"parts": [*(parts or [])]}
        return bool((await self._c._call(_api.lookup(ns, [item])))[0]["exists"])

    async def get(
        self,
        ns: str,
        *,
        key: Optional[str] = None,
        parts: Optional[Sequence[str]] = None,
        id: Optional[str] = None,
    ) -> Optional[ClaimRecord]:
        return await self._c._call(_api.claim_get(ns, resolve_id(id, key, parts)))

    async def delete(
        self,
        ns: str,
        *,
        key: Optional[str] = None,
        parts: Optional[Sequence[str]] = None,
        id: Optional[str] = None,
    ) -> bool:
        return await self._c._call(_api.claim_delete(ns, resolve_id(id, key, parts)))

    async def list(
        self,
        ns: str,
        prefix: Union[str, Sequence[str]],
        *,
        limit: Optional[int] = None,
        after: Optional[str] = None,
    ) -> ClaimPage:
        """One page of the live claims under ``prefix``, in parts order: ``.items`` and ``.next``."""
        return await self._c._call(_api.claims_list(ns, prefix, limit, after))

    async def iter(
        self, ns: str, prefix: Union[str, Sequence[str]], *, page_size: Optional[int] = None
    ) -> AsyncIterator[ClaimRecord]:
        """Every live claim under ``prefix``, in parts order, page after page (``async for``)."""
        after: Optional[str] = None
        while True:
            page = await self.list(ns, prefix, limit=page_size, after=after)
            for item in page.items:
                yield item
            if page.next is None or not page.items:
                return
            after = page.next

    async def delete_prefix(self, ns: str, prefix: Union[str, Sequence[str]]) -> int:
        """Delete every live claim under ``prefix`` (at least one part); returns how many, calling
        again while the server says more remain."""
        total = 0
        while True:
            deleted, more = await self._c._call(_api.claims_delete_prefix(ns, prefix))
            total += deleted
            if not more or deleted == 0:
                return total


class AsyncOperations:
    """``idem.operations`` of :class:`AsyncIdem`; see :class:`idem_client.Idem`'s ``Operations``."""

    def __init__(self, client: AsyncIdem) -> None:
        self._c = client

    async def begin(
        self,
        ns: str,
        *,
        key: Optional[str] = None,
        parts: Optional[Sequence[str]] = None,
        request: Any = None,
        lease_seconds: Optional[int] = None,
        ttl_seconds: Optional[int] = None,
        wait_seconds: Optional[int] = None,
        client_token: Optional[str] = None,
    ) -> BeginResult:
        return await self._c._call(
            _api.op_begin(
                ns, key, parts, request, lease_seconds, ttl_seconds, wait_seconds, client_token
            )
        )

    async def complete(self, ns: str, id: str, token: str, result: Any = None) -> Dict[str, Any]:
        return await self._c._call(_api.op_complete(ns, id, token, result))

    async def release(self, ns: str, id: str, token: str) -> None:
        await self._c._call(_api.op_release(ns, id, token))

    async def extend(self, ns: str, id: str, token: str, lease_seconds: int) -> Dict[str, Any]:
        return await self._c._call(_api.op_extend(ns, id, token, lease_seconds))

    async def get(
        self,
        ns: str,
        *,
        key: Optional[str] = None,
        parts: Optional[Sequence[str]] = None,
        id: Optional[str] = None,
    ) -> Optional[Dict[str, Any]]:
        return await self._c._call(_api.op_get(ns, resolve_id(id, key, parts)))

    async def delete(
        self,
        ns: str,
        *,
        key: Optional[str] = None,
        parts: Optional[Sequence[str]] = None,
        id: Optional[str] = None,
    ) -> bool:
        return await self._c._call(_api.op_delete(ns, resolve_id(id, key, parts)))

    async def run(
        self,
        ns: str,
        fn: Callable[[], Awaitable[T]],
        *,
        key: Optional[str] = None,
        parts: Optional[Sequence[str]] = None,
        request: Any = None,
        lease_seconds: Optional[int] = None,
        ttl_seconds: Optional[int] = None,
        wait_timeout: Optional[float] = None,
        client_token: Optional[str] = None,
    ) -> T:
        """Run ``await fn()`` once per key and return its result (see ``Idem.operations.run``);
        the lease is extended by a task while ``fn`` runs (every third of the lease, counted from
        before the begin was sent; a failed extension tried again 250 ms later until one gets
        through). ``fn`` may also be a plain function."""
        # One token for every begin of this run: each is the same request, asked again.
        token_of_call = _client_token(client_token)
        begun, sent_at = await self._begin_waiting(
            ns, key, parts, request, lease_seconds, ttl_seconds, wait_timeout, token_of_call
        )
        if not begun.started:
            return cast(T, begun.result)
        token = begun.token or ""
        lease = lease_seconds or DEFAULT_LEASE_SECONDS

        async def extend_once(timeout: float) -> None:
            await self._c._call(_api.op_extend(ns, begun.id, token, lease, timeout=timeout, retries=0))

        # The lease counts from before the begin was sent, as the server counts it.
        beats = Beats(lease=lease, leased_at=sent_at, timeout=self._c._options.timeout)
        beat = asyncio.ensure_future(_heartbeat(extend_once, beats, f"{ns}/{begun.id}"))
        try:
            outcome: Any = fn()
            value = await outcome if inspect.isawaitable(outcome) else outcome
            stored = roundtrip(value)
        except BaseException:
            await _stop(beat)
            await self._release_quietly(ns, begun.id, token)
            raise
        await _stop(beat)
        await self.complete(ns, begun.id, token, stored)
        return cast(T, stored)

    async def _begin_waiting(
        self,
        ns: str,
        key: Optional[str],
        parts: Optional[Sequence[str]],
        request: Any,
        lease_seconds: Optional[int],
        ttl_seconds: Optional[int],
        wait_timeout: Optional[float],
        client_token: str,
    ) -> Tuple[BeginResult, float]:
        """The begin's answer, and when (``time.monotonic()``) the begin that got it was sent."""
        clock = self._c._clock
        limit = self._c._options.wait_timeout if wait_timeout is None else wait_timeout
        deadline = clock() + limit
        attempt = 0
        while True:
            asked = server_wait_seconds(deadline - clock())
            began = clock()
            sent_at = time.monotonic()
            try:
                begun = await self.begin(
                    ns,
                    key=key,
                    parts=parts,
                    request=request,
                    lease_seconds=lease_seconds,
                    ttl_seconds=ttl_seconds,
                    wait_seconds=asked,
                    client_token=client_token,
                )
                return begun, sent_at
            except InProgressError as exc:
                now = clock()
                delay = in_progress_delay(
                    self._c._options.policy, attempt, exc.retry_after, deadline - now, asked, now - began
                )
                if delay is None:
                    raise
            if delay > 0:
                await self._c._sleep(delay)
            attempt += 1

    async def _release_quietly(self, ns: str, id: str, token: str) -> None:
        try:
            await self.release(ns, id, token)
        except Exception as exc:  # the original exception matters more
            logger.warning("idem: could not release operation %s/%s: %s", ns, id, exc)


async def _heartbeat(extend: Callable[[float], Awaitable[None]], beats: Beats, what: str) -> None:
    """Extends the lease on the schedule of :class:`Beats` until cancelled; ``extend(timeout)`` is
    one attempt."""
    warned = False
    while True:
        await asyncio.sleep(max(0.0, beats.beat_at - time.monotonic()))
        asked_at = time.monotonic()
        try:
            await extend(beats.attempt_timeout)
        except LeaseLostError:
            logger.warning("idem: lease lost while %s was running: another caller took the key", what)
            return
        except Exception as exc:
            # The first failure in a row is worth a warning; the tries every 250 ms after it are not.
            log = logger.warning if beats.failing_since is None else logger.debug
            log("idem: could not extend the lease of %s (trying again every 250 ms): %s", what, exc)
            if not warned and beats.ran_out(asked_at):
                warned = True
                logger.warning(
                    "idem: the lease of %s ran out before an extension got through; still trying "
                    "(it is this caller's until another takes the key)",
                    what,
                )
            beats.failed(time.monotonic())
        else:
            beats.extended(asked_at)


async def _stop(task: "asyncio.Future[None]") -> None:
    """Cancel the heartbeat and wait for it to end. ``asyncio.wait`` never raises the task's
    own CancelledError; a cancellation of the caller still propagates."""
    if not task.done():
        task.cancel()
    await asyncio.wait([task])


class AsyncReceipts:
    """``idem.receipts`` of :class:`AsyncIdem`."""

    def __init__(self, client: AsyncIdem) -> None:
        self._c = client

    async def list(
        self,
        source: Optional[str] = None,
        status: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> ReceiptPage:
        return await self._c._call(_api.receipts_list(source, status, limit, cursor))

    async def iter(
        self, source: Optional[str] = None, status: Optional[str] = None, page_size: Optional[int] = None
    ) -> AsyncIterator[Dict[str, Any]]:
        """Every matching receipt, newest first, following ``next_cursor`` (``async for``)."""
        cursor: Optional[str] = None
        while True:
            page = await self.list(source=source, status=status, limit=page_size, cursor=cursor)
            for item in page.items:
                yield item
            if page.next_cursor is None or not page.items:
                return
            cursor = page.next_cursor

    async def get(self, id: str) -> Optional[Dict[str, Any]]:
        return await self._c._call(_api.receipt_get(id))

    async def discard(self, id: str) -> Dict[str, Any]:
        """Mark a dead receipt as handled by hand: it leaves the dead letters and can still be replayed."""
        return await self._c._call(_api.receipt_discard(id))

    async def count_matching(
        self,
        source: Optional[str] = None,
        status: Optional[str] = None,
        event_id: Optional[str] = None,
        created_before: Optional[str] = None,
        created_after: Optional[str] = None,
    ) -> int:
        """How many receipts ``replay_matching`` with these filters would replay; changes nothing."""
        call = _api.receipts_replay_matching(source, status, event_id, created_before, created_after, True)
        return await self._c._call(call)

    async def replay_matching(
        self,
        source: Optional[str] = None,
        status: Optional[str] = None,
        event_id: Optional[str] = None,
        created_before: Optional[str] = None,
        created_after: Optional[str] = None,
    ) -> int:
        """Replay every matching receipt (``status`` defaults to ``dead``); returns how many were queued."""
        call = _api.receipts_replay_matching(source, status, event_id, created_before, created_after, False)
        return await self._c._call(call)

    async def replay(self, id: str) -> Dict[str, Any]:
        return await self._c._call(_api.receipt_replay(id))
