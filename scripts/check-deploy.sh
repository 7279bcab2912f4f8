#!/usr/bin/env bash
# Verifies the Helm chart without a cluster or Docker daemon: renders it with
# `helm template` for several value sets, validates every object strictly
# against the Kubernetes 1.37 JSON schemas (kubernetes-validate, from PyPI,
# which ships the schemas), and checks that unsafe value sets are refused.
# Needs: helm (go install helm.sh/helm/v3/cmd/helm@v3.22.0) and the tools venv.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CHART=deploy/helm/execgate
VALIDATE="$ROOT/.tools/venv/bin/kubernetes-validate"
[ -x "$VALIDATE" ] || "$ROOT/.tools/venv/bin/pip" install -q "kubernetes-validate==1.37.0"
OUT="$(mktemp -d)"; trap 'rm -rf "$OUT"' EXIT

ok() { echo "ok   $*"; }
render() { # name, args...
  local name=$1; shift
  helm template t "$CHART" "$@" > "$OUT/$name.yaml"
  "$VALIDATE" --strict --quiet "$OUT/$name.yaml"
  ok "$name renders and validates"
}
refuse() { # name, expected message, args...
  local name=$1 want=$2; shift 2
  if msg=$(helm template t "$CHART" "$@" 2>&1); then
    echo "FAIL $name: rendered, want a refusal ($want)"; exit 1
  fi
  grep -q "$want" <<<"$msg" || { echo "FAIL $name: $msg"; exit 1; }
  ok "$name refused: $want"
}

render jwks-redis --set redis.url=redis://redis:6379/0 --set auth.jwksUrl=https://idp.example/jwks.json
render pem-keys-otel --set redis.existingUrlSecret=redis-url --set auth.publicKeysSecret=jwt-keys \
  --set 'auth.publicKeyFiles={rs256.pem,ed25519.pem}' --set otel.endpoint=http://otel-collector:4318
render single-memory --set replicaCount=1 --set config.quota.backend=memory --set auth.jwksUrl=https://idp.example/jwks.json
render split --set redis.url=redis://redis:6379/0 --set auth.jwksUrl=https://idp.example/jwks.json \
  --set split.enabled=true --set split.specKeySecret=spec-key
render split-executor-hpa --set redis.existingUrlSecret=redis-url --set auth.jwksUrl=https://idp.example/jwks.json \
  --set split.enabled=true --set split.specKeySecret=spec-key --set split.executor.autoscaling.enabled=true --set split.executor.slots=8
refuse split-without-key "needs split.specKeySecret" --set redis.url=redis://r:6379/0 --set auth.jwksUrl=https://x/j --set split.enabled=true
refuse split-with-memory "needs config.quota.backend=redis" --set replicaCount=1 --set config.quota.backend=memory \
  --set auth.jwksUrl=https://x/j --set split.enabled=true --set split.specKeySecret=s
grep -q 'EXECGATE_DISPATCH_REDIS_URL' "$OUT/split.yaml" && grep -q 'app.kubernetes.io/component: executor' "$OUT/split.yaml" \
  && ! grep -q 'tenants:' <(awk '/name: t-execgate-executor$/,/^---/' "$OUT/split.yaml") && ok "split: executors get the dispatch Redis and no tenants"
refuse redis-without-url "needs redis.url" --set auth.jwksUrl=https://idp.example/jwks.json
refuse replicas-with-memory "memory quotas are per process" --set config.quota.backend=memory --set auth.jwksUrl=https://x/j
refuse no-auth "auth.jwksUrl or auth.publicKeysSecret" --set redis.url=redis://r:6379/0
grep -q 'EXECGATE_AUTH_PUBLIC_KEYS' "$OUT/pem-keys-otel.yaml" && grep -q '/etc/execgate/keys/rs256.pem,/etc/execgate/keys/ed25519.pem' "$OUT/pem-keys-otel.yaml" && ok "public key files wired"
# The rendered config.yaml must pass execgate's own strict loader.
if [ -x "$ROOT/bin/execgate" ]; then
  for f in jwks-redis pem-keys-otel single-memory split; do
    # The first config.yaml (the gateway's; the split's executor has its own, checked below).
    awk '/config.yaml: \|/&&!done{on=1;next} on&&(/^[^ ]/||/^---/){on=0;done=1} on{sub(/^    /,"");print}' "$OUT/$f.yaml" > "$OUT/$f.config.yaml"
    keys=""; [ "$f" = pem-keys-otel ] && keys=/etc/execgate/keys/rs256.pem  # set by the Deployment's env
    EXECGATE_AUTH_PUBLIC_KEYS="$keys" EXECGATE_QUOTA_REDIS_URL=redis://r:6379/0 EXECGATE_DISPATCH_SPEC_KEY_FILE=/etc/execgate/dispatch/spec.key \
      EXECGATE_STATE_DIR="$OUT/state" "$ROOT/bin/execgate" config print --config "$OUT/$f.config.yaml" >/dev/null
    ok "$f config.yaml accepted by execgate's strict loader"
  done
  awk '/name: t-execgate-executor$/{ex=1} ex&&/config.yaml: \|/{on=1;next} on&&(/^[^ ]/||/^---/){on=0;ex=0} on{sub(/^    /,"");print}' "$OUT/split.yaml" > "$OUT/executor.config.yaml"
  # Read whole, then matched: `| grep -q` would end the pipe early and,
  # under pipefail, fail on the writer's SIGPIPE.
  printed=$(EXECGATE_DISPATCH_REDIS_URL=redis://r:6379/0 EXECGATE_DISPATCH_SPEC_KEY_FILE=/etc/execgate/dispatch/spec.key EXECGATE_STATE_DIR="$OUT/state" \
    "$ROOT/bin/execgate" config print --config "$OUT/executor.config.yaml")
  grep -q 'role: executor' <<<"$printed" || { echo "FAIL split executor config: not role executor"; exit 1; }
  ok "split executor config.yaml accepted by execgate's strict loader (role executor, no auth)"
fi
# The image build context must not carry the host's tools venv or
# binaries, but bin/execgate (the BUILDER=prebuilt stage takes it).
for p in .git .tools 'bin/*' '!bin/execgate'; do
  grep -qxF "$p" "$ROOT/.dockerignore" || { echo "FAIL .dockerignore lacks the line $p"; exit 1; }
done
ok ".dockerignore keeps .git, .tools and bin (but bin/execgate) out of the image build context"
# The systemd units load: systemd-analyze verify, with ExecStart pointed at
# this checkout's binary (the units name the installed path).
if command -v systemd-analyze >/dev/null 2>&1; then
  mkdir -p "$OUT/systemd"
  for u in "$ROOT"/deploy/systemd/*.service; do
    sed "s|/usr/local/bin/execgate|$ROOT/bin/execgate|" "$u" > "$OUT/systemd/$(basename "$u")"
  done
  verify=$(cd "$OUT/systemd" && systemd-analyze verify ./*.service 2>&1 || true)
  # A host without systemd as PID 1 (a container, this VM's CI) still loads
  # and checks the units; only lines naming them count.
  bad=$(grep -E 'execgate(-gateway)?\.service' <<<"$verify" || true)
  [ -z "$bad" ] || { echo "FAIL systemd units: $bad"; exit 1; }
  grep -q '^Delegate=yes' "$ROOT/deploy/systemd/execgate.service" || { echo "FAIL execgate.service lacks Delegate=yes"; exit 1; }
  ok "systemd units verified (systemd-analyze verify), execgate.service delegates its cgroup"
else
  echo "FAIL systemd-analyze is missing: the systemd units cannot be verified"; exit 1
fi
echo "deploy checks passed"
