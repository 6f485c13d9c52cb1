"""Python client for idem: claims, operations (work done once), event receipts and
Standard Webhooks verification.

    from idem_client import Idem
    idem = Idem("http://127.0.0.1:7070")   # or Idem(): IDEM_URL and IDEM_TOKEN
    r = idem.claims.claim("survey", parts=["scenario-1", "user-3", "node-2"], data={"answer": "A"})
    r.claimed, r.record["id"]
"""

from ._async import AsyncClaims, AsyncIdem, AsyncOperations, AsyncReceipts
from ._errors import (
    OUTCOME_UNKNOWN,
    STORE_UNAVAILABLE,
    ForbiddenError,
    IdemConnectionError,
    IdemError,
    InProgressError,
    LeaseLostError,
    MismatchError,
    UnavailableError,
    WebhookVerificationError,
)
from ._keys import claim_id
from ._models import BeginResult, ClaimPage, ClaimRecord, ClaimResult, LookupResult, ReceiptPage
from ._sync import Claims, Idem, Operations, Receipts
from ._version import __version__
from ._webhook import sign_webhook, verify_webhook

__all__ = [
    "Idem",
    "AsyncIdem",
    "claim_id",
    "verify_webhook",
    "sign_webhook",
    "IdemError",
    "ForbiddenError",
    "InProgressError",
    "MismatchError",
    "UnavailableError",
    "LeaseLostError",
    "IdemConnectionError",
    "WebhookVerificationError",
    "OUTCOME_UNKNOWN",
    "STORE_UNAVAILABLE",
    "ClaimResult",
    "ClaimRecord",
    "ClaimPage",
    "LookupResult",
    "ReceiptPage",
    "BeginResult",
    "Claims",
    "Operations",
    "Receipts",
    "AsyncClaims",
    "AsyncOperations",
    "AsyncReceipts",
    "__version__",
]
