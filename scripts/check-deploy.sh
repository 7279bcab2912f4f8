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
# The image build context must not carry the host's tools venv or binaries.
for p in .git .tools bin; do
  grep -qx "$p" "$ROOT/.dockerignore" || { echo "FAIL .dockerignore does not exclude $p"; exit 1; }
done
ok ".dockerignore keeps .git, .tools and bin out of the image build context"
echo "deploy checks passed"
