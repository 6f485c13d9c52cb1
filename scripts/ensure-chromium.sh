#!/usr/bin/env bash
# Makes sure Debian's chromium and chromium-driver are installed (the dashboard's browser tests
# drive them). Installs them with apt-get when missing and this runs as root; otherwise says why
# not and exits 1.
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    printf '\n==> installing Debian'"'"'s chromium and chromium-driver (the dashboard'"'"'s browser tests)\n'
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null
    exit 0
fi
echo "chromium and chromium-driver are not installed, and this is not root with apt-get: install them to run the dashboard's browser tests" >&2
exit 1
