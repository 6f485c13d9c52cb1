"""Result shapes. Records stay plain dicts with the API's field names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, TypedDict


class ClaimRecord(TypedDict):
    """A claim as the API returns it (RFC 3339 UTC timestamps; ``expires_at`` ``None`` = never)."""

    namespace: str
    id: str
    parts: List[str]
    data: Any
    created_at: str
    expires_at: Optional[str]


class _LookupBase(TypedDict):
    id: str
    exists: bool


class LookupResult(_LookupBase, total=False):
    """One answer of ``claims.lookup``: ``record`` is present when ``exists`` is true."""

    record: ClaimRecord


@dataclass(frozen=True)
class ClaimResult:
    """The answer to a claim: ``claimed`` is true for the one caller that created the record;
    ``record`` is the record (the existing one, unchanged, when ``claimed`` is false)."""

    claimed: bool
    record: ClaimRecord

    @property
    def id(self) -> str:
        return self.record["id"]


@dataclass(frozen=True)
class ClaimPage:
    """A page of claims, in the order of their parts. Pass ``next`` as ``after`` for the next page;
    it is ``None`` on the last page."""

    items: List[ClaimRecord]
    next: Optional[str]


@dataclass(frozen=True)
class ReceiptPage:
    """A page of receipts, newest first. Pass ``next_cursor`` as ``cursor`` for the next page;
    it is ``None`` on the last page."""

    items: List[Dict[str, Any]]
    next_cursor: Optional[str]


@dataclass(frozen=True)
class BeginResult:
    """The answer to ``operations.begin``.

    ``status == "started"``: the caller holds the key (``token``, ``lease_expires_at``,
    ``fence``) and must do the work, then ``complete`` or ``release``. ``status ==
    "completed"``: the work was done before; ``result`` is what it returned. ``raw`` is the
    whole response body.

    ``fence`` (``None`` unless started) is the lease's fencing number: every later take of the
    key gets a greater one. Send it with the work's writes so that what they write to can
    refuse a write whose fence is smaller than one it has seen, from a holder paused past its
    lease.
    """

    status: str
    id: str
    token: Optional[str]
    lease_expires_at: Optional[str]
    result: Any
    completed_at: Optional[str]
    expires_at: Optional[str]
    raw: Dict[str, Any]
    fence: Optional[int] = None

    @property
    def started(self) -> bool:
        return self.status == "started"

    @property
    def completed(self) -> bool:
        return self.status == "completed"

    def __repr__(self) -> str:  # never show the lease token
        return (
            f"BeginResult(status={self.status!r}, id={self.id!r}, "
            f"lease_expires_at={self.lease_expires_at!r}, fence={self.fence!r}, "
            f"completed_at={self.completed_at!r})"
        )
