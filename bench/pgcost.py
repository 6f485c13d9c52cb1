#!/usr/bin/env python3
"""bench/pgcost.sh's helper (standard library only): the upstream and event handler, the load, and
the counting. bench/pgcost.sh sets up the cluster and the nodes and runs `pgcost.py run`; see
there and docs/performance.md ("What PostgreSQL does per operation").

  pgcost.py serve PORT    the gateway's upstream (any POST but /events: 201 at once) and the
                          event handler (POST /events: 200 at once); GET /count: distinct
                          webhook-ids received
  pgcost.py run           every kind, counted; configured by the environment (PGCOST_*)
"""
import http.client
import http.server
import json
import multiprocessing
import os
import re
import subprocess
import sys
import threading
import time


# ---------------------------------------------------------------------------------------------
# The upstream and the event handler

def serve(port):
    seen, lock = set(), threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length", 0)))
            if self.path.startswith("/events"):
                with lock:
                    seen.add(self.headers.get("webhook-id"))
                status, body = 200, b""
            else:
                status, body = 201, b'{"id":"ord_1","status":"created"}'
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            with lock:
                body = str(len(seen)).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    server.serve_forever()


# ---------------------------------------------------------------------------------------------
# PostgreSQL, through psql: `control` is the postgres database as the superuser (whose own
# statements pg_stat_statements keeps apart: only the idem role's are counted), `idemdb` the idem
# database as the superuser (pg_stat_user_tables is per database).

PSQL = os.environ.get("PGCOST_PSQL", "psql").split()
CONTROL = os.environ.get("PGCOST_CONTROL", "")
IDEMDB = os.environ.get("PGCOST_IDEMDB", "")
ROLE = os.environ.get("PGCOST_ROLE", "idem")


def sql(db, text):
    out = subprocess.run(PSQL + ["-X", "-qAt", "-F", "\t", "-v", "ON_ERROR_STOP=1", "-d", db, "-c", text],
                         check=True, capture_output=True, text=True).stdout
    return [line.split("\t") for line in out.splitlines() if line]


TXN_CONTROL = re.compile(r"^\s*(BEGIN|COMMIT|ROLLBACK|START\s+TRANSACTION|END|ABORT)\b", re.I)


def cluster_counters():
    """What every backend reports into shared stats: the idem database's transactions and rows,
    and the cluster's WAL. Read from the control database, so that reading commits nothing in idem."""
    row = sql(CONTROL, """
        SELECT d.xact_commit, d.xact_rollback, d.tup_inserted + d.tup_updated + d.tup_deleted,
               w.wal_records, w.wal_fpi, w.wal_bytes, w.wal_sync, w.wal_write
        FROM pg_stat_database d, pg_stat_wal w WHERE d.datname = 'idem'""")[0]
    keys = ["commits", "rollbacks", "tuples", "wal_records", "wal_fpi", "wal_bytes", "wal_sync", "wal_write"]
    return dict(zip(keys, (int(float(v)) for v in row)))


def statements():
    """pg_stat_statements of the idem role in the idem database: [(query, calls, rows, wal_bytes)]."""
    rows = sql(CONTROL, f"""
        SELECT regexp_replace(query, '\\s+', ' ', 'g'), calls, rows, wal_bytes
        FROM pg_stat_statements
        WHERE dbid = (SELECT oid FROM pg_database WHERE datname = 'idem')
          AND userid = (SELECT oid FROM pg_roles WHERE rolname = '{ROLE}')""")
    return [(q, int(c), int(r), int(float(w))) for q, c, r, w in rows]


def table_counters():
    rows = sql(IDEMDB, """
        SELECT coalesce(sum(n_tup_ins), 0), coalesce(sum(n_tup_upd), 0), coalesce(sum(n_tup_del), 0),
               coalesce(sum(n_tup_hot_upd), 0)
        FROM pg_stat_user_tables""")[0]
    return dict(zip(["ins", "upd", "del", "hot"], (int(float(v)) for v in rows)))


SETTLE = float(os.environ.get("PGCOST_SETTLE", "11"))


def settle(seconds):
    """PostgreSQL 15's backends report their counters when they go idle, but at most once a second:
    one that last reported less than a second before going idle reports 10 s later
    (PGSTAT_IDLE_INTERVAL), and pg_stat_force_next_flush() reaches only the backend that calls it.
    So: wait `seconds`, then until the rows and WAL counted stay the same for half a second."""
    started = time.monotonic()
    time.sleep(seconds)
    last = None
    while True:
        c = cluster_counters()
        now = (c["tuples"], c["wal_records"], c["wal_sync"])
        if now == last or time.monotonic() - started > seconds + 10:
            return
        last = now
        time.sleep(0.5)


def reset():
    """Counters back to zero (pg_stat_reset() must run in the database it resets), then a baseline:
    what a backend reports late is still caught by the difference."""
    sql(IDEMDB, "SELECT pg_stat_reset()")
    time.sleep(0.2)  # psql's own backend reports its transaction as it exits
    sql(CONTROL, "SELECT pg_stat_statements_reset(); SELECT pg_stat_reset_shared('wal')")
    return cluster_counters(), table_counters()


def wal_lsn():
    return sql(CONTROL, "SELECT pg_current_wal_insert_lsn()")[0][0]


WALDUMP = os.environ.get("PGCOST_WALDUMP", "").split()


def wal_by_record(start, end):
    """pg_waldump's statistics between two LSNs: [(record type, count, bytes incl. full-page
    images)], the largest first (the nodes' background included: it is counted, not taken off)."""
    if not WALDUMP:
        return []
    out = subprocess.run(WALDUMP + ["--stats=record", "-s", start, "-e", end], capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        m = re.match(r"^(\S+/\S+(?: \S+)?)\s+(\d+)\s+\(\s*[\d.]+\)\s+\d+\s+\(\s*[\d.]+\)\s+\d+\s+\(\s*[\d.]+\)\s+(\d+)", line)
        if m:
            found.append((m.group(1), int(m.group(2)), int(m.group(3))))
    return sorted(found, key=lambda f: -f[2])


COUNTS = ["statements", "txn_control", "commits", "rollbacks", "wal_bytes", "wal_records", "wal_fpi",
          "fsyncs", "wal_writes", "rows", "ins", "upd", "del", "hot"]
# What the nodes do per second with nothing asked of them (delivery polling, gauges, the clock's
# offset), from the idle row: each later row has this much taken off for every second it was
# counted over (its load, then the wait for the counters).
BACKGROUND = {}


def measure(label, ops, work, per_second=False):
    """`work()` does the operations; returns what the idem role's statements did meanwhile, per
    operation once divided by `ops` (with `per_second`: per second of the window, and remembered
    as the background)."""
    sql(IDEMDB, "VACUUM (ANALYZE)")  # each kind from a vacuumed, analyzed database (autovacuum is off)
    settle(1.2)
    before, tables_before = reset()
    lsn_before = wal_lsn() if WALDUMP else None
    started = time.monotonic()
    work()
    elapsed = time.monotonic() - started
    settle(SETTLE)
    after = cluster_counters()
    window = time.monotonic() - started
    records = wal_by_record(lsn_before, wal_lsn()) if WALDUMP else []
    stmts = statements()
    tables_after = table_counters()
    d = {k: after[k] - before[k] for k in after}
    t = {k: tables_after[k] - tables_before[k] for k in tables_after}
    control = sum(c for q, c, _, _ in stmts if TXN_CONTROL.match(q))
    r = {
        "statements": sum(c for q, c, _, _ in stmts) - control, "txn_control": control,
        "commits": d["commits"], "rollbacks": d["rollbacks"],
        "wal_bytes": d["wal_bytes"], "wal_records": d["wal_records"], "wal_fpi": d["wal_fpi"],
        "fsyncs": d["wal_sync"], "wal_writes": d["wal_write"],
        "rows": t["ins"] + t["upd"] + t["del"], "ins": t["ins"], "upd": t["upd"], "del": t["del"], "hot": t["hot"],
    }
    if per_second:
        ops = window
        BACKGROUND.update({k: r[k] / window for k in COUNTS})
        BACKGROUND.update({("q", q): c / window for q, c, _, _ in stmts})
        top = [(q, c, c, n, w) for q, c, n, w in stmts]
    else:
        for k in COUNTS:
            r[k] -= BACKGROUND.get(k, 0) * window
        top = [(q, c, c - BACKGROUND.get(("q", q), 0) * window, n, w) for q, c, n, w in stmts]
    r.update({"records": records, "label": label, "ops": ops, "seconds": elapsed, "window": window,
              "top": sorted(top, key=lambda s: (-s[2], s[0]))})
    print(f"  {label}: {ops:.0f} in {elapsed:.1f} s (counted over {window:.1f} s)", file=sys.stderr, flush=True)
    return r


# ---------------------------------------------------------------------------------------------
# The load: `clients` processes, each with kept-alive connections, operation i on process i % clients.

class Failures:
    def __init__(self):
        self.lock, self.n, self.first = threading.Lock(), 0, []

    def add(self, what):
        with self.lock:
            self.n += 1
            if len(self.first) < 5:
                self.first.append(what)


class Client:
    def __init__(self):
        self.conns = {}

    def call(self, port, method, path, body=None, headers=None):
        for attempt in (0, 1):
            conn = self.conns.get(port)
            if conn is None:
                conn = self.conns[port] = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            try:
                h = {"content-type": "application/json"}
                h.update(headers or {})
                conn.request(method, path, body, h)
                reply = conn.getresponse()
                return reply.status, reply.read(), reply
            except (http.client.HTTPException, ConnectionError):
                conn.close()
                del self.conns[port]
                if attempt:
                    raise


def run_load(count, clients, one):
    """`one(client, i)` for i in 0..count over `clients` processes; `one` returns None or a failure.

    Processes, not threads: Python's threads take turns holding the interpreter, so 32 of them
    kept fewer requests at idem at once than pgbench's 32 clients keep at PostgreSQL for the floor,
    and single claims gathered into smaller groups than the same 32 clients would make."""
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()

    def worker(w):
        failures, client = Failures(), Client()
        for i in range(w, count, clients):
            try:
                bad = one(client, i)
            except Exception as e:  # noqa: BLE001 — counted and reported, never hidden
                bad = repr(e)
            if bad:
                failures.add(bad)
        results.put((failures.n, failures.first))

    procs = [ctx.Process(target=worker, args=(w,)) for w in range(clients)]
    [p.start() for p in procs]
    failed, first = 0, []
    for _ in procs:
        n, some = results.get(timeout=3600)
        failed, first = failed + n, (first + some)[:5]
    [p.join() for p in procs]
    if any(p.exitcode for p in procs):
        raise SystemExit(f"a load process failed: exit codes {[p.exitcode for p in procs]}")
    if failed:
        raise SystemExit(f"{failed} of {count} operations failed, e.g. {first}")


def expect(status, body, *wanted):
    return None if status in wanted else f"{status} {body[:200]!r}"


# ---------------------------------------------------------------------------------------------

def main_run():
    env = os.environ
    n = int(env.get("PGCOST_N", "20000"))
    clients = int(env.get("PGCOST_CLIENTS", "32"))
    api = [int(p) for p in env["PGCOST_API"].split()]
    gw = [int(p) for p in env["PGCOST_GATEWAY"].split()]
    handler = int(env["PGCOST_HANDLER"])
    verbose = env.get("VERBOSE", "") not in ("", "0")
    pgbench = env.get("PGCOST_PGBENCH", "")
    only = set(env.get("ONLY", "").split(","))-{""}
    rows = []

    def want(kind):
        return not only or kind in only

    # An idle stretch first: what the nodes do with nothing asked of them (delivery polling, the
    # clock's offset, gauges), per second; each row below includes this much per second it ran.
    if want("idle"):
        rows.append(measure("idle node(s), per second (taken off every row below)", 0, lambda: time.sleep(5),
                            per_second=True))

    def claim_new(c, i):
        s, b, _ = c.call(api[0], "POST", "/v1/claims/pgcost", json.dumps({"key": f"pgcost-{i:07d}"}))
        return expect(s, b, 201)

    def claim_old(c, i):
        s, b, _ = c.call(api[0], "POST", "/v1/claims/pgcost", json.dumps({"key": f"pgcost-{i:07d}"}))
        return expect(s, b, 200) or (None if b'"claimed":false' in b else f"claimed again: {b[:200]!r}")

    if want("claim"):
        rows.append(measure("claim, new key", n, lambda: run_load(n, clients, claim_new)))
        rows.append(measure("claim, existing key", n, lambda: run_load(n, clients, claim_old)))

    batches = (n + 499) // 500

    def batch(c, i):
        keys = range(i * 500, min(n, (i + 1) * 500))
        body = json.dumps({"items": [{"key": f"batch-{k:07d}"} for k in keys]})
        s, b, _ = c.call(api[0], "POST", "/v1/claims/pgcost/batch", body)
        return expect(s, b, 200) or (None if b.count(b'"claimed":true') == len(keys) else f"not all new: {b[:200]!r}")

    if want("batch"):
        rows.append(measure("batch claim of 500 new keys, per key", n, lambda: run_load(batches, clients, batch)))

    def gateway(port, replay):
        def one(c, i):
            s, b, reply = c.call(port, "POST", "/orders", json.dumps({"amount": 42, "order": i}),
                                 {"idempotency-key": f"gw-{i:07d}", "authorization": "Bearer pgcost"})
            bad = expect(s, b, 201)
            replayed = reply.getheader("idempotent-replayed") == "true"
            return bad or (None if replayed == replay else f"replayed: {replayed}")
        return one

    if want("gateway"):
        rows.append(measure("gateway, first execution", n, lambda: run_load(n, clients, gateway(gw[0], False))))
        if len(gw) > 1:
            rows.append(measure("gateway replay, on another node", n, lambda: run_load(n, clients, gateway(gw[1], True))))
        rows.append(measure("gateway replay, on the node that executed it", n,
                            lambda: run_load(n, clients, gateway(gw[0], True))))

    def begin_complete(c, i):
        s, b, _ = c.call(api[0], "POST", "/v1/operations/pgcost/begin",
                         json.dumps({"key": f"op-{i:07d}", "request": {"amount": 42}}))
        if s != 201:
            return f"begin: {s} {b[:200]!r}"
        started = json.loads(b)
        s, b, _ = c.call(api[0], "POST", f"/v1/operations/pgcost/{started['id']}/complete",
                         json.dumps({"token": started["token"], "result": {"charge_id": f"ch_{i}"}}))
        return expect(s, b, 200)

    def rebegin(c, i):
        s, b, _ = c.call(api[0], "POST", "/v1/operations/pgcost/begin",
                         json.dumps({"key": f"op-{i:07d}", "request": {"amount": 42}}))
        return expect(s, b, 200) or (None if b'"completed"' in b else f"not completed: {b[:200]!r}")

    if want("operation"):
        rows.append(measure("operation begin → complete", n, lambda: run_load(n, clients, begin_complete)))
        rows.append(measure("operation re-begin of a completed key", n, lambda: run_load(n, clients, rebegin)))

    def handler_count():
        conn = http.client.HTTPConnection("127.0.0.1", handler, timeout=10)
        conn.request("GET", "/count")
        got = int(conn.getresponse().read())
        conn.close()
        return got

    def completed():
        """Receipts of the source completed, by every node's /metrics (which reads no database)."""
        total = 0
        for port in api:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/metrics")
            for line in conn.getresponse().read().decode().splitlines():
                if line.startswith("idem_deliveries_total{") and 'outcome="completed"' in line and 'source="pgcost"' in line:
                    total += int(float(line.rsplit(" ", 1)[1]))
            conn.close()
        return total

    def events():
        before = completed()

        def intake(c, i):
            s, b, _ = c.call(api[0], "POST", "/v1/sources/pgcost/events",
                             json.dumps({"external_event_id": f"ev-{i:07d}", "amount": 42}))
            return expect(s, b, 202)
        run_load(n, clients, intake)
        deadline = time.monotonic() + 600
        while completed() - before < n or handler_count() < n:
            if time.monotonic() > deadline:
                raise SystemExit(f"events: {handler_count()} of {n} delivered after 600 s")
            time.sleep(0.1)

    if want("events"):
        rows.append(measure("event intake + delivery", n, events))

    # The floor: PostgreSQL's own prepared INSERT … ON CONFLICT DO NOTHING into a table of the
    # claims table's shape, through pgbench as the same role.
    if pgbench and want("floor"):
        per_client = (n + clients - 1) // clients
        total = per_client * clients
        dsn = env["PGCOST_IDEM_DSN"]
        scripts = env["PGCOST_TMP"]
        bench = ["pgbench", "-n", "-M", "prepared", "-c", str(clients), "-j", "2", "-t", str(per_client)]
        new = os.path.join(scripts, "floor_new.sql")
        old = os.path.join(scripts, "floor_old.sql")
        with open(new, "w") as f:
            f.write("\\set k random(1, 1000000000000000)\n"
                    "INSERT INTO floor_claims (ns, id, parts, created_at) VALUES ('floor', "
                    "sha256(convert_to('pgcost-' || :k, 'UTF8')), convert_to('pgcost-' || :k, 'UTF8'), "
                    "1700000000000) ON CONFLICT DO NOTHING;\n")
        with open(old, "w") as f:
            f.write(f"\\set k random(1, {n})\n"
                    "INSERT INTO floor_claims (ns, id, parts, created_at) VALUES ('floor', "
                    "sha256(convert_to('old-' || :k, 'UTF8')), convert_to('old-' || :k, 'UTF8'), "
                    "1700000000000) ON CONFLICT DO NOTHING;\n")
        subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-c",
                               "CREATE TABLE floor_claims (LIKE claims INCLUDING ALL); "
                               "INSERT INTO floor_claims (ns, id, parts, created_at) SELECT 'floor', "
                               "sha256(convert_to('old-' || g, 'UTF8')), convert_to('old-' || g, 'UTF8'), 1700000000000 "
                               f"FROM generate_series(1, {n}) g"], check=True)

        def floor(script):
            def work():
                subprocess.run(bench + ["-f", script, dsn], check=True, stdout=subprocess.DEVNULL)
            return work
        rows.append(measure("floor: prepared INSERT … ON CONFLICT DO NOTHING, new key", total, floor(new)))
        rows.append(measure("floor: the same, existing key", total, floor(old)))

    print_table(rows, verbose)


def fmt(x, digits=2):
    """A count per operation: 0 when under half a thousandth, or just under zero (the background
    taken off leaves such crumbs), three decimals under 0.1 (a 500-key batch's one statement is
    0.002 per key)."""
    if abs(x) < (0.5 if digits == 0 else 0.0005) or -0.01 < x < 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if digits and abs(x) < 0.095:
        digits = 3
    return f"{x:.{digits}f}"


def print_table(rows, verbose):
    env = os.environ
    print()
    print(env.get("PGCOST_HEADER", ""))
    print()
    if not BACKGROUND:
        print("(no idle stretch measured: nothing taken off for the nodes' background)")
        print()
    print("| per operation | statements | commits | WAL bytes | fsyncs | rows changed | HOT % |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ops = r["ops"]
        hot = f"{100 * r['hot'] / r['upd']:.0f} %" if r["upd"] >= 1 else "—"
        print(f"| {r['label']} | {fmt(r['statements'] / ops)} | {fmt(r['commits'] / ops)} | "
              f"{fmt(r['wal_bytes'] / ops, 0)} | {fmt(r['fsyncs'] / ops)} | {fmt(r['rows'] / ops)} | {hot} |")
    if not verbose:
        return
    print()
    print("Per kind: what ran, and the top statements by calls (per operation; `rows` per call).")
    for r in rows:
        ops = r["ops"]
        print()
        print(f"### {r['label']} — {ops:.0f} in {r['seconds']:.1f} s, counted over {r['window']:.1f} s")
        print(f"BEGIN/COMMIT/ROLLBACK lines {fmt(r['txn_control'] / ops)}, rollbacks {fmt(r['rollbacks'] / ops)}, "
              f"WAL records {fmt(r['wal_records'] / ops)} (full-page images {r['wal_fpi']:.0f}), WAL writes "
              f"{fmt(r['wal_writes'] / ops)}; rows inserted {fmt(r['ins'] / ops)}, updated {fmt(r['upd'] / ops)} "
              f"(HOT {r['hot']:.0f}), deleted {fmt(r['del'] / ops)}")
        print()
        records = [(name, count, size) for name, count, size in r["records"][:8] if size / ops >= 1]
        if records:
            print("WAL by record type (pg_waldump; per operation): " + ", ".join(
                f"{name} {fmt(count / ops)} × = {fmt(size / ops, 0)} B" for name, count, size in records))
            print()
        top = [t for t in r["top"][:10] if t[2] / ops >= 0.0005]
        if not top:
            print("No statements beyond the idle background.")
            continue
        print("| calls/op | rows/call | WAL bytes/op | statement |")
        print("|---:|---:|---:|---|")
        for q, calls, net, nrows, wal in top:
            text = (q if len(q) <= 150 else q[:147] + "…").replace("|", "\\|")
            print(f"| {fmt(net / ops, 3)} | {fmt(nrows / calls)} | {fmt(wal / ops, 0)} | `{text}` |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        serve(int(sys.argv[2]))
    elif sys.argv[1:2] == ["run"]:
        main_run()
    else:
        sys.exit(__doc__)
