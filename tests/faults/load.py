"""Load on the idem nodes, as clients would make it, with every attempt recorded.

Three kinds of logical call, each retried on connection errors, timeouts, 502/503/504 and 409
(honouring `Retry-After`, capped) until it gets an answer or its deadline passes:

- `claim`: `POST /v1/claims/{ns}` `{"key", "data": {"call": <logical call id>}}`. The record a
  claim answers carries the winner's call id, so an answer `claimed: false` whose record names the
  asking call is a winner that was never told.
- `op`: `POST /v1/operations/{ns}/begin` → `POST …/{id}/complete` `{"token", "result": {"call"}}`;
  a `complete` answered `409 lease-lost` starts over with a new begin.
- `gw`: `POST /orders` through the node's gateway with an `Idempotency-Key`. A seeded share of
  keys is slow (`"work"` in the order: the upstream takes 0.5–20 s, log-uniform, on every
  execution of that key), so that the client gets `504` and the call finishes in the background,
  its lease extended meanwhile. A `504` is retried honouring its `Retry-After`; its retries get
  `409` until the answer is stored, then the answer replayed. Each attempt carries
  `X-Faults-Attempt: <call>/<try>`, which the upstream records with the execution it causes.
  Every key answered 2xx is sent again 8 s later (past the lease) through the node that did not
  execute it (the answer names it), so that its replay comes from the store, not from the
  executing node's memory.

Some keys are called from every node at once (a pair), so that the nodes race for them. With
`client_token` (the coming server; detected in `/openapi.json`), claims and begins carry the
logical call's id as their token, reused on every retry.

Every attempt is one JSON line in `attempts.jsonl`: when it was sent and answered, node, kind, step,
key, logical call, try, status or error, problem type, Retry-After and the answer's fields that
the checker needs.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

RETRY_STATUSES = {409, 502, 503, 504}
AUTHORIZATION = "Bearer faults-load"  # the gateway route's scope (header:authorization)
ATTEMPT_HEADER = "X-Faults-Attempt"
OUTCOME_UNKNOWN = "urn:idem:problem:upstream-outcome-unknown"


class HttpError(Exception):
    pass


@dataclass
class Resp:
    status: int
    headers: Dict[str, str]
    body: bytes

    def json(self) -> Optional[dict]:
        try:
            v = json.loads(self.body)
            return v if isinstance(v, dict) else None
        except ValueError:
            return None


async def http(port: int, method: str, path: str, body: Optional[dict] = None,
               headers: Optional[Dict[str, str]] = None, timeout: float = 30.0) -> Resp:
    """One HTTP/1.1 request on a new connection (`Connection: close`)."""

    async def go() -> Resp:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            data = json.dumps(body).encode() if body is not None else b""
            lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close",
                     f"Content-Length: {len(data)}"]
            if body is not None:
                lines.append("Content-Type: application/json")
            for k, v in (headers or {}).items():
                lines.append(f"{k}: {v}")
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            status_line, *header_lines = head.decode("latin-1").split("\r\n")
            status = int(status_line.split(" ")[1])
            hdrs: Dict[str, str] = {}
            for h in header_lines:
                if ":" in h:
                    k, v = h.split(":", 1)
                    hdrs[k.strip().lower()] = v.strip()
            if "content-length" in hdrs:
                payload = await reader.readexactly(int(hdrs["content-length"]))
            elif hdrs.get("transfer-encoding", "").lower() == "chunked":
                payload = b""
                while True:
                    size = int((await reader.readline()).strip().split(b";")[0], 16)
                    if size == 0:
                        await reader.readline()
                        break
                    payload += await reader.readexactly(size)
                    await reader.readline()
            else:
                payload = await reader.read()
            return Resp(status, hdrs, payload)
        finally:
            writer.close()

    return await asyncio.wait_for(go(), timeout)


class Recorder:
    def __init__(self, path: str) -> None:
        self.file = open(path, "a", buffering=1 << 16)
        self.count = 0

    def write(self, entry: dict) -> None:
        self.count += 1
        self.file.write(json.dumps(entry, separators=(",", ":")) + "\n")

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()


@dataclass
class Node:
    name: str
    api: int
    gateway: int


@dataclass
class LoadConfig:
    ns: str                     # the run's namespace (claims and operations)
    prefix: str                 # the run's key prefix
    workers: int = 4            # per kind (claims, operations)
    gw_workers: int = 10        # the gateway's calls wait for the upstream: more of them
    pair_share: float = 0.35    # share of keys called from every node at once
    request_timeout: float = 30.0
    call_deadline: float = 60.0
    retry_after_cap: float = 2.0
    timeout_retry_cap: float = 5.0  # a 504's Retry-After (the route's upstream_timeout) is honoured
    op_lease: int = 5           # operations' lease_seconds
    client_token: bool = False
    pause: float = 0.02         # between logical calls of one worker
    resend_after: float = 8.0   # a gateway key answered 2xx is sent once more this much later
    resend_share: float = 1.0   # (past the route's lease): it must be replayed, never executed again
    kinds: Tuple[str, ...] = ("claim", "op", "gw")
    slow_share: float = 0.2     # share of gateway keys whose upstream call is slow...
    slow_min: float = 0.5       # ...taking this long (s, log-uniform between the two)
    slow_max: float = 20.0
    seed: str = ""              # which keys are slow, and how slow: a function of this and the key


class Load:
    def __init__(self, nodes: List[Node], cfg: LoadConfig, recorder: Recorder, rng: random.Random) -> None:
        self.nodes, self.cfg, self.rec, self.rng = nodes, cfg, recorder, rng
        self.counter = 0
        self.stopping = asyncio.Event()
        self.outcomes: List[dict] = []
        self.background: set = set()
        self.orders: Dict[str, dict] = {}  # each gateway key's body, the same on every attempt
        # New slow keys while this is set: run.py clears it once the fault has healed, so that
        # slow calls run across the fault without making the load's drain wait for fresh ones.
        self.slow_calls = True

    def next_id(self, kind: str) -> str:
        self.counter += 1
        return f"{self.cfg.prefix}-{kind}-{self.counter}"

    # ---- one attempt ------------------------------------------------------------------------

    async def attempt(self, node: Node, kind: str, step: str, key: str, call: str, n: int, port: int,
                      method: str, path: str, body: Optional[dict], headers: Optional[Dict[str, str]] = None
                      ) -> Tuple[Optional[Resp], dict]:
        t0 = time.time()
        entry = {"t0": t0, "node": node.name, "kind": kind, "step": step, "key": key, "call": call, "try": n}
        resp: Optional[Resp] = None
        try:
            resp = await http(port, method, path, body, headers, self.cfg.request_timeout)
            entry["status"] = resp.status
            j = resp.json()
            if resp.status >= 400:
                entry["type"] = (j or {}).get("type")
                if resp.status >= 500:
                    entry["detail"] = str((j or {}).get("detail") or resp.body[:200].decode(errors="replace"))[:200]
            if "retry-after" in resp.headers:
                entry["retry_after"] = resp.headers["retry-after"]
        except asyncio.TimeoutError:
            entry["err"] = "timeout"
        except ConnectionRefusedError:
            entry["err"] = "refused"
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as e:
            entry["err"] = type(e).__name__
        entry["t1"] = time.time()
        return resp, entry

    async def backoff(self, n: int, resp: Optional[Resp], deadline: float) -> bool:
        """Sleeps before retry `n`; False when the logical call's deadline has passed."""
        delay = min(0.1 * (2 ** min(n, 6)), 1.0) * (0.5 + self.rng.random())
        if resp is not None and "retry-after" in resp.headers:
            cap = self.cfg.timeout_retry_cap if resp.status == 504 else self.cfg.retry_after_cap
            try:
                delay = min(float(resp.headers["retry-after"]), cap)
            except ValueError:
                pass
        if time.time() + delay > deadline:
            return False
        await asyncio.sleep(delay)
        return True

    def retryable(self, resp: Optional[Resp]) -> bool:
        if resp is not None and resp.status == 502 and (resp.json() or {}).get("type") == OUTCOME_UNKNOWN:
            return False  # the upstream may have acted: the key keeps this answer, a retry gets it again
        return resp is None or resp.status in RETRY_STATUSES

    # ---- logical calls ----------------------------------------------------------------------

    async def claim(self, node: Node, key: str, call: str) -> dict:
        body: dict = {"key": key, "data": {"call": call}}
        if self.cfg.client_token:
            body["client_token"] = call
        deadline = time.time() + self.cfg.call_deadline
        n = 0
        while True:
            resp, e = await self.attempt(node, "claim", "claim", key, call, n, node.api, "POST",
                                         f"/v1/claims/{self.cfg.ns}", body)
            if resp is not None and resp.status in (200, 201):
                j = resp.json() or {}
                e["claimed"] = j.get("claimed")
                e["winner"] = ((j.get("data") or {}) if isinstance(j.get("data"), dict) else {}).get("call")
            self.rec.write(e)
            if not self.retryable(resp):
                return {"kind": "claim", "call": call, "key": key, "node": node.name, "status": e.get("status"),
                        "claimed": e.get("claimed"), "winner": e.get("winner")}
            n += 1
            if not await self.backoff(n, resp, deadline):
                return {"kind": "claim", "call": call, "key": key, "node": node.name, "gave_up": True}

    async def op(self, node: Node, key: str, call: str) -> dict:
        ns = self.cfg.ns
        begin: dict = {"key": key, "lease_seconds": self.cfg.op_lease, "request": {"k": key}}
        if self.cfg.client_token:
            begin["client_token"] = call
        deadline = time.time() + self.cfg.call_deadline
        n = 0
        while True:
            resp, e = await self.attempt(node, "op", "begin", key, call, n, node.api, "POST",
                                         f"/v1/operations/{ns}/begin", begin)
            j = (resp.json() if resp is not None else None) or {}
            if resp is not None and resp.status in (200, 201):
                e["opstatus"] = j.get("status")
                e["token"] = j.get("token")
                if "fence" in j:
                    e["fence"] = j.get("fence")
                if resp.status == 200:
                    e["winner"] = ((j.get("result") or {}) if isinstance(j.get("result"), dict) else {}).get("call")
            self.rec.write(e)
            n += 1
            if resp is not None and resp.status == 200 and j.get("status") == "completed":
                return {"kind": "op", "call": call, "key": key, "node": node.name, "completed": True,
                        "winner": e.get("winner")}
            if resp is not None and resp.status == 201 and j.get("token"):
                done = await self.complete(node, key, call, j["id"], j["token"], deadline)
                if done.get("completed") or done.get("final"):
                    return done
                n += 1
                continue  # lease lost: begin again
            if not self.retryable(resp):
                return {"kind": "op", "call": call, "key": key, "node": node.name, "status": e.get("status")}
            if not await self.backoff(n, resp, deadline):
                return {"kind": "op", "call": call, "key": key, "node": node.name, "gave_up": True}

    async def complete(self, node: Node, key: str, call: str, op_id: str, token: str, deadline: float) -> dict:
        n = 0
        while True:
            resp, e = await self.attempt(node, "op", "complete", key, call, n, node.api, "POST",
                                         f"/v1/operations/{self.cfg.ns}/{op_id}/complete",
                                         {"token": token, "result": {"call": call}})
            j = (resp.json() if resp is not None else None) or {}
            if resp is not None and resp.status == 200:
                e["opstatus"] = j.get("status")
            self.rec.write(e)
            if resp is not None and resp.status == 200:
                return {"kind": "op", "call": call, "key": key, "node": node.name, "completed": True, "winner": call}
            if resp is not None and resp.status == 409 and j.get("type", "").endswith("lease-lost"):
                return {"lease_lost": True}
            if resp is not None and resp.status not in RETRY_STATUSES:
                return {"kind": "op", "call": call, "key": key, "node": node.name, "status": resp.status,
                        "final": True}
            n += 1
            if not await self.backoff(n, resp, deadline):
                return {"kind": "op", "call": call, "key": key, "node": node.name, "gave_up": True, "final": True}

    def order(self, key: str) -> dict:
        """The key's order, the same on every attempt, node and re-send (one fingerprint): slow for
        a seeded share of keys."""
        if key not in self.orders:
            body: dict = {"order": key}
            # Of the seed and the key only, not of the order the workers happened to run in.
            rng = random.Random(f"{self.cfg.seed}-{key}")
            if self.slow_calls and rng.random() < self.cfg.slow_share:
                lo, hi = math.log(self.cfg.slow_min), math.log(self.cfg.slow_max)
                body["work"] = round(math.exp(rng.uniform(lo, hi)), 2)
            self.orders[key] = body
        return self.orders[key]

    async def gw(self, node: Node, key: str, call: str) -> dict:
        body = self.order(key)
        deadline = time.time() + self.cfg.call_deadline
        n = 0
        while True:
            headers = {"Idempotency-Key": f'"{key}"', "Authorization": AUTHORIZATION,
                       ATTEMPT_HEADER: f"{call}/{n}"}
            resp, e = await self.attempt(node, "gw", "post", key, call, n, node.gateway, "POST", "/orders",
                                         body, headers)
            if resp is not None and 200 <= resp.status < 300:
                j = resp.json() or {}
                e["execution"] = j.get("execution")
                e["by"] = j.get("node")  # the node that executed it (the upstream says)
                e["replayed"] = resp.headers.get("idempotent-replayed") == "true"
            self.rec.write(e)
            if not self.retryable(resp):
                if (resp is not None and 200 <= resp.status < 300 and not call.endswith("#again")
                        and self.rng.random() < self.cfg.resend_share):
                    t = asyncio.ensure_future(self.resend(key, call, e.get("by")))
                    self.background.add(t)
                    t.add_done_callback(self.background.discard)
                return {"kind": "gw", "call": call, "key": key, "node": node.name, "status": e.get("status"),
                        "execution": e.get("execution")}
            n += 1
            if not await self.backoff(n, resp, deadline):
                return {"kind": "gw", "call": call, "key": key, "node": node.name, "gave_up": True}

    async def resend(self, key: str, call: str, executed_by: Optional[str]) -> None:
        """A client that lost its answer sends the key again, past the lease: a replay is due.
        Through the node that did not execute it, so that the replay comes from the store, not
        from the executing node's replay cache."""
        await asyncio.sleep(self.cfg.resend_after)
        others = [n for n in self.nodes if n.name != executed_by] or self.nodes
        self.outcomes.append(await self.gw(self.rng.choice(others), key, call + "#again"))

    # ---- workers ----------------------------------------------------------------------------

    async def worker(self, kind: str) -> None:
        fn = {"claim": self.claim, "op": self.op, "gw": self.gw}[kind]
        while not self.stopping.is_set():
            key = self.next_id(kind[0])
            if len(self.nodes) > 1 and self.rng.random() < self.cfg.pair_share:
                targets = list(self.nodes)
            else:
                targets = [self.rng.choice(self.nodes)]
            calls = [fn(node, key, f"{key}@{node.name}") for node in targets]
            self.outcomes.extend(await asyncio.gather(*calls))
            await asyncio.sleep(self.cfg.pause * (0.5 + self.rng.random()))

    async def run(self) -> None:
        tasks = [asyncio.ensure_future(self.worker(k)) for k in self.cfg.kinds
                 for _ in range(self.cfg.gw_workers if k == "gw" else self.cfg.workers)]

        async def flusher() -> None:
            while not self.stopping.is_set():
                self.rec.flush()
                await asyncio.sleep(1)

        f = asyncio.ensure_future(flusher())
        await asyncio.gather(*tasks)
        while self.background:
            await asyncio.gather(*list(self.background))
        f.cancel()
        self.rec.flush()


async def supports_client_token(node: Node) -> bool:
    """Whether the server's OpenAPI document knows `client_token` (the coming server)."""
    try:
        r = await http(node.api, "GET", "/openapi.json", timeout=10)
        return r.status == 200 and b"client_token" in r.body
    except Exception:
        return False
