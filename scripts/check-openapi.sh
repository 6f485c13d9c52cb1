#!/usr/bin/env bash
# Checks that GET /openapi.json tells the truth and that generators accept it, against a real
# `idem serve` (target/debug/idem, or $IDEM_TEST_BIN): the document must pass an independent
# validator (openapi-spec-validator) and Redocly's recommended lint rules with no error or warning;
# openapi-python-client must generate a client from it without a warning, and that client makes a
# claim against the server (scripts/openapi-tools/generated_claim.py); and a
# bounded Schemathesis run (every check, a fixed seed and example count, about 20 s here) must find
# nothing (its request timeout outlasts wait_seconds, at most 30 s). The server runs with a token, so that the auth checks mean something, and with a
# 64 MiB body limit, so that a schema-violating body is judged by its content rather than refused
# for its size first (413 is deliberate; see docs/testing.md). No event source is
# configured, so intake answers 404 for every source name. A second, shorter run sends a read-only
# token: every write is then 403 and must be documented as such (positive_data_acceptance is off for
# it, since a valid write is refused by design).
#
# Needs: python3 -m pip install openapi-spec-validator schemathesis openapi-python-client (the
# versions scripts/test.sh pins), and npm (Redocly is installed here with `npm ci` in
# scripts/openapi-tools, from its lock file; no network once npm's cache holds it).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${IDEM_TEST_BIN:-target/debug/idem}
WORK=$(mktemp -d)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
printf '[auth]\ntokens = ["openapi-check-token"]\n[[auth.token]]\nname = "openapi-reader"\ntoken = "openapi-read-token"\ncan = "read"\n[limits]\nmax_body_bytes = 67108864\n' > "$WORK/idem.toml"
env -u IDEM_CONFIG IDEM_LOG__LEVEL=warn "$BIN" serve --config "$WORK/idem.toml" --listen "127.0.0.1:$PORT" \
    --data-dir "$WORK/data" > "$WORK/idem.log" 2>&1 &
IDEM_PID=$!
trap 'kill "$IDEM_PID" 2>/dev/null || true; wait "$IDEM_PID" 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 1 100); do
    curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && break
    sleep 0.1
done
curl -fs "http://127.0.0.1:$PORT/openapi.json" > "$WORK/openapi.json"

echo "openapi-spec-validator:"
python3 -m openapi_spec_validator "$WORK/openapi.json"

echo "redocly lint (recommended rules; a warning fails too):"
TOOLS="$PWD/scripts/openapi-tools"
[ -x "$TOOLS/node_modules/.bin/redocly" ] || (cd "$TOOLS" && npm ci --no-audit --no-fund --loglevel=error)
"$TOOLS/node_modules/.bin/redocly" lint "$WORK/openapi.json" --max-problems 50 --format stylish 2>&1 | tee "$WORK/redocly.log"
if grep -Eq ' (error|warning) ' "$WORK/redocly.log"; then echo "redocly: the document has problems (above)"; exit 1; fi

echo "openapi-python-client (generate, failing on any warning; then a claim through the client):"
openapi-python-client generate --path "$WORK/openapi.json" --output-path "$WORK/idem_openapi_client" \
    --config "$TOOLS/python-client.yaml" --meta none --fail-on-warning > "$WORK/generate.log" 2>&1 ||
    { cat "$WORK/generate.log"; echo "openapi-python-client: the document does not generate cleanly"; exit 1; }
python3 "$TOOLS/generated_claim.py" "$WORK" "http://127.0.0.1:$PORT" openapi-check-token

echo "schemathesis (--checks all, seed 1, 20 examples per operation):"
CONFIG="$PWD/scripts/schemathesis.toml"
# scripts/schemathesis_hooks.py: created_at generated in the past and with its TTL still to run.
export PYTHONPATH="$PWD/scripts${PYTHONPATH:+:$PYTHONPATH}" SCHEMATHESIS_HOOKS=schemathesis_hooks
cd "$WORK"
python3 -m schemathesis.cli --config-file "$CONFIG" run "http://127.0.0.1:$PORT/openapi.json" --checks all --max-examples 20 --seed 1 \
    -H "Authorization: Bearer openapi-check-token" --request-timeout 40 --no-color

echo "schemathesis as a read-only token (--checks all but positive_data_acceptance, seed 1, 5 examples per operation):"
python3 -m schemathesis.cli --config-file "$CONFIG" run "http://127.0.0.1:$PORT/openapi.json" --checks all \
    --exclude-checks positive_data_acceptance --max-examples 5 --seed 1 --phases coverage,fuzzing \
    -H "Authorization: Bearer openapi-read-token" --request-timeout 40 --no-color
