#!/usr/bin/env bash
# Claims on PostgreSQL through one idem node and through three, beside raw
# `INSERT … ON CONFLICT DO NOTHING` through pgbench, in one run. 64 connections in all.
#
#   PGURL=postgres://postgres@127.0.0.1:5432/postgres bench/postgres.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
PGURL=${PGURL:-postgres://postgres@127.0.0.1:5432/postgres}
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install -y wrk" >&2; exit 1; }
cargo build --release -q -p idem-server
SCHEMA=idem_bench_$$
psql "$PGURL" -qc "CREATE SCHEMA $SCHEMA"
URL="$PGURL?options=-c%20search_path%3D$SCHEMA"
DATA=$(mktemp -d)
PIDS=()
trap 'kill ${PIDS[@]} 2>/dev/null; wait 2>/dev/null; psql "$PGURL" -qc "DROP SCHEMA $SCHEMA CASCADE" 2>/dev/null; rm -rf "$DATA"' EXIT
# pgbench first: with three idem pools open too, 64 more clients would pass max_connections.
psql "$PGURL" -qc "DROP TABLE IF EXISTS bench_claims; CREATE TABLE bench_claims (id text PRIMARY KEY, created_at timestamptz NOT NULL DEFAULT now());" 2>/dev/null
pg=$(pgbench "$PGURL" -n -c 64 -j 2 -T "$SECS" -f bench/pg_insert.sql 2>&1 | awk '/^tps/ {printf "%.0f", $3}')
psql "$PGURL" -qc "DROP TABLE bench_claims"
./target/release/idem migrate --database-url "$URL" 2>/dev/null
for i in 0 1 2; do
  ./target/release/idem serve --store postgres --database-url "$URL" --data-dir "$DATA/$i" --listen 127.0.0.1:$((7420 + i)) 2>"$DATA/log$i" &
  PIDS+=($!)
done
for i in 0 1 2; do for _ in $(seq 50); do curl -sf http://127.0.0.1:$((7420 + i))/readyz >/dev/null && break; sleep 0.1; done; done
rps() { awk '/Requests\/sec/ {s += $2} END {printf "%.0f", s}'; }

one=$(RUN=one$$ wrk -t2 -c64 -d"${SECS}s" -s bench/claim.lua http://127.0.0.1:7420 | rps)
three=$( (for i in 0 1 2; do RUN=three$$-$i wrk -t1 -c21 -d"${SECS}s" -s bench/claim.lua http://127.0.0.1:$((7420 + i)) & done; wait) | rps)
batch=$(RUN=b$$ wrk -t2 -c64 -d"${SECS}s" -s bench/batch.lua http://127.0.0.1:7420 | rps)
echo
echo "machine: $(nproc) cores; $(date -u +%FT%TZ); ${SECS}s per scenario, 64 connections in all"
printf '%-40s %12s %14s\n' scenario "per second" "vs pgbench"
printf '%-40s %12s %13.2fx\n' "pgbench INSERT ... ON CONFLICT DO NOTHING" "$pg" 1
printf '%-40s %12s %13.2fx\n' "single claims, one node" "$one" "$(awk -v a="$one" -v b="$pg" 'BEGIN {print a / b}')"
printf '%-40s %12s %13.2fx\n' "single claims, three nodes" "$three" "$(awk -v a="$three" -v b="$pg" 'BEGIN {print a / b}')"
keys=$(awk -v r="$batch" 'BEGIN {printf "%.0f", r * 500}')
printf '%-40s %12s %13.2fx\n' "500-item batches, one node (keys)" "$keys" "$(awk -v a="$keys" -v b="$pg" 'BEGIN {print a / b}')"
