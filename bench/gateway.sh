#!/usr/bin/env bash
# The gateway beside its upstream, in one run: the upstream called directly, the replay path and
# the first-execution path through idem. 64 connections on 127.0.0.1.
#
#   bench/gateway.sh [seconds-per-scenario]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
API=7402; GW=7403; UP=7401
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install -y wrk" >&2; exit 1; }
cargo build --release -q -p idem-server
cargo build --release -q -p idem-gateway --example bench_upstream
DATA=$(mktemp -d)
trap 'kill $IDEM $UPSTREAM 2>/dev/null; wait 2>/dev/null; rm -rf "$DATA"' EXIT
./target/release/examples/bench_upstream 127.0.0.1:$UP >/dev/null &
UPSTREAM=$!
cat > "$DATA/idem.toml" <<TOML
[gateway]
listen = "127.0.0.1:$GW"
upstream = "http://127.0.0.1:$UP"
[[gateway.routes]]
path = "/orders"
methods = ["POST"]
key = "required"
TOML
./target/release/idem serve --config "$DATA/idem.toml" --data-dir "$DATA/d" --listen 127.0.0.1:$API 2>"$DATA/log" &
IDEM=$!
for _ in $(seq 50); do curl -sf http://127.0.0.1:$API/readyz >/dev/null && break; sleep 0.1; done

run_wrk() { # name url mode
  local out; out=$(MODE=$3 RUN="$1-$$" wrk -t2 -c64 -d"${SECS}s" --latency -s bench/gateway.lua "$2")
  if grep -q 'Non-2xx' <<<"$out"; then echo "!! $1: $(grep Non-2xx <<<"$out")" >&2; fi
  printf '%s %s %s %s\n' "$1" "$(awk '/Requests\/sec/ {print $2}' <<<"$out")" \
    "$(awk '$1=="50%" {print $2}' <<<"$out")" "$(awk '$1=="99%" {print $2}' <<<"$out")"
}
MODE=replay wrk -t2 -c64 -d2s -s bench/gateway.lua http://127.0.0.1:$GW >/dev/null   # complete the replay keys
results=$(
  run_wrk direct "http://127.0.0.1:$UP" none
  run_wrk replay "http://127.0.0.1:$GW" replay
  run_wrk first-execution "http://127.0.0.1:$GW" first
)
direct=$(awk '$1=="direct" {print $2}' <<<"$results")
echo
echo "machine: $(nproc) cores; $(date -u +%FT%TZ); ${SECS}s per scenario, 64 connections"
printf '%-18s %12s %10s %10s %12s\n' scenario "requests/s" p50 p99 "vs direct"
while read -r name rps p50 p99; do
  printf '%-18s %12.0f %10s %10s %11.2fx\n' "$name" "$rps" "$p50" "$p99" "$(awk -v a="$rps" -v b="$direct" 'BEGIN {print a / b}')"
done <<<"$results"
echo "idem memory (RssAnon): $(awk '/RssAnon/ {printf "%.0f MiB", $2/1024}' /proc/$IDEM/status)"
