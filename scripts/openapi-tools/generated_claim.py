"""Seed 000's job through a client that openapi-python-client generated from GET /openapi.json.

Run by scripts/check-openapi.sh as `python3 generated_claim.py GENERATED_DIR URL TOKEN`: a first
claim is 201 with the record as sent, a second of the same key is 200 with the record unchanged,
and the claim reads back by its id. Exits non-zero, naming what differed, otherwise.
"""

import hashlib
import sys

sys.path.insert(0, sys.argv[1])

from idem_openapi_client import AuthenticatedClient  # noqa: E402
from idem_openapi_client.api.claims import claim, get_claim  # noqa: E402
from idem_openapi_client.models import ClaimByParts, ClaimResponse, Record  # noqa: E402


def main(url: str, token: str) -> None:
    client = AuthenticatedClient(base_url=url, token=token)
    parts = ["scenario-1", "user-3", "node-2"]
    body = ClaimByParts(parts=parts, data={"answer": "A"})
    first = claim.sync_detailed("generated", client=client, body=body)
    assert first.status_code == 201, f"first claim: {first.status_code} {first.content!r}"
    record = first.parsed
    assert isinstance(record, ClaimResponse), record
    expected_id = hashlib.sha256("\0".join(parts).encode()).hexdigest()
    assert record.claimed is True and record.id == expected_id, record
    assert record.namespace == "generated" and record.parts == parts and record.data == {"answer": "A"}, record
    assert record.expires_at is None and record.created_at.tzinfo is not None, record

    again = claim.sync_detailed("generated", client=client, body=body)
    assert again.status_code == 200, f"second claim: {again.status_code} {again.content!r}"
    assert isinstance(again.parsed, ClaimResponse) and again.parsed.claimed is False, again.parsed
    assert again.parsed.created_at == record.created_at, "the existing record, unchanged"

    read = get_claim.sync("generated", expected_id, client=client)
    assert isinstance(read, Record) and read.parts == parts, read
    print(f"generated client: claimed {expected_id[:12]}… (201), then 200 claimed=false, then read it back")


if __name__ == "__main__":
    main(sys.argv[2], sys.argv[3])
