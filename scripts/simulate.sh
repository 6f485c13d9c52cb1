#!/usr/bin/env bash
# The request-lifecycle simulation (crates/idem-sim, docs/testing.md#the-request-lifecycle-simulation):
# builds it in release and runs seeds. Every argument goes to idem-sim:
#
#   scripts/simulate.sh --seeds 1000000 [--first N] [--keep-going]   # many seeds; stops at the first failure
#   scripts/simulate.sh --seed 4711 --trace                          # one seed again, every event
#   scripts/simulate.sh --seeds 3000 --clock wall                    # leases on the wall clock: caught
#   scripts/simulate.sh --mutant lease-from-answer --seeds 20000     # a past fix reverted: caught
#
# A failing seed prints its violations and the one command that replays it. Runs on as many cores as
# it is given with --jobs N (each job a range of seeds).
set -euo pipefail
cd "$(dirname "$0")/.."

mutant=""
jobs=1
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --mutant) mutant="$2"; shift 2 ;;
        --jobs) jobs="$2"; shift 2 ;;
        *) args+=("$1"); shift ;;
    esac
done

root=$PWD
bin=target/release/idem-sim
if [ -n "$mutant" ]; then
    patch="crates/idem-sim/mutants/$mutant.patch"
    [ -f "$patch" ] || { echo "simulate: no mutant $mutant (crates/idem-sim/mutants/*.patch)" >&2; exit 2; }
    tree=$(mktemp -d)
    trap 'rm -rf "$tree"' EXIT
    git archive HEAD | tar -x -C "$tree"
    (cd "$tree" && patch -p1 -s < "$root/$patch")
    echo "simulate: mutant $mutant applied in $tree" >&2
    (cd "$tree" && CARGO_TARGET_DIR="$root/target/mutants" cargo build --release -q -p idem-sim)
    bin="$root/target/mutants/release/idem-sim"
else
    cargo build --release -q -p idem-sim
fi

if [ "$jobs" -le 1 ]; then
    exec "$bin" "${args[@]}"
fi

# --jobs N: split --seeds over N processes.
seeds=1000 first=0 rest=()
set -- "${args[@]}"
while [ $# -gt 0 ]; do
    case "$1" in
        --seeds) seeds="$2"; shift 2 ;;
        --first) first="$2"; shift 2 ;;
        *) rest+=("$1"); shift ;;
    esac
done
share=$(( (seeds + jobs - 1) / jobs ))
status=0
pids=()
for j in $(seq 0 $((jobs - 1))); do
    from=$(( first + j * share ))
    count=$(( share < seeds - j * share ? share : seeds - j * share ))
    [ "$count" -gt 0 ] || continue
    "$bin" --first "$from" --seeds "$count" "${rest[@]}" &
    pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
exit $status
