#!/usr/bin/env bash
# Checks the operator's pack in deploy/: the Prometheus alert rules with `promtool check rules`, and
# the systemd unit with `systemd-analyze verify` (its ExecStart pointed at the binary cargo built,
# since verify insists that the command exists). That every metric the rules and the dashboard
# name exists on a running idem is checked by the Rust test `deploy::every_metric_named_exists`.
#
# Needs: promtool (Debian package `prometheus`), systemd-analyze (Debian package `systemd`).
set -euo pipefail
cd "$(dirname "$0")/.."

promtool check rules deploy/prometheus/idem-alerts.yml

BIN=$(realpath "${IDEM_TEST_BIN:-target/debug/idem}")
UNIT_DIR=$(mktemp -d)
trap 'rm -rf "$UNIT_DIR"' EXIT
sed "s|/usr/local/bin/idem|$BIN|" deploy/systemd/idem.service > "$UNIT_DIR/idem.service"
systemd-analyze verify "$UNIT_DIR/idem.service"
echo "deploy/systemd/idem.service: OK"
