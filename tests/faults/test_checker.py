"""The checker, checked: a synthetic run (what the load, the upstream, the harness and the
database would have recorded) that keeps contract §10 must pass, and the same run with one
violation planted must be flagged, naming the planted key. Runs in well under a second, without
PostgreSQL or idem.

The clean run, around a 10 s pause of node n1 (the route's lease is 6 s):
- a fast gateway key, answered, re-sent 8 s later through the other node: replayed;
- a slow key (10 s of upstream work): `504`, `409`s while it runs, then its answer replayed;
- a key whose call ran on n1 when n1 was paused: n2's retry took the key once the lease had ended
  and ran it again (the documented case), n1 answered its own execution when it came back;
- claims (one key raced by both nodes: one winner, told), operations begun and completed, a `503`
  and `409`s with Retry-After, and both nodes writing again right after the pause.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import checker  # noqa: E402
from checker import check_run, claim_id, excuses_double, op_store_id  # noqa: E402

T0 = 1_700_000_000.0
RUN = "r001-idem-pause"
NS = "f1-r001"


def key(name: str) -> str:
    return f"{RUN}-{name}"


class Synthetic:
    """A run made up of records, written to a run directory and checked as a real one is."""

    def __init__(self) -> None:
        self.attempts: List[dict] = []
        self.upstream: List[dict] = []
        self.events: List[dict] = [{"t": T0, "event": "run_start", "run": RUN, "fault": "idem-pause"}]
        self.db: dict = {"claims": {}, "ops": {}, "gw": {}}
        self.meta = {"run": RUN, "ns": NS, "fault": "idem-pause", "nodes": ["n1", "n2"], "call_timeout": 5.0,
                     "gateway_lease": 6.0, "gateway_upstream_timeout": 3.0, "client_token": True}
        self.fence = 100

    # ---- what each side records ---------------------------------------------------------------

    def attempt(self, kind: str, k: str, call: str, node: str, t0: float, t1: float, status: Optional[int],
                tr: int = 0, step: Optional[str] = None, **fields) -> dict:
        step = step or {"claim": "claim", "op": "begin", "gw": "post"}[kind]
        a = {"t0": T0 + t0, "t1": T0 + t1, "node": node, "kind": kind, "step": step, "key": k, "call": call,
             "try": tr, **fields}
        if status is None:
            a["err"] = "timeout"
        else:
            a["status"] = status
        self.attempts.append(a)
        return a

    def execute(self, k: str, node: str, call: str, tr: int, t: float, work: float,
                fence: Optional[int] = None) -> int:
        """The upstream runs `k` at `t` (the attempt `call`/`tr` caused it), for `work` seconds."""
        n = len([u for u in self.upstream if "done" not in u]) + 1
        if fence is None:
            self.fence += 1
            fence = self.fence
        self.upstream.append({"n": n, "t": T0 + t, "node": node, "method": "POST", "path": f"/{node}/orders",
                              "key": f'"{k}"', "fence": str(fence), "attempt": f"{call}/{tr}", "work": work})
        self.upstream.append({"done": n, "t": T0 + t + work, "answered": True})
        return n

    def answered(self, k: str, call: str, node: str, t0: float, t1: float, n: int, by: str, tr: int = 0,
                 replayed: bool = False) -> dict:
        return self.attempt("gw", k, call, node, t0, t1, 201, tr, execution=n, by=by, replayed=replayed)

    def store_gw(self, k: str, n: int) -> None:
        fence = next(int(u["fence"]) for u in self.upstream if u.get("n") == n and "done" not in u)
        self.db["gw"][k] = {"state": 1, "fence": fence, "status": 201, "execution": n}

    def claim(self, k: str, call: str, node: str, t: float, claimed: bool, winner: str) -> None:
        self.attempt("claim", k, call, node, t, t + 0.01, 201 if claimed else 200, claimed=claimed, winner=winner)
        self.db["claims"][claim_id(k)] = winner

    def operation(self, k: str, call: str, node: str, t: float) -> None:
        self.attempt("op", k, call, node, t, t + 0.01, 201, opstatus="started", token="tok")
        self.attempt("op", k, call, node, t + 0.02, t + 0.03, 200, step="complete", opstatus="completed")
        self.db["ops"][op_store_id(NS, k)] = {"state": 1, "call": call}

    def fault(self, fault: str, start: float, end: float, node: Optional[str] = "n1", what: str = "SIGCONT") -> None:
        self.meta["fault"] = fault
        self.events += [{"t": T0 + start, "event": "fault_start", "run": RUN, "fault": fault, "node": node},
                        {"t": T0 + end, "event": "heal", "run": RUN, "fault": fault, "what": what, "node": node},
                        {"t": T0 + end, "event": "fault_end", "run": RUN, "fault": fault}]

    def check(self, root: Path) -> dict:
        run_dir = root / "runs" / RUN
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "attempts.jsonl").write_text("".join(json.dumps(a) + "\n" for a in self.attempts))
        (run_dir / "outcomes.jsonl").write_text("")
        (run_dir / "db.json").write_text(json.dumps(self.db))
        return check_run(run_dir, self.events, self.upstream, self.meta)


def clean() -> Synthetic:
    s = Synthetic()
    # A fast key, answered and re-sent through the other node 8 s later: replayed from the store.
    fast = key("g-1")
    n = s.execute(fast, "n1", f"{fast}@n1", 0, 2.01, 0.05)
    s.answered(fast, f"{fast}@n1", "n1", 2.0, 2.07, n, "n1")
    s.answered(fast, f"{fast}@n1#again", "n2", 10.07, 10.09, n, "n1", replayed=True)
    s.store_gw(fast, n)
    # A slow key: 504 (Retry-After 3), 409s while it runs in the background, then the answer.
    slow = key("g-2")
    call = f"{slow}@n2"
    n = s.execute(slow, "n2", call, 0, 5.01, 10.0)
    s.attempt("gw", slow, call, "n2", 5.0, 8.02, 504, 0, retry_after="3", type="urn:idem:problem:upstream-timeout")
    s.attempt("gw", slow, call, "n2", 11.0, 11.01, 409, 1, retry_after="1", type="urn:idem:problem:request-in-flight")
    s.attempt("gw", slow, call, "n2", 12.1, 12.11, 409, 2, retry_after="1", type="urn:idem:problem:request-in-flight")
    s.answered(slow, call, "n2", 15.2, 15.21, n, "n2", tr=3, replayed=True)
    s.answered(slow, call + "#again", "n1", 31.0, 31.02, n, "n2", replayed=True)
    s.store_gw(slow, n)
    # The documented case: n1 runs a slow key and is paused 20-30 s; n2's call of the same key
    # gets 409 until the lease has ended (at 24.9 at the earliest), then takes it and runs it.
    doc = key("g-3")
    a = s.execute(doc, "n1", f"{doc}@n1", 0, 19.0, 8.0)
    s.attempt("gw", doc, f"{doc}@n2", "n2", 18.9, 18.91, 409, 0, retry_after="1")
    s.attempt("gw", doc, f"{doc}@n2", "n2", 20.0, 20.01, 409, 1, retry_after="1")
    b = s.execute(doc, "n2", f"{doc}@n2", 2, 25.55, 0.05)
    s.answered(doc, f"{doc}@n2", "n2", 25.5, 25.61, b, "n2", tr=2)
    s.answered(doc, f"{doc}@n1", "n1", 18.9, 30.1, a, "n1")  # n1's own answer, when it came back
    s.answered(doc, f"{doc}@n2#again", "n1", 33.61, 33.62, b, "n2", replayed=True)
    s.store_gw(doc, b)
    # Claims: one key raced by both nodes (one winner, told); operations; a 503 with Retry-After.
    c = key("c-1")
    s.claim(c, f"{c}@n1", "n1", 1.0, True, f"{c}@n1")
    s.claim(c, f"{c}@n2", "n2", 1.0, False, f"{c}@n1")
    s.attempt("claim", key("c-2"), f"{key('c-2')}@n2", "n2", 3.0, 3.01, 503, retry_after="1",
              type="urn:idem:problem:store-unavailable")
    s.claim(key("c-2"), f"{key('c-2')}@n2", "n2", 3.5, True, f"{key('c-2')}@n2")
    s.operation(key("o-1"), f"{key('o-1')}@n1", "n1", 4.0)
    s.attempt("op", key("o-2"), f"{key('o-2')}@n2", "n2", 4.0, 4.01, 409, retry_after="2",
              type="urn:idem:problem:in-progress")
    s.operation(key("o-2"), f"{key('o-2')}@n2", "n2", 6.0)
    # The pause, and both nodes writing again right after it.
    s.fault("idem-pause", 20.0, 30.0)
    s.claim(key("c-3"), f"{key('c-3')}@n1", "n1", 30.3, True, f"{key('c-3')}@n1")
    s.claim(key("c-4"), f"{key('c-4')}@n2", "n2", 30.2, True, f"{key('c-4')}@n2")
    return s


def flagged(result: dict) -> Dict[str, List[str]]:
    return result["examples"]


def test_a_clean_run_passes(tmp_path):
    r = clean().check(tmp_path)
    assert r["violations"] == {}, r["examples"]
    assert r["gw_double_documented"] == 1 and r["gw_double_undocumented"] == 0
    assert r["gw_background_completed"] == 1 and r["gw_504_then_answer"] == 1
    assert r["gw_fences_grow"] is True


# ---- the plants: each one violation, and the key it must be found by --------------------------

def executed_twice_with_no_fault(s: Synthetic) -> str:
    k = key("g-9")
    a = s.execute(k, "n2", f"{k}@n2", 0, 3.01, 0.05)
    s.answered(k, f"{k}@n2", "n2", 3.0, 3.07, a, "n2")
    b = s.execute(k, "n2", f"{k}@n2#again", 0, 11.08, 0.05)
    s.answered(k, f"{k}@n2#again", "n2", 11.07, 11.14, b, "n2")
    s.store_gw(k, b)
    return k


def excused_only_by_a_too_short_pause(s: Synthetic) -> str:
    # The pause lasts 1 s: n1 extends the lease again when it resumes (it writes at once). The
    # old checker let any pause between two executions excuse them.
    for e in s.events:
        if e["event"] in ("heal", "fault_end"):
            e["t"] = T0 + 21.0
    s.claim(key("c-5"), f"{key('c-5')}@n1", "n1", 21.2, True, f"{key('c-5')}@n1")
    return key("g-3")


def a_lease_extended_while_the_call_ran(s: Synthetic) -> str:
    # A 15 s call on n1, a 2 s partition 10 s into it, another execution on n2 just after: the
    # lease, extended every couple of seconds while the call ran, cannot have ended. Counted from
    # the begin only, it would have ended at 36.5 s and excused this.
    s.fault("partition", 40.0, 42.0, what="path back")
    k = key("g-8")
    s.execute(k, "n1", f"{k}@n1", 0, 30.55, 15.0)
    s.attempt("gw", k, f"{k}@n1", "n1", 30.5, 33.56, 504, 0, retry_after="3")
    b = s.execute(k, "n2", f"{k}@n2", 0, 43.0, 0.05)
    s.answered(k, f"{k}@n2", "n2", 42.95, 43.06, b, "n2")
    s.store_gw(k, b)
    s.claim(key("c-5"), f"{key('c-5')}@n1", "n1", 42.1, True, f"{key('c-5')}@n1")
    return k


def taken_before_the_dead_nodes_lease_ended(s: Synthetic) -> str:
    # n1 killed 2 s into a slow call; n2 ran the key 1 s later, with the lease still running.
    s.fault("idem-kill", 40.0, 41.5, what="node restarted")
    k = key("g-7")
    s.execute(k, "n1", f"{k}@n1", 0, 38.05, 10.0)
    s.attempt("gw", k, f"{k}@n1", "n1", 38.0, 40.0, None)
    b = s.execute(k, "n2", f"{k}@n2", 1, 41.0, 0.05)
    s.answered(k, f"{k}@n2", "n2", 40.95, 41.06, b, "n2", tr=1)
    s.store_gw(k, b)
    return k


def taken_from_its_own_call_by_a_retry_on_the_same_node(s: Synthetic) -> str:
    # n1 cut off for 10 s while a 6 s call ran; its client's retry, sent to n1 during the cut,
    # took the key when the path came back (the lease had ended) and ran it again on n1, which
    # had the first answer in hand: no takeover, n1 never stopped.
    s.fault("partition", 40.0, 50.0, what="path back")
    k = key("g-6")
    s.execute(k, "n1", f"{k}@n1", 0, 38.05, 6.0)
    s.attempt("gw", k, f"{k}@n1", "n1", 38.0, 41.06, 504, 0, retry_after="3")
    b = s.execute(k, "n1", f"{k}@n1", 1, 50.3, 0.05)
    s.answered(k, f"{k}@n1", "n1", 44.0, 50.36, b, "n1", tr=1)
    s.store_gw(k, b)
    s.claim(key("c-5"), f"{key('c-5')}@n1", "n1", 50.2, True, f"{key('c-5')}@n1")
    return k


def one_lease_executed_twice(s: Synthetic) -> str:
    # The documented case, but both executions under one fencing number.
    k = key("g-3")
    second = [u for u in s.upstream if u.get("key") == f'"{k}"'][1]
    second["fence"] = [u for u in s.upstream if u.get("key") == f'"{k}"'][0]["fence"]
    s.db["gw"][k]["fence"] = int(second["fence"])
    return k


def a_claim_acknowledged_then_lost(s: Synthetic) -> str:
    del s.db["claims"][claim_id(key("c-2"))]
    return key("c-2")


def a_claim_stored_for_another_call(s: Synthetic) -> str:
    s.db["claims"][claim_id(key("c-3"))] = f"{key('c-3')}@n2"
    return key("c-3")


def an_operation_completed_then_lost(s: Synthetic) -> str:
    s.db["ops"][op_store_id(NS, key("o-1"))] = {"state": 0, "call": None}
    return key("o-1")


def a_gateway_answer_never_stored(s: Synthetic) -> str:
    del s.db["gw"][key("g-1")]
    return key("g-1")


def a_gateway_answer_stored_for_another_execution(s: Synthetic) -> str:
    s.db["gw"][key("g-2")]["execution"] = 1
    return key("g-2")


def an_answer_of_500(s: Synthetic) -> str:
    k = key("c-6")
    s.attempt("claim", k, f"{k}@n1", "n1", 5.0, 5.01, 500, type="urn:idem:problem:internal", detail="boom")
    return k


def a_503_without_retry_after(s: Synthetic) -> str:
    k = key("g-6")
    s.attempt("gw", k, f"{k}@n1", "n1", 6.0, 6.01, 503, type="urn:idem:problem:store-unavailable")
    return k


def a_504_without_retry_after(s: Synthetic) -> str:
    a = next(a for a in s.attempts if a.get("status") == 504)
    del a["retry_after"]
    return a["key"]


def a_409_without_retry_after(s: Synthetic) -> str:
    a = next(a for a in s.attempts if a.get("status") == 409 and a["kind"] == "gw")
    del a["retry_after"]
    return a["key"]


def an_operation_started_after_it_completed(s: Synthetic) -> str:
    k = key("o-1")
    s.attempt("op", k, f"{k}@n2", "n2", 9.0, 9.01, 201, opstatus="started", token="tok2")
    return k


def a_claim_with_two_winners(s: Synthetic) -> str:
    a = next(a for a in s.attempts if a["call"] == f"{key('c-1')}@n2")
    a["claimed"], a["status"] = True, 201
    return key("c-1")


def a_winner_never_told(s: Synthetic) -> str:
    k = key("c-7")
    s.claim(k, f"{k}@n1", "n1", 7.0, False, f"{k}@n2")
    s.db["claims"][claim_id(k)] = f"{k}@n1"
    return k


def a_replay_of_another_answer(s: Synthetic) -> str:
    resend = next(a for a in s.attempts if a["call"] == f"{key('g-1')}@n1#again")
    resend["execution"] = 99
    return key("g-1")


def a_new_execution_answered_after_a_504(s: Synthetic) -> str:
    # A 504 said the call goes on; a retry must get it, or 409: here a 422 (nothing of it).
    k = key("g-2")
    s.attempt("gw", k, f"{k}@n2", "n2", 13.0, 13.01, 422, 9, type="urn:idem:problem:key-reused")
    return k


def stored_by_an_older_holder(s: Synthetic) -> str:
    # The documented case, but the row keeps the old holder's answer under the new lease.
    k = key("g-3")
    first = [u for u in s.upstream if u.get("key") == f'"{k}"'][0]["n"]
    s.db["gw"][k]["execution"] = first
    return k


def a_slow_answer(s: Synthetic) -> str:
    k = key("c-8")
    s.attempt("claim", k, f"{k}@n2", "n2", 8.0, 15.0, 503, retry_after="1")
    return k


def no_recovery_after_the_pause(s: Synthetic) -> str:
    s.attempts = [a for a in s.attempts if not (a["node"] == "n1" and a["kind"] == "claim" and a["t0"] > T0 + 30)]
    s.attempt("claim", key("c-9"), f"{key('c-9')}@n1", "n1", 30.5, 30.6, 503, retry_after="1")
    s.attempt("claim", key("c-9"), f"{key('c-9')}@n1", "n1", 41.0, 41.1, 201, 1, claimed=True,
              winner=f"{key('c-9')}@n1")
    s.db["claims"][claim_id(key("c-9"))] = f"{key('c-9')}@n1"
    return "n1"


PLANTS: Dict[str, Callable[[Synthetic], str]] = {
    "double-exec": executed_twice_with_no_fault,
    "double-exec/short-pause": excused_only_by_a_too_short_pause,
    "double-exec/extended-lease": a_lease_extended_while_the_call_ran,
    "double-exec/kill-too-soon": taken_before_the_dead_nodes_lease_ended,
    "double-exec/same-node": taken_from_its_own_call_by_a_retry_on_the_same_node,
    "fence-not-growing": one_lease_executed_twice,
    "lost/claim": a_claim_acknowledged_then_lost,
    "lost/claim-other-call": a_claim_stored_for_another_call,
    "lost/operation": an_operation_completed_then_lost,
    "lost/gateway": a_gateway_answer_never_stored,
    "lost/gateway-other-execution": a_gateway_answer_stored_for_another_execution,
    "500": an_answer_of_500,
    "503-no-retry-after": a_503_without_retry_after,
    "504-no-retry-after": a_504_without_retry_after,
    "409-no-retry-after": a_409_without_retry_after,
    "started-after-completed": an_operation_started_after_it_completed,
    "two-winners": a_claim_with_two_winners,
    "winner-never-told": a_winner_never_told,
    "answer-changed": a_replay_of_another_answer,
    "after-504": a_new_execution_answered_after_a_504,
    "stored-by-stale-holder": stored_by_an_older_holder,
    "slow": a_slow_answer,
    "recovery": no_recovery_after_the_pause,
}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_each_planted_violation_is_flagged(tmp_path, plant):
    s = clean()
    needle = PLANTS[plant](s)
    r = s.check(tmp_path)
    kind = plant.split("/")[0]
    assert kind in r["violations"], f"{plant} passed unflagged: {r['violations']}"
    assert any(needle in x for x in r["examples"][kind]), f"{plant}: flagged, not the planted {needle}: {r['examples']}"
    # Anything else flagged is a consequence of the same plant (a double also changes the answer),
    # never noise from the clean part of the run.
    for other, examples in r["examples"].items():
        assert all(needle in x for x in examples), f"{plant} also flagged {other}: {examples}"


def test_the_id_of_a_gateway_key_is_idems():
    """The row id the checker reads, as idem_core::gateway::request_id computes it."""
    scope = hashlib.sha256(len(b"Bearer x").to_bytes(8, "big") + b"Bearer x").digest()
    want = hashlib.sha256(b"/orders\0" + scope + b"\0" + b"k-1").hexdigest()
    assert checker.gw_request_id("k-1", "/orders", ["Bearer x"]) == want


def test_a_stored_response_decodes():
    body = b'{"execution": 7}'
    raw = bytes([1]) + (201).to_bytes(2, "big") + (1).to_bytes(2, "big") + (12).to_bytes(2, "big") + b"content-type" \
        + (16).to_bytes(4, "big") + b"application/json" + body
    assert checker.decode_stored_response(raw) == {"status": 201, "body": body}
    assert checker.decode_stored_response(raw[:10]) is None


# ---- the documented case, on the long runs' own shapes (lease 6 s) -------------------------------

def window(start, end, back, fault="repoint"):
    return {"fault": fault, "node": "n1", "start": start, "end": end, "back": {"n1": back}}


def execution(sent, t):
    return {"node": "n1", "t": t, "sent": sent}


def test_a_double_is_excused_only_when_the_lease_ran_out_while_its_node_was_cut_off():
    # Sent 0.1 s before a 5.95 s re-point, back 0.24 s after it: the lease ended while cut off.
    assert excuses_double(window(100.0, 105.95, 106.19), "n1", execution(99.9, 100.0), 108.0, 6.0)
    # ...but not if the other execution came before the lease can have ended.
    assert not excuses_double(window(100.0, 105.95, 106.19), "n1", execution(99.9, 100.0), 105.0, 6.0)
    # A retry sent 4.6 s before a partition healed, executed after the heal (the bug #36 found):
    # it reached the store only after the heal.
    assert not excuses_double(window(90.0, 104.6, 104.7, "partition"), "n1", execution(100.0, 104.65), 110.0, 6.0)
    # A 7 s black hole that ended just after the execution: the node could store it at once.
    assert not excuses_double(window(93.0, 100.2, 100.3, "blackhole"), "n1", execution(99.9, 100.0), 108.0, 6.0)
    # Without the attempt's times (its record lost): cut off for at least the lease.
    unknown = {"node": "n1", "t": 100.0, "sent": None}
    assert excuses_double(window(99.0, 105.5, 105.6), "n1", unknown, 108.0, 6.0)
    assert not excuses_double(window(99.0, 104.0, 104.1), "n1", unknown, 108.0, 6.0)


def test_a_pause_or_a_kill_excuses_only_what_outlived_the_lease():
    # A 1 s pause: the node extends the lease again when it resumes.
    assert not excuses_double(window(101.0, 102.0, 102.1, "idem-pause"), "n1", execution(99.9, 100.0), 108.0, 6.0)
    # A 10 s pause, the retry elsewhere after the lease ended...
    assert excuses_double(window(101.0, 111.0, 111.1, "idem-pause"), "n1", execution(99.9, 100.0), 108.0, 6.0, "n2")
    # ...but not the paused node's own retry, taking the key from its own call when it resumed.
    assert not excuses_double(window(101.0, 111.0, 111.1, "idem-pause"), "n1", execution(99.9, 100.0), 111.2, 6.0,
                              "n1")
    # A kill: dead is dead however short, but the key is free only when the lease ends.
    assert excuses_double(window(101.0, 102.0, 102.1, "idem-kill"), "n1", execution(99.9, 100.0), 108.0, 6.0)
    assert not excuses_double(window(101.0, 102.0, 102.1, "idem-kill"), "n1", execution(99.9, 100.0), 104.0, 6.0)
    # The restarted node may run it again: it is another node.
    assert excuses_double(window(101.0, 102.0, 102.1, "idem-kill"), "n1", execution(99.9, 100.0), 108.0, 6.0, "n1")
    # An execution the restarted node ran is not the dead one's.
    assert not excuses_double(window(101.0, 102.0, 102.1, "idem-kill"), "n1", execution(102.5, 102.6), 110.0, 6.0)


def test_a_lease_counts_from_its_last_extension_not_from_the_begin():
    # A call begun at 100 and still running at 120 was extended meanwhile: a 2 s partition at 120
    # cannot have outlived its lease, though 20 s have passed since the begin.
    assert not excuses_double(window(120.0, 122.0, 122.1, "partition"), "n1", execution(100.0, 100.05), 123.0, 6.0)
    # A 9 s partition did (the last extension at most half a lease before it).
    assert excuses_double(window(120.0, 129.0, 129.1, "partition"), "n1", execution(100.0, 100.05), 126.0, 6.0)
