"""Schemathesis hooks for scripts/check-openapi.sh: a rule of time that JSON Schema cannot state.

A claim's `created_at` (for an imported record) must not be in the future, and its TTL counts
from it, so a record whose TTL has already run out is absent at once
(docs/reference/api.md#claims). The document says `format: date-time`, which a generator fills
with any year. This hook moves a generated `created_at` that parses as a date-time to a second ago
when it is in the future or its TTL would already have run out, so that a schema-valid request is
one the server must accept and its claim one that a read must find. Values that do not parse are
left as drawn: they test the server's refusal.
"""
from datetime import datetime, timedelta, timezone
from typing import Any

import schemathesis


def _live(item: Any, now: datetime) -> None:
    if not isinstance(item, dict) or not isinstance(item.get("created_at"), str):
        return
    try:
        made = datetime.fromisoformat(item["created_at"].replace("Z", "+00:00"))
    except ValueError:
        return
    if made.tzinfo is None:
        return
    ttl = item.get("ttl_seconds")
    try:
        expired = isinstance(ttl, (int, float)) and made + timedelta(seconds=ttl) <= now + timedelta(minutes=1)
    except OverflowError:
        expired = False
    if made > now or expired:
        item["created_at"] = (now - timedelta(seconds=1)).isoformat().replace("+00:00", "Z")


@schemathesis.hook
def map_body(ctx: Any, body: Any) -> Any:
    now = datetime.now(timezone.utc)
    _live(body, now)
    if isinstance(body, dict) and isinstance(body.get("items"), list):
        for item in body["items"]:
            _live(item, now)
    return body
