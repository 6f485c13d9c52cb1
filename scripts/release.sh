#!/usr/bin/env bash
# Writes idem's release artefacts for this machine's platform (docs/install.md#the-release-tarball):
#
#   dist/idem-<version>-<target>.tar.gz   one directory idem-<version>-<target>/ holding the idem
#                                         binary, LICENSE, README.md (scripts/release-README.md:
#                                         the first steps with the binary in hand), CHANGELOG.md,
#                                         idem.example.toml, docs/ (the Markdown docs and their
#                                         pictures), examples/ and deploy/ (systemd, Prometheus,
#                                         Grafana, the container image's files, Kubernetes)
#   dist/idem-<version>-<target>.cdx.json the CycloneDX 1.5 SBOM of the crates built into the
#                                         binary (scripts/release-sbom.py)
#   dist/SHA256SUMS                       the SHA-256 of both: `cd dist && sha256sum -c SHA256SUMS`
#   dist/SHA256SUMS.minisig               SHA256SUMS signed with minisign, when a key is given
#                                         (IDEM_RELEASE_MINISIGN_KEY): `minisign -Vm SHA256SUMS -p idem.pub`
#
# The binary is built with `cargo build --release --locked -p idem-server` (its --version names the
# commit: crates/idem-server/build.rs). The archive's entries are sorted, owned by 0:0 and dated at
# the commit, and gzip stores no name or time; the SBOM is dated at the commit too, and the
# signature's trusted comment names the version, target and commit: the same binary packs into the
# same bytes.
#
# A Markdown link in the tarball to a file it does not hold (a client's README, tests/faults/) is
# rewritten to that file in the repository at the tag v<version>; every other relative link
# resolves inside the tarball, offline (scripts/check-shipping.sh checks both).
#
# Environment:
#   IDEM_BIN    package this binary instead of building one (scripts/check-shipping.sh packs the
#               debug binary the test command built, to check the packing without a second build)
#   DIST        where to write (default: dist)
#   TARGET      the platform in the name (default: <uname -m>-unknown-linux-gnu)
#   IDEM_RELEASE_MINISIGN_KEY       a minisign secret key: sign SHA256SUMS with it (Debian: minisign)
#   IDEM_RELEASE_MINISIGN_PASSWORD  its password (minisign reads it on standard input); unset, a
#                                   terminal is asked, and without one the key must be unencrypted
#                                   (`minisign -G -W`)
#   IDEM_RELEASE_MINISIGN_PUB       the public key that must verify the signature (idem.pub), checked
#                                   right after signing: the wrong secret key fails the release
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
    cat <<'EOF'
Usage: scripts/release.sh [-h|--help]

Builds idem in the release profile (cargo build --release --locked -p idem-server) and writes to
dist/ (or $DIST):
  idem-<version>-<target>.tar.gz    the binary, README.md, LICENSE, CHANGELOG.md,
                                    idem.example.toml, docs/, examples/, deploy/
  idem-<version>-<target>.cdx.json  CycloneDX 1.5 SBOM of the crates in the binary
  SHA256SUMS                        SHA-256 of both
  SHA256SUMS.minisig                its minisign signature, with IDEM_RELEASE_MINISIGN_KEY

Environment:
  IDEM_BIN=PATH                        pack this binary instead of building one
  DIST=DIR                             where to write (default: dist)
  TARGET=TRIPLE                        platform in the names (default: <uname -m>-unknown-linux-gnu)
  IDEM_RELEASE_MINISIGN_KEY=PATH       sign SHA256SUMS with this minisign secret key
  IDEM_RELEASE_MINISIGN_PASSWORD=PW    the key's password (else asked on a terminal, or none: -W keys)
  IDEM_RELEASE_MINISIGN_PUB=PATH       check the signature with this public key after signing

Verifying a release: docs/install.md#verifying-a-release
EOF
}

case "${1:-}" in
    -h | --help) usage; exit 0 ;;
    "") ;;
    *) printf 'release.sh: unknown argument %s\n\n' "$1" >&2; usage >&2; exit 2 ;;
esac

say() { printf 'release.sh: %s\n' "$*" >&2; }

VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
TARGET=${TARGET:-$(uname -m)-unknown-linux-gnu}
DIST=${DIST:-dist}
NAME=idem-$VERSION-$TARGET
KEY=${IDEM_RELEASE_MINISIGN_KEY:-}
REPO_URL=https://github.com/idem-dev/idem

if [ -n "$KEY" ]; then
    command -v minisign >/dev/null || { say "IDEM_RELEASE_MINISIGN_KEY is set but minisign is not installed (Debian: minisign)"; exit 1; }
    [ -r "$KEY" ] || { say "IDEM_RELEASE_MINISIGN_KEY: cannot read $KEY"; exit 1; }
fi

if [ -n "${IDEM_BIN:-}" ]; then
    BIN=$IDEM_BIN
    say "packing $BIN (IDEM_BIN), not a fresh release build"
else
    git diff --quiet HEAD -- 2>/dev/null ||
        say "WARNING: the work tree has uncommitted changes; the binary will name commit $(git rev-parse --short=7 HEAD) all the same"
    cargo build --release --locked -p idem-server
    BIN=target/release/idem
fi
BUILT=$("$BIN" --version)
case "$BUILT" in
    "idem $VERSION "*) ;;
    *) say "$BIN says '$BUILT', but Cargo.toml's version is $VERSION"; exit 1 ;;
esac

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/$NAME"
install -m 0755 "$BIN" "$STAGE/$NAME/idem"
cp LICENSE CHANGELOG.md idem.example.toml "$STAGE/$NAME/"
# The tarball's README: scripts/release-README.md, and the README's five-minute tour (curl, and the
# examples with `idem serve`: no Rust toolchain) in place of @TOUR@.
awk '/^## A five-minute tour/ { on = 1 } /^## / && !/^## A five-minute tour/ { on = 0 } on' README.md > "$STAGE/tour.md"
[ -s "$STAGE/tour.md" ] || { say "README.md has no '## A five-minute tour' section for the tarball's README"; exit 1; }
sed -e "s/@VERSION@/$VERSION/g" -e "s/@TARGET@/$TARGET/g" scripts/release-README.md |
    awk -v tour="$STAGE/tour.md" '$0 == "@TOUR@" { while ((getline line < tour) > 0) print line; next } { print }' \
        > "$STAGE/$NAME/README.md"
cp -R deploy "$STAGE/$NAME/deploy"
# docs/: the Markdown and the pictures it shows; examples/: the sources, without what running them
# leaves behind (node_modules, __pycache__, data dirs).
tar -cf - --exclude=node_modules --exclude=__pycache__ --exclude='*.pyc' --exclude='idem-data*' \
    docs examples | tar -xf - -C "$STAGE/$NAME"
find "$STAGE/$NAME/docs" -type f ! -name '*.md' ! -name '*.png' ! -name '*.svg' -delete

# Links to files the tarball does not hold: to the repository at this version's tag.
python3 - "$STAGE/$NAME" "$REPO_URL" "v$VERSION" <<'EOF'
import os, re, sys
root, repo, tag = sys.argv[1:4]
link = re.compile(r'(\]\()([^)\s]+)(\))')
rewritten = 0
def fix(match, md):
    global rewritten
    target = match.group(2)
    if re.match(r'^[a-z]+:', target) or target.startswith(('#', '<')):
        return match.group(0)
    path, hash_, anchor = target.partition('#')
    dest = os.path.normpath(os.path.join(os.path.dirname(md), path))
    if os.path.exists(dest):
        return match.group(0)
    rel = os.path.relpath(dest, root)
    if rel.startswith('..') or not os.path.exists(rel):
        print(f'release.sh: WARNING: {os.path.relpath(md, root)}: {target} is a broken link', file=sys.stderr)
        return match.group(0)
    rewritten += 1
    kind = 'tree' if os.path.isdir(rel) else 'blob'
    return f'{match.group(1)}{repo}/{kind}/{tag}/{rel}{hash_}{anchor}{match.group(3)}'
for dirpath, _, names in os.walk(root):
    for name in names:
        if name.endswith('.md'):
            md = os.path.join(dirpath, name)
            text = open(md, encoding='utf-8').read()
            lines, code = text.split('\n'), False
            for i, line in enumerate(lines):
                if line.lstrip().startswith('```'):
                    code = not code
                elif not code:
                    lines[i] = link.sub(lambda m: fix(m, md), line)
            new = '\n'.join(lines)
            if new != text:
                open(md, 'w', encoding='utf-8').write(new)
print(f'release.sh: {rewritten} links to files outside the tarball point at {repo} at {tag}', file=sys.stderr)
EOF

# The commit the binary names (HEAD may have moved during the build), and its date: the tarball and
# the SBOM are dated at it, so that packing twice gives the same bytes.
COMMIT=$(sed -n 's/.*(commit \([0-9a-f]*\),.*/\1/p' <<< "$BUILT")
STAMP=$(git show -s --format=%ct "${COMMIT:-HEAD}^{commit}" 2>/dev/null || git show -s --format=%ct HEAD 2>/dev/null || date +%s)
COMMIT=${COMMIT:-$(git rev-parse --short=7 HEAD 2>/dev/null || echo unknown)}
mkdir -p "$DIST"
rm -f "$DIST/$NAME.tar.gz" "$DIST/$NAME.cdx.json" "$DIST/SHA256SUMS" "$DIST/SHA256SUMS.minisig"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$STAMP" \
    -C "$STAGE" -cf - "$NAME" | gzip -n > "$DIST/$NAME.tar.gz"
python3 scripts/release-sbom.py "$TARGET" "$BIN" "$STAMP" "$DIST/$NAME.cdx.json"
(cd "$DIST" && sha256sum "$NAME.tar.gz" "$NAME.cdx.json" > SHA256SUMS)

if [ -n "$KEY" ]; then
    # The trusted comment is signed too, and shown by `minisign -V`: what this SHA256SUMS is of.
    comment="idem $VERSION $TARGET SHA256SUMS, commit $COMMIT"
    sign() { minisign -S -s "$KEY" -m "$DIST/SHA256SUMS" -t "$comment" -c "idem $VERSION release: verify with idem.pub"; }
    if [ -n "${IDEM_RELEASE_MINISIGN_PASSWORD:-}" ]; then
        printf '%s\n' "$IDEM_RELEASE_MINISIGN_PASSWORD" | sign >/dev/null
    elif [ -t 0 ]; then
        sign
    else
        sign </dev/null >/dev/null
    fi || { say "minisign could not sign SHA256SUMS with $KEY (a password-protected key needs IDEM_RELEASE_MINISIGN_PASSWORD)"; exit 1; }
    if [ -n "${IDEM_RELEASE_MINISIGN_PUB:-}" ]; then
        minisign -Vm "$DIST/SHA256SUMS" -p "$IDEM_RELEASE_MINISIGN_PUB" -q ||
            { say "the signature does not verify with $IDEM_RELEASE_MINISIGN_PUB: signed with another key?"; exit 1; }
        say "signed SHA256SUMS; it verifies with $IDEM_RELEASE_MINISIGN_PUB"
    else
        say "signed SHA256SUMS (set IDEM_RELEASE_MINISIGN_PUB to check it against the published key)"
    fi
else
    say "SHA256SUMS is not signed: no IDEM_RELEASE_MINISIGN_KEY"
fi
say "$BUILT"
say "wrote $DIST/$NAME.tar.gz ($(du -h "$DIST/$NAME.tar.gz" | cut -f1)), $DIST/$NAME.cdx.json and $DIST/SHA256SUMS${KEY:+ and SHA256SUMS.minisig}"
