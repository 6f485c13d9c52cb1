#!/usr/bin/env bash
# Does idem slow down as claims pile up? Loads claims through 500-item batches and, at each
# stage (0, 1 million, 10 million stored claims by default), measures single durable claims and
# 500-key batch lookups of stored keys, 64 connections each.
#
#   bench/scale.sh [stages...]        e.g. bench/scale.sh 0 1000000 10000000
set -euo pipefail
cd "$(dirname "$0")/.."
STAGES=("${@:-0 1000000 10000000}")
[ $# -gt 0 ] || STAGES=(0 1000000 10000000)
SECS=${SECS:-8}
PORT=${PORT:-7398}
URL=http://127.0.0.1:$PORT
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install -y wrk" >&2; exit 1; }

cargo build --release -q -p idem-server
DATA=${DATA:-$(mktemp -d)}
trap 'kill $IDEM 2>/dev/null; wait $IDEM 2>/dev/null; rm -rf "$DATA"' EXIT
./target/release/idem serve --data-dir "$DATA" --listen 127.0.0.1:$PORT 2>"$DATA/log" &
IDEM=$!
for _ in $(seq 50); do curl -sf $URL/readyz >/dev/null && break; sleep 0.1; done

stored() { curl -s $URL/metrics | awk -F' ' '/^idem_claims_total\{namespace="bench",outcome="claimed"\}/ {print $2}' | head -1; }
chunk=0
first_maxc=""
printf '%-12s %18s %10s %10s %22s %10s\n' stored "claims/s" p50 p99 "lookup keys/s" p99
for target in "${STAGES[@]}"; do
  while [ "$(stored || echo 0)" -lt "$target" ] 2>/dev/null; do
    chunk=$((chunk + 1))
    out=$(RUN=load$chunk wrk -t2 -c64 -d20s -s bench/batch.lua $URL)
    [ -n "$first_maxc" ] || first_maxc=$(awk -F= '/^MAXC=/ {print $2}' <<<"$out")
  done
  # Let the checkpointer drain the WAL the load left behind: measure the stored size, not the load.
  sleep "${SETTLE:-15}"
  c=$(RUN=stage$target-$$ wrk -t2 -c64 -d${SECS}s --latency -s bench/claim.lua $URL)
  if [ -n "$first_maxc" ]; then
    l=$(RUN=load1 MAXC=$first_maxc wrk -t2 -c64 -d${SECS}s --latency -s bench/lookup.lua $URL)
    lk=$(awk '/Requests\/sec/ {printf "%.0f", $2 * 500}' <<<"$l"); lp99=$(awk '$1=="99%" {print $2}' <<<"$l")
  else
    lk="-"; lp99="-"
  fi
  printf '%-12s %18.0f %10s %10s %22s %10s\n' "$(stored)" "$(awk '/Requests\/sec/ {print $2}' <<<"$c")" \
    "$(awk '$1=="50%" {print $2}' <<<"$c")" "$(awk '$1=="99%" {print $2}' <<<"$c")" "$lk" "$lp99"
done
echo "data: $(du -sh "$DATA" | cut -f1); idem memory: $(awk '/RssAnon|RssFile/ {printf "%s %.0f MiB  ", $1, $2/1024}' /proc/$IDEM/status)"
echo "(RssFile is the database file mapped by each connection: shared page cache, not heap)"
