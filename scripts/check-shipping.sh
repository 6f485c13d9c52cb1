#!/usr/bin/env bash
# Shipping (docs/install.md, contract §11): every artefact a team without Rust installs, each tested
# from the artefact rather than from the repository's folders.
#
#   versions              one version in every file scripts/versions.txt lists
#   release-tarball       scripts/release.sh's tarball and SHA256SUMS (sha256sum -c), the same bytes
#                         when packed twice, its contents, its idem --version; an idem from it
#                         serves the checks below
#   typescript-package    `npm pack`, installed into an empty project, claims against that idem
#   python-wheel          `pip wheel`, installed into a fresh venv, claims against that idem
#   go-module             the module as a tag clients/go/vX.Y.Z would serve it (a file GOPROXY made
#                         from the tracked files), required by an empty module that claims
#   container-image       deploy/container/build.sh, then the image run: healthy, 401 without a
#                         token, 201 with one, uid 10001, data in /data, a read-only root, a clean
#                         stop on SIGTERM, the data kept across a restart
#   container-on-postgres the image with IDEM_STORE__TYPE=postgres, on a database of its own in the
#                         test command's PostgreSQL (IDEM_TEST_DATABASE_URL; skipped without)
#   compose-file          deploy/container/compose.yaml against the compose schema (docker-compose
#                         config); validated, not run: no registry here to pull postgres from
#   kubernetes-manifests  scripts/check-manifests.py
#
# Prints `--- PASS: name` / `--- FAIL: name` / `--- SKIP: name (why)`, which scripts/test.sh counts,
# and each check's time. Exits 1 if any check failed.
#
# Needs: the idem binary the test command built (IDEM_TEST_BIN, default target/debug/idem: the
# release profile is not built a second time here), Python 3.11+, Node 18+ with npm, and
# kubernetes-validate (PyPI). Uses when present, and skips loudly without: go; podman and runc
# (Debian); docker-compose (Debian). .ci/run installs them. Podman runs with its own storage in a
# temporary directory (the vfs driver, runc, cgroupfs: what works on the machine idem is developed
# on; see docs/install.md), removed at the end with every container and image made here.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

BIN=$(realpath "${IDEM_TEST_BIN:-target/debug/idem}")
WORK=$(mktemp -d)
TOKEN=ship-$RANDOM$RANDOM
CLAIM='{"parts": ["container", "k1"]}'
FAILED=0
SERVER_PID=
STARTED=$SECONDS

say() { printf '    %s\n' "$*"; }
cleanup() {
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
    podman_cleanup
    rm -rf "$WORK"
}
trap cleanup EXIT

# Runs check function $1 as test $1, in a subshell, its output indented: PASS when it returns 0,
# else FAIL; a check that prints a `--- SKIP:` line of its own (and returns 0) is counted skipped.
run_check() {
    local name=$1 begun=$SECONDS
    # Without systemd, podman logs an error each time it would set up a health check's timer:
    # left out here (the health check is run by hand).
    ("$name") 2>&1 | grep --line-buffered -v 'unable to get systemd connection' | tee "$WORK/$name.out" |
        sed 's/^/    /; s/^    --- SKIP:/--- SKIP:/'
    local status=${PIPESTATUS[0]}
    if grep -q '^--- SKIP:' "$WORK/$name.out"; then
        return
    elif [ "$status" -eq 0 ]; then
        echo "--- PASS: $name ($((SECONDS - begun)) s)"
    else
        echo "--- FAIL: $name ($((SECONDS - begun)) s)"
        FAILED=1
    fi
}

# http EXPECTED METHOD URL [TOKEN [BODY]]: one request; fails unless the status is EXPECTED.
http() {
    python3 - "$@" <<'EOF'
import sys, urllib.request, urllib.error
expected, method, url = int(sys.argv[1]), sys.argv[2], sys.argv[3]
token = sys.argv[4] if len(sys.argv) > 4 else ""
body = sys.argv[5].encode() if len(sys.argv) > 5 else None
request = urllib.request.Request(url, data=body, method=method)
if token:
    request.add_header("Authorization", f"Bearer {token}")
if body is not None:
    request.add_header("Content-Type", "application/json")
try:
    status = urllib.request.urlopen(request, timeout=10).status
except urllib.error.HTTPError as e:
    status = e.code
print(f"{method} {url}{' (token)' if token else ''}: {status}")
sys.exit(0 if status == expected else 1)
EOF
}

VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
UNPACKED=$WORK/unpacked

release-tarball() {
    IDEM_BIN=$BIN DIST=$WORK/dist scripts/release.sh || return 1
    (cd "$WORK/dist" && sha256sum -c SHA256SUMS) || return 1
    # Packed twice, the same bytes: a small stand-in for the binary is enough to show it.
    printf '#!/bin/sh\necho "idem %s (commit 0000000, 2026-01-01)"\n' "$VERSION" > "$WORK/stand-in" &&
        chmod +x "$WORK/stand-in" || return 1
    for again in 1 2; do
        IDEM_BIN=$WORK/stand-in DIST=$WORK/again-$again scripts/release.sh 2>/dev/null || return 1
    done
    cmp -s "$WORK/again-1/SHA256SUMS" "$WORK/again-2/SHA256SUMS" ||
        { say "packing the same binary twice gave different bytes"; return 1; }
    say "packed twice: the same bytes"
    local name
    name=$(cd "$WORK/dist" && ls idem-*.tar.gz)
    [ "$name" = "idem-$VERSION-$(uname -m)-unknown-linux-gnu.tar.gz" ] || { say "unexpected name $name"; return 1; }
    mkdir -p "$UNPACKED" && tar -xzf "$WORK/dist/$name" -C "$UNPACKED" --strip-components=1 || return 1
    for f in idem LICENSE README.md CHANGELOG.md idem.example.toml deploy/container/Containerfile \
        deploy/container/build.sh deploy/container/compose.yaml deploy/kubernetes/embedded/statefulset.yaml \
        deploy/systemd/idem.service; do
        [ -e "$UNPACKED/$f" ] || { say "the tarball has no $f"; return 1; }
    done
    "$UNPACKED/idem" --version | grep -E "^idem $VERSION \(commit [0-9a-f]{7}, [0-9-]{10}\)$" || {
        say "the tarball's idem --version does not name a commit: $("$UNPACKED/idem" --version)"
        return 1
    }
}

# The idem the client checks talk to: the tarball's binary, with a token required.
start_idem() {
    local bin=$UNPACKED/idem
    [ -x "$bin" ] || bin=$BIN
    IDEM_AUTH__TOKENS="[\"$TOKEN\"]" "$bin" serve --listen 127.0.0.1:0 --data-dir "$WORK/idem-data" \
        2> "$WORK/idem.log" &
    SERVER_PID=$!
    for _ in $(seq 1 200); do
        IDEM=$(sed -n 's/.*idem listening addr=\([0-9.:]*\).*/http:\/\/\1/p' "$WORK/idem.log")
        [ -n "$IDEM" ] && break
        sleep 0.1
    done
    [ -n "$IDEM" ] || { cat "$WORK/idem.log"; echo "--- FAIL: start-idem"; FAILED=1; return 1; }
    export IDEM IDEM_TOKEN=$TOKEN
    echo "    idem for the client checks: $IDEM"
}

typescript-package() {
    (cd clients/typescript && npm pack --silent --pack-destination "$WORK") >/dev/null || return 1
    local tarball=$WORK/idem-client-$VERSION.tgz
    [ -f "$tarball" ] || { say "npm pack wrote no $tarball"; return 1; }
    say "$(tar -tzf "$tarball" | wc -l) files in $(basename "$tarball")"
    mkdir -p "$WORK/ts-app" && cd "$WORK/ts-app" || return 1
    npm init -y >/dev/null && npm install --no-audit --no-fund --loglevel=error "$tarball" || return 1
    cat > claim.mjs <<'EOF'
import { Idem } from "idem-client";
import { createRequire } from "node:module";
const where = createRequire(import.meta.url).resolve("idem-client");
if (!where.startsWith(process.cwd() + "/node_modules/")) throw new Error(`idem-client from ${where}`);
const idem = new Idem({ url: process.env.IDEM, token: process.env.IDEM_TOKEN });
const first = await idem.claims.claim("shipping", { parts: ["typescript", String(process.pid)] });
const again = await idem.claims.claim("shipping", { parts: ["typescript", String(process.pid)] });
if (!first.claimed || again.claimed) throw new Error(`claimed ${first.claimed}, then ${again.claimed}`);
console.log(`idem-client from ${where}: claimed, then a duplicate`);
EOF
    node claim.mjs
}

python-wheel() {
    python3 -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$WORK/wheels" ./clients/python || return 1
    local wheel=$WORK/wheels/idem_client-$VERSION-py3-none-any.whl
    [ -f "$wheel" ] || { say "no $wheel"; return 1; }
    python3 -c 'import sys, zipfile; sys.exit("idem_client/py.typed" not in zipfile.ZipFile(sys.argv[1]).namelist())' "$wheel" ||
        { say "the wheel has no idem_client/py.typed"; return 1; }
    python3 -m venv "$WORK/venv" && "$WORK/venv/bin/pip" install --quiet --disable-pip-version-check "$wheel" || return 1
    cd "$WORK" || return 1
    "$WORK/venv/bin/python" - <<'EOF'
import os, idem_client
where = idem_client.__file__
assert where.startswith(os.environ["WORK"] + "/venv/"), f"idem_client from {where}"
idem = idem_client.Idem(os.environ["IDEM"], token=os.environ["IDEM_TOKEN"])
first = idem.claims.claim("shipping", parts=["python", str(os.getpid())])
again = idem.claims.claim("shipping", parts=["python", str(os.getpid())])
assert first.claimed and not again.claimed, (first.claimed, again.claimed)
print(f"idem_client {idem_client.__version__} from {where}: claimed, then a duplicate")
EOF
}

go-module() {
    command -v go >/dev/null || { echo "--- SKIP: go-module (go is not installed; Debian: golang-go)"; return 0; }
    local module=github.com/idem-dev/idem/clients/go proxy=$WORK/goproxy
    local at=$proxy/$module/@v
    mkdir -p "$at" "$WORK/go-app" || return 1
    # What the module proxy serves for the tag clients/go/v$VERSION: the tracked files under
    # clients/go, in a zip whose paths start with module@version.
    git ls-files clients/go | python3 -c '
import sys, zipfile
module, version, out = sys.argv[1:4]
with zipfile.ZipFile(out, "w") as z:
    for path in sys.stdin.read().split():
        z.write(path, f"{module}@{version}/" + path.removeprefix("clients/go/"))
' "$module" "v$VERSION" "$at/v$VERSION.zip" || return 1
    cp clients/go/go.mod "$at/v$VERSION.mod"
    printf '{"Version":"v%s","Time":"2026-01-01T00:00:00Z"}\n' "$VERSION" > "$at/v$VERSION.info"
    echo "v$VERSION" > "$at/list"
    cd "$WORK/go-app" || return 1
    printf 'module shipcheck\n\ngo 1.19\n\nrequire %s v%s\n' "$module" "$VERSION" > go.mod
    cat > main.go <<'EOF'
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"

	idem "github.com/idem-dev/idem/clients/go"
)

func main() {
	c := idem.New(os.Getenv("IDEM"), idem.WithToken(os.Getenv("IDEM_TOKEN")))
	parts := idem.Parts("go", strconv.Itoa(os.Getpid()))
	first, err := c.Claims.Claim(context.Background(), "shipping", parts)
	if err != nil {
		panic(err)
	}
	again, err := c.Claims.Claim(context.Background(), "shipping", parts)
	if err != nil {
		panic(err)
	}
	if !first.Claimed || again.Claimed {
		panic(fmt.Sprintf("claimed %v, then %v", first.Claimed, again.Claimed))
	}
	fmt.Printf("the Go client %s from the module proxy: claimed, then a duplicate\n", idem.Version)
}
EOF
    GOPROXY=file://$proxy GOSUMDB=off GOFLAGS=-mod=mod GOTOOLCHAIN=local GOPATH=$WORK/gopath GOCACHE=$WORK/gocache \
        go run . || return 1
    GOPATH=$WORK/gopath go clean -modcache # read-only files otherwise
}

# Podman with storage of its own under $WORK: vfs, runc, cgroupfs, and the ulimits this machine's
# kernel and limits need (docs/install.md).
podman_setup() {
    mkdir -p "$WORK/podman"
    cat > "$WORK/podman/storage.conf" <<EOF
[storage]
driver = "vfs"
graphroot = "$WORK/podman/root"
runroot = "$WORK/podman/run"
EOF
    cat > "$WORK/podman/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
EOF
    export CONTAINERS_STORAGE_CONF=$WORK/podman/storage.conf CONTAINERS_CONF=$WORK/podman/containers.conf
}
podman_cleanup() {
    [ -f "$WORK/podman/storage.conf" ] || return 0
    podman rm -af -t 0 >/dev/null 2>&1
    podman volume prune -f >/dev/null 2>&1
    podman rmi -af >/dev/null 2>&1
}

# wait_listening CONTAINER [N]: until its log says "idem listening" N times (default 1: a restarted
# container's log goes on after the first run's), or it has stopped.
wait_listening() {
    for _ in $(seq 1 300); do
        [ "$(podman logs "$1" 2>&1 | grep -c 'idem listening')" -ge "${2:-1}" ] && return 0
        [ "$(podman inspect -f '{{.State.Running}}' "$1")" = true ] || break
        sleep 0.2
    done
    podman logs "$1" 2>&1 | tail -n 20
    return 1
}

container-image() {
    command -v podman >/dev/null && command -v runc >/dev/null || {
        echo "--- SKIP: container-image (podman or runc is not installed; Debian: apt-get install podman runc; .ci/run installs them)"
        return 0
    }
    local image=localhost/idem:$VERSION begun=$SECONDS
    IDEM_BIN=$UNPACKED/idem IDEM_IMAGE=$image deploy/container/build.sh >/dev/null || return 1
    say "deploy/container/build.sh: $((SECONDS - begun)) s"
    image_refuses_without_token "$image" && image_serves "$image" idem-ship && image_restarts idem-ship
    local ok=$?
    podman rm -f -t 0 idem-ship >/dev/null 2>&1
    return $ok
}

image_refuses_without_token() {
    local out
    out=$(podman run --rm --no-healthcheck "$1" 2>&1)
    [ $? -eq 2 ] && grep -q -- '--insecure-no-auth' <<< "$out" ||
        { say "without a token the image should refuse to start (exit 2), it said: $out"; return 1; }
    say "without a token: refuses to start, naming --insecure-no-auth"
}

# image_serves IMAGE CONTAINER: runs it with a read-only root, a token and the volume idem-ship-data
# on /data; healthy, 401 without the token, 201 with it, uid 10001, its files in the volume.
image_serves() {
    local ctr=$2 port
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    CLAIMS=http://127.0.0.1:$port/v1/claims/shipping
    podman run -d --name "$ctr" --read-only --health-interval disable -p "127.0.0.1:$port:7070" \
        -v idem-ship-data:/data -e "IDEM_AUTH__TOKENS=[\"$TOKEN\"]" "$1" >/dev/null || return 1
    wait_listening "$ctr" && podman exec "$ctr" idem health || return 1
    podman healthcheck run "$ctr" && [ "$(podman inspect -f '{{.State.Health.Status}}' "$ctr")" = healthy ] ||
        { say "the image's HEALTHCHECK is not healthy: $(podman inspect -f '{{json .State.Health}}' "$ctr")"; return 1; }
    say "podman healthcheck run (the image's HEALTHCHECK): healthy"
    http 401 POST "$CLAIMS" "" "$CLAIM" && http 201 POST "$CLAIMS" "$TOKEN" "$CLAIM" || return 1
    local pid uid data
    pid=$(podman inspect -f '{{.State.Pid}}' "$ctr")
    uid=$(awk '/^Uid:/ {print $2 " " $3 " " $4 " " $5}' "/proc/$pid/status")
    [ "$uid" = "10001 10001 10001 10001" ] || { say "idem runs as uid $uid, not 10001"; return 1; }
    say "idem runs as uid 10001 (real, effective, saved, filesystem)"
    data=$(podman volume inspect -f '{{.Mountpoint}}' idem-ship-data)
    [ -d "$data/log" ] && [ "$(stat -c %u "$data/log")" = 10001 ] ||
        { say "no log/ owned by 10001 in the /data volume: $(ls -ln "$data")"; return 1; }
    say "the /data volume holds $(ls "$data" | tr '\n' ' ')(owned by 10001)"
}

# image_restarts CONTAINER: SIGTERM stops it cleanly; started again, the claim is still there.
image_restarts() {
    local begun=$SECONDS
    podman stop -t 45 "$1" >/dev/null || return 1
    [ "$(podman inspect -f '{{.State.ExitCode}}' "$1")" = 0 ] && grep -q 'idem stopped' <<< "$(podman logs "$1" 2>&1)" ||
        { say "SIGTERM did not stop idem cleanly: $(podman logs "$1" 2>&1 | tail -n 3)"; return 1; }
    say "podman stop (SIGTERM): exit 0, 'idem stopped', $((SECONDS - begun)) s"
    podman start "$1" >/dev/null && wait_listening "$1" 2 || return 1
    http 200 POST "$CLAIMS" "$TOKEN" "$CLAIM" || return 1
    say "after a restart the claim is still there (200, a duplicate)"
}

# The image in PostgreSQL mode, as compose.yaml and the Kubernetes Deployment run it, on a database
# of its own in the test command's PostgreSQL (skipped without one).
container-on-postgres() {
    local image=localhost/idem:$VERSION url=${IDEM_TEST_DATABASE_URL:-}
    if ! podman image exists "$image" 2>/dev/null; then
        echo "--- SKIP: container-on-postgres (no image: see container-image)"
        return 0
    elif [ -z "$url" ] || ! command -v psql >/dev/null; then
        echo "--- SKIP: container-on-postgres (no IDEM_TEST_DATABASE_URL, or no psql)"
        return 0
    fi
    local db=idem_ship_$$ port
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    psql "$url" -qc "CREATE DATABASE $db" || return 1
    local ok=0
    podman run -d --name idem-ship-pg --network host -e "IDEM_LISTEN=127.0.0.1:$port" -e IDEM_STORE__TYPE=postgres \
        -e "IDEM_STORE__URL=${url%/*}/$db" -e "IDEM_AUTH__TOKENS=[\"$TOKEN\"]" --health-interval disable "$image" >/dev/null &&
        wait_listening idem-ship-pg &&
        http 201 POST "http://127.0.0.1:$port/v1/claims/shipping" "$TOKEN" '{"key": "postgres"}' &&
        http 200 POST "http://127.0.0.1:$port/v1/claims/shipping" "$TOKEN" '{"key": "postgres"}' || ok=1
    # The whole log first, then grep: `podman logs | grep -q` under pipefail fails when grep leaves
    # early and podman gets SIGPIPE (#43: it failed a newcomer's run).
    grep -q 'store="postgres"' <<< "$(podman logs idem-ship-pg 2>&1)" || ok=1
    podman rm -f -t 0 idem-ship-pg >/dev/null
    psql "$url" -qc "DROP DATABASE $db" || ok=1
    [ $ok = 0 ] && say "on PostgreSQL (IDEM_STORE__TYPE=postgres, migrated at start): 201, then 200"
    return $ok
}

compose-file() {
    command -v docker-compose >/dev/null || {
        echo "--- SKIP: compose-file (docker-compose is not installed; Debian: docker-compose; .ci/run installs it)"
        return 0
    }
    IDEM_TOKEN=t docker-compose -f deploy/container/compose.yaml config -q || return 1
    say "docker-compose $(docker-compose version --short) config: valid"
    if env -u IDEM_TOKEN docker-compose -f deploy/container/compose.yaml config -q 2>/dev/null; then
        say "without IDEM_TOKEN it should refuse"
        return 1
    fi
    say "without IDEM_TOKEN: refused"
}

export WORK
python3 scripts/check-versions.py || FAILED=1
run_check release-tarball
if start_idem; then
    run_check typescript-package
    run_check python-wheel
    run_check go-module
fi
command -v podman >/dev/null && podman_setup
run_check container-image
run_check container-on-postgres
run_check compose-file
python3 scripts/check-manifests.py || FAILED=1
echo "check-shipping.sh: $((SECONDS - STARTED)) s"
exit $FAILED
