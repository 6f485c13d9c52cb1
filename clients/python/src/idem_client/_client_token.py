"""Client tokens (contract §10, "an unknown outcome is not called a failure").

A claim, a batch claim and an operation's begin carry a ``client_token`` chosen once per logical
call and sent again, unchanged, on every retry of that call. When the store's answer was lost after
the write was made (a 503 ``outcome-unknown``, a dropped connection, a timeout), the retry with the
same token is told that the claim, or the lease, it finds is its own: ``claimed`` true again, or the
same lease ``token`` and ``fence``. A token made for one call is never reused for another: that
would tell a second call it won what the first won.
"""

from __future__ import annotations

import re
import uuid
from typing import Optional

_VALID = re.compile(r"[\x20-\x7e]{1,255}")


def client_token(given: Optional[str]) -> str:
    """The caller's own token when given (e.g. kept across a restart), checked as the server
    would (1 to 255 printable ASCII characters); else a fresh random UUID v4 (``uuid.uuid4``,
    from ``os.urandom``)."""
    if given is None:
        return str(uuid.uuid4())
    if not isinstance(given, str) or not _VALID.fullmatch(given):
        raise ValueError("client_token must be 1 to 255 printable ASCII characters")
    return given
