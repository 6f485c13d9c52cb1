"""The README's method tables against the client itself: every public method of ``idem.claims``,
``idem.operations`` and ``idem.receipts`` is documented, with the shapes the server answers."""

from __future__ import annotations

import inspect
from pathlib import Path

from idem_client._sync import Claims, Operations, Receipts

README = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")


def test_every_public_method_is_documented() -> None:
    for cls in (Claims, Operations, Receipts):
        for name, _ in inspect.getmembers(cls, inspect.isfunction):
            if name.startswith("_"):
                continue
            documented = f"| `{name}(" in README or f"\n`{name}(" in README or f"### `{name}(" in README
            assert documented, f"the README does not document {cls.__name__.lower()}.{name}"


def test_replay_is_documented_with_the_servers_field_names() -> None:
    row = next(line for line in README.splitlines() if line.startswith("| `replay(id)`"))
    assert '"replayed": true' in row
