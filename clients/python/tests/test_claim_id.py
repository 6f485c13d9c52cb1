"""claim_id against ids recorded from a real `idem serve` (clients/testdata/claim_ids.json, shared with
the server's tests and the TypeScript client's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest

from idem_client import claim_id

VECTORS: List[Dict[str, Any]] = json.loads((Path(__file__).parents[2] / "testdata" / "claim_ids.json").read_text("utf-8"))["vectors"]


@pytest.mark.parametrize("vector", VECTORS, ids=lambda v: v["id"][:12])
def test_vectors(vector: Dict[str, Any]) -> None:
    assert claim_id(vector["parts"]) == vector["id"]
    if "key" in vector:  # a one-part entry: its key form names the same id
        assert claim_id(vector["key"]) == vector["id"]


def test_single_key_is_the_one_part_form_and_joins_cannot_collide() -> None:
    assert claim_id("a") == claim_id(["a"])
    assert claim_id(["a_b", "c"]) != claim_id(["a", "b_c"])
    assert claim_id(("a", "b")) == "59b271ae1bbcb1d31d41929817f4b16fb439eb4f31520b5ad1d5ce98920a7138"
    assert claim_id(["scenario-1", "user-3", "node-2"]) == "57b0a95b0f19886aa01c2908b86c3eb171392a90cd8e603606293d8e7c0bd892"
    with pytest.raises(TypeError):
        claim_id([1])  # type: ignore[list-item]
