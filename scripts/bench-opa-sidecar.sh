#!/usr/bin/env bash
# Compares execgate's embedded OPA decision with the same default policies
# served by a stock `opa run --server` on loopback (POST
# /v1/data/execgate/main/decision). Prints p50/p90/p99/mean and req/s for the
# engine as served (decision memo on), the engine evaluating every decision
# (memo off, like the sidecar) and the sidecar, for a
# minimal probe request and a full one (proxy, egress, a requirement, limits).
#
#   scripts/bench-opa-sidecar.sh [N]          # default N=5000 decisions each
#
# Needs the opa binary: GOBIN=$PWD/.tools/bin go install github.com/open-policy-agent/opa@v1.22.3
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
N="${1:-5000}"
OPA="${OPA:-$ROOT/.tools/bin/opa}"
[ -x "$OPA" ] || { echo "bench-opa-sidecar: $OPA missing; GOBIN=$ROOT/.tools/bin go install github.com/open-policy-agent/opa@v1.22.3" >&2; exit 1; }

work="$(mktemp -d)"
opa_pid=""
cleanup() {
  if [ -n "$opa_pid" ]; then kill "$opa_pid" 2>/dev/null || true; wait "$opa_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# The served modules only (the engine skips _test.rego as well).
mkdir -p "$work/policies"
for f in policies/*.rego; do
  case "$f" in *_test.rego) ;; *) cp "$f" "$work/policies/" ;; esac
done

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$OPA" run --server --addr "127.0.0.1:$port" --log-level error "$work/policies" >"$work/opa.log" 2>&1 &
opa_pid=$!
for _ in $(seq 100); do
  curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$port/health" >/dev/null || { cat "$work/opa.log" >&2; exit 1; }

echo "opa $("$OPA" version | awk '/^Version/{print $2}') on 127.0.0.1:$port; $(nproc) CPUs; load: $(cut -d' ' -f1-3 /proc/loadavg)"
go run ./cmd/bench-opa-sidecar -opa "http://127.0.0.1:$port" -n "$N"
