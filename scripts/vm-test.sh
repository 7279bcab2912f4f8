#!/usr/bin/env bash
# scripts/vm-test.sh [COMMAND ARGS...]
#
# Boots a nested VM whose userspace runs on the unified cgroup v2 hierarchy
# only (systemd.unified_cgroup_hierarchy=1 cgroup_no_v1=all: no v1
# controller exists there, no manual cgroup set-up is done inside) and runs
# COMMAND in it from the repository root, exiting with COMMAND's status.
# Without COMMAND it runs the v2 suites (scripts/vm-guest.sh): the
# containment suite, the cgroup and level-process sandbox tests and the app
# isolation tests under CI=true (no skips), `execgate smoke`, the README's
# curl probe against `execgate serve`, execgate under a systemd-style
# delegated cgroup and inside a container-style cgroup namespace shared
# with other processes, and the shipped image run with podman
# (scripts/image.sh build here, check there; EXECGATE_VM_IMAGE=0 leaves it
# out, and with a COMMAND it is only attached when EXECGATE_VM_IMAGE=1).
#
# The VM is Debian's stock kernel (linux-image-amd64) under qemu, booted by
# virtme-ng over a copy-on-write view of this host's own root filesystem,
# so the guest runs the very binaries built here. KVM is used where it
# really works (a probe boots the kernel under KVM for a few seconds);
# otherwise qemu emulates the CPU (TCG), 4-15x slower, and timing
# allowances in the tests are scaled by EXECGATE_TEST_TIME_SCALE.
# Anything missing (qemu, a kernel, busybox-static, virtme-ng) fails the
# script, naming it: it never passes without having booted the VM.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TOOLS="$(realpath -m "$ROOT/.tools")"
OUT="$TOOLS/vm"
VM_MEMORY="${EXECGATE_VM_MEMORY:-6G}"
VM_CPUS="${EXECGATE_VM_CPUS:-2}"
VM_TIMEOUT="${EXECGATE_VM_TIMEOUT:-3000}" # seconds for the whole VM run

log() { printf '\033[1mvm-test:\033[0m %s\n' "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

missing=()
command -v qemu-system-x86_64 >/dev/null 2>&1 || missing+=("qemu-system-x86_64 (Debian package qemu-system-x86)")
KERNEL="${EXECGATE_VM_KERNEL:-$(ls -1v /boot/vmlinuz-* 2>/dev/null | tail -1 || true)}"
[ -n "$KERNEL" ] && [ -r "$KERNEL" ] || missing+=("a kernel in /boot (Debian package linux-image-amd64)")
bb="$(ldd /bin/busybox 2>&1 || true)" # a static binary: "not a dynamic executable"
{ [ -x /bin/busybox ] && grep -q "not a dynamic" <<<"$bb"; } || missing+=("a static busybox (Debian package busybox-static)")
VNG="$TOOLS/venv/bin/vng"
[ -x "$VNG" ] || missing+=("virtme-ng in $TOOLS/venv (scripts/setup.sh --test installs it)")
[ -x "$ROOT/bin/execgate" ] || missing+=("bin/execgate (scripts/setup.sh builds it)")
if [ ${#missing[@]} -gt 0 ]; then
  for m in "${missing[@]}"; do log "missing: $m"; done
  die "the cgroup v2 VM cannot boot on this host"
fi

# KVM only where it truly runs a stock kernel: a nested software layer may
# offer /dev/kvm and then hang or abort in the guest.
accel=(--disable-kvm)
ACCEL_NAME=tcg
if [ "${EXECGATE_VM_ACCEL:-auto}" != tcg ] && [ -w /dev/kvm ]; then
  if timeout 20 qemu-system-x86_64 -accel kvm -cpu host -m 256 -nographic -no-reboot -kernel "$KERNEL" \
    -append "console=ttyS0 earlyprintk=ttyS0 panic=-1" 2>&1 </dev/null | grep -q -m1 'Linux version'; then
    accel=()
    ACCEL_NAME=kvm
  fi
fi
[ "${EXECGATE_VM_ACCEL:-auto}" = kvm ] && [ "$ACCEL_NAME" != kvm ] && die "EXECGATE_VM_ACCEL=kvm but KVM cannot boot $KERNEL here"
scale=1
[ "$ACCEL_NAME" = tcg ] && scale="${EXECGATE_TEST_TIME_SCALE:-8}"
log "booting $(basename "$KERNEL") with $ACCEL_NAME ($VM_CPUS CPUs, $VM_MEMORY), cgroup v2 only; time allowances x$scale"

# Test binaries are built here: go test's own build step is slow in the VM.
mkdir -p "$OUT/bin"
# What the guest writes for the host: its status and logs. The guest sees
# the host's root read-only; the repository is given to it copy-on-write
# (its writes land in the guest's memory), this one directory read-write.
RES="$(mktemp -d /tmp/execgate-vm.XXXXXX)"
trap 'rm -rf "$RES"' EXIT
# The image check is part of the default run.
[ $# -eq 0 ] && export EXECGATE_VM_IMAGE="${EXECGATE_VM_IMAGE:-1}"
if [ $# -eq 0 ]; then
  log "building the test binaries"
  # One binary per package vm-guest.sh runs, named with its slashes as
  # dashes (sandbox/cgroups → bin/sandbox-cgroups.test).
  for pkg in containment sandbox sandbox/cgroups sandbox/workspace app; do
    go test -c -trimpath -o "$OUT/bin/$(echo "$pkg" | tr / -).test" "./$pkg"
  done
  if [ "${EXECGATE_VM_IMAGE:-0}" = 1 ]; then
    ./scripts/image.sh build
  fi
fi
# The image check's podman store (scripts/image.sh build loads the image
# into it on the host) is an ext4 disk of the VM.
disks=()
if [ "${EXECGATE_VM_IMAGE:-0}" = 1 ]; then
  [ -r "$OUT/podman-store.img" ] || die "no $OUT/podman-store.img: run scripts/image.sh build first"
  disks=(--disk "$OUT/podman-store.img")
fi

# The guest's command line, quoted for its shell.
cmd="$(printf '%q ' "$@")"
[ $# -eq 0 ] && cmd="scripts/vm-guest.sh"
guest="cd $(printf '%q' "$ROOT") && mkdir -p /tmp/vmhome && export HOME=/tmp/vmhome GOCACHE=/tmp/vmhome/go-build \
GOMODCACHE=$(printf '%q' "$(go env GOMODCACHE)") GOPROXY=off \
CI=${CI:-} EXECGATE_TEST_TIME_SCALE=$scale EXECGATE_VM_ACCEL=$ACCEL_NAME EXECGATE_VM_IMAGE=${EXECGATE_VM_IMAGE:-0} \
EXECGATE_VM_OUT=$(printf '%q' "$OUT") EXECGATE_VM_RESULTS=$(printf '%q' "$RES") PATH=$(printf '%q' "$TOOLS/bin:$PATH"); \
$cmd; echo \$? > $(printf '%q' "$RES/status")"

start=$(date +%s)
set +e
PATH="$TOOLS/venv/bin:$PATH" timeout "$VM_TIMEOUT" "$VNG" --run "$KERNEL" "${accel[@]}" --cpus "$VM_CPUS" --memory "$VM_MEMORY" \
  --append "systemd.unified_cgroup_hierarchy=1 cgroup_no_v1=all" \
  --overlay-rwdir "$ROOT" --rwdir "$RES" "${disks[@]}" --cwd "$ROOT" --exec "$guest" </dev/null
vng_status=$?
set -e
took=$(( $(date +%s) - start ))
if [ ! -s "$RES/status" ]; then
  die "the VM ended (status $vng_status after ${took}s) without running the command to its end"
fi
status="$(cat "$RES/status")"
[ -s "$RES/progress.log" ] && { log "steps in the VM:"; cat "$RES/progress.log" >&2; }
if [ "$status" != 0 ] && [ -s "$RES/go-tests.txt" ] && grep -q FAIL "$RES/go-tests.txt"; then
  log "the go tests' failures in the VM:"
  grep -E -B2 -A25 -- '^(--- FAIL|FAIL)' "$RES/go-tests.txt" | head -200 >&2
fi
log "VM ($ACCEL_NAME) finished in ${took}s; command status $status"
exit "$status"
