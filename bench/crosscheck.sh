#!/usr/bin/env bash
# idem-bench's figures beside independent tools' on the same kind of target, in one run: wrk for
# idem and the HTTP ceiling, redis-benchmark for Redis, pgbench for PostgreSQL. Prints both and
# their ratio, so a disagreement shows (docs/performance.md explains the ones over 20 %). Each tool
# runs right after the idem-bench scenario that measures the same thing: this machine's speed
# drifts.
#
#   bench/crosscheck.sh [seconds-per-measurement]
#
# Needs: wrk (apt-get install -y wrk), redis-server and redis-benchmark, pgbench, python3, and a
# PostgreSQL at $PGURL (default: the local one).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-8}
PGURL=${PGURL:-postgres://postgres@127.0.0.1:5432/postgres}
for tool in wrk redis-server redis-benchmark pgbench python3; do
  command -v $tool >/dev/null || { echo "$tool is needed" >&2; exit 1; }
done
cargo build --release -q -p idem-server -p idem-bench
T=$(mktemp -d)
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { for _ in $(seq 100); do curl -sf "$1" >/dev/null && return; sleep 0.1; done; echo "$1 did not answer" >&2; exit 1; }

rps() { awk '/Requests\/sec/ {print $2}' <<<"$1"; }
wrk_check() { if grep -q 'Non-2xx' <<<"$1"; then echo "!! $(grep Non-2xx <<<"$1")" >&2; fi; }
start_idem() { # [config-file]; sets IDEM
  local port; port=$(free_port)
  ./target/release/idem serve --listen 127.0.0.1:$port --data-dir "$T/d$port" ${1:+--config "$1"} >"$T/idem$port.log" 2>&1 &
  PIDS+=($!); IDEM=http://127.0.0.1:$port; wait_http "$IDEM/readyz"
}
bench() { # scenario: idem-bench's run, just before the tools measure the same things
  echo "== idem-bench $1, then the same with the independent tools"
  ./target/release/idem-bench "$1" --seconds "$SECS" --json "$T/$1.json" >/dev/null 2>"$T/$1.err" \
    || { cat "$T/$1.err" >&2; exit 1; }
}
redis_rps() { # extra redis-server args...
  local port; port=$(free_port); mkdir -p "$T/r$port"
  redis-server --port $port --bind 127.0.0.1 --save '' --dir "$T/r$port" "$@" >/dev/null & local pid=$!
  for _ in $(seq 50); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
  # A fixed count, sized to last about SECS seconds at this machine's ~100k/s.
  redis-benchmark -p $port -c 64 -n $((SECS * 100000)) -r 1000000000 -q SET 'key:__rand_int__' v NX EX 86400 \
    | tr '\r' '\n' | awk '/requests per second/ {for (i = 1; i <= NF; i++) if ($i == "requests") v = $(i-1)} END {print v}'
  kill $pid; wait $pid 2>/dev/null || true
}
UP=$(free_port)
./target/release/idem-bench upstream 127.0.0.1:$UP >/dev/null 2>&1 & PIDS+=($!)
for _ in $(seq 50); do (echo >/dev/tcp/127.0.0.1/$UP) 2>/dev/null && break; sleep 0.1; done

bench claims
# Every tool gets the warm-up idem-bench gives (2 s, not counted): the first seconds on an empty
# store are faster than the rest, and a measurement without them reads up to 1.5x higher.
start_idem
RUN=w$$ wrk -t2 -c64 -d2s -s bench/claim.lua "$IDEM" >/dev/null
out=$(RUN=x$$ wrk -t2 -c64 -d"${SECS}s" -s bench/claim.lua "$IDEM"); wrk_check "$out"; wrk_claims=$(rps "$out")
redis_mem=$(redis_rps --appendonly no)
redis_fsync=$(redis_rps --appendonly yes --appendfsync always)
psql "$PGURL" -qc "DROP TABLE IF EXISTS bench_claims; CREATE TABLE bench_claims (id text PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now());" 2>/dev/null
# Like idem-bench's anchor: a prepared statement, a short random key. (bench/pg_insert.sql, which
# bench/claims.sh runs in pgbench's default simple protocol, makes PostgreSQL parse and plan each one.)
printf '\\set k random(1, 1000000000000)\nINSERT INTO bench_claims (id) VALUES (:k) ON CONFLICT DO NOTHING;\n' > "$T/pg.sql"
pgbench "$PGURL" -n -M prepared -c 64 -j 2 -T 2 -f "$T/pg.sql" >/dev/null 2>&1
pg=$(pgbench "$PGURL" -n -M prepared -c 64 -j 2 -T "$SECS" -f "$T/pg.sql" 2>&1)
pg_tps=$(awk '/^tps/ {print $3}' <<<"$pg")
pg=$(pgbench "$PGURL" -n -c 64 -j 2 -T "$SECS" -f bench/pg_insert.sql 2>&1)
pg_simple=$(awk '/^tps/ {print $3}' <<<"$pg")
psql "$PGURL" -qc "DROP TABLE bench_claims;"
out=$(wrk -t2 -c64 -d"${SECS}s" -s bench/ok.lua "http://127.0.0.1:$UP"); wrk_check "$out"; wrk_ceiling=$(rps "$out")

bench claims-batch
printf '[limits]\nmax_body_bytes = 4194304\n' > "$T/batch.toml"
start_idem "$T/batch.toml"
RUN=v$$ wrk -t2 -c64 -d2s -s bench/batch.lua "$IDEM" >/dev/null
out=$(RUN=b$$ wrk -t2 -c64 -d"${SECS}s" -s bench/batch.lua "$IDEM"); wrk_check "$out"; wrk_batch=$(awk -v r="$(rps "$out")" 'BEGIN {print r * 500}')

bench gateway
GW=$(free_port)
printf '[gateway]\nlisten = "127.0.0.1:%s"\nupstream = "http://127.0.0.1:%s"\n[[gateway.routes]]\npath = "/orders"\nmethods = ["POST"]\nkey = "required"\n' $GW $UP > "$T/gw.toml"
start_idem "$T/gw.toml"
MODE=replay wrk -t2 -c64 -d2s -s bench/gateway.lua "http://127.0.0.1:$GW" >/dev/null
out=$(MODE=replay wrk -t2 -c64 -d"${SECS}s" -s bench/gateway.lua "http://127.0.0.1:$GW"); wrk_check "$out"; wrk_replay=$(rps "$out")
out=$(MODE=first RUN=f$$ wrk -t2 -c64 -d"${SECS}s" -s bench/gateway.lua "http://127.0.0.1:$GW"); wrk_check "$out"; wrk_first=$(rps "$out")
out=$(MODE=none wrk -t2 -c64 -d"${SECS}s" -s bench/gateway.lua "http://127.0.0.1:$UP"); wrk_direct=$(rps "$out")

echo
echo "machine: $(nproc) cores, $(free -g | awk '/Mem/ {print $2}') GiB; $(date -u +%FT%TZ); ${SECS}s per measurement, 64 connections"
python3 - "$T" <<PY
import json, sys
t = sys.argv[1]
rows = {}
for s in ("claims", "claims-batch", "gateway"):
    doc = json.load(open(f"{t}/{s}.json"))
    for table in doc["scenarios"]:
        for m in table["rows"] + table["anchors"]:
            rows.setdefault(m["name"], m["ops_per_sec"] * m["per_op"])
pairs = [
    ("idem single claims", "wrk", $wrk_claims),
    ("idem 500-item batches", "wrk (keys/s)", $wrk_batch),
    ('HTTP ceiling (axum "ok" server)', "wrk", $wrk_ceiling),
    ("upstream called directly", "wrk", $wrk_direct),
    ("idem gateway replays", "wrk", $wrk_replay),
    ("idem gateway first executions", "wrk", $wrk_first),
    ("redis SET NX EX (in memory)", "redis-benchmark", ${redis_mem:-0}),
    ("redis SET NX EX (appendfsync always)", "redis-benchmark", ${redis_fsync:-0}),
    ("postgres INSERT … ON CONFLICT DO NOTHING", "pgbench -M prepared", ${pg_tps:-0}),
    ("postgres INSERT … ON CONFLICT DO NOTHING", "pgbench (simple)", ${pg_simple:-0}),
]
print(f"{'measurement':<42} {'idem-bench':>11} {'tool':>19} {'tool figure':>12} {'tool / bench':>13}")
for name, tool, figure in pairs:
    bench = rows.get(name, 0.0)
    ratio = figure / bench if bench else float("nan")
    flag = "  (over 20 % apart)" if abs(ratio - 1) > 0.2 else ""
    print(f"{name:<42} {bench:>11.0f} {tool:>19} {figure:>12.0f} {ratio:>12.2f}x{flag}")
PY
