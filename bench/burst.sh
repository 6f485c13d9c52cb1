#!/usr/bin/env bash
# Events on PostgreSQL after the queue was analyzed while empty (issue #42): a burst of events is
# delivered to a handler that answers 200 at once, the queue drains, `ANALYZE jobs` runs on the
# empty table (what autovacuum does to any queue that drains), and a second burst follows. Each
# burst is timed from its first event sent to its last event received by the handler; a burst
# that takes longer than the time limit is reported with how many it delivered, and how many
# jobs sat leased. Each run has a database of its own, dropped afterwards.
#
#   PGURL=postgres://postgres@127.0.0.1:5432/postgres bench/burst.sh [events] [nodes] [limit s]
#
# IDEM=path/to/idem runs that binary instead of building this tree's; KEEP=1 keeps the nodes' logs.
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS=${1:-3000}; NODES=${2:-1}; LIMIT=${3:-120}
PGURL=${PGURL:-postgres://postgres@127.0.0.1:5432/postgres}
API=7430; UP=7429
if [ -z "${IDEM:-}" ]; then cargo build --release -q -p idem-server; IDEM=./target/release/idem; fi
DB=idem_burst_$$
URL="${PGURL%/*}/$DB"
DATA=$(mktemp -d)
PIDS=()
cleanup() {
  kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true
  psql "$PGURL" -qc "DROP DATABASE IF EXISTS $DB WITH (FORCE)" 2>/dev/null || true
  if [ -n "${KEEP:-}" ]; then echo "the nodes' logs: $DATA/log*"; else rm -rf "$DATA"; fi
}
trap cleanup EXIT
psql "$PGURL" -qc "CREATE DATABASE $DB"
"$IDEM" migrate --database-url "$URL" >/dev/null

# The handler: 200 at once, HTTP/1.1 kept alive; GET /count says how many distinct events it got.
cat > "$DATA/handler.py" <<'PY'
import http.server, sys, threading
seen, lock = set(), threading.Lock()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        with lock:
            seen.add(self.headers.get("webhook-id"))
        self.send_response(200); self.send_header("content-length", "0"); self.end_headers()
    def do_GET(self):
        with lock:
            body = str(len(seen)).encode()
        self.send_response(200); self.send_header("content-length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
# The sender: `events` events, ids prefixed by `run`, over 16 kept-alive connections spread over
# the nodes; exits non-zero unless every one was accepted (202).
cat > "$DATA/send.py" <<'PY'
import http.client, sys, threading
run, events, ports = sys.argv[1], int(sys.argv[2]), [int(p) for p in sys.argv[3:]]
failed = []
def send(worker):
    conn = http.client.HTTPConnection("127.0.0.1", ports[worker % len(ports)])
    for n in range(worker, events, 16):
        body = '{"external_event_id":"%s-%d","amount":42}' % (run, n)
        conn.request("POST", "/v1/sources/burst/events", body, {"content-type": "application/json"})
        reply = conn.getresponse(); reply.read()
        if reply.status != 202:
            failed.append(reply.status)
threads = [threading.Thread(target=send, args=(w,)) for w in range(16)]
[t.start() for t in threads]; [t.join() for t in threads]
sys.exit(f"{len(failed)} events not accepted: {failed[:5]}" if failed else 0)
PY
python3 "$DATA/handler.py" $UP &
PIDS+=($!)
cat > "$DATA/idem.toml" <<TOML
[[sources]]
name = "burst"
handler_url = "http://127.0.0.1:$UP/events"
event_id = "/external_event_id"
signing_secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
TOML
PORTS=()
for i in $(seq 0 $((NODES - 1))); do
  "$IDEM" serve --config "$DATA/idem.toml" --store postgres --database-url "$URL" --data-dir "$DATA/$i" \
    --listen 127.0.0.1:$((API + i)) 2>"$DATA/log$i" &
  PIDS+=($!); PORTS+=($((API + i)))
done
for p in "${PORTS[@]}" $UP; do
  for _ in $(seq 100); do curl -so /dev/null "http://127.0.0.1:$p/readyz" && break; sleep 0.1; done
done
count() { curl -s http://127.0.0.1:$UP/count; }
sql() { psql "$URL" -Atqc "$1"; }

# One burst: its events sent, then the handler polled until it has them all or the limit passes.
burst() {
  local run=$1 before start sent now got
  before=$(count); start=$(date +%s.%N)
  python3 "$DATA/send.py" "$run" "$EVENTS" "${PORTS[@]}"
  sent=$(date +%s.%N)
  while :; do
    got=$(( $(count) - before )); now=$(date +%s.%N)
    if [ "$got" -ge "$EVENTS" ]; then
      printf '%-34s %6d of %d delivered in %6.1f s (sent in %.1f s)\n' "$2" "$got" "$EVENTS" \
        "$(awk -v a="$start" -v b="$now" 'BEGIN {print b - a}')" "$(awk -v a="$start" -v b="$sent" 'BEGIN {print b - a}')"
      return
    fi
    if awk -v a="$start" -v b="$now" -v l="$LIMIT" 'BEGIN {exit !(b - a > l)}'; then
      printf '%-34s %6d of %d delivered after %d s; %s jobs leased and not done\n' "$2" "$got" "$EVENTS" "$LIMIT" \
        "$(sql "SELECT count(*) FROM jobs WHERE lease_until IS NOT NULL")"
      return
    fi
    sleep 0.05
  done
}

echo "machine: $(nproc) cores; $(date -u +%FT%TZ); $EVENTS events per burst, $NODES node(s); $("$IDEM" --version)"
burst a "first burst"
for _ in $(seq 600); do [ "$(sql "SELECT count(*) FROM jobs")" = 0 ] && break; sleep 0.1; done
sql "ANALYZE jobs"
echo "jobs drained and analyzed: $(sql "SELECT relpages || ' pages, ' || reltuples || ' rows' FROM pg_class WHERE relname = 'jobs'")"
burst b "after ANALYZE of the empty queue"
