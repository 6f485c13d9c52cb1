"""In-memory stand-ins for unit tests: an idem Operations/Claims/Receipts API behind
`httpx.MockTransport`, and a fake clock whose sleep advances it instantly; and, for tests against
a real server, a transport that loses answers on the way back."""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any, Callable, Dict, List, Optional, Tuple

import httpx

from idem_client import claim_id

PROBLEM = {"content-type": "application/problem+json"}


def problem(status: int, kind: str, detail: str = "", field: Optional[str] = None, **headers: str) -> httpx.Response:
    body: Dict[str, Any] = {"type": f"urn:idem:problem:{kind}", "title": kind.replace("-", " "), "status": status, "detail": detail}
    if field is not None:
        body["field"] = field
    return httpx.Response(status, json=body, headers={**PROBLEM, **{k.replace("_", "-"): v for k, v in headers.items()}})


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: List[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)


class FakeIdem:
    """Just enough of the Operations API (docs/reference/api.md#operations) to drive
    `operations.run`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ops: Dict[str, Dict[str, Any]] = {}
        self.log: List[Tuple[str, str, Any]] = []
        #: Called with (op id, begin body) when a begin finds the key held; may complete it.
        self.on_held: Optional[Callable[[str, Dict[str, Any]], None]] = None

    def count(self, suffix: str) -> int:
        return sum(1 for _, path, _ in self.log if path.endswith(suffix))

    def hold(self, id: str, token: str = "someone-else", request: Any = None) -> None:
        self.ops[id] = {"status": "in_progress", "token": token, "request": request}

    def finish(self, id: str, result: Any) -> None:
        op = self.ops[id]
        op.update(status="completed", result=result, token=None)

    def handler(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        with self.lock:
            self.log.append((request.method, request.url.path, body))
            return self._route(request.method, request.url.path.split("/")[2:], body)

    def _route(self, method: str, seg: List[str], body: Any) -> httpx.Response:
        if seg[0] != "operations":
            return problem(404, "not-found")
        ns = seg[1]
        if seg[2] == "begin":
            return self._begin(ns, body)
        id = seg[2]
        op = self.ops.get(id)
        if len(seg) == 3:
            if method == "GET":
                if op is None:
                    return problem(404, "not-found")
                return httpx.Response(200, json={"id": id, **{k: v for k, v in op.items() if k != "token"}})
            if op is None:
                return problem(404, "not-found")
            del self.ops[id]
            return httpx.Response(204)
        action = seg[3]
        if op is None or op.get("token") != body.get("token"):
            return problem(409, "lease-lost")
        if action == "complete":
            op.update(status="completed", result=body.get("result"), token=None)
            return httpx.Response(200, json={"status": "completed", "id": id, "result": op["result"]})
        if action == "release":
            del self.ops[id]
            return httpx.Response(204)
        if action == "extend":
            return httpx.Response(200, json={"lease_expires_at": "2030-01-01T00:00:00Z"})
        return problem(404, "not-found")

    def _begin(self, ns: str, body: Dict[str, Any]) -> httpx.Response:
        parts = body.get("parts") or [body["key"]]
        id = claim_id(parts)
        op = self.ops.get(id)
        req = body.get("request")
        if op is not None and req is not None and op.get("request") not in (None, req):
            return problem(422, "fingerprint-mismatch")
        if op is not None and op["status"] == "in_progress" and self.on_held is not None:
            self.on_held(id, body)
            op = self.ops.get(id)
        if op is None:
            token = uuid.uuid4().hex
            self.ops[id] = {"status": "in_progress", "token": token, "request": req}
            return httpx.Response(
                201,
                json={"status": "started", "id": id, "token": token, "lease_expires_at": "2030-01-01T00:00:00Z"},
            )
        if op["status"] == "completed":
            return httpx.Response(
                200,
                json={"status": "completed", "id": id, "result": op["result"], "completed_at": "2030-01-01T00:00:00Z", "expires_at": None},
            )
        return problem(409, "in-progress", "held by another caller", retry_after="2")


class LosingTransport(httpx.BaseTransport):
    """A real HTTP transport whose first ``lose`` answers are lost on the way back: each request
    reaches the server and is answered, but the client sees a broken connection. Records every
    request body (``sent``) and every lost answer (``lost``: status and parsed body)."""

    def __init__(self, lose: int = 1) -> None:
        self.inner = httpx.HTTPTransport()
        self.lose = lose
        self.sent: List[Any] = []
        self.lost: List[Tuple[int, Any]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(json.loads(request.content) if request.content else None)
        response = self.inner.handle_request(request)
        if len(self.lost) >= self.lose:
            return response
        response.read()
        self.lost.append((response.status_code, json.loads(response.content)))
        response.close()
        raise httpx.ReadError("the answer was lost on the way back", request=request)

    def close(self) -> None:
        self.inner.close()
