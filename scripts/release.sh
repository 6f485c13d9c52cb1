#!/usr/bin/env bash
# Writes idem's release artefacts for this machine's platform (docs/install.md#release-tarball):
#
#   dist/idem-<version>-<target>.tar.gz   one directory idem-<version>-<target>/ holding the idem
#                                         binary, LICENSE, README.md, CHANGELOG.md,
#                                         idem.example.toml and deploy/ (systemd, Prometheus,
#                                         Grafana, the container image's files, Kubernetes)
#   dist/SHA256SUMS                       `cd dist && sha256sum -c SHA256SUMS` verifies it
#
# The binary is built with `cargo build --release --locked -p idem-server` (its --version names the
# commit: crates/idem-server/build.rs). The archive's entries are sorted, owned by 0:0 and dated at
# the commit, and gzip stores no name or time: the same binary packs into the same bytes.
#
# Environment:
#   IDEM_BIN    package this binary instead of building one (scripts/check-shipping.sh packs the
#               debug binary the test command built, to check the packing without a second build)
#   DIST        where to write (default: dist)
#   TARGET      the platform in the name (default: <uname -m>-unknown-linux-gnu)
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'release.sh: %s\n' "$*" >&2; }

VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
TARGET=${TARGET:-$(uname -m)-unknown-linux-gnu}
DIST=${DIST:-dist}
NAME=idem-$VERSION-$TARGET

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
cp LICENSE README.md CHANGELOG.md idem.example.toml "$STAGE/$NAME/"
cp -R deploy "$STAGE/$NAME/deploy"

# Dated at the commit when there is one, so that packing twice gives the same bytes.
STAMP=$(git show -s --format=%ct HEAD 2>/dev/null || date +%s)
mkdir -p "$DIST"
rm -f "$DIST/$NAME.tar.gz" "$DIST/SHA256SUMS"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$STAMP" \
    -C "$STAGE" -cf - "$NAME" | gzip -n > "$DIST/$NAME.tar.gz"
(cd "$DIST" && sha256sum "$NAME.tar.gz" > SHA256SUMS)
say "$BUILT"
say "wrote $DIST/$NAME.tar.gz ($(du -h "$DIST/$NAME.tar.gz" | cut -f1)) and $DIST/SHA256SUMS"
