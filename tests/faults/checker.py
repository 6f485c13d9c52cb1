"""The checker: proves contract §10 for one run from every recorded attempt, the upstream's log,
the harness's events and the database's rows; and sums a whole schedule.

Run it again on a finished schedule's directory (it keeps the rows it read in each run's
`db.json`): `python3 tests/faults/checker.py OUT_DIR`. `test_checker.py` plants each violation
below in a synthetic run and fails if the checker lets one pass.

What a run must show (each line a violation when it fails):

- `500`: no answer of 500, ever (every 5xx is listed by status and problem type);
- `lost`: every claim answered `201 claimed:true` is in the database, won by that call; every
  operation answered `completed` is still completed, with that call's result; every gateway key
  answered 2xx is stored completed with the answer its client got (outside the documented case);
- `two-winners`: at most one logical call told it won each claim key;
- `winner-never-told`: a claim stored for a call that was told `claimed:false` (or gave up):
  counted, and a violation only when client tokens were in use;
- `double-exec`: no gateway key executed twice at the upstream, except in the documented case
  ([`excuses_double`]): the earlier execution's node could not reach the store (killed, paused,
  cut off) for longer than its lease as extended, and the later execution's begin came after that
  lease had ended, on another node. The documented case is reported, with whether the fencing
  numbers differ (`fence-not-growing`: one lease executed twice);
- `answer-changed`: every 2xx answer for a gateway key (first answer, retry, replay, re-send
  through the other node) carries the execution the first one did, outside the documented case;
- `stored-by-stale-holder`: a gateway key's stored answer is the execution of the lease that
  holds the row (its fencing number), never an older holder's;
- `after-504`: a `504` means the outcome is pending: the call's retries get `409`, `503`, another
  `504`, or the stored answer, nothing else;
- `started-after-completed`: an operation told `completed` never later answers `started`;
- `slow`: every answer within call_timeout + 1 s, plus the upstream's own time up to the route's
  upstream_timeout for an attempt that executed (a paused node's stalled requests excepted);
- `503-no-retry-after`, `504-no-retry-after`, `409-no-retry-after`: each carries Retry-After
  (a 504 and a 409 on the gateway, a 409 to an operation's begin);
- `recovery`: after a promotion each node answers 2xx within 3 s; after a path comes back
  (black hole, partition, re-point, read-only reverted, standby back, SIGCONT), within 10 s;
- `start-refused`: an idem node that would not start (a standby first in its URL).
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Tuple

# A node that died: it holds nothing once it is gone, whenever it comes back.
DEATH_FAULTS = {"idem-kill", "standby-first"}
PROMOTION_FAULTS = {"failover", "switchover", "demote"}
RECOVERY_BOUND = {"promoted": 3.0}
DEFAULT_RECOVERY_BOUND = 10.0
MEASUREMENT_SLACK = 0.1
# A node that can reach the store extends a key it holds at half the lease after taking it, then
# every third of the lease, and takes no key with more than half of its lease used
# (idem-gateway's held.rs and engine.rs): so its last successful contact for a held key is at
# most half a lease old. This much more for a beat that was late or slow on a busy machine.
BEAT_SLACK = 0.5
# The gateway route of the suite (harness.py) and the scope value the load sends (load.py).
GW_ROUTE = "/orders"
GW_SCOPE = ["Bearer faults-load"]
OUTCOME_UNKNOWN = "urn:idem:problem:upstream-outcome-unknown"


def claim_id(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def op_store_id(ns: str, key: str) -> str:
    h = hashlib.sha256()
    h.update(b"operation\0" + ns.encode() + b"\0" + bytes.fromhex(claim_id(key)))
    return h.hexdigest()


def gw_request_id(key: str, route: str = GW_ROUTE, scope: Iterable[str] = GW_SCOPE) -> str:
    """A gateway key's row id, as idem_core::gateway::request_id makes it: SHA-256 over the route's
    pattern, the hash of the scope's values (each after its length, 8 bytes big-endian) and the
    key."""
    scope_hash = hashlib.sha256()
    for value in scope:
        raw = value.encode()
        scope_hash.update(len(raw).to_bytes(8, "big") + raw)
    h = hashlib.sha256()
    h.update(route.encode() + b"\0" + scope_hash.digest() + b"\0" + key.encode())
    return h.hexdigest()


def decode_stored_response(raw: bytes) -> Optional[dict]:
    """A stored gateway response (idem_core::gateway::StoredResponse's binary form: `1 | status
    u16 | count u16 | (name-len u16, name, value-len u32, value)* | body`): its status and body."""
    if len(raw) < 5 or raw[0] != 1:
        return None
    status, count = int.from_bytes(raw[1:3], "big"), int.from_bytes(raw[3:5], "big")
    at = 5
    for _ in range(count):
        if at + 2 > len(raw):
            return None
        at += 2 + int.from_bytes(raw[at:at + 2], "big")
        if at + 4 > len(raw):
            return None
        at += 4 + int.from_bytes(raw[at:at + 4], "big")
    return {"status": status, "body": raw[at:]} if at <= len(raw) else None


def read_jsonl(path: Path) -> List[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a line cut by a crash
    return out


# ---- the database's rows ------------------------------------------------------------------

def request_rows(query: Callable[[str], str], ids: Iterable[str]) -> Dict[str, dict]:
    """Rows of `requests` (operations and gateway keys) by id: state, fencing number, response."""
    rows = {}
    ids = sorted(set(ids))
    for chunk in range(0, len(ids), 2000):
        values = ",".join(f"('\\x{i}'::bytea)" for i in ids[chunk:chunk + 2000])
        out = query(
            "SELECT encode(r.id, 'hex'), r.state, r.fence, encode(coalesce(r.response, ''::bytea), 'hex') "
            f"FROM requests r JOIN (VALUES {values}) AS v(id) ON r.id = v.id;")
        for line in out.splitlines():
            if line.count("|") == 3:
                i, state, fence, resp = line.split("|")
                rows[i] = {"state": int(state), "fence": int(fence) if fence else None, "response": resp}
    return rows


def op_row(row: dict) -> dict:
    """An operation's row: its state and the call its stored result names."""
    call, resp = None, row["response"]
    if row["state"] == 1 and len(resp) >= 52:
        try:
            result = json.loads(bytes.fromhex(resp[52:]).decode())
            call = result.get("call") if isinstance(result, dict) else None
        except ValueError:
            pass
    return {"state": row["state"], "call": call}


def gw_row(row: dict) -> dict:
    """A gateway key's row: its state, fencing number, and the stored answer's status and the
    upstream execution it carries."""
    out = {"state": row["state"], "fence": row["fence"], "status": None, "execution": None}
    stored = decode_stored_response(bytes.fromhex(row["response"])) if row["state"] == 1 else None
    if stored:
        out["status"] = stored["status"]
        try:
            body = json.loads(stored["body"])
            out["execution"] = body.get("execution") if isinstance(body, dict) else None
        except ValueError:
            pass
    return out


def snapshot_db(query: Callable[[str], str], ns: str, op_keys: Iterable[str], gw_keys: Iterable[str] = (),
                route: str = GW_ROUTE, scope: Iterable[str] = GW_SCOPE) -> dict:
    """The run's claims, operations and gateway keys as the database holds them now."""
    claims = {}
    out = query(f"SELECT encode(id, 'hex'), coalesce(data, '') FROM claims WHERE ns = '{ns}';")
    for line in out.splitlines():
        if "|" in line:
            i, data = line.split("|", 1)
            try:
                claims[i] = (json.loads(data) or {}).get("call")
            except ValueError:
                claims[i] = None
    op_ids = {op_store_id(ns, k): k for k in op_keys}
    gw_ids = {gw_request_id(k, route, list(scope)): k for k in gw_keys}
    rows = request_rows(query, list(op_ids) + list(gw_ids))
    ops = {i: op_row(rows[i]) for i in op_ids if i in rows}
    gw = {k: gw_row(rows[i]) for i, k in gw_ids.items() if i in rows}
    return {"claims": claims, "ops": ops, "gw": gw}


# ---- fault windows and the documented case ------------------------------------------------

def percentile(xs: List[float], p: float) -> Optional[float]:
    if not xs:
        return None
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return xs[k]


def fault_windows(events: List[dict]) -> List[dict]:
    """[start, end] of each fault: while a node was stopped, dead or cut off from the store
    (`node` names it), or while no node could write (`node` None: no writable primary, or a
    synchronous standby missing). `end` is the heal (the promotion, the path back), or for a lost
    standby the moment it streams again."""
    out = []
    starts: Dict[str, dict] = {}
    heals: Dict[str, dict] = {}
    for e in events:
        run = e.get("run")
        if e["event"] == "fault_start" and e.get("fault") != "control":
            starts[run] = e
        elif e["event"] == "heal" and run in starts:
            heals[run] = e
        elif e["event"] in ("standby_back", "fault_end") and run in starts and run in heals:
            if e["event"] == "fault_end" or starts[run]["fault"] == "standby-loss":
                s, h = starts.pop(run), heals.pop(run)
                end = e["t"] if e["event"] == "standby_back" else h.get("at", h["t"])
                out.append({"fault": s["fault"], "node": s.get("node"), "start": s["t"], "end": end,
                            "seconds": round(end - s["t"], 1)})
    return out


def lease_end_floor(w: dict, a: dict, lease: float) -> float:
    """The earliest moment the lease under which execution `a` ran can have ended, its node having
    lost the store at `w["start"]` (killed, paused, cut off).

    The lease began at the begin (not before the client sent the attempt: `a["sent"]`) and was
    extended while its node could reach the store, so at the cut its last extension was at most
    half a lease old (`BEAT_SLACK` more); nor was anything forwarded (at `a["t"]`) under a lease
    more than half used. An attempt sent while the node was cut off reached the store only after
    the heal. With no attempt known (a harness that lost it), the lease counts from the cut: the
    node must have been away for a whole lease."""
    sent = a.get("sent")
    if sent is None:
        return w["start"] + lease
    if w["start"] <= sent <= w["end"]:
        return w["end"] + lease
    return max(sent, max(a["t"], w["start"]) - lease / 2 - BEAT_SLACK) + lease


def excuses_double(w: dict, node: str, a: dict, t_b: float, lease: float, node_b: Optional[str] = None) -> bool:
    """Whether fault window `w` is the documented cause of a key executed (`a`: its upstream
    record, with when the client sent the attempt that caused it) on `node` and again, under a
    later lease, at `t_b` (on `node_b`): the node lost the store while it still held the key
    (before it had settled it: `a["held_until"]`), could not reach it again until its lease had
    ended (dead, or paused or cut off until its first write after the heal, `w["back"]`), and the
    later begin came after that end (it cannot have been later than its execution), elsewhere: a
    node that lived on knows what it holds, and its own retry taking the key from its own call is
    no takeover (contract §10: "a retry may then run elsewhere"); a node that died and restarted
    is another. A pause or a kill shorter than what was left of the lease excuses nothing: the
    node extends the lease again when it is back."""
    if w["node"] not in (node, None) or w["start"] > t_b or w["start"] > a.get("held_until", math.inf):
        return False
    if node_b == node and w["fault"] not in DEATH_FAULTS:
        return False
    end = lease_end_floor(w, a, lease)
    if t_b < end:
        return False
    if w["fault"] in DEATH_FAULTS:
        return a["t"] <= w["start"] + MEASUREMENT_SLACK  # it ran before its node died
    back = w.get("back", {}).get(node, w["end"])
    return back >= end


def first_write(attempts: List[dict], node: str, t: float) -> Optional[float]:
    """When `node` first answered a store-backed request (a claim or an operation) 2xx at or after
    `t`: from then on it could write again."""
    ok = [a["t1"] for a in attempts if a["node"] == node and a["kind"] in ("claim", "op")
          and a.get("t1", 0) >= t and a.get("status") and 200 <= a["status"] < 300]
    return min(ok) if ok else None


# ---- one run ------------------------------------------------------------------------------

def ok2xx(a: dict) -> bool:
    return a.get("status") is not None and 200 <= a["status"] < 300


def attempt_id(a: dict) -> str:
    """What the load sends as `X-Faults-Attempt` (and the upstream records)."""
    return f"{a['call']}/{a['try']}"


class Run:
    """One run's records, and the violations and figures found in them."""

    def __init__(self, run_dir: Path, events: List[dict], upstream: List[dict], meta: dict) -> None:
        self.attempts = read_jsonl(run_dir / "attempts.jsonl")
        self.outcomes = read_jsonl(run_dir / "outcomes.jsonl")
        db_path = run_dir / "db.json"
        self.db = json.loads(db_path.read_text()) if db_path.exists() else None
        self.meta = meta
        self.run_id, self.ns = meta["run"], meta["ns"]
        self.call_timeout = meta.get("call_timeout", 5.0)
        self.lease = meta.get("gateway_lease", 6.0)
        self.upstream_timeout = meta.get("gateway_upstream_timeout", 3.0)
        self.events = run_events(events, self.run_id)
        self.windows = fault_windows(self.events)
        for w in self.windows:
            w["back"] = {n: first_write(self.attempts, n, w["end"]) or w["end"] for n in meta["nodes"]}
        self.gw_attempts = [a for a in self.attempts if a["kind"] == "gw"]
        self.execs = gateway_executions(upstream, self.run_id, self.gw_attempts, self.call_timeout)
        self.v: Dict[str, List[str]] = defaultdict(list)  # violations: kind -> examples
        self.r: dict = {"run": self.run_id, "fault": meta.get("fault"), "attempts": len(self.attempts),
                        "logical": len(self.outcomes)}


def run_events(events: List[dict], run_id: str) -> List[dict]:
    """Events of this run, and those that name no run (a node's failed start) within its time."""
    starts = [e["t"] for e in events if e["event"] == "run_start" and e.get("run") == run_id]
    t_from = starts[0] if starts else 0
    later = [e["t"] for e in events if e["event"] == "run_start" and e["t"] > t_from]
    t_to = min(later) if later else float("inf")
    return [e for e in events if e.get("run") == run_id or ("run" not in e and t_from <= e["t"] <= t_to)]


def gateway_executions(upstream: List[dict], run_id: str, gw_attempts: List[dict],
                       call_timeout: float) -> Dict[str, List[dict]]:
    """The run's upstream executions by key, each with the attempt that caused it (`sent`,
    `answered`, `status`: by the attempt id the upstream recorded, else by the execution number a
    2xx answer carried), when the upstream answered it (`done`), and by when a node that could
    reach the store had settled its key (`held_until`)."""
    done = {u["done"]: u["t"] for u in upstream if "done" in u}
    by_id = {attempt_id(a): a for a in gw_attempts}
    by_exec = {a["execution"]: a for a in gw_attempts if a.get("execution") is not None and not a.get("replayed")}
    execs: Dict[str, List[dict]] = defaultdict(list)
    for u in upstream:
        k = (u.get("key") or "").strip('"')
        if "done" in u or not k.startswith(run_id + "-"):
            continue
        a = by_id.get(u.get("attempt") or "") or by_exec.get(u.get("n"))
        e = {**u, "sent": a and a["t0"], "answered": a and a.get("t1"), "status": a and a.get("status"),
             "done": done.get(u["n"])}
        e["held_until"] = held_until(e, a, call_timeout)
        execs[k].append(e)
    return execs


def held_until(e: dict, a: Optional[dict], call_timeout: float) -> float:
    """The latest a node that could reach the store still held an executed key: the gateway
    stores the answer (or keeps it for the store, still holding the key) before its client gets it;
    one the client did not wait for is stored when the upstream answers, within one store call."""
    if a is not None and ok2xx(a) and a.get("execution") == e["n"] and not a.get("replayed"):
        return a["t1"]
    if e["done"] is not None:
        return e["done"] + call_timeout + MEASUREMENT_SLACK
    return math.inf


def check_statuses(run: Run) -> None:
    """5xx by status and type; 500s; 503 (and a gateway 504 or 409, an operation's 409 to a
    begin) without Retry-After."""
    fivexx, statuses = Counter(), Counter()
    v = run.v
    for a in run.attempts:
        s = a.get("status")
        statuses[str(s) if s is not None else a.get("err", "?")] += 1
        if s is not None and s >= 500:
            fivexx[f"{s} {a.get('type') or '-'} ({a['kind']})"] += 1
            if s == 500:
                v["500"].append(f"{a['node']} {a['kind']}/{a['step']} {a['key']}: {a.get('detail', '')[:120]}"
                                if len(v["500"]) < 5 else "")
        if retry_after_due(a) and "retry_after" not in a:
            v[f"{s}-no-retry-after"].append(f"{a['node']} {a['kind']}/{a['step']} {a['key']}")
    run.r["statuses"] = dict(statuses)
    run.r["5xx"] = dict(fivexx)


def retry_after_due(a: dict) -> bool:
    """Whether the answer must say when to retry: a 503; a gateway 504 (the call goes on) or 409
    (in flight); an operation's begin answered 409 (in progress)."""
    s = a.get("status")
    if a["kind"] == "gw":
        return s in (409, 503, 504)
    return s == 503 or (s == 409 and a["kind"] == "op" and a["step"] == "begin")


def check_latency(run: Run) -> None:
    """Bounded time; a stopped node's requests excepted. The client measures on a busy two-core
    machine: 0.1 s of slack for its own event loop. A gateway attempt that executed also waited
    for the upstream, up to the route's upstream_timeout."""
    bound = run.call_timeout + 1.0 + MEASUREMENT_SLACK
    paused = [w for w in run.windows if w["fault"] == "idem-pause"]
    upstream_part = {e["attempt"]: min((e["done"] or math.inf) - e["t"], run.upstream_timeout)
                     for es in run.execs.values() for e in es if e.get("attempt")}
    lat_by_status: Dict[str, float] = defaultdict(float)
    slow_excused = 0
    for a in run.attempts:
        lat = a["t1"] - a["t0"]
        k = str(a.get("status") or a.get("err"))
        lat_by_status[k] = max(lat_by_status[k], lat)
        own = upstream_part.get(attempt_id(a), 0.0) if a["kind"] == "gw" else 0.0
        if lat - own > bound:
            if any(w["node"] == a["node"] and a["t0"] <= w["end"] + 0.5 and a["t1"] >= w["start"] for w in paused):
                slow_excused += 1
            else:
                run.v["slow"].append(f"{a['node']} {a['kind']}/{a['step']} {a['key']} {lat:.1f}s -> {k}")
    run.r["max_latency"] = {k: round(x, 2) for k, x in sorted(lat_by_status.items())}
    run.r["slow_while_paused"] = slow_excused


def check_claims(run: Run) -> None:
    told_true: Dict[str, set] = defaultdict(set)
    told: Dict[str, Dict[str, Optional[bool]]] = defaultdict(dict)
    claim_keys = set()
    for a in run.attempts:
        if a["kind"] != "claim":
            continue
        claim_keys.add(a["key"])
        if a.get("status") in (200, 201):
            told[a["key"]][a["call"]] = a.get("claimed")
            if a.get("claimed"):
                told_true[a["key"]].add(a["call"])
    for key, calls in told_true.items():
        if len(calls) > 1:
            run.v["two-winners"].append(f"{key}: {sorted(calls)}")
    never_told, gave_up_winners = [], []
    if run.db is not None:
        rows = run.db["claims"]
        for key, calls in told_true.items():
            row = rows.get(claim_id(key), "absent")
            for call in calls:
                if row == "absent":
                    run.v["lost"].append(f"claim {key} told to {call}: not in the database")
                elif row != call:
                    run.v["lost"].append(f"claim {key} told to {call}: the database says {row}")
        for key in claim_keys:
            row = rows.get(claim_id(key), "absent")
            if row == "absent" or told_true.get(key):
                continue
            if told[key].get(row) is False:
                never_told.append(f"{key}: stored for {row}, which was told claimed:false")
            else:
                gave_up_winners.append(f"{key}: stored for {row}, which gave up unanswered")
    run.r["claims_winner_never_told"] = len(never_told)
    run.r["claims_winner_gave_up"] = len(gave_up_winners)
    if never_told and run.meta.get("client_token", False):
        run.v["winner-never-told"].extend(never_told)
    run.r["winner_never_told_examples"] = never_told[:5]


def check_operations(run: Run) -> None:
    """Completed never later started; completed still completed, with the completing call's
    result."""
    completed_at: Dict[str, float] = {}
    completed_by: Dict[str, set] = defaultdict(set)
    for a in run.attempts:
        if a["kind"] == "op" and a.get("status") == 200 and a.get("opstatus") == "completed":
            completed_at[a["key"]] = min(completed_at.get(a["key"], a["t1"]), a["t1"])
            if a["step"] == "complete":
                completed_by[a["key"]].add(a["call"])
    for a in run.attempts:
        if a["kind"] == "op" and a["step"] == "begin" and a.get("status") == 201:
            c = completed_at.get(a["key"])
            if c is not None and a["t0"] > c:
                run.v["started-after-completed"].append(f"{a['key']} on {a['node']} ({a['t0'] - c:.1f}s after)")
    if run.db is not None:
        for key in completed_at:
            row = run.db["ops"].get(op_store_id(run.ns, key))
            if not row or row["state"] != 1:
                run.v["lost"].append(f"operation {key} told completed: {'absent' if not row else 'not completed'}")
            elif completed_by.get(key) and row["call"] not in completed_by[key]:
                run.v["lost"].append(f"operation {key}: completed by {sorted(completed_by[key])}, stored {row['call']}")
    run.r["ops_completed"] = len(completed_at)


def take_order(es: List[dict]) -> List[dict]:
    """A key's executions in the order their leases were taken: by fencing number when every
    execution has one (an old holder, paused past its lease, may forward after a newer one did),
    else as the upstream saw them."""
    if all(e.get("fence") is not None for e in es):
        return sorted(es, key=lambda e: (int(e["fence"]), e["n"]))
    return sorted(es, key=lambda e: e["n"])


def excusing(run: Run, a: dict, b: dict, elsewhere: bool = True) -> List[dict]:
    """The fault windows that make execution `b` after `a` the documented case (where `b` ran
    left aside when not `elsewhere`)."""
    return [w for w in run.windows
            if excuses_double(w, a["node"], a, b["t"], run.lease, b["node"] if elsewhere else None)]


def describe_double(run: Run, key: str, es: List[dict], ok: bool) -> str:
    pairs = list(zip(es, es[1:]))
    why = sorted({f"{w['fault']} {w['seconds']}s" for a, b in pairs for w in excusing(run, a, b)})
    line = (f"{key}: {len(es)}x on {[e['node'] for e in es]} at {[round(e['t'] % 1000, 2) for e in es]}, "
            f"sent {[e['sent'] and round(e['sent'] % 1000, 2) for e in es]}, fences {[e.get('fence') for e in es]}"
            + (f" ({', '.join(why)})" if why else ""))
    if not ok and any(a["node"] == b["node"] and excusing(run, a, b, elsewhere=False) for a, b in pairs):
        line += " (the lease had ended, but the node that held the key ran it again itself)"
    return line


def check_doubles(run: Run) -> set:
    """Keys executed twice: each later take must be the documented case after the one before it.
    Answers which keys were (so the answer checks can allow their second answer)."""
    doubles, documented, fences, stale = [], [], [], 0
    documented_keys = set()
    for key, es in run.execs.items():
        if len(es) < 2:
            continue
        es = take_order(es)
        pairs = list(zip(es, es[1:]))
        ok = all(excusing(run, a, b) for a, b in pairs)
        stale += sum(1 for a, b in pairs if b["n"] < a["n"])
        line = describe_double(run, key, es, ok)
        if not ok:
            doubles.append(line)
            continue
        documented.append(line)
        documented_keys.add(key)
        fence = [e.get("fence") for e in es]
        if all(f is not None for f in fence):
            fences.append(len({int(f) for f in fence}) == len(fence))  # one lease, one execution
    run.v["double-exec"].extend(doubles)
    run.r["gw_keys"] = len(run.execs)
    run.r["gw_executions"] = sum(len(es) for es in run.execs.values())
    run.r["gw_executions_without_fence"] = sum(1 for es in run.execs.values() for e in es if e.get("fence") is None)
    run.r["gw_double_undocumented"] = len(doubles)
    run.r["gw_double_documented"] = len(documented)
    run.r["gw_documented_examples"] = documented[:5]
    run.r["gw_older_fence_later"] = stale
    run.r["gw_fences_grow"] = (all(fences) if fences else None)
    if fences and not all(fences):
        run.v["fence-not-growing"].extend(x for x, ok in zip(documented, fences) if not ok)
    return documented_keys


def answer_loss_excused(run: Run, e: dict) -> bool:
    """An answer its node could not store, and that was lost with it: the documented case too
    (the node killed, or cut off from the store past the lease)."""
    return any(excuses_double(w, e["node"], e, math.inf, run.lease) for w in run.windows)


def check_gateway_answers(run: Run, documented: set) -> None:
    """Every 2xx answer for a key carries its first answer's execution; the row holds it,
    stored by the lease holding the row; after a 504 only 409, 503, 504 or the answer."""
    answers: Dict[str, List[dict]] = defaultdict(list)
    for a in run.gw_attempts:
        if ok2xx(a):
            answers[a["key"]].append(a)
    for key, got in answers.items():
        got.sort(key=lambda a: a["t1"])
        first = got[0].get("execution")
        changed = [a for a in got if a.get("execution") != first]
        if changed and key not in documented:
            a = changed[0]
            run.v["answer-changed"].append(f"{key}: first answered execution {first}, then {a.get('execution')} "
                                           f"({a['node']}, {'replayed' if a.get('replayed') else 'not replayed'})")
        if run.db is not None and "gw" in run.db:
            check_gateway_row(run, key, first, key in documented)
    if run.db is not None and "gw" in run.db:
        check_stored_fences(run)
    check_after_504(run)


def check_gateway_row(run: Run, key: str, first: Optional[int], documented: bool) -> None:
    """A key answered 2xx (execution `first`) is stored completed with that answer, or, in the
    documented case, with one of its executions."""
    row = run.db["gw"].get(key)
    execs = {e["n"]: e for e in run.execs.get(key, [])}
    stored = row and row["state"] == 1 and row.get("execution")
    if documented and stored in execs:
        return
    if stored == first:
        return
    e = execs.get(first)
    if e is not None and not stored and answer_loss_excused(run, e):
        return
    what = "absent" if not row else ("in flight" if row["state"] == 0 else
                                     f"stored {row.get('status')} execution {row.get('execution')}")
    run.v["lost"].append(f"gateway key {key} answered execution {first}: the database has it {what}")


def check_stored_fences(run: Run) -> None:
    """A stored answer is the execution of the lease that holds the row (same fencing number):
    an older holder stores nothing over a newer one."""
    for key, row in run.db["gw"].items():
        e = next((e for e in run.execs.get(key, []) if e["n"] == row.get("execution")), None)
        if row["state"] != 1 or e is None or e.get("fence") is None or row.get("fence") is None:
            continue
        if int(e["fence"]) != int(row["fence"]):
            run.v["stored-by-stale-holder"].append(
                f"{key}: stored execution {e['n']} (fence {e['fence']}) under the lease of fence {row['fence']}")


def check_after_504(run: Run) -> None:
    """A 504 says the call goes on: what the client's retries may be answered."""
    by_call: Dict[str, List[dict]] = defaultdict(list)
    for a in run.gw_attempts:
        by_call[a["call"]].append(a)
    timed_out = replayed_after = 0
    for call, tries in by_call.items():
        tries.sort(key=lambda a: a["try"])
        first_504 = next((i for i, a in enumerate(tries) if a.get("status") == 504), None)
        if first_504 is None:
            continue
        timed_out += 1
        for a in tries[first_504 + 1:]:
            s = a.get("status")
            if s is None or s in (409, 503, 504):
                continue
            if ok2xx(a):
                replayed_after += bool(a.get("replayed"))
                continue
            run.v["after-504"].append(f"{a['key']} ({call} try {a['try']} on {a['node']}): {s} {a.get('type') or ''}")
    run.r["gw_504"] = sum(1 for a in run.gw_attempts if a.get("status") == 504)
    run.r["gw_calls_504"] = timed_out
    run.r["gw_504_then_answer"] = replayed_after


def count_background(run: Run) -> None:
    """Figures that show the slow paths ran: executions outliving the client's wait (a 504) whose
    answer was stored or replayed afterwards (background completions), and executions that were
    running while their node or the store was away."""
    seen = {(a["key"], a.get("execution")) for a in run.gw_attempts if ok2xx(a)}
    stored = {(k, row.get("execution")) for k, row in ((run.db or {}).get("gw") or {}).items()}
    bg = under_fault = 0
    for key, es in run.execs.items():
        for e in es:
            if e.get("status") == 504 and ((key, e["n"]) in seen or (key, e["n"]) in stored):
                bg += 1
            end = e.get("done") or e["t"]
            if end - e["t"] > run.lease / 2 and any(
                    w["node"] in (e["node"], None) and w["start"] < end and w["end"] > e["t"] for w in run.windows):
                under_fault += 1
    run.r["gw_background_completed"] = bg
    run.r["gw_slow_under_fault"] = under_fault
    run.r["gw_slow_executions"] = sum(1 for es in run.execs.values() for e in es
                                      if (e.get("done") or e["t"]) - e["t"] > run.upstream_timeout)


def check_recovery(run: Run) -> None:
    """From each heal, each node's first store-backed 2xx."""
    rec = []
    for e in run.events:
        if e["event"] != "heal" or e.get("what") == "nothing happened":
            continue
        h = e.get("at", e["t"])
        bound_s = RECOVERY_BOUND.get(e.get("what"), DEFAULT_RECOVERY_BOUND)
        for node in run.meta["nodes"]:
            after = [a for a in run.attempts if a["node"] == node and a["kind"] in ("claim", "op")
                     and a.get("t1", 0) >= h]
            first = first_write(run.attempts, node, h)
            secs = round(first - h, 2) if first is not None else None
            rec.append({"fault": e["fault"], "what": e.get("what"), "node": node, "seconds": secs,
                        "attempts_after": len(after)})
            if secs is None and after:
                run.v["recovery"].append(f"{node}: no 2xx after {e.get('what')} ({len(after)} attempts)")
            elif secs is not None and secs > bound_s:
                run.v["recovery"].append(f"{node}: first 2xx {secs:.1f}s after {e.get('what')} (bound {bound_s:.0f}s)")
    run.r["recovery"] = rec


def check_run(run_dir: Path, events: List[dict], upstream: List[dict], meta: dict) -> dict:
    run = Run(run_dir, events, upstream, meta)
    check_statuses(run)
    check_latency(run)
    check_claims(run)
    check_operations(run)
    documented = check_doubles(run)
    check_gateway_answers(run, documented)
    count_background(run)
    check_recovery(run)
    for e in run.events:
        if e["event"] == "start_failed":
            run.v["start-refused"].append(f"{e['node']}: {' | '.join(e.get('log') or [])[-200:]}")
    r = run.r
    if any(e["event"] == "harness_error" for e in run.events):
        r["harness_error"] = [e.get("error") for e in run.events if e["event"] == "harness_error"]
    r["gave_up"] = dict(Counter(o["kind"] for o in run.outcomes if o.get("gave_up")))
    r["violations"] = {k: len(x) for k, x in run.v.items() if x}
    r["examples"] = {k: [s for s in x if s][:5] for k, x in run.v.items() if x}
    return r


# ---- a schedule ---------------------------------------------------------------------------

def summarize(results: List[dict]) -> dict:
    by_fault: Dict[str, dict] = {}
    for r in results:
        f = r["fault"]
        s = by_fault.setdefault(f, {"runs": 0, "attempts": 0, "500": 0, "5xx": Counter(), "violations": Counter(),
                                    "lost": 0, "two_winners": 0, "winner_never_told": 0, "gw_double": 0,
                                    "gw_documented": 0, "started_after_completed": 0, "slow": 0,
                                    "no_retry_after": 0, "recovery": defaultdict(list), "max_latency": 0.0,
                                    "gw_504": 0, "gw_background_completed": 0, "gw_slow_under_fault": 0})
        s["runs"] += 1
        s["attempts"] += r["attempts"]
        s["5xx"].update(r["5xx"])
        s["500"] += sum(n for k, n in r["5xx"].items() if k.startswith("500"))
        s["violations"].update(r["violations"])
        s["lost"] += r["violations"].get("lost", 0)
        s["two_winners"] += r["violations"].get("two-winners", 0)
        s["winner_never_told"] += r["claims_winner_never_told"]
        s["gw_double"] += r["gw_double_undocumented"]
        s["gw_documented"] += r["gw_double_documented"]
        s["started_after_completed"] += r["violations"].get("started-after-completed", 0)
        s["slow"] += r["violations"].get("slow", 0)
        s["no_retry_after"] += sum(n for k, n in r["violations"].items() if k.endswith("-no-retry-after"))
        for k in ("gw_504", "gw_background_completed", "gw_slow_under_fault"):
            s[k] += r.get(k, 0)
        s["max_latency"] = max([s["max_latency"]] + list(r["max_latency"].values()))
        for x in r["recovery"]:
            if x["seconds"] is not None:
                s["recovery"][x["what"]].append(x["seconds"])
    for s in by_fault.values():
        s["5xx"] = dict(s["5xx"])
        s["violations"] = dict(s["violations"])
        s["recovery"] = {w: {"p50": percentile(xs, 50), "max": max(xs), "n": len(xs)}
                         for w, xs in s["recovery"].items()}
    total = Counter()
    for r in results:
        total.update(r["violations"])
    return {"by_fault": by_fault, "violations": dict(total), "runs": len(results)}


def table(summary: dict) -> str:
    cols = ["fault", "runs", "attempts", "500", "other 5xx", "lost", "2 winners", "never told", "gw 2x",
            "gw 2x doc", "done->started", "slow", "no RA", "504", "bg done", "slow@fault", "recovery p50/max s",
            "max lat s"]
    rows = [cols]
    for f, s in summary["by_fault"].items():
        other = sum(n for k, n in s["5xx"].items() if not k.startswith("500"))
        recov = "; ".join(f"{w}: {x['p50']:.1f}/{x['max']:.1f}" for w, x in s["recovery"].items()) or "-"
        rows.append([f, s["runs"], s["attempts"], s["500"], other, s["lost"], s["two_winners"],
                     s["winner_never_told"], s["gw_double"], s["gw_documented"], s["started_after_completed"],
                     s["slow"], s["no_retry_after"], s["gw_504"], s["gw_background_completed"],
                     s["gw_slow_under_fault"], recov, f"{s['max_latency']:.1f}"])
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(cols))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def report(results: List[dict], summary: dict) -> str:
    out = [table(summary), ""]
    for r in results:
        if r["violations"]:
            out.append(f"{r['run']}: " + ", ".join(f"{k} {n}" for k, n in sorted(r["violations"].items())))
            for k, ex in r["examples"].items():
                for e in ex[:3]:
                    out.append(f"    {k}: {e}")
        if r.get("harness_error"):
            out.append(f"{r['run']}: harness error {r['harness_error']}")
    fivexx = Counter()
    for r in results:
        fivexx.update(r["5xx"])
    out.append("")
    out.append("every 5xx by status, problem type (kind): " + (", ".join(f"{k} x{n}" for k, n in sorted(fivexx.items())) or "none"))
    out.append("violations: " + (", ".join(f"{k} {n}" for k, n in sorted(summary["violations"].items())) or "none"))
    return "\n".join(out)


def check_dir(out_dir: Path) -> Tuple[List[dict], dict]:
    events = read_jsonl(out_dir / "events.jsonl")
    upstream = read_jsonl(out_dir / "upstream.jsonl")
    results = []
    for run_dir in sorted((out_dir / "runs").iterdir()):
        meta_path = run_dir / "meta.json"
        if meta_path.exists():
            results.append(check_run(run_dir, events, upstream, json.loads(meta_path.read_text())))
    return results, summarize(results)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: checker.py OUT_DIR")
    results, summary = check_dir(Path(sys.argv[1]))
    print(report(results, summary))
    sys.exit(1 if summary["violations"] else 0)
