"""Standard Webhooks verification (https://www.standardwebhooks.com/), as idem signs its
deliveries and result webhooks."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from datetime import datetime
from typing import Any, Iterable, Mapping, Tuple, Union

from ._errors import WebhookVerificationError

#: How far a webhook's timestamp may be from now, in seconds.
DEFAULT_TOLERANCE = 5 * 60

_SECRET_PREFIX = "whsec_"

HeadersLike = Union[Mapping[str, str], Iterable[Tuple[str, str]]]


def _secret_key(secret: Union[str, bytes]) -> bytes:
    if isinstance(secret, bytes):
        key = secret
    else:
        text = secret.strip()
        if text.startswith(_SECRET_PREFIX):
            text = text[len(_SECRET_PREFIX):]
        try:
            # Tolerate missing padding, as other Standard Webhooks libraries do.
            key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise WebhookVerificationError("the webhook secret is not whsec_ + base64") from None
    if not key:
        raise WebhookVerificationError("the webhook secret is empty")
    return key


def _lower_headers(headers: HeadersLike) -> dict[str, str]:
    items: Iterable[Tuple[str, str]]
    if isinstance(headers, Mapping):
        items = headers.items()
    elif hasattr(headers, "items"):  # e.g. http.client.HTTPMessage, werkzeug Headers
        items = headers.items()
    else:
        items = headers
    out: dict[str, str] = {}
    for name, value in items:
        out.setdefault(str(name).lower(), str(value))
    return out


def sign_webhook(secret: Union[str, bytes], msg_id: str, timestamp: int, body: Union[bytes, str]) -> str:
    """The ``webhook-signature`` value (``v1,<base64>``) for a message; handy in tests."""
    raw = body.encode("utf-8") if isinstance(body, str) else body
    mac = hmac.new(_secret_key(secret), f"{msg_id}.{timestamp}.".encode() + raw, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode("ascii")


def verify_webhook(
    secret: Union[str, bytes],
    headers: HeadersLike,
    body: Union[bytes, str],
    *,
    now: Union[float, datetime, None] = None,
    tolerance: float = DEFAULT_TOLERANCE,
    parse: bool = True,
) -> Any:
    """Verify a Standard Webhooks delivery and return its parsed JSON body.

    ``secret`` is ``whsec_`` + base64 (raw base64, or the key as ``bytes``, also accepted);
    ``headers`` a mapping (names in any case) holding ``webhook-id``, ``webhook-timestamp``
    and ``webhook-signature``; ``body`` the raw request body exactly as received. The
    signature header may list several space-separated signatures (during a secret rotation):
    one matching ``v1`` signature is enough. The timestamp must be within ``tolerance``
    seconds (5 minutes) of ``now`` (default: the current time).

    Returns the body parsed as JSON (with ``parse=False``: the raw body as ``bytes``).
    Raises :class:`WebhookVerificationError` otherwise.
    """
    key = _secret_key(secret)
    h = _lower_headers(headers)
    msg_id = h.get("webhook-id")
    msg_ts = h.get("webhook-timestamp")
    msg_sig = h.get("webhook-signature")
    if not msg_id or not msg_ts or not msg_sig:
        raise WebhookVerificationError(
            "missing webhook-id, webhook-timestamp or webhook-signature header"
        )
    try:
        timestamp = int(msg_ts.strip())
    except ValueError:
        raise WebhookVerificationError("webhook-timestamp is not an integer") from None
    if now is None:
        current = time.time()
    elif isinstance(now, datetime):
        current = now.timestamp()
    else:
        current = float(now)
    if timestamp < current - tolerance:
        raise WebhookVerificationError("webhook timestamp too old")
    if timestamp > current + tolerance:
        raise WebhookVerificationError("webhook timestamp too new")

    raw = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    expected = hmac.new(key, f"{msg_id}.{msg_ts.strip()}.".encode() + raw, hashlib.sha256).digest()
    matched = False
    for candidate in msg_sig.split():
        version, sep, encoded = candidate.partition(",")
        if not sep or version != "v1":
            continue
        try:
            given = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            continue
        if hmac.compare_digest(expected, given):
            matched = True  # keep going: constant work whichever signature matches
    if not matched:
        raise WebhookVerificationError("no matching webhook signature")
    if not parse:
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        raise WebhookVerificationError(
            "the webhook body is not JSON (use parse=False for other bodies)"
        ) from None
