"""The synchronous client, :class:`Idem`."""

from __future__ import annotations

import copy
import functools
import inspect
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar, Union, cast

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


class Idem:
    """A synchronous idem client (thread-safe; share one per process).

    ``url`` is the server (default: the ``IDEM_URL`` environment variable, else
    ``http://127.0.0.1:7070``); ``token`` the bearer token when the server has ``[auth] tokens``
    (default: ``IDEM_TOKEN``, if set; ``""`` sends none); ``timeout`` seconds per HTTP attempt; ``retries`` how many
    times a call is retried on connection errors and 502/503/504 (exponential backoff with
    jitter, honouring ``Retry-After``). ``sleep`` and ``clock`` can be replaced in tests;
    ``transport`` is an ``httpx`` transport (e.g. ``httpx.MockTransport``).
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
        transport: Optional[httpx.BaseTransport] = None,
        limits: Optional[httpx.Limits] = None,
        sleep: Callable[[float], None] = time.sleep,
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

        def make_client() -> httpx.Client:
            return httpx.Client(
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
        self.claims = Claims(self)
        self.operations = Operations(self)
        self.receipts = Receipts(self)

    def with_options(
        self,
        *,
        timeout: Optional[float] = None,
        retries: Optional[int] = None,
        wait_timeout: Optional[float] = None,
    ) -> Idem:
        """A view of this client with other settings for some calls, sharing its connections:
        ``idem.with_options(timeout=2, retries=0).claims.claim(...)``. Close the original."""
        clone = copy.copy(self)
        clone._options = replace_options(self._options, timeout, retries, wait_timeout)
        clone.claims = Claims(clone)
        clone.operations = Operations(clone)
        clone.receipts = Receipts(clone)
        return clone

    def __repr__(self) -> str:
        return client_repr("Idem", self._options)

    def close(self) -> None:
        self._http.close()
        self._waiting_http.close()

    def __enter__(self) -> Idem:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, call: Call[T]) -> T:
        policy = policy_of(self._options, call)
        attempt = 0
        while True:
            try:
                http = self._waiting_http if call.extra_timeout else self._http
                response = http.request(
                    call.method, call.path, **request_kwargs(self._options, call)
                )
            except httpx.TransportError as exc:
                delay = policy.for_connection_error(attempt)
                if delay is None:
                    raise connection_error(exc, http.base_url, call.method, call.path, attempt + 1) from exc
            else:
                delay = policy.for_status(
                    attempt, response.status_code, _retry_after(response)
                )
                if delay is None:
                    return call.finish(response, http.base_url)
                response.close()
            logger.debug("idem: retrying %s %s in %.2fs", call.method, call.path, delay)
            self._sleep(delay)
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
        """Decorate a function so it runs once per key (see :meth:`Operations.run`).

        ``key(*args, **kwargs)`` computes the key (a ``str``, or a list of ``str`` as parts);
        ``request(*args, **kwargs)``, when given, the JSON the key must always come with
        (another request under the same key raises :class:`MismatchError`). The function's
        return value must be JSON-serializable; later calls return the stored result.
        """

        def decorate(fn: F) -> F:
            if inspect.iscoroutinefunction(fn):
                raise TypeError("use AsyncIdem.idempotent for async functions")

            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                k, parts, req = decorator_args(key, request, args, kwargs)
                return self.operations.run(
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


def _retry_after(response: httpx.Response) -> Optional[float]:
    return parse_retry_after(response.headers.get("retry-after"))


class Claims:
    """``idem.claims``: the first-writer-wins dedup store (docs/reference/api.md#claims)."""

    def __init__(self, client: Idem) -> None:
        self._c = client

    def claim(
        self,
        ns: str,
        *,
        key: Optional[str] = None,
        parts: Optional[Sequence[str]] = None,
        data: Any = None,
        ttl_seconds: Optional[int] = None,
        client_token: Optional[str] = None,
    ) -> ClaimResult:
        """Claim a key: ``.claimed`` is true for exactly one caller; ``.record`` is the record.

        Every attempt of the call sends the same ``client_token`` (a fresh UUID v4 unless one is
        given: 1 to 255 printable ASCII, e.g. to keep across a restart), so a retry after a lost
        answer is still told ``claimed`` true. Never give one token to two different claims."""
        return self._c._call(_api.claim(ns, key, parts, data, ttl_seconds, client_token))

    def claim_batch(
        self, ns: str, items: Sequence[Item], *, client_token: Optional[str] = None
    ) -> List[ClaimResult]:
        """Claim 1 to 10,000 keys in one call; results in request order. One ``client_token``
        for the whole call (as :meth:`claim`'s): a retry is told each item as first decided."""
        return self._c._call(_api.claim_batch(ns, items, client_token))

    def lookup(self, ns: str, items: Sequence[Item]) -> List[LookupResult]:
        """Which of these keys exist: ``[{"id", "exists", "record"?}]`` in request order."""
        return self._c._call(_api.lookup(ns, items))

    def exists(
        self,
        ns: str,
        prefix: Union[str, Sequence[str], None] = None,
        *,
        key: Optional[str] = None,
        parts: Optional[Sequence[str]] = None,
    ) -> bool:
        """Is there a live claim whose parts begin with ``prefix`` (or, with ``key=`` /
        ``parts=``, this exact key)?"""
        if prefix is not None:
            if key is not None or parts is not None:
                raise ValueError("give prefix=, or key= / parts=, not both")
            return self._c._call(_api.exists_prefix(ns, prefix))
        if (key is None) == (parts is None):
            raise ValueError("give exactly one of prefix=, key= or parts=")
        item: Item = {"key": key} if key is not None else {"parts": [*(parts or [])]}
        return bool(self._c._call(_api.lookup(ns, [item]))[0]["exists"])

    def get(
        self,
        ns: str,
        *,
        key: Optional[str] = None,
        parts: Optional[Sequence[str]] = None,
        id: Optional[str] = None,
    ) -> Optional[ClaimRecord]:
        """The record, or ``None`` when absent (or expired)."""
        return self._c._call(_api.claim_get(ns, resolve_id(id, key, parts)))

    def delete(
        self,
        ns: str,
        *,
        key: Optional[str] = None,
        parts: Optional[Sequence[str]] = None,
        id: Optional[str] = None,
    ) -> bool:
        """Delete a claim: ``True`` if it existed, ``False`` if it was absent."""
        return self._c._call(_api.claim_delete(ns, resolve_id(id, key, parts)))

    def list(
        self,
        ns: str,
        prefix: Union[str, Sequence[str]],
        *,
        limit: Optional[int] = None,
        after: Optional[str] = None,
    ) -> ClaimPage:
        """One page of the live claims whose parts begin with ``prefix`` (1 to 16 parts), in the
        order of their parts: ``.items`` (records) and ``.next``, which is ``after`` for the next
        page (``None`` on the last). ``limit``: 1 to 1000 (server default 100)."""
        return self._c._call(_api.claims_list(ns, prefix, limit, after))

    def iter(
        self, ns: str, prefix: Union[str, Sequence[str]], *, page_size: Optional[int] = None
    ) -> Iterator[ClaimRecord]:
        """Every live claim whose parts begin with ``prefix``, in parts order, page after page."""
        after: Optional[str] = None
        while True:
            page = self.list(ns, prefix, limit=page_size, after=after)
            yield from page.items
            if page.next is None or not page.items:
                return
            after = page.next

    def delete_prefix(self, ns: str, prefix: Union[str, Sequence[str]]) -> int:
        """Delete every live claim whose parts begin with ``prefix`` (at least one part); returns
        how many were deleted. The server deletes up to 100,000 a call and says when more remain:
        this calls again until none do."""
        total = 0
        while True:
            deleted, more = self._c._call(_api.claims_delete_prefix(ns, prefix))
            total += deleted
            # A call that deleted nothing cannot have more to delete: never loop on a confused answer.
            if not more or deleted == 0:
                return total


class Operations:
    """``idem.operations``: a piece of work done once (docs/reference/api.md#operations)."""

    def __init__(self, client: Idem) -> None:
        self._c = client

    def begin(
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
        """Take the key (``status == "started"``, with a ``token``) or get the stored result
        (``status == "completed"``). Raises :class:`InProgressError` while someone else holds
        it (after waiting up to ``wait_seconds`` on the server) and :class:`MismatchError`
        for another ``request``. Every attempt sends the same ``client_token`` (as
        :meth:`Claims.claim`'s), so a retry of a begin that took the key, its answer lost, gets
        the same lease (``token``, ``fence``) back."""
        return self._c._call(
            _api.op_begin(
                ns, key, parts, request, lease_seconds, ttl_seconds, wait_seconds, client_token
            )
        )

    def complete(self, ns: str, id: str, token: str, result: Any = None) -> Dict[str, Any]:
        """Store the work's JSON result; later begins get it. :class:`LeaseLostError` if the
        token no longer holds the key."""
        return self._c._call(_api.op_complete(ns, id, token, result))

    def release(self, ns: str, id: str, token: str) -> None:
        """Give the key up: the work failed and may run again."""
        self._c._call(_api.op_release(ns, id, token))

    def extend(self, ns: str, id: str, token: str, lease_seconds: int) -> Dict[str, Any]:
        """Heartbeat: hold the key ``lease_seconds`` more. Returns ``{"lease_expires_at"}``."""
        return self._c._call(_api.op_extend(ns, id, token, lease_seconds))

    def get(
        self,
        ns: str,
        *,
        key: Optional[str] = None,
        parts: Optional[Sequence[str]] = None,
        id: Optional[str] = None,
    ) -> Optional[Dict[str, Any]]:
        """The operation (``status`` ``in_progress`` or ``completed``), or ``None``."""
        return self._c._call(_api.op_get(ns, resolve_id(id, key, parts)))

    def delete(
        self,
        ns: str,
        *,
        key: Optional[str] = None,
        parts: Optional[Sequence[str]] = None,
        id: Optional[str] = None,
    ) -> bool:
        """Forget a completed result: ``True`` if it existed, ``False`` if absent.
        Raises :class:`InProgressError` while the key is held."""
        return self._c._call(_api.op_delete(ns, resolve_id(id, key, parts)))

    def run(
        self,
        ns: str,
        fn: Callable[[], T],
        *,
        key: Optional[str] = None,
        parts: Optional[Sequence[str]] = None,
        request: Any = None,
        lease_seconds: Optional[int] = None,
        ttl_seconds: Optional[int] = None,
        wait_timeout: Optional[float] = None,
        client_token: Optional[str] = None,
    ) -> T:
        """Run ``fn`` once per key and return its result.

        Begins the operation; if this caller holds the key, calls ``fn()``, stores its
        (JSON-serializable) return value and returns it, extending the lease while ``fn`` runs
        (a heartbeat thread: every third of the lease, counted from before the begin was sent; a
        failed extension tried again 250 ms later until one gets through). If the work was done before, returns the stored result without
        calling ``fn``. If ``fn`` raises, the key is released (so a later call runs it again)
        and the exception propagates. While another caller holds the key, waits for it (up to
        ``wait_timeout`` seconds, default the client's) and then raises :class:`InProgressError`.

        Every begin of one run (its retries, and those sent while waiting) carries one
        ``client_token`` (``client_token=``, else a fresh UUID v4), so a begin that took the key
        but whose answer was lost still hands this call the lease.
        """
        # One token for every begin of this run: each is the same request, asked again.
        token_of_call = _client_token(client_token)
        begun, sent_at = self._begin_waiting(
            ns, key, parts, request, lease_seconds, ttl_seconds, wait_timeout, token_of_call
        )
        if not begun.started:
            return cast(T, begun.result)
        token = begun.token or ""
        lease = lease_seconds or DEFAULT_LEASE_SECONDS

        def extend_once(timeout: float) -> None:
            self._c._call(_api.op_extend(ns, begun.id, token, lease, timeout=timeout, retries=0))

        # The lease counts from before the begin was sent, as the server counts it.
        beats = Beats(lease=lease, leased_at=sent_at, timeout=self._c._options.timeout)
        beat = _Heartbeat(extend_once, beats, f"{ns}/{begun.id}")
        beat.start()
        try:
            value = fn()
            stored = roundtrip(value)
        except BaseException:
            beat.stop()
            self._release_quietly(ns, begun.id, token)
            raise
        beat.stop()
        self.complete(ns, begun.id, token, stored)
        return cast(T, stored)

    def _begin_waiting(
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
                begun = self.begin(
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
                self._c._sleep(delay)
            attempt += 1

    def _release_quietly(self, ns: str, id: str, token: str) -> None:
        try:
            self.release(ns, id, token)
        except Exception as exc:  # the original exception matters more
            logger.warning("idem: could not release operation %s/%s: %s", ns, id, exc)


class _Heartbeat:
    """Extends the lease on a daemon thread, on the schedule of :class:`Beats`, until stopped;
    ``extend(timeout)`` is one attempt."""

    def __init__(self, extend: Callable[[float], None], beats: Beats, what: str) -> None:
        self._extend = extend
        self._beats = beats
        self._what = what
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="idem-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _loop(self) -> None:
        beats = self._beats
        warned = False
        while not self._stopped.wait(max(0.0, beats.beat_at - time.monotonic())):
            asked_at = time.monotonic()
            try:
                self._extend(beats.attempt_timeout)
            except LeaseLostError:
                logger.warning("idem: lease lost while %s was running: another caller took the key", self._what)
                return
            except Exception as exc:
                # The first failure in a row is worth a warning; the tries every 250 ms after it are not.
                log = logger.warning if beats.failing_since is None else logger.debug
                log("idem: could not extend the lease of %s (trying again every 250 ms): %s", self._what, exc)
                if not warned and beats.ran_out(asked_at):
                    warned = True
                    logger.warning(
                        "idem: the lease of %s ran out before an extension got through; still trying "
                        "(it is this caller's until another takes the key)",
                        self._what,
                    )
                beats.failed(time.monotonic())
            else:
                beats.extended(asked_at)


class Receipts:
    """``idem.receipts``: event receipts, dead letters and replay (docs/reference/api.md#events)."""

    def __init__(self, client: Idem) -> None:
        self._c = client

    def list(
        self,
        source: Optional[str] = None,
        status: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> ReceiptPage:
        """One page of receipts, newest first: ``.items`` and ``.next_cursor``."""
        return self._c._call(_api.receipts_list(source, status, limit, cursor))

    def iter(
        self, source: Optional[str] = None, status: Optional[str] = None, page_size: Optional[int] = None
    ) -> Iterator[Dict[str, Any]]:
        """Every matching receipt, newest first, following ``next_cursor`` page by page."""
        cursor: Optional[str] = None
        while True:
            page = self.list(source=source, status=status, limit=page_size, cursor=cursor)
            yield from page.items
            if page.next_cursor is None or not page.items:
                return
            cursor = page.next_cursor

    def get(self, id: str) -> Optional[Dict[str, Any]]:
        """The receipt (status, attempts, result webhook state), or ``None``."""
        return self._c._call(_api.receipt_get(id))

    def discard(self, id: str) -> Dict[str, Any]:
        """Mark a dead receipt as handled by hand: it leaves the dead letters and can still be replayed."""
        return self._c._call(_api.receipt_discard(id))

    def count_matching(
        self,
        source: Optional[str] = None,
        status: Optional[str] = None,
        event_id: Optional[str] = None,
        created_before: Optional[str] = None,
        created_after: Optional[str] = None,
    ) -> int:
        """How many receipts ``replay_matching`` with these filters would replay; changes nothing."""
        call = _api.receipts_replay_matching(source, status, event_id, created_before, created_after, True)
        return self._c._call(call)

    def replay_matching(
        self,
        source: Optional[str] = None,
        status: Optional[str] = None,
        event_id: Optional[str] = None,
        created_before: Optional[str] = None,
        created_after: Optional[str] = None,
    ) -> int:
        """Replay every matching receipt (``status`` defaults to ``dead``); returns how many were queued."""
        call = _api.receipts_replay_matching(source, status, event_id, created_before, created_after, False)
        return self._c._call(call)

    def replay(self, id: str) -> Dict[str, Any]:
        """Deliver a ``dead`` or ``completed`` receipt again from attempt 1 (same ``webhook-id``)."""
        return self._c._call(_api.receipt_replay(id))

