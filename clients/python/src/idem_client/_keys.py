"""Keys and ids: the same computation as the server's."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

#: A key given as one string (the one-part form) or as its parts.
KeyLike = Union[str, Sequence[str]]


def claim_id(parts: KeyLike) -> str:
    """The server's id of a key: lowercase hex SHA-256 of the parts joined by a NUL byte.

    ``claim_id("k") == claim_id(["k"])``; ``["a_b", "c"]`` and ``["a", "b_c"]`` never collide.
    """
    if isinstance(parts, str):
        items: Sequence[str] = [parts]
    else:
        items = list(parts)
        for part in items:
            if not isinstance(part, str):
                raise TypeError(f"key parts must be str, not {type(part).__name__}")
    return hashlib.sha256("\0".join(items).encode("utf-8")).hexdigest()


def key_body(key: Optional[str], parts: Optional[Sequence[str]]) -> Dict[str, Any]:
    """The ``{"key": ...}`` or ``{"parts": [...]}`` member of a request body."""
    if (key is None) == (parts is None):
        raise ValueError("give exactly one of key= or parts=")
    if key is not None:
        if not isinstance(key, str):
            raise TypeError(f"key must be a str, not {type(key).__name__}")
        return {"key": key}
    assert parts is not None
    if isinstance(parts, str):
        raise TypeError("parts must be a list of str, not a str (use key= for a single string)")
    return {"parts": list(parts)}


def resolve_id(id: Optional[str], key: Optional[str], parts: Optional[Sequence[str]]) -> str:
    """The record id from exactly one of ``id=``, ``key=`` or ``parts=``."""
    given = sum(x is not None for x in (id, key, parts))
    if given != 1:
        raise ValueError("give exactly one of id=, key= or parts=")
    if id is not None:
        return id
    if key is not None:
        return claim_id([key])
    assert parts is not None
    if isinstance(parts, str):
        raise TypeError("parts must be a list of str, not a str (use key= for a single string)")
    return claim_id(parts)


def item_body(item: Union[str, Sequence[str], Mapping[str, Any]]) -> Dict[str, Any]:
    """One item of a batch or lookup: a dict as the API takes it, or a bare key (``str``) or
    parts (a list of ``str``) as a shorthand."""
    if isinstance(item, str):
        return {"key": item}
    if isinstance(item, Mapping):
        return dict(item)
    return {"parts": list(item)}


def split_key(value: Any) -> "tuple[Optional[str], Optional[List[str]]]":
    """A decorator's computed key as ``(key, parts)``: a ``str`` (or an ``int`` or ``UUID``,
    turned into its string) is a key; a list or tuple of them is parts."""
    if isinstance(value, (list, tuple)):
        return None, [_key_text(p) for p in value]
    return _key_text(value), None


def _key_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, uuid.UUID)) and not isinstance(value, bool):
        return str(value)
    raise TypeError(
        f"a key must be a str (or int or UUID), or a list of them, not {type(value).__name__}"
    )
