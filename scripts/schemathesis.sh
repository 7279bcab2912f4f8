#!/usr/bin/env bash
# Fuzzes a live gateway against its own OpenAPI document with schemathesis.
#
# Starts `bin/execgate serve` (the embedded default) with a temporary state
# dir on a free loopback port, mints an executor+admin token for tenant demo,
# runs schemathesis on /openapi.json with the checks
#   not_a_server_error, response_schema_conformance,
#   status_code_conformance, content_type_conformance
# and stops the server. Exit status is schemathesis's. /mcp is left out: its
# bodies are MCP's JSON-RPC messages, exercised by the MCP clients' tests.
#
# Environment:
#   EXECGATE_BIN              binary to run (default bin/execgate, built if missing)
#   SCHEMATHESIS              schemathesis executable (default .tools/venv/bin/schemathesis)
#   SCHEMATHESIS_MAX_EXAMPLES examples per operation (default 20)
#   SCHEMATHESIS_MAX_TIME     time budget in seconds (default 90; fuzzing repeats until it is spent)
#   EXECGATE_SANDBOX_ROOTFS_DIR  reuse a built rootfs instead of building one in the state dir
#
# Install schemathesis into the tools venv with:
#   .tools/bin/uv pip install --python .tools/venv/bin/python schemathesis
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${EXECGATE_BIN:-$ROOT/bin/execgate}"
ST="${SCHEMATHESIS:-$ROOT/.tools/venv/bin/schemathesis}"
MAX_EXAMPLES="${SCHEMATHESIS_MAX_EXAMPLES:-20}"
MAX_TIME="${SCHEMATHESIS_MAX_TIME:-90}"

log() { printf 'schemathesis.sh: %s\n' "$*" >&2; }

if [ ! -x "$ST" ]; then
  log "schemathesis not found at $ST"
  log "install: .tools/bin/uv pip install --python .tools/venv/bin/python schemathesis"
  exit 2
fi
if [ ! -x "$BIN" ]; then
  log "building $BIN"
  (cd "$ROOT" && go build -trimpath -o "$BIN" ./cmd/execgate)
fi

STATE="$(mktemp -d "${TMPDIR:-/tmp}/execgate-schemathesis.XXXXXX")"
PORT="$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
URL="http://127.0.0.1:$PORT"
SERVER_LOG="$STATE/serve.log"
PID=""

cleanup() {
  if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
  fi
  rm -rf "$STATE"
}
trap cleanup EXIT INT TERM

# Unset overrides that would point the embedded default elsewhere.
unset EXECGATE_LISTEN EXECGATE_STATE_DIR EXECGATE_QUOTA_BACKEND || true

log "starting $BIN serve on $URL (state dir $STATE)"
"$BIN" serve --state-dir "$STATE" --listen "127.0.0.1:$PORT" >"$STATE/serve.out" 2>"$SERVER_LOG" &
PID=$!

deadline=$((SECONDS + 180)) # the first start builds the rootfs
until curl -fsS "$URL/readyz" >/dev/null 2>&1; do
  if ! kill -0 "$PID" 2>/dev/null; then
    log "execgate serve exited; its log:"; cat "$SERVER_LOG" >&2; exit 1
  fi
  if [ "$SECONDS" -ge "$deadline" ]; then
    log "gateway not ready after 180s; /readyz says:"; curl -sS "$URL/readyz" >&2 || true
    log "its log:"; tail -50 "$SERVER_LOG" >&2; exit 1
  fi
  sleep 0.5
done

TOKEN="$("$BIN" token --state-dir "$STATE" --tenant demo --role executor --role admin --role policy-author --ttl 1h)"

log "running schemathesis ($MAX_EXAMPLES examples per operation, at most ${MAX_TIME}s)"
set +e
"$ST" run "$URL/openapi.json" \
  --checks not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance \
  --header "Authorization: Bearer $TOKEN" \
  --exclude-path /mcp \
  --max-examples "$MAX_EXAMPLES" \
  --max-time "$MAX_TIME" \
  --workers 1 \
  --request-timeout 30 \
  --generation-database none \
  --suppress-health-check all \
  --no-color
status=$?
set -e
if [ "$status" -ne 0 ]; then
  log "schemathesis failed ($status); the gateway's log tail:"
  tail -30 "$SERVER_LOG" >&2
fi
exit "$status"
