#!/usr/bin/env bash
# Shipping (docs/install.md, contract §11): every artefact a team without Rust installs, each tested
# from the artefact rather than from the repository's folders.
#
#   versions              one version in every file scripts/versions.txt lists
#   release-tarball       scripts/release.sh: -h/--help print the usage and build nothing; its
#                         tarball, SBOM and SHA256SUMS (sha256sum -c), the same bytes when packed
#                         twice, its contents, its idem --version, a README with no Rust toolchain
#                         in it, and every relative link of its Markdown resolving inside it; an
#                         idem from it serves the checks below
#   release-signature     SHA256SUMS signed with a throwaway minisign key (minisign -G -W) verifies
#                         with minisign -V, and a changed SHA256SUMS or another public key does not;
#                         a password-protected key signs, a wrong password fails (skipped without
#                         minisign; Debian: minisign)
#   release-sbom          the CycloneDX SBOM: valid against the 1.5 schema (cyclonedx-python-lib
#                         from PyPI, in a venv), a component for each crate cargo tree says the
#                         binary is built from, with Cargo.lock's versions and checksums
#   typescript-package    `npm pack`, installed into an empty project, claims against that idem
#   python-wheel          `pip wheel`, installed into a fresh venv, claims against that idem
#   go-module             the module as a tag clients/go/vX.Y.Z would serve it (a file GOPROXY made
#                         from the tracked files), required by an empty module that claims
#   container-image       deploy/container/build.sh, then the image: its OCI version and revision
#                         labels; run: healthy, 401 without a token, 201 with one, uid 10001, data
#                         in /data, a read-only root, a clean stop on SIGTERM, the data kept across a
#                         restart
#   container-on-postgres the image with IDEM_STORE__TYPE=postgres, on a database of its own in the
#                         test command's PostgreSQL (IDEM_TEST_DATABASE_URL; skipped without)
#   compose-file          deploy/container/compose.yaml against the compose schema (docker-compose
#                         config), its variables' defaults and overrides; validated, not run: no
#                         registry here to pull postgres from
#   kubernetes-manifests  scripts/check-manifests.py
#
# Prints `--- PASS: name` / `--- FAIL: name` / `--- SKIP: name (why)`, which scripts/test.sh counts,
# and each check's time. Exits 1 if any check failed.
#
# Needs: the idem binary the test command built (IDEM_TEST_BIN, default target/debug/idem: the
# release profile is not built a second time here), Python 3.11+, Node 18+ with npm,
# kubernetes-validate and cyclonedx-python-lib (PyPI). Uses when present, and skips loudly without:
# minisign (Debian); go; podman and runc (Debian); docker-compose (Debian). .ci/run installs them.
# Podman runs with its own storage in a temporary directory (the vfs driver, runc, cgroupfs: what
# works on the machine idem is developed on; see docs/install.md), removed at the end with every
# container and image made here.
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
    release_help || return 1
    # Signed with a throwaway key when minisign is here (release-signature checks the signature).
    local sign=()
    if command -v minisign >/dev/null; then
        mkdir -p "$WORK/keys" &&
            minisign -G -W -p "$WORK/keys/idem.pub" -s "$WORK/keys/idem.key" >/dev/null || return 1
        sign=(IDEM_RELEASE_MINISIGN_KEY="$WORK/keys/idem.key" IDEM_RELEASE_MINISIGN_PUB="$WORK/keys/idem.pub")
    fi
    env "${sign[@]}" IDEM_BIN="$BIN" DIST="$WORK/dist" scripts/release.sh || return 1
    (cd "$WORK/dist" && sha256sum -c SHA256SUMS) || return 1
    # Packed twice, the same bytes: a small stand-in for the binary is enough to show it.
    printf '#!/bin/sh\necho "idem %s (commit 0000000, 2026-01-01)"\n' "$VERSION" > "$WORK/stand-in" &&
        chmod +x "$WORK/stand-in" || return 1
    for again in 1 2; do
        env "${sign[@]}" IDEM_BIN="$WORK/stand-in" DIST="$WORK/again-$again" scripts/release.sh 2>/dev/null || return 1
    done
    for f in SHA256SUMS ${sign:+SHA256SUMS.minisig}; do
        cmp -s "$WORK/again-1/$f" "$WORK/again-2/$f" ||
            { say "packing the same binary twice gave a different $f"; return 1; }
    done
    say "packed twice: the same bytes (the tarball, the SBOM${sign:+, the signature})"
    local name
    name=$(cd "$WORK/dist" && ls idem-*.tar.gz)
    [ "$name" = "idem-$VERSION-$(uname -m)-unknown-linux-gnu.tar.gz" ] || { say "unexpected name $name"; return 1; }
    mkdir -p "$UNPACKED" && tar -xzf "$WORK/dist/$name" -C "$UNPACKED" --strip-components=1 || return 1
    for f in idem LICENSE README.md CHANGELOG.md idem.example.toml deploy/container/Containerfile \
        deploy/container/build.sh deploy/container/compose.yaml deploy/kubernetes/embedded/statefulset.yaml \
        deploy/systemd/idem.service docs/README.md docs/install.md docs/reference/config.md \
        docs/screenshots/overview.png examples/orders/idem.toml examples/support.py; do
        [ -e "$UNPACKED/$f" ] || { say "the tarball has no $f"; return 1; }
    done
    "$UNPACKED/idem" --version | grep -E "^idem $VERSION \(commit [0-9a-f]{7}, [0-9-]{10}\)$" || {
        say "the tarball's idem --version does not name a commit: $("$UNPACKED/idem" --version)"
        return 1
    }
    # Its README starts from the binary in hand; nothing in it or the unit asks for a Rust toolchain.
    grep -q '^\./idem serve' "$UNPACKED/README.md" && grep -q '^## A five-minute tour' "$UNPACKED/README.md" ||
        { say "the tarball's README has no './idem serve' first step or no tour"; return 1; }
    if grep -n -i -E 'cargo|rust toolchain' "$UNPACKED/README.md" "$UNPACKED/deploy/systemd/idem.service"; then
        say "the tarball's README or systemd unit (above) asks for cargo or a Rust toolchain"
        return 1
    fi
    tarball_links "$UNPACKED"
}

# release.sh -h and --help print the usage and exit 0 having built and written nothing (a `cargo`
# first on PATH records any call); an unknown argument exits 2.
release_help() {
    mkdir -p "$WORK/fakebin" &&
        printf '#!/bin/sh\ntouch "%s/cargo-called"\nexit 1\n' "$WORK" > "$WORK/fakebin/cargo" &&
        chmod +x "$WORK/fakebin/cargo" || return 1
    local flag out
    for flag in -h --help; do
        out=$(PATH=$WORK/fakebin:$PATH DIST=$WORK/help-dist scripts/release.sh "$flag") ||
            { say "release.sh $flag exited $?"; return 1; }
        grep -q '^Usage: scripts/release.sh' <<< "$out" || { say "release.sh $flag printed no usage: $out"; return 1; }
        [ ! -e "$WORK/cargo-called" ] && [ ! -e "$WORK/help-dist" ] ||
            { say "release.sh $flag ran cargo or wrote $WORK/help-dist"; return 1; }
    done
    PATH=$WORK/fakebin:$PATH DIST=$WORK/help-dist scripts/release.sh --bogus >/dev/null 2>&1
    [ $? = 2 ] && [ ! -e "$WORK/cargo-called" ] || { say "release.sh --bogus should exit 2 building nothing"; return 1; }
    say "release.sh -h and --help: the usage, exit 0, nothing built or written; --bogus: exit 2"
}

# tarball_links DIR: every relative link in every Markdown file under DIR names a file under DIR
# (and a heading, for file.md#anchor: GitHub's slugs); links in code are not links.
tarball_links() {
    python3 - "$1" <<'EOF'
import os, re, sys
root = os.path.realpath(sys.argv[1])
def strip_code(text):
    out, code = [], False
    for line in text.split('\n'):
        if line.lstrip().startswith('```'):
            code = not code; out.append(''); continue
        out.append('' if code else re.sub(r'`[^`]*`', lambda m: m.group(0) if '](' not in m.group(0) else '', line))
    return '\n'.join(out)
def slugs(path):
    found, seen, code = set(), {}, False
    for line in open(path, encoding='utf-8'):
        if line.lstrip().startswith('```'): code = not code; continue
        m = not code and re.match(r'^(#{1,6})\s+(.*?)\s*#*\s*$', line)
        if m:
            s = re.sub(r'[^\w\- ]', '', m.group(2).lower()).replace(' ', '-')
            n = seen.get(s, 0); seen[s] = n + 1
            found.add(s if n == 0 else f'{s}-{n}')
    return found
files = sorted(os.path.join(d, n) for d, _, names in os.walk(root) for n in names if n.endswith('.md'))
links = outside = bad = 0
for f in files:
    name = os.path.relpath(f, root)
    for target in re.findall(r'\]\(([^)\s]+)\)', strip_code(open(f, encoding='utf-8').read())):
        if re.match(r'^[a-z]+:', target) or target.startswith('<'):
            outside += target.startswith('https://github.com/idem-dev/idem/')
            continue
        links += 1
        path, _, anchor = target.partition('#')
        dest = os.path.realpath(os.path.join(os.path.dirname(f), path)) if path else f
        if dest != root and not dest.startswith(root + os.sep):
            print(f'{name}: {target}: outside the tarball'); bad += 1
        elif not os.path.exists(dest):
            print(f'{name}: {target}: the tarball has no {os.path.relpath(dest, root)}'); bad += 1
        elif anchor and dest.endswith('.md') and anchor not in slugs(dest):
            print(f'{name}: {target}: no heading #{anchor} in {os.path.relpath(dest, root)}'); bad += 1
print(f'    the tarball\'s {len(files)} Markdown files: {links} relative links, {bad} broken; '
      f'{outside} to the repository at the tag (files the tarball does not hold)')
sys.exit(1 if bad or len(files) < 20 else 0)
EOF
}

# The signature release-tarball made with its throwaway key verifies with minisign -V (and a
# SHA256SUMS changed by one byte does not); a password-protected key signs with the password in
# IDEM_RELEASE_MINISIGN_PASSWORD, and a wrong password fails the release.
release-signature() {
    command -v minisign >/dev/null || {
        echo "--- SKIP: release-signature (minisign is not installed; Debian: minisign; .ci/run installs it)"
        return 0
    }
    [ -f "$WORK/dist/SHA256SUMS.minisig" ] || { say "release.sh wrote no SHA256SUMS.minisig"; return 1; }
    (cd "$WORK/dist" && minisign -Vm SHA256SUMS -p "$WORK/keys/idem.pub") || return 1
    # The whole output first, then grep (a `| grep -q` under pipefail can fail when grep leaves early).
    local trusted
    trusted=$(minisign -Vm "$WORK/dist/SHA256SUMS" -p "$WORK/keys/idem.pub" -Q) || return 1
    grep -qx "idem $VERSION $(uname -m)-unknown-linux-gnu SHA256SUMS, commit [0-9a-f]*" <<<"$trusted" ||
        { say "the trusted comment does not name the version, target and commit"; return 1; }
    mkdir -p "$WORK/tampered" && cp "$WORK/dist/SHA256SUMS" "$WORK/dist/SHA256SUMS.minisig" "$WORK/tampered/" &&
        sed -i '1s/^a/b/; t; 1s/^./a/' "$WORK/tampered/SHA256SUMS" || return 1
    if minisign -Vm "$WORK/tampered/SHA256SUMS" -p "$WORK/keys/idem.pub" -q 2>/dev/null; then
        say "a changed SHA256SUMS verified"; return 1
    fi
    say "a SHA256SUMS changed by one character: minisign -V refuses it"
    minisign -G -W -p "$WORK/keys/other.pub" -s "$WORK/keys/other.key" >/dev/null || return 1
    if minisign -Vm "$WORK/dist/SHA256SUMS" -p "$WORK/keys/other.pub" -q 2>/dev/null; then
        say "another key's public key verified the signature"; return 1
    fi
    say "another public key: minisign -V refuses it"
    # A password-protected key, as a real release's: minisign reads the password on standard input.
    printf 'pw-%s\npw-%s\n' "$TOKEN" "$TOKEN" | minisign -G -p "$WORK/keys/pw.pub" -s "$WORK/keys/pw.key" >/dev/null 2>&1 ||
        return 1
    IDEM_RELEASE_MINISIGN_KEY=$WORK/keys/pw.key IDEM_RELEASE_MINISIGN_PASSWORD=pw-$TOKEN \
        IDEM_RELEASE_MINISIGN_PUB=$WORK/keys/pw.pub IDEM_BIN=$WORK/stand-in DIST=$WORK/signed-pw \
        scripts/release.sh 2>/dev/null &&
        minisign -Vm "$WORK/signed-pw/SHA256SUMS" -p "$WORK/keys/pw.pub" -q || { say "signing with a password failed"; return 1; }
    if IDEM_RELEASE_MINISIGN_KEY=$WORK/keys/pw.key IDEM_RELEASE_MINISIGN_PASSWORD=wrong \
        IDEM_BIN=$WORK/stand-in DIST=$WORK/signed-wrong scripts/release.sh 2>/dev/null; then
        say "a wrong password did not fail the release"; return 1
    fi
    if IDEM_RELEASE_MINISIGN_KEY=$WORK/keys/idem.key IDEM_RELEASE_MINISIGN_PUB=$WORK/keys/pw.pub \
        IDEM_BIN=$WORK/stand-in DIST=$WORK/signed-other scripts/release.sh 2>/dev/null; then
        say "a key that IDEM_RELEASE_MINISIGN_PUB does not verify did not fail the release"; return 1
    fi
    say "a password-protected key signs (IDEM_RELEASE_MINISIGN_PASSWORD); a wrong password, or a key the public key does not verify, fails the release"
}

# The SBOM beside the tarball: listed in SHA256SUMS, valid CycloneDX 1.5 (cyclonedx-python-lib's
# strict JSON-schema validator, from PyPI, in a venv of its own), and a component for each crate
# `cargo tree` says the binary is built from, no more, each with Cargo.lock's version and checksum.
release-sbom() {
    local sbom=$WORK/dist/idem-$VERSION-$(uname -m)-unknown-linux-gnu.cdx.json
    [ -f "$sbom" ] || { say "release.sh wrote no $(basename "$sbom")"; return 1; }
    grep -q " $(basename "$sbom")\$" "$WORK/dist/SHA256SUMS" || { say "SHA256SUMS does not list the SBOM"; return 1; }
    python3 -m venv "$WORK/sbom-venv" &&
        "$WORK/sbom-venv/bin/pip" install --quiet --disable-pip-version-check 'cyclonedx-python-lib[json-validation]==11.12.0' ||
        return 1
    cargo tree --locked -e normal -p idem-server --target "$(uname -m)-unknown-linux-gnu" --prefix none --format '{p}' \
        > "$WORK/tree.txt" || return 1
    "$WORK/sbom-venv/bin/python" - "$sbom" "$WORK/tree.txt" "$UNPACKED/idem" <<'EOF'
import hashlib, json, sys, tomllib
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
path, tree, binary = sys.argv[1:4]
text = open(path, encoding='utf-8').read()
bom = json.loads(text)
assert bom.get('bomFormat') == 'CycloneDX' and bom.get('specVersion') == '1.5', (bom.get('bomFormat'), bom.get('specVersion'))
error = JsonStrictValidator(SchemaVersion.V1_5).validate_str(text)
assert error is None, f'not valid CycloneDX 1.5: {error}'
print('    valid CycloneDX 1.5 JSON (cyclonedx-python-lib, strict schema)')
expected = {tuple(line.split()[:2]) for line in open(tree) if line.strip()}
expected = {(name, version.removeprefix('v')) for name, version in expected}
subject = bom['metadata']['component']
got = {(c['name'], c['version']) for c in bom['components']} | {(subject['name'], subject['version'])}
assert got == expected, f'cargo tree only: {sorted(expected - got)}; SBOM only: {sorted(got - expected)}'
sha = hashlib.sha256(open(binary, 'rb').read()).hexdigest()
assert {'alg': 'SHA-256', 'content': sha} in subject.get('hashes', []), 'metadata.component has not the SHA-256 of the binary'
lock = {(p['name'], p['version']): p for p in tomllib.load(open('Cargo.lock', 'rb'))['package']}
licensed = 0
for c in bom['components']:
    key = (c['name'], c['version'])
    assert key in lock, f'{key} is not in Cargo.lock'
    assert c['purl'] == f'pkg:cargo/{c["name"]}@{c["version"]}', c['purl']
    if 'checksum' in lock[key]:
        assert c.get('hashes') == [{'alg': 'SHA-256', 'content': lock[key]['checksum']}], f'{key}: not Cargo.lock\'s checksum'
        assert c.get('licenses'), f'{key} (crates.io) has no license'
    licensed += bool(c.get('licenses'))
refs = {c['bom-ref'] for c in bom['components']} | {subject['bom-ref']}
for d in bom['dependencies']:
    assert d['ref'] in refs and set(d['dependsOn']) <= refs, d['ref']
print(f'    {len(bom["components"])} crates and the binary, as cargo tree lists them; '
      f'{licensed} with a license; Cargo.lock\'s versions and checksums; the binary\'s SHA-256')
EOF
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
    image_labels "$image" && image_refuses_without_token "$image" && image_serves "$image" idem-ship &&
        image_restarts idem-ship
    local ok=$?
    podman rm -f -t 0 idem-ship >/dev/null 2>&1
    return $ok
}

# image_labels IMAGE: org.opencontainers.image.version is Cargo.toml's, and .revision the commit the
# binary names (`idem --version`), in full when that is HEAD.
image_labels() {
    local version revision commit head
    version=$(podman image inspect -f '{{index .Labels "org.opencontainers.image.version"}}' "$1")
    revision=$(podman image inspect -f '{{index .Labels "org.opencontainers.image.revision"}}' "$1")
    commit=$("$UNPACKED/idem" --version | sed -n 's/.*(commit \([0-9a-f]\{7,\}\),.*/\1/p')
    head=$(git rev-parse HEAD)
    [ "$version" = "$VERSION" ] || { say "org.opencontainers.image.version is '$version', not $VERSION"; return 1; }
    [ -n "$commit" ] && [[ "$revision" == "$commit"* ]] && { [[ "$head" != "$commit"* ]] || [ "$revision" = "$head" ]; } ||
        { say "org.opencontainers.image.revision is '$revision'; the binary names commit '$commit', HEAD is $head"; return 1; }
    say "labels: org.opencontainers.image.version $version, org.opencontainers.image.revision $revision"
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
    # The variables' defaults, then each overridden (env -u: a caller's own must not leak in).
    local out
    out=$(env -u IDEM_IMAGE -u POSTGRES_IMAGE -u IDEM_PORT IDEM_TOKEN=t \
        docker-compose -f deploy/container/compose.yaml config) || return 1
    for want in "image: localhost/idem:$VERSION" "image: docker.io/library/postgres:15" "127.0.0.1:7070:7070"; do
        grep -qF -- "$want" <<< "$out" || { say "by default the config should have '$want'"; return 1; }
    done
    out=$(IDEM_TOKEN=t IDEM_IMAGE=registry.example/idem:9 POSTGRES_IMAGE=registry.example/postgres:16 IDEM_PORT=17070 \
        docker-compose -f deploy/container/compose.yaml config) || return 1
    for want in "image: registry.example/idem:9" "image: registry.example/postgres:16" "127.0.0.1:17070:7070"; do
        grep -qF -- "$want" <<< "$out" || { say "IDEM_IMAGE, POSTGRES_IMAGE and IDEM_PORT should give '$want'"; return 1; }
    done
    say "IDEM_IMAGE, POSTGRES_IMAGE, IDEM_PORT: the defaults (localhost/idem:$VERSION, postgres:15, 7070), and each overridden"
    if env -u IDEM_TOKEN docker-compose -f deploy/container/compose.yaml config -q 2>/dev/null; then
        say "without IDEM_TOKEN it should refuse"
        return 1
    fi
    say "without IDEM_TOKEN: refused"
}

export WORK
python3 scripts/check-versions.py || FAILED=1
run_check release-tarball
run_check release-signature
run_check release-sbom
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
