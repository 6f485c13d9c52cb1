#!/usr/bin/env bash
# Builds the container image localhost/idem:<version> on a machine with no container registry: from
# the idem binary cargo built and Debian's packages, with Podman (docs/install.md#container-image).
#
#   cargo build --release --locked -p idem-server    # or take the binary from the release tarball
#   deploy/container/build.sh                        # -> localhost/idem:0.1.0
#
# 1. A distroless-style base, localhost/idem-base:<debian release>, FROM scratch: what `ldd` says the
#    binary loads (libc6, libgcc-s1) and ca-certificates, fetched with `apt-get download` and
#    unpacked with `dpkg -x` (no maintainer scripts run: the CA bundle is concatenated here), an
#    /etc/passwd naming the user idem runs as (10001), /tmp, and the packages' records in
#    /var/lib/dpkg/status.d/ for image scanners. No shell, no package manager.
# 2. The `runtime` stage of deploy/container/Containerfile on that base, its `build` stage replaced by
#    a directory holding the binary: the same user, volume, health check and entry point as an image
#    built by a registry-connected builder from that Containerfile, and the labels
#    org.opencontainers.image.version (the binary's version, which must be Cargo.toml's when built
#    in a checkout) and org.opencontainers.image.revision (`git rev-parse HEAD` when the binary was
#    built from HEAD, else the commit the binary names).
#
# Environment:
#   IDEM_BIN      the binary (default: target/release/idem)
#   IDEM_IMAGE    the tag (default: localhost/idem:<the binary's version>)
#   IDEM_REVISION the org.opencontainers.image.revision label (default: as above)
#   PODMAN        the podman command with any global flags (default: podman). On the machine idem is
#                 developed on: PODMAN="podman --storage-driver vfs --runtime runc --cgroup-manager cgroupfs"
#   PODMAN_RUN    extra flags for the `podman run` that checks the image at the end (this machine:
#                 "--ulimit nofile=20000:20000 --ulimit nproc=4096:4096")
#
# Needs: podman (Debian: podman, and runc or crun), apt-get with its package lists (apt-get update),
# dpkg-deb, ldd.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${IDEM_BIN:-$ROOT/target/release/idem}
read -r -a PODMAN <<< "${PODMAN:-podman}"
read -r -a PODMAN_RUN <<< "${PODMAN_RUN:-}"
# Runtime libraries come from these packages; every library ldd names must be in one of them.
PACKAGES=(libc6 libgcc-s1 ca-certificates)

say() { printf 'build.sh: %s\n' "$*" >&2; }
fail() { say "$*"; exit 1; }

[ -x "$BIN" ] || fail "no idem binary at $BIN: run 'cargo build --release --locked -p idem-server' or set IDEM_BIN"
command -v "${PODMAN[0]}" >/dev/null || fail "${PODMAN[0]} is not installed (Debian: apt-get install podman runc)"
VERSION=$("$BIN" --version | awk '{print $2}')
[ -n "$VERSION" ] || fail "$BIN --version printed no version"
TAG=${IDEM_IMAGE:-localhost/idem:$VERSION}
# The labels. In a checkout, the binary must be the version Cargo.toml says (as scripts/release.sh
# insists); from the release tarball (no Cargo.toml, no .git) the binary's word is all there is.
if [ -f "$ROOT/Cargo.toml" ]; then
    CARGO_VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/Cargo.toml" | head -n 1)
    [ "$CARGO_VERSION" = "$VERSION" ] || fail "$BIN is idem $VERSION, but $ROOT/Cargo.toml says $CARGO_VERSION: rebuild it"
fi
COMMIT=$("$BIN" --version | sed -n 's/.*(commit \([0-9a-f]\{7,\}\),.*/\1/p')
HEAD=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || true)
if [ -n "${IDEM_REVISION:-}" ]; then
    REVISION=$IDEM_REVISION
elif [ -n "$HEAD" ] && [[ -z "$COMMIT" || "$HEAD" == "$COMMIT"* ]]; then
    REVISION=$HEAD
elif [ -n "$COMMIT" ]; then
    REVISION=$COMMIT
    [ -z "$HEAD" ] || say "WARNING: $BIN was built from commit $COMMIT, not this checkout's HEAD ($HEAD): the image's revision label says $COMMIT"
else
    REVISION=unknown
fi
# shellcheck disable=SC1091
DEBIAN=$(. /etc/os-release && echo "${ID:-debian}${VERSION_ID:-}")
BASE=localhost/idem-base:$DEBIAN

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
ROOTFS=$WORK/base/rootfs
mkdir -p "$ROOTFS" "$WORK/debs" "$WORK/build/out/data" "$WORK/context"

say "fetching ${PACKAGES[*]} with apt-get download"
(cd "$WORK/debs" && apt-get download -q=2 -o APT::Sandbox::User=root "${PACKAGES[@]}") ||
    fail "apt-get download failed: run 'apt-get update' first"
mkdir -p "$ROOTFS/var/lib/dpkg/status.d"
for deb in "$WORK"/debs/*.deb; do
    dpkg-deb -x "$deb" "$ROOTFS"
    name=$(dpkg-deb -f "$deb" Package)
    { dpkg-deb -f "$deb"; echo "Status: install ok installed"; } > "$ROOTFS/var/lib/dpkg/status.d/$name"
done

# What a maintainer script or a package manager would have made.
find "$ROOTFS/usr/share/ca-certificates" -name '*.crt' | sort | xargs cat > "$WORK/ca-certificates.crt"
mkdir -p "$ROOTFS/etc/ssl/certs"
mv "$WORK/ca-certificates.crt" "$ROOTFS/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nidem:x:10001:10001:idem:/data:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' > "$ROOTFS/etc/passwd"
printf 'root:x:0:\nidem:x:10001:\nnogroup:x:65534:\n' > "$ROOTFS/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files dns\n' > "$ROOTFS/etc/nsswitch.conf"
mkdir "$ROOTFS/tmp" && chmod 1777 "$ROOTFS/tmp"
# Manuals, translations and lintian overrides: no use without a shell. Copyright files stay.
rm -rf "$ROOTFS/usr/share/man" "$ROOTFS/usr/share/locale" "$ROOTFS/usr/share/lintian" "$ROOTFS/usr/share/bug"

# Every library the binary loads must be in the base: a new dependency fails here, not at run time.
for lib in $(ldd "$BIN" | awk '/=> \//{print $3} /^\t\//{print $1}'); do
    [ -n "$(find "$ROOTFS" -name "$(basename "$lib")" -print -quit)" ] ||
        fail "$BIN loads $lib, which none of ${PACKAGES[*]} provides: add its package to PACKAGES"
done

printf 'FROM scratch\nCOPY rootfs/ /\n' > "$WORK/base/Containerfile"
say "building $BASE from Debian's packages"
"${PODMAN[@]}" build --quiet --format docker -t "$BASE" "$WORK/base" >/dev/null

cp "$BIN" "$WORK/build/out/idem"
say "building $TAG: the runtime stage of deploy/container/Containerfile on $BASE"
"${PODMAN[@]}" build --quiet --format docker --target runtime \
    -f "$ROOT/deploy/container/Containerfile" \
    --build-arg BASE_IMAGE="$BASE" \
    --build-arg IDEM_VERSION="$VERSION" \
    --build-arg IDEM_REVISION="$REVISION" \
    --build-context build="$WORK/build" \
    -t "$TAG" "$WORK/context" >/dev/null

"${PODMAN[@]}" run --rm --no-healthcheck "${PODMAN_RUN[@]}" "$TAG" --version >&2
say "built $TAG ($("${PODMAN[@]}" image inspect --format '{{.Size}}' "$TAG" | awk '{printf "%.1f MB", $1 / 1e6}'); version $VERSION, revision $REVISION)"
echo "$TAG"
