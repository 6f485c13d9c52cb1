#!/usr/bin/env bash
# What PostgreSQL does per idem operation, counted (not timed): statements, commits, WAL bytes,
# WAL fsyncs and rows changed per claim, batch key, gateway request, operation and event, beside
# PostgreSQL's own prepared `INSERT … ON CONFLICT DO NOTHING` (the floor). Issue #44.
#
#   bench/pgcost.sh                    # as root: a private PostgreSQL 15 cluster, dropped afterwards
#   N=5000 NODES=2 VERBOSE=1 bench/pgcost.sh
#
# N operations of each kind (default 20000) over CLIENTS kept-alive connections (default 32).
# NODES=2 starts a second idem node, and gateway replays are also sent to the node that did not
# execute them. VERBOSE=1 adds each kind's top statements from pg_stat_statements and its WAL by
# record type (pg_waldump --stats=record). ONLY=claim,batch runs some kinds only (idle, claim,
# batch, gateway, operation, events, floor). IDEM=path runs that binary instead of building this tree's; KEEP=1 keeps the nodes' logs; PGCOST_SETTLE=11 is how
# long each kind waits for PostgreSQL's counters (docs/performance.md says why 11 s).
#
# The cluster (`pg_createcluster 15 pgcost_<pid>` on a free port in 5480–5499; the machine's own
# clusters are left alone) has pg_stat_statements loaded and tracking every statement, autovacuum
# off and no checkpoint due within the run (each kind starts from a VACUUM ANALYZE), so that what
# is counted is the operations' own doing. docs/performance.md says what each column is.
set -euo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
N=${N:-20000}; NODES=${NODES:-1}; CLIENTS=${CLIENTS:-32}
[ "$(id -u)" = 0 ] || { echo "bench/pgcost.sh runs as root (pg_createcluster, and psql as postgres)" >&2; exit 1; }
for tool in pg_createcluster pg_ctlcluster pg_dropcluster psql pgbench runuser curl python3; do
  command -v $tool >/dev/null || { echo "$tool is needed (Debian: postgresql-15, postgresql-client-15, curl, python3)" >&2; exit 1; }
done
[ -d /usr/lib/postgresql/15 ] || { echo "PostgreSQL 15 is needed (Debian: postgresql-15)" >&2; exit 1; }
if [ -z "${IDEM:-}" ]; then cargo build --release -q -p idem-server; IDEM=./target/release/idem; fi

# Something listening on 127.0.0.1:$1?
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# PORT := a port in [$1, $2] that nothing listens on, no PostgreSQL cluster is configured for
# and this script has not taken already (not in a subshell: USED must outlive the call).
USED=" "
free_port() {
  local p taken
  taken=" $(pg_lsclusters -h | awk '{print $3}' | tr '\n' ' ') "
  for p in $(seq "$1" "$2"); do
    case "$taken$USED" in *" $p "*) continue ;; esac
    if ! listening "$p"; then USED="$USED$p "; PORT=$p; return; fi
  done
  echo "no free port in $1-$2" >&2; exit 1
}
free_port 5480 5499; PGPORT=$PORT
CLUSTER=pgcost_$$
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  local rc=$?
  [ ${#PIDS[@]} -gt 0 ] && { kill "${PIDS[@]}" 2>/dev/null || true; wait "${PIDS[@]}" 2>/dev/null || true; }
  if pg_lsclusters -h 2>/dev/null | awk '{print $1, $2}' | grep -qx "15 $CLUSTER"; then
    pg_dropcluster --stop 15 "$CLUSTER" || echo "could not drop cluster 15/$CLUSTER: pg_dropcluster --stop 15 $CLUSTER" >&2
  fi
  if [ -n "${KEEP:-}" ]; then echo "the nodes' logs: $TMP/log*" >&2; else rm -rf "$TMP"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The cluster: local connections as postgres by peer, TCP by password (scram), on localhost only
# (Debian's default); its settings are written by pg_createcluster, so pg_dropcluster removes them.
pg_createcluster 15 "$CLUSTER" -p "$PGPORT" \
  -o shared_preload_libraries=pg_stat_statements -o pg_stat_statements.track=all \
  -o autovacuum=off -o checkpoint_timeout=1h -o max_wal_size=8GB >/dev/null
pg_ctlcluster 15 "$CLUSTER" start
PSQL="runuser -u postgres -- psql -h /var/run/postgresql -p $PGPORT"
PW=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
$PSQL -X -q -v ON_ERROR_STOP=1 -d postgres <<SQL
CREATE ROLE idem LOGIN PASSWORD '$PW';
CREATE DATABASE idem OWNER idem;
CREATE EXTENSION pg_stat_statements;
\c idem
CREATE EXTENSION pg_stat_statements;
SQL
URL="postgres://idem:$PW@127.0.0.1:$PGPORT/idem"
"$IDEM" migrate --database-url "$URL" >/dev/null

# The upstream (201 at once) and the event handler (200 at once), one process.
free_port 7460 7499; HANDLER=$PORT
python3 bench/pgcost.py serve "$HANDLER" &
PIDS+=($!)
cat > "$TMP/idem.toml" <<TOML
[gateway]
upstream = "http://127.0.0.1:$HANDLER"

[[gateway.routes]]
path = "/orders"
methods = ["POST"]
key = "required"

[[sources]]
name = "pgcost"
handler_url = "http://127.0.0.1:$HANDLER/events"
event_id = "/external_event_id"
signing_secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
TOML
API=(); GW=()
for i in $(seq 0 $((NODES - 1))); do
  free_port 7460 7499; a=$PORT; free_port 7460 7499; g=$PORT
  API+=("$a"); GW+=("$g")
  IDEM_STORE__TYPE=postgres IDEM_STORE__URL="$URL" IDEM_LISTEN="127.0.0.1:$a" \
    IDEM_GATEWAY__LISTEN="127.0.0.1:$g" IDEM_DATA_DIR="$TMP/node$i" IDEM_SWEEPER__INTERVAL=1h \
    "$IDEM" serve --config "$TMP/idem.toml" 2>"$TMP/log$i" &
  PIDS+=($!)
done
for p in "${API[@]}"; do
  for _ in $(seq 100); do curl -sf -o /dev/null "http://127.0.0.1:$p/readyz" && break; sleep 0.1; done
  curl -sf -o /dev/null "http://127.0.0.1:$p/readyz" || { echo "idem on port $p did not start:" >&2; cat "$TMP"/log* >&2; exit 1; }
done
for _ in $(seq 50); do listening "$HANDLER" && break; sleep 0.1; done

COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$(git status --porcelain -- crates 2>/dev/null)" ] && COMMIT="$COMMIT + uncommitted changes in crates/"
VERSION=$($PSQL -X -Atc 'SHOW server_version' -d postgres)
HEADER="PostgreSQL $VERSION (a private cluster: autovacuum off, no checkpoint within the run); N=$N per kind, \
$CLIENTS clients, $NODES node(s); $(date -u +'%F %H:%M UTC'); commit $COMMIT; $("$IDEM" --version)"

echo "counting, $N operations per kind, on cluster 15/$CLUSTER (port $PGPORT)" >&2
PGCOST_PSQL="$PSQL" PGCOST_CONTROL=postgres PGCOST_IDEMDB=idem PGCOST_ROLE=idem \
PGCOST_N="$N" PGCOST_CLIENTS="$CLIENTS" PGCOST_API="${API[*]}" PGCOST_GATEWAY="${GW[*]}" \
PGCOST_HANDLER="$HANDLER" PGCOST_PGBENCH=1 \
PGCOST_WALDUMP="${VERBOSE:+runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_waldump -p /var/lib/postgresql/15/$CLUSTER/pg_wal}" PGCOST_TMP="$TMP" PGCOST_HEADER="$HEADER" \
PGCOST_IDEM_DSN="host=127.0.0.1 port=$PGPORT user=idem dbname=idem" PGPASSWORD="$PW" \
  python3 bench/pgcost.py run
echo
echo "(the run took $(( $(date +%s) - START )) s)"
