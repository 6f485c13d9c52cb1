#!/usr/bin/env bash
# Every test of the project, as the README's quick start runs it: the Rust workspace, then the
# TypeScript, Python and Go clients against the `idem` binary that cargo built (target/debug/idem)
# (the Go suite also runs the Go example and the PHP handler under `php -S`), then the dashboard in
# a real headless Chromium, then the OpenAPI document against an independent validator and
# Schemathesis, then the deploy/ pack.
# Ends with one line summing every runner's counts: `tests: N passed, M failed`.
#
# Needs: a Rust toolchain, Node 18+ with npm, Python 3.9+ with pip, Go 1.19+ and PHP 8.2's CLI
# (Debian's golang-go and php-cli: skipped loudly when missing; .ci/run installs them), and
# Debian's chromium and chromium-driver (installed here when missing and run as root; .ci/run does
# the same). Tests that need PostgreSQL run
# when IDEM_TEST_DATABASE_URL is set and say loudly that they skipped otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
say() { printf '\n==> %s\n' "$*"; }

say "Rust: cargo test --workspace"
cargo test --workspace --locked 2>&1 | tee -a "$LOG"

say "TypeScript client (clients/typescript): npm ci && npm test"
(cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error && npm test) 2>&1 | tee -a "$LOG"

say "Python client (clients/python): mypy --strict and pytest"
python3 -m pip install --quiet --disable-pip-version-check -e './clients/python[test]' 2>&1 | tee -a "$LOG"
(cd clients/python && python3 -m mypy --strict src tests && python3 -m pytest -q -p no:cacheprovider) 2>&1 | tee -a "$LOG"

say "Go client (clients/go) and Go example (examples/articles-go): gofmt, go vet, go test; the PHP handler under php -S"
if command -v go >/dev/null 2>&1; then
    command -v php >/dev/null 2>&1 ||
        say "WARNING: php is not installed (Debian: php-cli): TestPHPHandler will SKIP; .ci/run installs it"
    # Standard library only, and the example's one requirement is replaced by ./clients/go:
    # nothing is downloaded (GOPROXY=off), and no newer toolchain is fetched (GOTOOLCHAIN=local).
    idem_bin="$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/debug/idem"
    for module in clients/go examples/articles-go; do
        (
            cd "$module"
            export GOPROXY=off GOTOOLCHAIN=local
            unformatted=$(gofmt -l .)
            if [ -n "$unformatted" ]; then echo "gofmt: not formatted: $unformatted"; exit 1; fi
            go vet ./...
            IDEM_BIN="$idem_bin" go test -count=1 -v ./...
        ) 2>&1 | tee -a "$LOG"
    done
else
    say "SKIPPED: the Go client's tests, the Go example's and the PHP handler's need go (Debian: golang-go) and php (php-cli); .ci/run installs them"
fi

say "Dashboard (tests/dashboard): Selenium driving Debian's headless Chromium against a real idem"
if scripts/ensure-chromium.sh; then
    python3 -m pip install --quiet --disable-pip-version-check -r tests/dashboard/requirements.txt 2>&1 | tee -a "$LOG"
    (cd tests/dashboard && python3 -m pytest -q -p no:cacheprovider) 2>&1 | tee -a "$LOG"
else
    say "SKIPPED: the dashboard's browser tests need chromium and chromium-driver (see above)"
fi

say "OpenAPI: openapi-spec-validator and a bounded Schemathesis run against a real idem"
python3 -m pip install --quiet --disable-pip-version-check 'openapi-spec-validator==0.9.0' 'schemathesis==4.32.5' 2>&1 | tee -a "$LOG"
scripts/check-openapi.sh 2>&1 | tee -a "$LOG"

say "Operator's pack (deploy/): promtool check rules, systemd-analyze verify"
if command -v promtool >/dev/null 2>&1 && command -v systemd-analyze >/dev/null 2>&1; then
    scripts/check-deploy.sh 2>&1 | tee -a "$LOG"
else
    say "SKIPPED: promtool (Debian package prometheus) or systemd-analyze (systemd) is not installed; .ci/run installs them"
fi

# cargo: "test result: ok. N passed; M failed"; node --test: "# pass N" / "# fail M";
# pytest: "N passed[, M failed]"; go test -v: one "--- PASS: Name" / "--- FAIL: Name" line per
# top-level test (subtests are indented and not counted).
awk '
    /^test result:/ { p += $4; f += $6 }
    /^--- PASS: / { p += 1 }
    /^--- FAIL: / { f += 1 }
    /^# pass / { p += $3 }
    /^# fail / { f += $3 }
    /^[0-9]+ passed/ || /^[0-9]+ failed/ {
        for (i = 1; i < NF; i++) {
            if ($(i + 1) ~ /^passed/) p += $i
            if ($(i + 1) ~ /^failed/) f += $i
        }
    }
    END { printf "\ntests: %d passed, %d failed\n", p, f }
' "$LOG"
