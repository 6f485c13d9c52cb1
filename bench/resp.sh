#!/usr/bin/env bash
# idem's Redis protocol beside Redis with `appendfsync always` (every write on disk before its
# reply, as idem's), on Redis's own benchmark tool, in one run on this machine (#41).
#
#   bench/resp.sh [requests] [rounds]       # default 200000 requests, 2 rounds
#
# Each round runs, alternately for idem and Redis, `redis-benchmark -c 50 -n N -r 1000000`
# with `SET key:__rand_int__ v NX EX 3600`, unpipelined (-P 1) and 16 deep (-P 16). idem runs on
# the embedded store from a fresh data dir, or with DATABASE_URL=postgres://… on that PostgreSQL
# (`idem migrate` first; its claims stay there, in namespace `redis`); Redis (redis-server, Debian's
# redis) from a fresh dir with `appendonly yes`, `appendfsync always`, no RDB snapshots. Prints
# requests/s and the ratio. COMMAND='SET key:__rand_int__ v EX 3600' times another command (here a
# plain SET, which replaces: one store update each, not grouped with its neighbours).
# Needs: redis-server and redis-benchmark (Debian: redis-server, redis-tools).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200000}; ROUNDS=${2:-2}
read -r -a COMMAND <<<"${COMMAND:-SET key:__rand_int__ v NX EX 3600}"
for tool in redis-server redis-benchmark redis-cli; do
  command -v $tool >/dev/null || { echo "$tool is needed (Debian: redis-server, redis-tools)" >&2; exit 1; }
done
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

cargo build --release -q -p idem-server
DIR=$(mktemp -d)
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null; wait "${PIDS[@]}" 2>/dev/null; rm -rf "$DIR"' EXIT

API=$(free_port); IDEM_PORT=$(free_port); REDIS_PORT=$(free_port)
printf 'listen = "127.0.0.1:%s"\ndata_dir = "%s/idem"\n[resp]\nlisten = "127.0.0.1:%s"\n' "$API" "$DIR" "$IDEM_PORT" >"$DIR/idem.toml"
STORE="the embedded store"
if [ -n "${DATABASE_URL:-}" ]; then
  ./target/release/idem migrate --database-url "$DATABASE_URL" >/dev/null
  printf '[store]\ntype = "postgres"\nurl = "%s"\n' "$DATABASE_URL" >>"$DIR/idem.toml"
  STORE="PostgreSQL"
fi
./target/release/idem serve --config "$DIR/idem.toml" 2>"$DIR/idem.log" &
PIDS+=($!)
mkdir -p "$DIR/redis"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$DIR/redis" --appendonly yes --appendfsync always \
  --save '' --daemonize no --logfile "$DIR/redis.log" &
PIDS+=($!)
for port in $IDEM_PORT $REDIS_PORT; do
  for _ in $(seq 100); do redis-cli -p "$port" PING >/dev/null 2>&1 && break; sleep 0.1; done
done

# requests/s of one redis-benchmark run against $1 with pipeline depth $2.
rate() {
  redis-benchmark -p "$1" -c 50 -n "$N" -r 1000000 -P "$2" -q "${COMMAND[@]}" |
    tr '\r' '\n' | awk '/requests per second/ {for (i = 1; i <= NF; i++) if ($i == "requests") v = $(i - 1)} END {print v}'
}

echo "redis-benchmark -c 50 -n $N -r 1000000, ${COMMAND[*]}; idem on $STORE; $(date -u +'%F %H:%M UTC'); $(nproc) CPUs"
printf '%-6s %-5s %14s %14s %8s\n' round depth "idem req/s" "redis req/s" ratio
for round in $(seq "$ROUNDS"); do
  for depth in 1 16; do
    idem=$(rate "$IDEM_PORT" "$depth"); redis=$(rate "$REDIS_PORT" "$depth")
    printf '%-6s %-5s %14s %14s %7.2fx\n' "$round" "-P $depth" "$idem" "$redis" "$(python3 -c "print($idem / $redis)")"
  done
done
