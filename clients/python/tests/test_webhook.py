"""verify_webhook against the reference implementation (PyPI `standardwebhooks`)."""

from __future__ import annotations

import base64
import json
import os
import time
from datetime import datetime, timezone
from typing import Dict

import pytest
from standardwebhooks.webhooks import Webhook

from idem_client import WebhookVerificationError, sign_webhook, verify_webhook

KEY = os.urandom(32)
SECRET = "whsec_" + base64.b64encode(KEY).decode()
OTHER = "whsec_" + base64.b64encode(os.urandom(32)).decode()
BODY = json.dumps({"external_event_id": "evt-1", "amount": 120, "note": "café ☕"})


def reference_headers(secret: str, body: str, ts: int, msg_id: str = "rcpt_01") -> Dict[str, str]:
    sig = Webhook(secret).sign(msg_id, datetime.fromtimestamp(ts, tz=timezone.utc), body)
    return {"webhook-id": msg_id, "webhook-timestamp": str(ts), "webhook-signature": sig}


def test_reference_signature_verifies_and_returns_json() -> None:
    now = int(time.time())
    headers = reference_headers(SECRET, BODY, now)
    assert verify_webhook(SECRET, headers, BODY) == json.loads(BODY)
    assert verify_webhook(SECRET, headers, BODY.encode()) == json.loads(BODY)


def test_header_names_are_case_insensitive_and_raw_base64_secret_works() -> None:
    now = int(time.time())
    headers = {k.title(): v for k, v in reference_headers(SECRET, BODY, now).items()}
    assert "Webhook-Signature" in headers
    assert verify_webhook(base64.b64encode(KEY).decode(), headers, BODY)["amount"] == 120
    assert verify_webhook(KEY, list(headers.items()), BODY)["amount"] == 120


def test_tampered_body_wrong_secret_and_bad_headers_are_rejected() -> None:
    now = int(time.time())
    headers = reference_headers(SECRET, BODY, now)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(SECRET, headers, BODY.replace("120", "121"))
    with pytest.raises(WebhookVerificationError):
        verify_webhook(OTHER, headers, BODY)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(SECRET, {**headers, "webhook-id": "rcpt_02"}, BODY)
    for missing in headers:
        with pytest.raises(WebhookVerificationError):
            verify_webhook(SECRET, {k: v for k, v in headers.items() if k != missing}, BODY)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(SECRET, {**headers, "webhook-timestamp": "yesterday"}, BODY)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(SECRET, {**headers, "webhook-signature": "v2," + headers["webhook-signature"][3:]}, BODY)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(SECRET, {**headers, "webhook-signature": "v1,not base64!"}, BODY)
    with pytest.raises(WebhookVerificationError):
        verify_webhook("whsec_%%%", headers, BODY)


def test_timestamp_tolerance_is_five_minutes() -> None:
    ts = 1_700_000_000
    headers = reference_headers(SECRET, BODY, ts)
    assert verify_webhook(SECRET, headers, BODY, now=ts + 299)
    assert verify_webhook(SECRET, headers, BODY, now=ts - 299)
    assert verify_webhook(SECRET, headers, BODY, now=datetime.fromtimestamp(ts + 10, tz=timezone.utc))
    with pytest.raises(WebhookVerificationError, match="too old"):
        verify_webhook(SECRET, headers, BODY, now=ts + 301)
    with pytest.raises(WebhookVerificationError, match="too new"):
        verify_webhook(SECRET, headers, BODY, now=ts - 301)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(SECRET, headers, BODY)  # "now" is years after ts


def test_several_signatures_one_matching_is_enough() -> None:
    now = int(time.time())
    mine = reference_headers(SECRET, BODY, now)["webhook-signature"]
    theirs = reference_headers(OTHER, BODY, now)["webhook-signature"]
    headers = {"webhook-id": "rcpt_01", "webhook-timestamp": str(now)}
    for sigs in (f"{theirs} {mine}", f"{mine} {theirs}", f"v0,abc {theirs} {mine}"):
        assert verify_webhook(SECRET, {**headers, "webhook-signature": sigs}, BODY)["amount"] == 120
    with pytest.raises(WebhookVerificationError):
        verify_webhook(SECRET, {**headers, "webhook-signature": theirs}, BODY)


def test_our_signature_verifies_with_the_reference() -> None:
    now = int(time.time())
    sig = sign_webhook(SECRET, "rcpt_9", now, BODY)
    headers = {"webhook-id": "rcpt_9", "webhook-timestamp": str(now), "webhook-signature": sig}
    assert Webhook(SECRET).verify(BODY, headers) == json.loads(BODY)
    assert sig == reference_headers(SECRET, BODY, now, "rcpt_9")["webhook-signature"]


def test_non_json_body() -> None:
    now = int(time.time())
    body = b"\x00binary\xff"
    headers = {"webhook-id": "m", "webhook-timestamp": str(now), "webhook-signature": sign_webhook(SECRET, "m", now, body)}
    assert verify_webhook(SECRET, headers, body, parse=False) == body
    with pytest.raises(WebhookVerificationError, match="not JSON"):
        verify_webhook(SECRET, headers, body)
