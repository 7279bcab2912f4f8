#!/usr/bin/env bash
# Runs every test of execgate on this host (as root: the sandbox tests create
# namespaces and cgroups). Installs what the tests need first (idempotent):
# the tools venv with nsjail and uv, redis-server, the stock opa CLI and
# schemathesis. Tests start their own redis-server on a free loopback port.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

./scripts/setup.sh --test

export PATH="$ROOT/.tools/bin:$PATH"
echo "== opa test policies/ deploy/examples/policies/ (stock OPA CLI)"
opa test policies/ deploy/examples/policies/

echo "== deploy: the Helm chart renders and validates (scripts/check-deploy.sh)"
./scripts/check-deploy.sh

echo "== docs: the site builds with every link and anchor checked (mkdocs build --strict)"
# The reference pages are generated from the code and checked by go test
# (internal/docgen); the shell examples run in go test too
# (internal/docexamples, against a real execgate serve).
site="$(mktemp -d)"
NO_MKDOCS_2_WARNING=1 .tools/venv/bin/mkdocs build --strict --quiet --site-dir "$site"
rm -rf "$site"

echo "== go test ./..."
# go test -json feeds scripts/gotest-report.py, which prints what plain
# go test would, the count of tests run and skipped, and fails under CI=true
# when a containment, sandbox or app test skipped (CI must prove them).
# What failed is repeated at the very end (CI logs are read from their tail).
gofailures="$(mktemp)"
trap 'rm -f "$gofailures"' EXIT
set +e
go test -json -count=1 -timeout 30m ./... | /usr/bin/python3 scripts/gotest-report.py --failures "$gofailures"
status=("${PIPESTATUS[@]}")
set -e
failed=()
{ [ "${status[0]}" = 0 ] && [ "${status[1]}" = 0 ]; } || failed+=("go test")

# The clients' suites run against a real bin/execgate serve that each starts
# itself (clients/testdata/execgate.yaml); the runtime (python3.11) is shared
# in .tools/cache/clients-runtimes.
echo "== Python client: build and install clients/python, pytest, wheel and sdist (twine check)"
if ! { .tools/bin/uv pip install -q --python clients/python/.venv/bin/python --reinstall --no-deps ./clients/python &&
  (cd clients/python && .venv/bin/python -m pytest -q -p no:cacheprovider &&
    .venv/bin/python scripts/check_dist.py "$ROOT/.tools/bin/uv"); }; then
  failed+=("python client")
fi

echo "== TypeScript client: types match gateway/openapi.yaml, build, node --test, npm pack --dry-run"
if ! (cd clients/typescript && npm run -s check-schema && npm run -s build && npm test --silent && npm run -s check-pack); then
  failed+=("typescript client")
fi

# The same suites on the unified cgroup v2 hierarchy: a nested VM
# (scripts/vm-test.sh) runs the containment suite, the cgroup and
# level-process sandbox tests, the app's isolation tests, smoke, the
# README's probe against serve, and execgate in a systemd-delegated cgroup
# and in a container's cgroup namespace, and the shipped image under podman
# (built here first by scripts/image.sh). It fails when the VM cannot boot.
echo "== cgroup v2 VM (scripts/vm-test.sh)"
if ! ./scripts/vm-test.sh; then
  failed+=("cgroup v2 VM")
fi

if [ "${#failed[@]}" -gt 0 ]; then
  if [ -s "$gofailures" ]; then
    echo "== what failed in go test (repeated from above)"
    cat "$gofailures"
    echo "== the failed tests, by name"
    grep -E '^--- (FAIL|SKIP)' "$gofailures" || true
  fi
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "all suites passed"
