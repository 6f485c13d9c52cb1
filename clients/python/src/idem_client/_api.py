"""Every API call as data: the request to send and how to read its answer. The sync and async
clients only differ in how they send a :class:`Call` (see ``_sync.py`` / ``_async.py``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import (
    Any,
    Callable,
    Dict,
    FrozenSet,
    Generic,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
    cast,
)
from urllib.parse import quote

import httpx

from ._client_token import client_token as _client_token
from ._errors import NOT_FOUND, error_from_response, not_idem_answer
from ._keys import item_body, key_body
from ._models import BeginResult, ClaimPage, ClaimRecord, ClaimResult, LookupResult, ReceiptPage

T = TypeVar("T")

#: A batch or lookup item: the API's dict, or a bare key (str) or parts (list of str).
Item = Union[str, Sequence[str], Mapping[str, Any]]

@dataclass(frozen=True)
class Call(Generic[T]):
    """One HTTP request and the parser of its answer."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    body: Optional[bytes] = None
    #: Query parameters in order; a name may repeat (``prefix=a&prefix=b``).
    params: Optional[Sequence[Tuple[str, str]]] = None
    #: Error statuses handed to ``parse`` instead of raising (e.g. 404 for ``get``).
    accept: FrozenSet[int] = field(default_factory=frozenset)
    #: Seconds added to the client's timeout (a begin that waits on the server).
    extra_timeout: float = 0.0
    #: This call's timeout per attempt instead of the client's (a heartbeat's, bounded by its lease).
    timeout: Optional[float] = None
    #: This call's retries instead of the client's (a heartbeat retries on a pace of its own).
    retries: Optional[int] = None

    def finish(self, response: httpx.Response, base_url: Optional[httpx.URL] = None) -> T:
        what = f"{self.method} {self.path}"
        if response.status_code >= 400 and not (response.status_code in self.accept and _is_absent(response)):
            raise error_from_response(response, base_url, what)
        try:
            return self.parse(response)
        except NotIdemAnswer as exc:
            raise not_idem_answer(response, base_url, what, exc.expected) from None


class NotIdemAnswer(Exception):
    """A success answer without the fields the call needs (``200 {}``, an HTML page): raised by a
    parser, and turned by :meth:`Call.finish` into the not-idem :class:`IdemError` naming the URL."""

    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


#: What each call needs of a success answer: field name to kind.
Shape = Dict[str, str]


def _fits(value: Any, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "array":
        return isinstance(value, list)
    raise ValueError(kind)


def _describe(shape: Shape) -> str:
    return "{ " + ", ".join(f"{name}: {kind}" for name, kind in shape.items()) + " }"


def _has(body: Any, shape: Shape) -> bool:
    return isinstance(body, dict) and all(_fits(body.get(name), kind) for name, kind in shape.items())


def _need(response: httpx.Response, shape: Shape) -> Dict[str, Any]:
    """The answer's JSON object when it has ``shape``'s fields, else :class:`NotIdemAnswer`."""
    body = _json(response, _describe(shape))
    if not _has(body, shape):
        raise NotIdemAnswer(_describe(shape))
    return cast(Dict[str, Any], body)


def _list_of(response: httpx.Response, name: str, shape: Shape) -> List[Dict[str, Any]]:
    """``{name: [item…]}``, each item with ``shape``'s fields."""
    expected = f"{{ {name}: [{_describe(shape)}, …] }}"
    body = _json(response, expected)
    items = body.get(name) if isinstance(body, dict) else None
    if not isinstance(items, list) or not all(_has(item, shape) for item in items):
        raise NotIdemAnswer(expected)
    return items


def _is_absent(response: httpx.Response) -> bool:
    """Only idem's own "no such record" is absent: a 404 for an unknown route (a wrong base URL)
    or from something in front of idem is an error."""
    if response.status_code != 404:
        return True
    try:
        body = json.loads(response.content)
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("type") == NOT_FOUND


def encode_json(value: Any) -> bytes:
    """Strict JSON (no NaN/Infinity); raises ``TypeError``/``ValueError`` for anything else."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


def _seg(value: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("path segments (namespace, id, source) must be non-empty strings")
    return quote(value, safe="")


def _json(response: httpx.Response, expected: str) -> Any:
    """The answer's JSON (not JSON: :class:`NotIdemAnswer`, which says so)."""
    try:
        return json.loads(response.content)
    except ValueError:
        raise NotIdemAnswer(expected) from None


#: The fields of each answer (docs/reference/api.md): a claim's ``claimed`` must be a boolean
#: (missing is not ``False``).
CLAIM: Shape = {"claimed": "boolean", "id": "string"}
LOOKUP: Shape = {"id": "string", "exists": "boolean"}
EXISTS: Shape = {"exists": "boolean"}
CLAIM_RECORD: Shape = {"id": "string"}
CLAIM_PAGE: Shape = {"items": "array"}
DELETED: Shape = {"deleted": "integer"}
EXTENDED: Shape = {"lease_expires_at": "string"}
OPERATION: Shape = {"status": "string", "id": "string"}
RECEIPT_PAGE: Shape = {"receipts": "array"}
RECEIPT: Shape = {"id": "string", "status": "string"}
RECEIPT_ACK: Shape = {"receipt_id": "string", "status": "string"}


def _claim_result(body: Dict[str, Any]) -> ClaimResult:
    record = dict(body)
    claimed = record.pop("claimed")
    return ClaimResult(claimed=claimed, record=cast(ClaimRecord, record))


def _none(response: httpx.Response) -> None:
    return None


def _found(response: httpx.Response) -> bool:
    return response.status_code != 404


def _optional(shape: Shape) -> Callable[[httpx.Response], Optional[Dict[str, Any]]]:
    def parse(response: httpx.Response) -> Optional[Dict[str, Any]]:
        return None if response.status_code == 404 else _need(response, shape)

    return parse


def _object(shape: Shape) -> Callable[[httpx.Response], Dict[str, Any]]:
    return lambda response: _need(response, shape)


_404 = frozenset({404})


# Claims (docs/reference/api.md#claims)


# A claim's, a batch's and a begin's body is encoded once, with its client_token, and every retry
# of the Call sends those same bytes: the token is the same on each attempt of one logical call.


def claim(
    ns: str,
    key: Optional[str],
    parts: Optional[Sequence[str]],
    data: Any,
    ttl_seconds: Optional[int],
    client_token: Optional[str] = None,
) -> Call[ClaimResult]:
    body = key_body(key, parts)
    if data is not None:
        body["data"] = data
    if ttl_seconds is not None:
        body["ttl_seconds"] = ttl_seconds
    body["client_token"] = _client_token(client_token)
    return Call("POST", f"/v1/claims/{_seg(ns)}", lambda r: _claim_result(_need(r, CLAIM)), encode_json(body))


def claim_batch(ns: str, items: Sequence[Item], client_token: Optional[str] = None) -> Call[List[ClaimResult]]:
    body = {"items": [item_body(i) for i in items], "client_token": _client_token(client_token)}
    return Call(
        "POST",
        f"/v1/claims/{_seg(ns)}/batch",
        lambda r: [_claim_result(x) for x in _list_of(r, "results", CLAIM)],
        encode_json(body),
    )


def lookup(ns: str, items: Sequence[Item]) -> Call[List[LookupResult]]:
    body = {"items": [item_body(i) for i in items]}
    return Call(
        "POST",
        f"/v1/claims/{_seg(ns)}/lookup",
        lambda r: cast(List[LookupResult], _list_of(r, "results", LOOKUP)),
        encode_json(body),
    )


def exists_prefix(ns: str, prefix: Union[str, Sequence[str]]) -> Call[bool]:
    parts = [prefix] if isinstance(prefix, str) else list(prefix)
    return Call(
        "POST",
        f"/v1/claims/{_seg(ns)}/prefix",
        lambda r: bool(_need(r, EXISTS)["exists"]),
        encode_json({"prefix": parts}),
    )


def _prefix(prefix: Union[str, Sequence[str]]) -> List[Tuple[str, str]]:
    parts = [prefix] if isinstance(prefix, str) else list(prefix)
    if not parts:
        raise ValueError("a prefix is at least one part, e.g. prefix=['scenario-1']")
    return [("prefix", part) for part in parts]


def _claim_page(response: httpx.Response) -> ClaimPage:
    body = _need(response, CLAIM_PAGE)
    items = body["items"]
    after = body.get("next")
    return ClaimPage(items=cast(List[ClaimRecord], items), next=after if isinstance(after, str) and after else None)


def claims_list(
    ns: str, prefix: Union[str, Sequence[str]], limit: Optional[int], after: Optional[str]
) -> Call[ClaimPage]:
    params = _prefix(prefix)
    if limit is not None:
        params.append(("limit", str(int(limit))))
    if after is not None:
        params.append(("after", after))
    return Call("GET", f"/v1/claims/{_seg(ns)}", _claim_page, params=params)


def _deleted(response: httpx.Response) -> Tuple[int, bool]:
    body = _need(response, DELETED)
    return int(body["deleted"]), body.get("more") is True


def claims_delete_prefix(ns: str, prefix: Union[str, Sequence[str]]) -> Call[Tuple[int, bool]]:
    """One call of a prefix's deletion: ``(deleted, more)``; ``more``: call again."""
    return Call("DELETE", f"/v1/claims/{_seg(ns)}", _deleted, params=_prefix(prefix))


def claim_get(ns: str, id: str) -> Call[Optional[ClaimRecord]]:
    return Call(
        "GET",
        f"/v1/claims/{_seg(ns)}/{_seg(id)}",
        lambda r: cast(Optional[ClaimRecord], _optional(CLAIM_RECORD)(r)),
        accept=_404,
    )


def claim_delete(ns: str, id: str) -> Call[bool]:
    return Call("DELETE", f"/v1/claims/{_seg(ns)}/{_seg(id)}", _found, accept=_404)


# Operations (docs/reference/api.md#operations)


def _fence(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_BEGIN = '{ status: "started", id: string, token: string } or { status: "completed", id: string, result }'


def _begin_result(response: httpx.Response) -> BeginResult:
    body = _json(response, _BEGIN)
    started = isinstance(body, dict) and body.get("status") == "started"
    if not (
        isinstance(body, dict)
        and isinstance(body.get("id"), str)
        and ((started and isinstance(body.get("token"), str) and body["token"]) or body.get("status") == "completed")
    ):
        raise NotIdemAnswer(_BEGIN)
    return BeginResult(
        status=str(body.get("status", "")),
        id=str(body.get("id", "")),
        token=body.get("token"),
        lease_expires_at=body.get("lease_expires_at"),
        fence=_fence(body.get("fence")),
        result=body.get("result"),
        completed_at=body.get("completed_at"),
        expires_at=body.get("expires_at"),
        raw=body,
    )


def op_begin(
    ns: str,
    key: Optional[str],
    parts: Optional[Sequence[str]],
    request: Any,
    lease_seconds: Optional[int],
    ttl_seconds: Optional[int],
    wait_seconds: Optional[int],
    client_token: Optional[str] = None,
) -> Call[BeginResult]:
    body = key_body(key, parts)
    if request is not None:
        body["request"] = request
    if lease_seconds is not None:
        body["lease_seconds"] = lease_seconds
    if ttl_seconds is not None:
        body["ttl_seconds"] = ttl_seconds
    if wait_seconds:
        body["wait_seconds"] = wait_seconds
    body["client_token"] = _client_token(client_token)
    return Call(
        "POST",
        f"/v1/operations/{_seg(ns)}/begin",
        _begin_result,
        encode_json(body),
        extra_timeout=float(wait_seconds or 0),
    )


_COMPLETED = '{ status: "completed", id: string, result }'


def _completed(response: httpx.Response) -> Dict[str, Any]:
    body = _json(response, _COMPLETED)
    if not (isinstance(body, dict) and body.get("status") == "completed" and isinstance(body.get("id"), str)):
        raise NotIdemAnswer(_COMPLETED)
    return body


def op_complete(ns: str, id: str, token: str, result: Any) -> Call[Dict[str, Any]]:
    return Call(
        "POST",
        f"/v1/operations/{_seg(ns)}/{_seg(id)}/complete",
        _completed,
        encode_json({"token": token, "result": result}),
    )


def op_release(ns: str, id: str, token: str) -> Call[None]:
    return Call(
        "POST", f"/v1/operations/{_seg(ns)}/{_seg(id)}/release", _none, encode_json({"token": token})
    )


def op_extend(
    ns: str,
    id: str,
    token: str,
    lease_seconds: int,
    timeout: Optional[float] = None,
    retries: Optional[int] = None,
) -> Call[Dict[str, Any]]:
    """An extend; a heartbeat gives its own ``timeout`` (bounded by the lease) and ``retries=0``."""
    return Call(
        "POST",
        f"/v1/operations/{_seg(ns)}/{_seg(id)}/extend",
        _object(EXTENDED),
        encode_json({"token": token, "lease_seconds": lease_seconds}),
        timeout=timeout,
        retries=retries,
    )


def op_get(ns: str, id: str) -> Call[Optional[Dict[str, Any]]]:
    return Call("GET", f"/v1/operations/{_seg(ns)}/{_seg(id)}", _optional(OPERATION), accept=_404)


def op_delete(ns: str, id: str) -> Call[bool]:
    return Call("DELETE", f"/v1/operations/{_seg(ns)}/{_seg(id)}", _found, accept=_404)


# Receipts (docs/reference/api.md#events)


def _receipt_page(response: httpx.Response) -> ReceiptPage:
    body = _need(response, RECEIPT_PAGE)
    items = body["receipts"]
    cursor = body.get("next_cursor")
    return ReceiptPage(items=items, next_cursor=cursor if isinstance(cursor, str) and cursor else None)


def receipts_list(
    source: Optional[str], status: Optional[str], limit: Optional[int], cursor: Optional[str]
) -> Call[ReceiptPage]:
    params: Dict[str, str] = {}
    if source is not None:
        params["source"] = source
    if status is not None:
        params["status"] = status
    if limit is not None:
        params["limit"] = str(int(limit))
    if cursor is not None:
        params["cursor"] = cursor
    return Call("GET", "/v1/receipts", _receipt_page, params=list(params.items()))


def receipt_get(id: str) -> Call[Optional[Dict[str, Any]]]:
    return Call("GET", f"/v1/receipts/{_seg(id)}", _optional(RECEIPT), accept=_404)


def receipt_replay(id: str) -> Call[Dict[str, Any]]:
    return Call("POST", f"/v1/receipts/{_seg(id)}/replay", _object(RECEIPT_ACK))


def receipt_discard(id: str) -> Call[Dict[str, Any]]:
    return Call("POST", f"/v1/receipts/{_seg(id)}/discard", _object(RECEIPT_ACK))


def _count(field: str) -> Callable[[httpx.Response], int]:
    def parse(response: httpx.Response) -> int:
        return int(_need(response, {field: "integer"})[field])

    return parse


def receipts_replay_matching(
    source: Optional[str],
    status: Optional[str],
    event_id: Optional[str],
    created_before: Optional[str],
    created_after: Optional[str],
    dry_run: bool,
) -> Call[int]:
    body: Dict[str, Any] = {"dry_run": dry_run}
    for name, value in (
        ("source", source),
        ("status", status),
        ("event_id", event_id),
        ("created_before", created_before),
        ("created_after", created_after),
    ):
        if value is not None:
            body[name] = value
    return Call("POST", "/v1/receipts/replay", _count("matching" if dry_run else "queued"), body=encode_json(body))
