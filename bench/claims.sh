#!/usr/bin/env bash
# Claims throughput, idem beside PostgreSQL, in one run on this machine.
#
#   bench/claims.sh [seconds-per-scenario]
#
# Needs: wrk (apt-get install wrk), pgbench and a PostgreSQL at $PGURL (default: the local one).
# Every scenario uses 64 connections on 127.0.0.1. idem runs from a fresh data dir.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
PGURL=${PGURL:-postgres://postgres@127.0.0.1:5432/postgres}
PORT=${PORT:-7399}
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install -y wrk" >&2; exit 1; }

cargo build --release -q -p idem-server
DATA=$(mktemp -d)
trap 'kill $IDEM 2>/dev/null; wait $IDEM 2>/dev/null; rm -rf "$DATA"' EXIT
./target/release/idem serve --data-dir "$DATA" --listen 127.0.0.1:$PORT 2>"$DATA/log" &
IDEM=$!
for _ in $(seq 50); do curl -sf http://127.0.0.1:$PORT/readyz >/dev/null && break; sleep 0.1; done

run_wrk() { # name script [env...]
  local name=$1 script=$2; shift 2
  local out; out=$(env RUN="$name-$$" "$@" wrk -t2 -c64 -d"${SECS}s" --latency -s "bench/$script" "http://127.0.0.1:$PORT")
  local rps p50 p99
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out"); p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  if grep -q 'Non-2xx' <<<"$out"; then echo "!! $name: non-2xx answers: $(grep Non-2xx <<<"$out")" >&2; fi
  printf '%s %s %s %s\n' "$name" "$rps" "$p50" "$p99"
}

results=$(
  run_wrk single claim.lua
  run_wrk single-10pct-repeat claim.lua REPEAT=10
  run_wrk batch-500 batch.lua
)
rss=$(awk '/RssAnon/ {printf "%.0f MiB", $2/1024}' /proc/$IDEM/status)

psql "$PGURL" -qc "DROP TABLE IF EXISTS bench_claims; CREATE TABLE bench_claims (id text PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now());" 2>/dev/null
pg=$(pgbench "$PGURL" -n -c 64 -j 2 -T "$SECS" -f bench/pg_insert.sql 2>&1)
pg_tps=$(awk '/^tps/ {print $3}' <<<"$pg")
pg_lat=$(awk '/latency average/ {print $4}' <<<"$pg")
psql "$PGURL" -qc "DROP TABLE bench_claims;"

echo
echo "machine: $(nproc) cores, $(free -g | awk '/Mem/ {print $2}') GiB; $(date -u +%FT%TZ); ${SECS}s per scenario, 64 connections"
printf '%-22s %14s %10s %10s %12s\n' scenario "per second" p50 p99 "vs pg insert"
while read -r name rps p50 p99; do
  if [ "$name" = batch-500 ]; then
    keys=$(awk -v r="$rps" 'BEGIN {printf "%.0f", r * 500}')
    printf '%-22s %14s %10s %10s %11.2fx\n' "$name (keys)" "$keys" "$p50" "$p99" "$(awk -v a="$keys" -v b="$pg_tps" 'BEGIN {print a / b}')"
  else
    printf '%-22s %14.0f %10s %10s %11.2fx\n' "$name" "$rps" "$p50" "$p99" "$(awk -v a="$rps" -v b="$pg_tps" 'BEGIN {print a / b}')"
  fi
done <<<"$results"
printf '%-22s %14.0f %10s %10s %12s\n' "pg INSERT..ON CONFLICT" "$pg_tps" "${pg_lat}ms" "(avg)" "1.00x"
echo "idem memory (RssAnon, heap; the mapped database file is not counted): $rss"
