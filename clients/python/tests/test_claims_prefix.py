"""Listing and deleting a prefix (docs/reference/api.md#claims) against a real `idem serve`, sync
and async; and, against a tiny fake server, what the real one cannot easily show: a server that is
not idem (an HTML 404) and a deletion that needs more than one call (``more: true``)."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest

from conftest import IdemServer
from idem_client import AsyncIdem, ClaimPage, Idem, IdemError, claim_id

# scenario-1: 5 users x 5 nodes (25 claims), claimed out of order; neighbours that must stay.
MINE = [["scenario-1", f"user-{u}", f"node-{n}"] for u in (4, 1, 5, 3, 2) for n in (3, 5, 1, 4, 2)]
NEIGHBOURS = [["scenario-10", "user-1", "node-1"], ["scenario-2", "user-1", "node-1"], ["scenario-0", "user-9"]]
SIX_DIGITS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def parts_order(parts: List[str]) -> bytes:
    """The server's order: each part followed by NUL, compared byte by byte."""
    return b"".join(p.encode() + b"\0" for p in parts)


@pytest.fixture
def filled(server: IdemServer, ns: str) -> Iterator[Idem]:
    """A client, with MINE and NEIGHBOURS claimed in ``ns`` and MINE in ``ns + "-other"``."""
    with Idem(server.url, timeout=5) as idem:
        idem.claims.claim_batch(ns, [{"parts": p, "data": {"i": i}} for i, p in enumerate(MINE + NEIGHBOURS)])
        idem.claims.claim_batch(ns + "-other", [{"parts": p} for p in MINE])
        yield idem


def test_list_pages_in_parts_order_until_next_is_none(filled: Idem, ns: str) -> None:
    pages: List[ClaimPage] = []
    after = None
    while True:
        page = filled.claims.list(ns, ["scenario-1"], limit=10, after=after)
        pages.append(page)
        if page.next is None:
            break
        after = page.next
    assert [len(p.items) for p in pages] == [10, 10, 5]
    listed = [r for p in pages for r in p.items]
    assert [r["parts"] for r in listed] == sorted(MINE, key=parts_order)
    assert all(r["namespace"] == ns and r["id"] == claim_id(r["parts"]) for r in listed)
    assert SIX_DIGITS.fullmatch(listed[0]["created_at"])

    user3 = filled.claims.list(ns, ["scenario-1", "user-3"])
    assert [r["parts"][2] for r in user3.items] == [f"node-{n}" for n in range(1, 6)] and user3.next is None
    assert filled.claims.list(ns, ["scenario-1", "user-30"]) == ClaimPage(items=[], next=None)
    assert [r["parts"] for r in filled.claims.list(ns, "scenario-0").items] == [["scenario-0", "user-9"]], "a str is one part"
    with pytest.raises(IdemError) as info:
        filled.claims.list(ns, ["scenario-1"], limit=1001)
    assert (info.value.status, info.value.field, info.value.not_idem) == (400, "limit", False)


def test_iter_yields_every_claim_under_the_prefix_across_pages(filled: Idem, ns: str) -> None:
    assert [r["parts"] for r in filled.claims.iter(ns, ["scenario-1"], page_size=7)] == sorted(MINE, key=parts_order)


def test_delete_prefix_of_two_parts_then_one_leaves_other_prefixes_and_namespaces(filled: Idem, ns: str) -> None:
    assert filled.claims.delete_prefix(ns, ["scenario-1", "user-3"]) == 5
    assert filled.claims.exists(ns, ["scenario-1", "user-3"]) is False
    assert filled.claims.exists(ns, ["scenario-1", "user-2"]) is True
    assert filled.claims.delete_prefix(ns, ["scenario-1"]) == 20
    assert filled.claims.delete_prefix(ns, "scenario-1") == 0
    assert filled.claims.list(ns, ["scenario-1"]).items == []
    for parts in NEIGHBOURS:
        assert filled.claims.exists(ns, parts=parts), parts
    assert len(list(filled.claims.iter(ns + "-other", ["scenario-1"]))) == 25, "another namespace keeps its claims"
    assert filled.claims.claim(ns, parts=MINE[0]).claimed, "claimable again once deleted"
    with pytest.raises(ValueError):
        filled.claims.delete_prefix(ns, [])


@pytest.mark.anyio
async def test_async_list_iter_and_delete_prefix(filled: Idem, server: IdemServer, ns: str) -> None:
    async with AsyncIdem(server.url, timeout=5) as idem:
        first = await idem.claims.list(ns, ["scenario-1"], limit=10)
        assert len(first.items) == 10 and first.next is not None
        seen = [r["parts"] async for r in idem.claims.iter(ns, ["scenario-1"], page_size=10)]
        assert seen == sorted(MINE, key=parts_order)
        assert await idem.claims.delete_prefix(ns, ["scenario-1", "user-1"]) == 5
        assert await idem.claims.delete_prefix(ns, ["scenario-1"]) == 20
        assert (await idem.claims.list(ns, ["scenario-1"])).items == []
        assert await idem.claims.exists(ns, ["scenario-10"]) is True


# A tiny fake server

Answer = Tuple[int, str, bytes]


class Fake:
    """An HTTP server on a free port answering every request with ``answer(i)`` (status, content
    type, body) and recording each as ``(method, path with query)``."""

    def __init__(self, answer: Callable[[int], Answer]) -> None:
        self.requests: List[Tuple[str, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                fake.requests.append((self.command, self.path))
                status, content_type, body = answer(len(fake.requests) - 1)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Fake:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def html_404(i: int) -> Answer:
    return 404, "text/html", b"<html><body><h1>Not Found</h1></body></html>"


def test_an_html_404_says_the_url_does_not_look_like_idem() -> None:
    with Fake(html_404) as fake, Idem(fake.url, retries=0) as idem:
        calls: List[Callable[[], Any]] = [
            lambda: idem.claims.claim("survey", key="k"),
            lambda: idem.claims.get("survey", key="k"),
            lambda: idem.claims.list("survey", ["scenario-1"]),
            lambda: idem.claims.delete_prefix("survey", ["scenario-1"]),
        ]
        for call in calls:
            with pytest.raises(IdemError) as info:
                call()
            e = info.value
            assert type(e) is IdemError and e.status == 404 and e.not_idem is True
            assert re.match(
                rf"404 Not Found: {re.escape(fake.url)} answered 404 to \w+ /v1/claims/survey\S* without an idem "
                r"problem document: it does not look like idem \(check the client's url= or IDEM_URL\)$",
                str(e),
            ), str(e)


@pytest.mark.anyio
async def test_an_html_404_says_the_url_does_not_look_like_idem_async() -> None:
    with Fake(html_404) as fake:
        async with AsyncIdem(fake.url, retries=0) as idem:
            with pytest.raises(IdemError, match="does not look like idem") as info:
                await idem.claims.list("survey", ["scenario-1"])
            assert info.value.status == 404 and info.value.not_idem


def test_delete_prefix_calls_again_while_more_is_true() -> None:
    answers: List[Dict[str, Any]] = [{"deleted": 100000, "more": True}, {"deleted": 100000, "more": True}, {"deleted": 42, "more": False}]

    def answer(i: int) -> Answer:
        return 200, "application/json", json.dumps(answers[i] if i < len(answers) else {"deleted": 0, "more": False}).encode()

    with Fake(answer) as fake, Idem(fake.url, retries=0) as idem:
        assert idem.claims.delete_prefix("survey", ["scenario 1", "user/3"]) == 200042
    assert fake.requests == [("DELETE", "/v1/claims/survey?prefix=scenario+1&prefix=user%2F3")] * 3
