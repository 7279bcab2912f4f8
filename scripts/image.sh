#!/usr/bin/env bash
# scripts/image.sh build|check — the shipped image, built and run without a
# Docker daemon or an image registry.
#
#   build  (on the host) a Debian 12 base made from Debian's archive with
#          mmdebstrap (the host's own apt sources; package versions listed
#          in .tools/vm/base-packages.txt), imported as
#          localhost/execgate-base:bookworm; then the Dockerfile built with
#          buildah against it (BASE=that base, BUILDER=prebuilt: bin/execgate
#          built here CGO_ENABLED=0 -trimpath), saved as an OCI archive in
#          .tools/vm/execgate-image.tar, and loaded into a podman store on
#          an ext4 disk image of its own (.tools/vm/podman-store.img) that
#          scripts/vm-test.sh attaches to the VM: loading the archive in the
#          VM, through 9p under emulation, took minutes.
#   check  (on a cgroup v2 host: the VM of scripts/vm-test.sh) mounts that
#          store and runs the image:
#          - --privileged: /readyz 200 and the README's probe ok through
#            the published port, a JavaScript probe ok, the CA count inside
#            a jail of the image > 0, and the rootfs built at image build
#            time is the one serve uses (not rebuilt at start);
#          - the capability set deploy/helm documents (CAP_SYS_ADMIN,
#            seccomp and AppArmor unconfined, a private cgroup namespace,
#            no bind mount of the host's cgroup2): the same probes ok;
#          - unprivileged (podman's defaults): /readyz 503 and a run 503
#            SandboxUnavailable with its hint, never an unjailed run;
#          - deploy/compose/compose.yaml with podman-compose (its one-box
#            services, only the images named): the probe ok through its
#            port, Redis holding the quota keys.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="$(realpath -m "$ROOT/.tools/vm")"
BASE_TAG=localhost/execgate-base:bookworm
IMAGE=localhost/execgate:test
ARCHIVE="$OUT/execgate-image.tar"
# The compose check's Redis: Debian's redis-server on the same base (the
# registry's redis image is not reachable here).
REDIS_IMAGE=localhost/redis:7-bookworm
REDIS_ARCHIVE="$OUT/redis-image.tar"
STORE_IMG="$OUT/podman-store.img"
STORE_LABEL=egpodman
# The store's paths are recorded in podman's database: the host (loading)
# and the VM (running) use the same ones.
STORE=/var/tmp/execgate-podman
RUNROOT=/run/execgate-podman
P=(podman --root "$STORE/root" --runroot "$RUNROOT" --storage-driver overlay --cgroup-manager cgroupfs --events-backend file)
log() {
  printf '\033[1mimage:\033[0m %s\n' "$*" >&2
  # In the VM, also where the host can follow it as it happens.
  [ -n "${EXECGATE_VM_RESULTS:-}" ] && printf '%s image: %s\n' "$(date +%T)" "$*" >>"$EXECGATE_VM_RESULTS/progress.log" || true
}
die() { log "FAIL: $*"; exit 1; }
# show BODY: a response the check refuses, where the host sees it whole.
show() { printf '%s\n' "$1" >&2; [ -n "${EXECGATE_VM_RESULTS:-}" ] && printf '%s\n' "$1" | head -c 4000 >>"$EXECGATE_VM_RESULTS/progress.log" || true; }
mkdir -p "$OUT"

build() {
  for t in mmdebstrap buildah podman; do command -v "$t" >/dev/null || die "missing $t (Debian package $t)"; done
  if ! buildah images --quiet "$BASE_TAG" >/dev/null 2>&1; then
    log "making the base from Debian's archive (mmdebstrap bookworm, minbase + python3, python3-venv, ca-certificates)"
    sources=/etc/apt/sources.list.d/debian.sources
    [ -r "$sources" ] || sources=/etc/apt/sources.list
    mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
      --customize-hook='chroot "$1" dpkg-query -W -f="\${Package} \${Version}\n" > "'"$OUT"'/base-packages.txt"' \
      bookworm "$OUT/base.tar" "$sources"
    podman import --quiet "$OUT/base.tar" "$BASE_TAG" >/dev/null
    rm -f "$OUT/base.tar"
  fi
  log "building bin/execgate (CGO_ENABLED=0 -trimpath) and the image $IMAGE with buildah"
  CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o bin/execgate ./cmd/execgate
  # pip inside the build trusts what pip here trusts (a TLS-inspecting
  # proxy's CA, when this host's pip is configured with one): the bundle is
  # mounted for the build only.
  cert="${PIP_CERT:-$("$ROOT/.tools/venv/bin/pip" config get global.cert 2>/dev/null || true)}"
  certargs=()
  if [ -n "$cert" ] && [ -r "$cert" ]; then
    certargs=(--volume "$(realpath "$cert"):/run/execgate-build/ca.crt:ro" --build-arg PIP_CERT=/run/execgate-build/ca.crt)
  fi
  # chroot isolation: the RUN steps need no OCI runtime or cgroups here.
  buildah bud --quiet --isolation chroot --network host --layers "${certargs[@]}" \
    --build-arg BASE="$BASE_TAG" --build-arg BUILDER=prebuilt -t "$IMAGE" -f Dockerfile . >/dev/null
  if ! buildah images --quiet "$REDIS_IMAGE" >/dev/null 2>&1; then
    log "building $REDIS_IMAGE from the same base (Debian's redis-server) for the compose check"
    local ctr
    ctr=$(buildah from --quiet "$BASE_TAG")
    buildah run --isolation chroot --network host "$ctr" -- sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null && rm -rf /var/lib/apt/lists/*'
    # As the registry image's entrypoint does: redis-server runs with
    # protected mode off (the compose network is the boundary).
    printf '#!/bin/sh\nif [ "$1" = redis-server ]; then shift; exec redis-server --protected-mode no "$@"; fi\nexec "$@"\n' >"$OUT/redis-entrypoint.sh"
    buildah copy --quiet --chmod 0755 "$ctr" "$OUT/redis-entrypoint.sh" /usr/local/bin/redis-entrypoint.sh
    buildah config --entrypoint '["/usr/local/bin/redis-entrypoint.sh"]' --cmd '["redis-server"]' --port 6379 "$ctr"
    buildah commit --quiet "$ctr" "$REDIS_IMAGE" >/dev/null
    buildah rm "$ctr" >/dev/null
  fi
  rm -f "$ARCHIVE" "$REDIS_ARCHIVE"
  podman save --quiet --format oci-archive -o "$REDIS_ARCHIVE" "$REDIS_IMAGE"
  podman save --quiet --format oci-archive -o "$ARCHIVE" "$IMAGE"
  log "saved $(du -h "$ARCHIVE" | cut -f1) to $ARCHIVE"
  log "loading it into a podman store on an ext4 disk image for the VM ($STORE_IMG)"
  command -v mkfs.ext4 >/dev/null || die "missing mkfs.ext4 (Debian package e2fsprogs)"
  mountpoint -q "$STORE" && umount "$STORE"
  rm -f "$STORE_IMG"
  truncate -s 6G "$STORE_IMG" # sparse: the image, three containers and their volumes
  mkfs.ext4 -q -F -L "$STORE_LABEL" "$STORE_IMG"
  mkdir -p "$STORE"
  mount -o loop "$STORE_IMG" "$STORE"
  local rc=0
  "${P[@]}" load --quiet -i "$ARCHIVE" >/dev/null || rc=$?
  "${P[@]}" load --quiet -i "$REDIS_ARCHIVE" >/dev/null || rc=$?
  "${P[@]}" images --format '{{.Repository}}:{{.Tag}} {{.Size}}' >&2 || true
  umount "$STORE"
  rm -rf "$RUNROOT"
  [ "$rc" = 0 ] || die "podman load into $STORE_IMG failed"
  log "the store holds $IMAGE ($(du -h "$STORE_IMG" | cut -f1) used of $(du -h --apparent-size "$STORE_IMG" | cut -f1))"
}

wait_ready() { # NAME PORT WANT: waits (at most 480 s) for /readyz to answer WANT
  local code="" deadline=$(( $(date +%s) + 480 ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    code=$(curl -s -m 10 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$2/readyz" || true)
    [ "$code" = "$3" ] && return 0
    if [ "$("${P[@]}" inspect -f '{{.State.Running}}' "$1" 2>/dev/null)" != true ]; then
      "${P[@]}" logs "$1" 2>&1 | tail -30; die "$1 stopped before /readyz answered $3"
    fi
    sleep 2
  done
  "${P[@]}" logs "$1" 2>&1 | tail -30
  die "$1: /readyz answered $code, not $3"
}

execute() { # PORT TOKEN BODY: prints the response, status line first
  curl -s -i "http://127.0.0.1:$1/v1/execute" -H "Authorization: Bearer $2" -H 'Content-Type: application/json' -d "$3"
}

PY_PROBE='{"execution_id":"probe","tenant_id":"demo","source":"async def run(args, context):\n    return {\"ok\": True}\n","entrypoint":"run"}'
# Deno's start takes seconds under emulation: the JavaScript probe asks for
# the demo tenant's 30 s maximum (the Python probe is the README's, as is).
JS_PROBE='{"tenant_id":"demo","language":"javascript","source":"export function run(args, context) {\n  return {ok: true, js: typeof Deno};\n}\n","limits":{"timeout_ms":30000,"cpu_ms":30000}}'

CA_PROBE='{"tenant_id":"demo","source":"import ssl\ndef run(args, context):\n    return {\"trusted_ca_count\": ssl.create_default_context().cert_store_stats()[\"x509_ca\"]}\n","limits":{"timeout_ms":30000,"cpu_ms":30000}}'

jailed() { # NAME PORT: the probes through a running container
  local name="$1" port="$2" token out
  token=$("${P[@]}" exec "$name" execgate token --tenant demo)
  out=$(execute "$port" "$token" "$PY_PROBE")
  grep -q '^HTTP/1.1 200' <<<"$out" && grep -q '"status":"ok"' <<<"$out" && grep -q '"result":{"ok":true}' <<<"$out" ||
    { show "$out"; die "$name: the README's probe did not answer status ok"; }
  log "$name: the README's probe answered status ok"
  out=$(execute "$port" "$token" "$JS_PROBE")
  grep -q '"status":"ok"' <<<"$out" && grep -q '"js":"object"' <<<"$out" || { show "$out"; die "$name: the JavaScript probe did not answer ok"; }
  # trusted_ca_count: what a tool inside a jail of the image trusts.
  out=$(execute "$port" "$token" "$CA_PROBE")
  ca=$(grep -o '"trusted_ca_count":[0-9]*' <<<"$out" | cut -d: -f2)
  [ "${ca:-0}" -gt 0 ] || { show "$out"; die "$name: no CA certificates inside a jail of the image"; }
  log "$name: probe ok, JavaScript ok, $ca CA certificates inside the jail"
}

check() { # check [priv] [caps] [unpriv] [compose]: the named runs only (default all)
  local want="${*:-priv caps unpriv compose}"
  [ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ] || die "the image check runs on a cgroup v2 host (scripts/vm-test.sh)"
  # The store scripts/image.sh build loaded, on the disk scripts/vm-test.sh
  # attached (ext4: podman's overlay driver cannot stack on the VM's
  # overlay root).
  local dev
  dev=$(findfs "LABEL=$STORE_LABEL" 2>/dev/null) || die "no disk labelled $STORE_LABEL: run scripts/image.sh build on the host, then EXECGATE_VM_IMAGE=1 scripts/vm-test.sh"
  mountpoint -q "$STORE" || { mkdir -p "$STORE" && mount "$dev" "$STORE"; }
  trap '"${P[@]}" rm -f -t 0 eg-priv eg-caps eg-unpriv egc_execgate_1 egc_redis_1 >/dev/null 2>&1 || true; umount "$STORE" 2>/dev/null || true' EXIT
  # A store used by an earlier check starts over from the loaded image.
  "${P[@]}" rm -af -t 0 >/dev/null 2>&1 || true
  "${P[@]}" volume prune -f >/dev/null 2>&1 || true
  "${P[@]}" image exists "$IMAGE" || die "$IMAGE is not in the store on $dev"
  built=$("${P[@]}" run --rm --entrypoint sha256sum "$IMAGE" /var/lib/execgate/runtimes/python3.11/etc/execgate/manifest.json | cut -d' ' -f1)

  if [[ " $want " == *" priv "* ]]; then
  log "podman run --privileged"
  "${P[@]}" run -d --name eg-priv --privileged -p 127.0.0.1:18030:8010 "$IMAGE" >/dev/null
  wait_ready eg-priv 18030 200
  log "eg-priv: /readyz 200"
  jailed eg-priv 18030
  now=$("${P[@]}" exec eg-priv sha256sum /var/lib/execgate/runtimes/python3.11/etc/execgate/manifest.json | cut -d' ' -f1)
  [ "$built" = "$now" ] || die "serve rebuilt the default runtime at start (manifest $built at build, $now after start)"
  log "eg-priv: serve used the default runtime built into the image (manifest sha256 ${built:0:12})"

  fi
  if [[ " $want " == *" caps "* ]]; then
  log "podman run with the capability set the Helm chart documents (SYS_ADMIN, seccomp and AppArmor unconfined, a private cgroup namespace)"
  "${P[@]}" run -d --name eg-caps --cap-add SYS_ADMIN --cap-add AUDIT_READ \
    --security-opt seccomp=unconfined --security-opt apparmor=unconfined --security-opt unmask=ALL \
    --cgroupns private \
    -p 127.0.0.1:18031:8010 "$IMAGE" >/dev/null
  wait_ready eg-caps 18031 200
  jailed eg-caps 18031
  # podman mounts the namespace's cgroup2 read-write for a container with
  # CAP_SYS_ADMIN; a runtime that mounts it read-only is the cgroupns-ro
  # shape of scripts/vm-cgroup-shapes.sh (execgate remounts it).
  log "eg-caps: /sys/fs/cgroup is $("${P[@]}" exec eg-caps awk '$2 == "/sys/fs/cgroup" {print $3 " " $4}' /proc/mounts) in the container"

  fi
  if [[ " $want " == *" unpriv "* ]]; then
  log "podman run unprivileged (its defaults)"
  "${P[@]}" run -d --name eg-unpriv -p 127.0.0.1:18032:8010 "$IMAGE" >/dev/null
  wait_ready eg-unpriv 18032 503
  token=$("${P[@]}" exec eg-unpriv execgate token --tenant demo)
  out=$(execute 18032 "$token" "$PY_PROBE")
  grep -q '^HTTP/1.1 503' <<<"$out" && grep -q '"type":"SandboxUnavailable"' <<<"$out" && grep -q '"traceback":"[^"]*privileged' <<<"$out" ||
    { show "$out"; die "eg-unpriv: a run was not refused 503 SandboxUnavailable with its hint"; }
  log "eg-unpriv: /readyz 503, a run 503 SandboxUnavailable: $(grep -o '"message":"[^"]*"' <<<"$out" | head -1)"
  fi
  if [[ " $want " == *" compose "* ]]; then
    compose
  fi
  log "the image passed"
}

# compose: deploy/compose/compose.yaml as shipped (its one-box services,
# execgate with Redis-backed quotas), with only the images named: the
# probe ok through its published port 8010, the quota keys in its Redis.
compose() {
  command -v podman-compose >/dev/null || die "missing podman-compose (Debian package podman-compose)"
  local dir out token keys
  dir=$(mktemp -d)
  cp deploy/compose/compose.yaml deploy/compose/config.yaml deploy/compose/executor.yaml "$dir/"
  : >"$dir/spec.key" # the split profile's secret file must exist; the one-box services do not read it
  printf 'services:\n  redis: { image: %s }\n  execgate: { image: %s }\n' "$REDIS_IMAGE" "$IMAGE" >"$dir/images.yaml"
  local PC=(podman-compose --podman-args "${P[*]:1}" -p egc -f "$dir/compose.yaml" -f "$dir/images.yaml")
  log "podman-compose up (deploy/compose/compose.yaml: redis, execgate)"
  "${PC[@]}" up -d --no-build redis execgate >"$dir/up.log" 2>&1 || { show "$(tail -30 "$dir/up.log")"; die "compose: up failed"; }
  wait_ready egc_execgate_1 8010 200
  token=$("${P[@]}" exec egc_execgate_1 execgate token --tenant demo)
  out=$(execute 8010 "$token" "$PY_PROBE")
  grep -q '^HTTP/1.1 200' <<<"$out" && grep -q '"result":{"ok":true}' <<<"$out" || { show "$out"; die "compose: the README's probe did not answer status ok"; }
  keys=$("${P[@]}" exec egc_redis_1 redis-cli --scan | wc -l)
  [ "$keys" -gt 0 ] || die "compose: the probe left no key in the compose file's Redis (quota.backend redis not in use?)"
  log "compose: /readyz 200, the probe ok through port 8010, $keys keys in its Redis"
  "${PC[@]}" down >/dev/null 2>&1 || true
  rm -rf "$dir"
}

case "${1:-}" in
build) build ;;
check) shift; check "$@" ;;
*) echo "usage: $0 build|check"; exit 2 ;;
esac
