"""Errors: every failure the server reports is an :class:`IdemError` built from its
RFC 9457 ``application/problem+json`` body."""

from __future__ import annotations

import json
from typing import Any, Optional

import httpx

from ._retry import parse_retry_after

IN_PROGRESS = "urn:idem:problem:in-progress"
FINGERPRINT_MISMATCH = "urn:idem:problem:fingerprint-mismatch"
LEASE_LOST = "urn:idem:problem:lease-lost"
FORBIDDEN = "urn:idem:problem:forbidden"
#: A 503: the store could not be used; nothing was changed.
STORE_UNAVAILABLE = "urn:idem:problem:store-unavailable"
#: A 503: the store's answer was lost after a write was sent; it may or may not have been made.
#: The client retries it with the call's own client token, which tells which.
OUTCOME_UNKNOWN = "urn:idem:problem:outcome-unknown"
#: A 404 meaning "no such record": the only 404 that ``get`` and ``delete`` read as absent.
NOT_FOUND = "urn:idem:problem:not-found"
#: A 404 for a path that is no route at all (a wrong base URL): always an error.
NO_SUCH_ROUTE = "urn:idem:problem:no-such-route"


class IdemError(Exception):
    """A problem reported by idem (or a failure to reach it).

    ``status`` is the HTTP status (0 when no response was received), ``type``, ``title``,
    ``detail`` and ``field`` come from the problem+json body, and ``retry_after`` is the
    ``Retry-After`` header in seconds when the server sent one. ``not_idem`` is true when the
    answer was not an idem problem document; the message then says the URL does not look like idem.
    """

    def __init__(
        self,
        status: int,
        type: str = "about:blank",
        title: str = "",
        detail: str = "",
        field: Optional[str] = None,
        retry_after: Optional[float] = None,
        not_idem: bool = False,
    ) -> None:
        self.status = status
        #: True when the answer was not an idem problem document (``application/problem+json``
        #: with a ``urn:idem:problem:`` type): a web server's 404 page, a proxy's error. The
        #: client's ``url`` (or ``IDEM_URL``) probably points at something that is not idem.
        self.not_idem = not_idem
        self.type = type
        self.title = title
        self.detail = detail
        self.field = field
        self.retry_after = retry_after
        super().__init__(self._message())

    def _message(self) -> str:
        head = f"{self.status} {self.title}".strip() if self.status else self.title
        text = f"{head}: {self.detail}" if self.detail else head
        if self.field:
            text += f" (field: {self.field})"
        return text

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(status={self.status!r}, type={self.type!r}, "
            f"title={self.title!r}, detail={self.detail!r}, field={self.field!r})"
        )


class ForbiddenError(IdemError):
    """403 ``urn:idem:problem:forbidden``: the token is known but may not do this (its ``can``,
    namespaces or sources); ``detail`` says what was refused. Nothing was changed."""


class InProgressError(IdemError):
    """409 ``urn:idem:problem:in-progress``: another holder is still running the operation."""


class LeaseLostError(IdemError):
    """409 ``urn:idem:problem:lease-lost``: this token no longer holds the operation's key."""


class MismatchError(IdemError):
    """422: the key was used before with another ``request`` (fingerprint mismatch)."""


class UnavailableError(IdemError):
    """503, after the client's own retries: the store cannot be reached or written.

    ``type`` says which: :data:`STORE_UNAVAILABLE` (nothing was changed; retry later) or
    :data:`OUTCOME_UNKNOWN` (the write may or may not have been made). After the latter, ask
    again with the same ``client_token`` to learn which: a claim that was made answers
    ``claimed`` true, a begin that took the key its lease."""


class IdemConnectionError(UnavailableError):
    """idem could not be reached at all (connection refused, reset, timed out) after the
    configured retries. ``status`` is 0."""


def _where(base_url: httpx.URL) -> str:
    """The base URL as an error shows it: without any user or password."""
    where = f"{base_url.scheme}://{base_url.host}" + (f":{base_url.port}" if base_url.port else "")
    return where + base_url.path.rstrip("/")


def connection_error(exc: httpx.TransportError, base_url: httpx.URL, method: str, path: str, attempts: int) -> IdemConnectionError:
    """The error for a call that never got an answer: it names where idem was looked for (without
    any user or password in the URL), why it could not be reached and how to look elsewhere."""
    where = _where(base_url)
    cause = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        reason = f"no answer in time ({type(exc).__name__})"
    elif "refused" in cause.lower():
        reason = f"connection refused (is idem running there?) [{cause}]"
    else:
        reason = f"{type(exc).__name__}: {cause}"
    detail = f"cannot reach idem at {where}: {reason} ({method} {path}, {attempts} attempts)"
    if not isinstance(exc, httpx.TimeoutException):
        detail += "; to point the client elsewhere, give it url= or set IDEM_URL"
    return IdemConnectionError(0, "urn:idem:client:connection-error", "Connection failed", detail)


class WebhookVerificationError(Exception):
    """A webhook's signature is missing, malformed or wrong, or its timestamp is too far from now."""


def is_idem_problem(response: httpx.Response, body: Any) -> bool:
    """Whether an error answer is idem's own: ``application/problem+json`` whose ``type`` is one of
    idem's (``urn:idem:problem:…``). Anything else comes from something that is not idem."""
    content_type = response.headers.get("content-type", "").strip().lower()
    kind = body.get("type") if isinstance(body, dict) else None
    return (
        content_type.startswith("application/problem+json")
        and isinstance(kind, str)
        and kind.startswith("urn:idem:problem:")
    )


def error_from_response(
    response: httpx.Response, base_url: Optional[httpx.URL] = None, what: str = "a call"
) -> IdemError:
    """Map an error response (problem+json or not) to the right :class:`IdemError` subclass; one
    that is not an idem problem document says that ``base_url`` does not look like idem
    (``what``: the call, ``"POST /v1/claims/survey"``)."""
    status = response.status_code
    body: Any = None
    try:
        body = json.loads(response.content) if response.content else None
    except ValueError:
        body = None
    retry_after = parse_retry_after(response.headers.get("retry-after"))
    if isinstance(body, dict):
        kind = _str(body.get("type")) or "about:blank"
        title = _str(body.get("title")) or response.reason_phrase
        detail = _str(body.get("detail"))
        field = body.get("field")
        field = field if isinstance(field, str) else None
    else:
        kind = "about:blank"
        title = response.reason_phrase
        detail = response.text[:200] if response.content else ""
        field = None
    not_idem = not is_idem_problem(response, body)
    if not_idem:
        where = _where(base_url) if base_url is not None else "the server"
        theirs = f" [its detail: {detail}]" if detail and isinstance(body, dict) else ""
        detail = (
            f"{where} answered {status} to {what} without an idem problem document: it does not look like idem "
            f"(check the client's url= or IDEM_URL){theirs}"
        )
    cls: type[IdemError] = IdemError
    if status == 403:
        cls = ForbiddenError
    elif status == 409 and kind == IN_PROGRESS:
        cls = InProgressError
    elif status == 409 and kind == LEASE_LOST:
        cls = LeaseLostError
    elif status == 422:
        cls = MismatchError
    elif status == 503:
        cls = UnavailableError
    return cls(status, kind, title, detail, field, retry_after, not_idem)


def not_idem_answer(
    response: httpx.Response, base_url: Optional[httpx.URL], what: str, expected: str
) -> IdemError:
    """A success answer without the fields the call needs (``200 {}``, an HTML page from a server
    that answers anything): not idem's answer, so not a result either. The not-idem error naming
    ``base_url``, as for an error answer that is not an idem problem document."""
    where = _where(base_url) if base_url is not None else "the server"
    status = response.status_code
    if not response.content:
        got = f"with an empty body (expected {expected})"
    else:
        try:
            json.loads(response.content)
            got = f"without the fields of idem's answer (expected {expected})"
        except ValueError:
            kind = response.headers.get("content-type") or "no Content-Type"
            got = f"with a body that is not JSON ({kind})"
    detail = (
        f"{where} answered {status} to {what} {got}: it does not look like idem "
        "(check the client's url= or IDEM_URL)"
    )
    return IdemError(status, "about:blank", "Invalid response", detail, not_idem=True)


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
