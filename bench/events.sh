#!/usr/bin/env bash
# Events, beside single claims of the same build, in one run: durable intake (64 connections) and
# end-to-end delivery to a fast local handler (accepted → completed).
#
#   bench/events.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
API=7412; UP=7411
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install -y wrk" >&2; exit 1; }
cargo build --release -q -p idem-server
cargo build --release -q -p idem-gateway --example bench_upstream
DATA=$(mktemp -d)
trap 'kill $IDEM $UPSTREAM 2>/dev/null; wait 2>/dev/null; rm -rf "$DATA"' EXIT
./target/release/examples/bench_upstream 127.0.0.1:$UP >/dev/null &
UPSTREAM=$!
cat > "$DATA/idem.toml" <<TOML
[[sources]]
name = "bench"
handler_url = "http://127.0.0.1:$UP/orders"
event_id = "/external_event_id"
signing_secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
concurrency = 64
TOML
./target/release/idem serve --config "$DATA/idem.toml" --data-dir "$DATA/d" --listen 127.0.0.1:$API 2>"$DATA/log" &
IDEM=$!
for _ in $(seq 50); do curl -sf http://127.0.0.1:$API/readyz >/dev/null && break; sleep 0.1; done
metric() { curl -s http://127.0.0.1:$API/metrics | awk -v m="$1" 'index($0, m) == 1 {print $2; exit}'; }

claims=$(RUN=c$$ wrk -t2 -c64 -d"${SECS}s" --latency -s bench/claim.lua http://127.0.0.1:$API)
start=$(date +%s.%N)
intake=$(RUN=e$$ wrk -t2 -c64 -d"${SECS}s" --latency -s bench/events.lua http://127.0.0.1:$API)
accepted=$(metric 'idem_events_intake_total{source="bench",outcome="accepted"}')
for _ in $(seq 600); do
  done_=$(metric 'idem_deliveries_total{source="bench",outcome="completed"}'); done_=${done_:-0}
  [ "${done_%.*}" -ge "${accepted%.*}" ] && break
  sleep 0.1
done
end=$(date +%s.%N)
claims_rps=$(awk '/Requests\/sec/ {print $2}' <<<"$claims")
intake_rps=$(awk '/Requests\/sec/ {print $2}' <<<"$intake")
delivered=$(awk -v n="$done_" -v a="$start" -v b="$end" 'BEGIN {printf "%.0f", n / (b - a)}')
echo
echo "machine: $(nproc) cores; $(date -u +%FT%TZ); ${SECS}s per scenario, 64 connections"
printf '%-34s %12s %10s %10s\n' scenario "per second" p50 p99
printf '%-34s %12.0f %10s %10s\n' "single claims (same build)" "$claims_rps" "$(awk '$1=="50%" {print $2}' <<<"$claims")" "$(awk '$1=="99%" {print $2}' <<<"$claims")"
printf '%-34s %12.0f %10s %10s   %.2fx claims\n' "event intake (durable, 202)" "$intake_rps" "$(awk '$1=="50%" {print $2}' <<<"$intake")" "$(awk '$1=="99%" {print $2}' <<<"$intake")" "$(awk -v a="$intake_rps" -v b="$claims_rps" 'BEGIN {print a / b}')"
printf '%-34s %12s\n' "delivery, accepted -> completed" "$delivered"
echo "events accepted: ${accepted%.*}; delivered and completed: ${done_%.*}"
