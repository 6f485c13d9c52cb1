"""The checker: proves contract §10 for one run from every recorded attempt, the upstream's log,
the harness's events and the database's rows; and sums a whole schedule.

Run it again on a finished schedule's directory (it keeps the rows it read in each run's
`db.json`): `python3 tests/faults/checker.py OUT_DIR`.

What a run must show (each line a violation when it fails):

- `500`: no answer of 500, ever (every 5xx is listed by status and problem type);
- `lost`: every claim answered `201 claimed:true` is in the database, won by that call; every
  operation answered `completed` is still completed, with that call's result;
- `two-winners`: at most one logical call told it won each claim key;
- `winner-never-told`: a claim stored for a call that was told `claimed:false` (or gave up):
  counted, and a violation only when client tokens were in use;
- `double-exec`: no gateway key executed twice at the upstream, except where the node of the
  earlier execution was paused, killed, or cut off from the store past the route's lease in
  between (the documented case; reported, with whether their fencing numbers differ and grow);
- `started-after-completed`: an operation told `completed` never later answers `started`;
- `slow`: every answer within call_timeout + 1 s (a paused node's stalled requests excepted);
  `503-no-retry-after`: every 503 carries Retry-After;
- `recovery`: after a promotion each node answers 2xx within 3 s; after a path comes back
  (black hole, partition, re-point, read-only reverted, standby back, SIGCONT), within 10 s;
- `start-refused`: an idem node that would not start (a standby first in its URL).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Tuple

PROCESS_FAULTS = {"idem-pause", "idem-kill", "standby-first"}
PROMOTION_FAULTS = {"failover", "switchover", "demote"}
RECOVERY_BOUND = {"promoted": 3.0}
DEFAULT_RECOVERY_BOUND = 10.0
MEASUREMENT_SLACK = 0.1


def claim_id(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def op_store_id(ns: str, key: str) -> str:
    h = hashlib.sha256()
    h.update(b"operation\0" + ns.encode() + b"\0" + bytes.fromhex(claim_id(key)))
    return h.hexdigest()


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

def snapshot_db(query: Callable[[str], str], ns: str, op_keys: Iterable[str]) -> dict:
    """The run's claims and operations as the database holds them now."""
    claims = {}
    out = query(f"SELECT encode(id, 'hex'), coalesce(data, '') FROM claims WHERE ns = '{ns}';")
    for line in out.splitlines():
        if "|" in line:
            i, data = line.split("|", 1)
            try:
                claims[i] = (json.loads(data) or {}).get("call")
            except ValueError:
                claims[i] = None
    ops = {}
    ids = sorted({op_store_id(ns, k) for k in op_keys})
    for chunk in range(0, len(ids), 2000):
        part = ids[chunk:chunk + 2000]
        if not part:
            continue
        values = ",".join(f"('\\x{i}'::bytea)" for i in part)
        out = query(
            "SELECT encode(r.id, 'hex'), r.state, encode(coalesce(r.response, ''::bytea), 'hex') FROM requests r "
            f"JOIN (VALUES {values}) AS v(id) ON r.id = v.id;")
        for line in out.splitlines():
            if line.count("|") == 2:
                i, state, resp = line.split("|")
                call = None
                if state == "1" and len(resp) >= 52:
                    try:
                        result = json.loads(bytes.fromhex(resp[52:]).decode())
                        call = result.get("call") if isinstance(result, dict) else None
                    except ValueError:
                        pass
                ops[i] = {"state": int(state), "call": call}
    return {"claims": claims, "ops": ops}


# ---- one run ------------------------------------------------------------------------------

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


def excuses_double(w: dict, node: str, a: dict, t_b: float, lease: float) -> bool:
    """Whether fault window `w` is the documented cause of a key executed (`a`: its upstream
    record, with the sending and answering times of the client's attempt where known) on `node` and
    again at `t_b`: that node died or was paused in between, or it (or every node) could not write
    to the store until the execution's lease had ended. The lease is counted from when the client
    sent the attempt (its begin cannot have been stamped earlier) and the node counts as cut off
    until its first write after the heal (`w["back"]`). Without the attempt's times: cut off for at
    least the lease."""
    t_a = a["t"]
    if w["start"] > t_b or w["end"] < t_a or w["node"] not in (node, None):
        return False
    if w["fault"] in PROCESS_FAULTS:
        return True
    sent, answered = a.get("sent"), a.get("answered")
    if sent is None or answered is None:
        return w["end"] - w["start"] >= lease
    back = w.get("back", {}).get(node, w["end"])
    return w["start"] <= answered and back >= sent + lease


def first_write(attempts: List[dict], node: str, t: float) -> Optional[float]:
    """When `node` first answered a store-backed request (a claim or an operation) 2xx at or after
    `t`: from then on it could write again."""
    ok = [a["t1"] for a in attempts if a["node"] == node and a["kind"] in ("claim", "op")
          and a.get("t1", 0) >= t and a.get("status") and 200 <= a["status"] < 300]
    return min(ok) if ok else None


def check_run(run_dir: Path, events: List[dict], upstream: List[dict], meta: dict) -> dict:
    attempts = read_jsonl(run_dir / "attempts.jsonl")
    outcomes = read_jsonl(run_dir / "outcomes.jsonl")
    db = json.loads((run_dir / "db.json").read_text()) if (run_dir / "db.json").exists() else None
    run_id, ns = meta["run"], meta["ns"]
    call_timeout = meta.get("call_timeout", 5.0)
    lease = meta.get("gateway_lease", 6.0)
    client_tokens = meta.get("client_token", False)
    starts = [e["t"] for e in events if e["event"] == "run_start" and e.get("run") == run_id]
    t_from = starts[0] if starts else 0
    later = [e["t"] for e in events if e["event"] == "run_start" and e["t"] > t_from]
    t_to = min(later) if later else float("inf")
    # Events of this run, and those that name no run (a node's failed start) within its time.
    run_events = [e for e in events if e.get("run") == run_id or ("run" not in e and t_from <= e["t"] <= t_to)]
    windows = fault_windows(run_events)
    v: Dict[str, List[str]] = defaultdict(list)  # violations: kind -> examples
    r: dict = {"run": run_id, "fault": meta.get("fault"), "attempts": len(attempts),
               "logical": len(outcomes)}

    # 5xx by status and type; 500s; 503 without Retry-After.
    fivexx = Counter()
    statuses = Counter()
    for a in attempts:
        s = a.get("status")
        statuses[str(s) if s is not None else a.get("err", "?")] += 1
        if s is not None and s >= 500:
            fivexx[f"{s} {a.get('type') or '-'} ({a['kind']})"] += 1
            if s == 500 and len(v["500"]) < 5:
                v["500"].append(f"{a['node']} {a['kind']}/{a['step']} {a['key']}: {a.get('detail', '')[:120]}")
            elif s == 500:
                v["500"].append("")
            if s == 503 and "retry_after" not in a:
                v["503-no-retry-after"].append(f"{a['node']} {a['kind']} {a['key']}")
    r["statuses"] = dict(statuses)
    r["5xx"] = dict(fivexx)

    # Bounded time; a stopped node's requests excepted.
    # The client measures on a busy two-core machine: 0.1 s of slack for its own event loop.
    bound = call_timeout + 1.0 + MEASUREMENT_SLACK
    paused = [w for w in windows if w["fault"] == "idem-pause"]
    lat_by_status: Dict[str, float] = defaultdict(float)
    slow_excused = 0
    for a in attempts:
        lat = a["t1"] - a["t0"]
        k = str(a.get("status") or a.get("err"))
        lat_by_status[k] = max(lat_by_status[k], lat)
        if lat > bound:
            if any(w["node"] == a["node"] and a["t0"] <= w["end"] + 0.5 and a["t1"] >= w["start"] for w in paused):
                slow_excused += 1
            else:
                v["slow"].append(f"{a['node']} {a['kind']}/{a['step']} {lat:.1f}s -> {k}")
    r["max_latency"] = {k: round(x, 2) for k, x in sorted(lat_by_status.items())}
    r["slow_while_paused"] = slow_excused

    # Claims.
    told_true: Dict[str, set] = defaultdict(set)
    told: Dict[str, Dict[str, Optional[bool]]] = defaultdict(dict)
    claim_keys = set()
    for a in attempts:
        if a["kind"] != "claim":
            continue
        claim_keys.add(a["key"])
        if a.get("status") in (200, 201):
            told[a["key"]][a["call"]] = a.get("claimed")
            if a.get("claimed"):
                told_true[a["key"]].add(a["call"])
    for key, calls in told_true.items():
        if len(calls) > 1:
            v["two-winners"].append(f"{key}: {sorted(calls)}")
    never_told, gave_up_winners = [], []
    if db is not None:
        rows = db["claims"]
        for key, calls in told_true.items():
            row = rows.get(claim_id(key), "absent")
            for call in calls:
                if row == "absent":
                    v["lost"].append(f"claim {key} told to {call}: not in the database")
                elif row != call:
                    v["lost"].append(f"claim {key} told to {call}: the database says {row}")
        for key in claim_keys:
            row = rows.get(claim_id(key), "absent")
            if row == "absent":
                continue
            if not told_true.get(key):
                if told[key].get(row) is False:
                    never_told.append(f"{key}: stored for {row}, which was told claimed:false")
                else:
                    gave_up_winners.append(f"{key}: stored for {row}, which gave up unanswered")
    r["claims_winner_never_told"] = len(never_told)
    r["claims_winner_gave_up"] = len(gave_up_winners)
    if never_told and client_tokens:
        v["winner-never-told"].extend(never_told)
    r["winner_never_told_examples"] = never_told[:5]

    # Operations: completed never later started; completed still completed.
    completed_at: Dict[str, float] = {}
    completed_by: Dict[str, set] = defaultdict(set)
    for a in attempts:
        if a["kind"] == "op" and a.get("status") == 200 and a.get("opstatus") == "completed":
            completed_at[a["key"]] = min(completed_at.get(a["key"], a["t1"]), a["t1"])
            if a["step"] == "complete":
                completed_by[a["key"]].add(a["call"])
    for a in attempts:
        if a["kind"] == "op" and a["step"] == "begin" and a.get("status") == 201:
            c = completed_at.get(a["key"])
            if c is not None and a["t0"] > c:
                v["started-after-completed"].append(f"{a['key']} on {a['node']} ({a['t0'] - c:.1f}s after)")
    if db is not None:
        for key in completed_at:
            row = db["ops"].get(op_store_id(ns, key))
            if not row or row["state"] != 1:
                v["lost"].append(f"operation {key} told completed: {'absent' if not row else 'not completed'}")
            elif completed_by.get(key) and row["call"] not in completed_by[key]:
                v["lost"].append(f"operation {key}: completed by {sorted(completed_by[key])}, stored {row['call']}")
    r["ops_completed"] = len(completed_at)

    # Gateway executions, each with the sending and answering times of the attempt it answered.
    for w in windows:
        w["back"] = {node: first_write(attempts, node, w["end"]) or w["end"] for node in meta["nodes"]}
    attempt_of = {a["execution"]: a for a in attempts if a["kind"] == "gw" and a.get("execution") is not None
                  and not a.get("replayed")}
    execs: Dict[str, List[dict]] = defaultdict(list)
    for u in upstream:
        k = (u.get("key") or "").strip('"')
        if k.startswith(run_id + "-"):
            a = attempt_of.get(u.get("n"))
            execs[k].append({**u, "sent": a and a["t0"], "answered": a and a.get("t1")})
    doubles, documented, fences = [], [], []
    r["gw_executions"] = sum(len(es) for es in execs.values())
    r["gw_executions_without_fence"] = sum(1 for es in execs.values() for e in es if e.get("fence") is None)
    for key, es in execs.items():
        if len(es) < 2:
            continue
        es.sort(key=lambda e: e["n"])
        ok = True
        for a, b in zip(es, es[1:]):
            cut = [w for w in windows if excuses_double(w, a["node"], a, b["t"], lease)]
            if not cut:
                ok = False
        fence = [e.get("fence") for e in es]
        why = sorted({f"{w['fault']} {w['seconds']}s" for w in windows
                      if excuses_double(w, es[0]["node"], es[0], es[-1]["t"], lease)})
        line = f"{key}: {len(es)}x on {[e['node'] for e in es]}, fences {fence}" + (f" ({', '.join(why)})" if why else "")
        if ok:
            documented.append(line)
            if all(f is not None for f in fence):
                nums = [int(f) for f in fence]
                fences.append(all(x < y for x, y in zip(nums, nums[1:])))
        else:
            doubles.append(line)
    v["double-exec"].extend(doubles)
    r["gw_keys"] = len(execs)
    r["gw_double_undocumented"] = len(doubles)
    r["gw_double_documented"] = len(documented)
    r["gw_documented_examples"] = documented[:5]
    r["gw_fences_grow"] = (all(fences) if fences else None)
    if fences and not all(fences):
        v["fence-not-growing"].extend(x for x, ok in zip(documented, fences) if not ok)

    # Recovery: from each heal, each node's first store-backed 2xx.
    rec = []
    for e in run_events:
        if e["event"] != "heal" or e.get("what") == "nothing happened":
            continue
        h = e.get("at", e["t"])
        bound_s = RECOVERY_BOUND.get(e.get("what"), DEFAULT_RECOVERY_BOUND)
        for node in meta["nodes"]:
            after = [a for a in attempts if a["node"] == node and a["kind"] in ("claim", "op")
                     and a.get("t1", 0) >= h]
            first = first_write(attempts, node, h)
            secs = round(first - h, 2) if first is not None else None
            rec.append({"fault": e["fault"], "what": e.get("what"), "node": node, "seconds": secs,
                        "attempts_after": len(after)})
            if secs is None and after:
                v["recovery"].append(f"{node}: no 2xx after {e.get('what')} ({len(after)} attempts)")
            elif secs is not None and secs > bound_s:
                v["recovery"].append(f"{node}: first 2xx {secs:.1f}s after {e.get('what')} (bound {bound_s:.0f}s)")
    r["recovery"] = rec

    for e in run_events:
        if e["event"] == "start_failed":
            v["start-refused"].append(f"{e['node']}: {' | '.join(e.get('log') or [])[-200:]}")
    if any(e["event"] == "harness_error" for e in run_events):
        r["harness_error"] = [e.get("error") for e in run_events if e["event"] == "harness_error"]

    r["gave_up"] = dict(Counter(o["kind"] for o in outcomes if o.get("gave_up")))
    r["violations"] = {k: len(x) for k, x in v.items() if x}
    r["examples"] = {k: [s for s in x if s][:5] for k, x in v.items() if x}
    return r


# ---- a schedule ---------------------------------------------------------------------------

def summarize(results: List[dict]) -> dict:
    by_fault: Dict[str, dict] = {}
    for r in results:
        f = r["fault"]
        s = by_fault.setdefault(f, {"runs": 0, "attempts": 0, "500": 0, "5xx": Counter(), "violations": Counter(),
                                    "lost": 0, "two_winners": 0, "winner_never_told": 0, "gw_double": 0,
                                    "gw_documented": 0, "started_after_completed": 0, "slow": 0,
                                    "no_retry_after": 0, "recovery": defaultdict(list), "max_latency": 0.0})
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
        s["no_retry_after"] += r["violations"].get("503-no-retry-after", 0)
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
            "gw 2x doc", "done->started", "slow", "503 no RA", "recovery p50/max s", "max lat s"]
    rows = [cols]
    for f, s in summary["by_fault"].items():
        other = sum(n for k, n in s["5xx"].items() if not k.startswith("500"))
        recov = "; ".join(f"{w}: {x['p50']:.1f}/{x['max']:.1f}" for w, x in s["recovery"].items()) or "-"
        rows.append([f, s["runs"], s["attempts"], s["500"], other, s["lost"], s["two_winners"],
                     s["winner_never_told"], s["gw_double"], s["gw_documented"], s["started_after_completed"],
                     s["slow"], s["no_retry_after"], recov, f"{s['max_latency']:.1f}"])
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
