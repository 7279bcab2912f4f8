#!/usr/bin/env bash
# The v2 suites, run inside the VM that scripts/vm-test.sh boots (from the
# repository root, as root, on a cgroup2-only hierarchy). Not meant to run
# on a host: it refuses to unless /sys/fs/cgroup is cgroup2 with no v1
# hierarchy anywhere.
#
# Go tests come as binaries built on the host ($EXECGATE_VM_OUT/bin); their
# output goes through go tool test2json and scripts/gotest-report.py, so a
# skip in a guarded package fails under CI=true as on the host.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${EXECGATE_VM_OUT:?set by scripts/vm-test.sh}"   # the test binaries (read-only here)
RES="${EXECGATE_VM_RESULTS:-/tmp}"                     # read-write, seen by the host
MOD=github.com/execgate/execgate
BIN="$ROOT/bin/execgate"
failed=()
step() {
  printf '\n\033[1m== vm: %s\033[0m\n' "$*"
  printf '%s %s\n' "$(date +%T)" "$*" >>"$RES/progress.log"
}
# A failure is also written to progress.log, which the host prints after
# the VM ends: the console's own output may be cut short by then.
fail() {
  printf 'vm: FAIL: %s\n' "$*"
  printf '%s FAIL: %s\n' "$(date +%T)" "$*" >>"$RES/progress.log"
  failed+=("$1")
}

if [ "$(stat -f -c %T /sys/fs/cgroup)" != cgroup2fs ] || grep -q ' cgroup ' /proc/mounts; then
  echo "vm-guest: /sys/fs/cgroup is not a cgroup2-only hierarchy: $(grep cgroup /proc/mounts | tr '\n' ';')"
  exit 2
fi
step "host: $(uname -r), $(nproc) CPUs, cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.controllers), own cgroup $(cat /proc/self/cgroup)"
export TMPDIR="${TMPDIR:-/tmp}"
# A zygote's start (Python and the harness's imports) takes seconds under
# emulation: the gateways started here get the stretched allowance too.
export EXECGATE_SANDBOX_ZYGOTES_START_MS=$(( 10000 * ${EXECGATE_TEST_TIME_SCALE:-1} ))
mkdir -p "$TMPDIR"

# gotests PKG RUN [SKIP]: runs the host-built test binary of PKG in PKG's
# dir, the tests matching RUN (all when empty) but not SKIP. A package's
# binary and results are named with its slashes as dashes (vm-test.sh
# builds sandbox/cgroups as bin/sandbox-cgroups.test).
gotests() {
  local pkg="$1" run="$2" skip="${3:-}" t0
  t0=$(date +%s)
  (cd "$pkg" && go tool test2json -p "$MOD/$pkg" -t "$OUT/bin/$(echo "$pkg" | tr / -).test" -test.v=test2json -test.count=1 \
    -test.timeout=45m ${run:+-test.run "$run"} ${skip:+-test.skip "$skip"}) >"$RES/$(echo "$pkg" | tr / -).json" 2>&1
  echo "$pkg: $(( $(date +%s) - t0 ))s" >>"$RES/times.log"
}

step "go tests under CI=${CI:-}: containment, sandbox (limits, level process), sandbox/cgroups, app (isolation)"
# Everything in these packages that touches cgroups, limits or level
# process. The rest of the sandbox suite (rendering, rootfs, imports, the
# bridge's framing) does not depend on the hierarchy and runs on the host.
SANDBOX_V2='^(TestProbeToolReturnsOK|TestRunOutcomes|TestCPULimitHoldsForAllProcessesTogether|TestJailIsolation|TestCancelledContextStopsTheRun|TestWarmPool|TestOneJailExhaustingPerUserLimitsDoesNotReachAnother|TestMultiprocessingPoolQueueLockAndSharedMemoryWork|TestJavaScriptRunsWithinThePidsLimit|TestJavaScriptProbeReturnsOK|TestProcess.*|TestZygote.*|TestSweep.*)$'
# The cgroup manager's own tests (detection, the v2 plan, stats, sweep)
# live in sandbox/cgroups since the sandbox's split (issue #27): the same
# tests SANDBOX_V2 matched there before.
CGROUPS_V2='^(TestCgroup.*|TestProbeCgroups.*|TestV2.*|TestSweep.*)$'
# (The README's probe through serve and a private state dir are the
# vm-probe step below; app tests that build execgate themselves would
# compile it again under emulation.)
APP_V2='^(TestIsolationProcessIsGrantedByPolicy|TestAnEscapeSyscallIsInTheEnvelopeTheAuditRecordAndTheMetric|TestSandboxUnavailableStillServesAndRunsNothing|TestQuotaE2EProcessTracking)$'
# Not here: the scan of every readable file for a gateway secret (no
# cgroup in it) outlasts the 60 s platform maximum under emulation; and
# TestEveryRuntime, the whole Python suite again on python3.13 (it doubles
# the suite's time; the cgroup facts do not depend on the runtime, and the
# host's go test runs it).
gotests containment "" "^(TestGatewaySecretIsNotFindableInTheJail|TestEveryRuntime)$"
gotests sandbox "$SANDBOX_V2"
gotests sandbox/cgroups "$CGROUPS_V2"
# The workspace's mounts (level process clones them another way on
# kernels before 6.15, as this VM's 6.1).
gotests sandbox/workspace ""
gotests app "$APP_V2"
# The report goes to the host too (go-tests.txt, printed after the VM ends
# when the tests failed).
if ! cat "$RES"/containment.json "$RES"/sandbox.json "$RES"/sandbox-cgroups.json "$RES"/sandbox-workspace.json "$RES"/app.json |
  /usr/bin/python3 scripts/gotest-report.py >"$RES/go-tests.txt" 2>&1; then
  fail "go tests ($(tail -1 "$RES/go-tests.txt"))"
fi
tail -40 "$RES/go-tests.txt"
cat "$RES/times.log"

state=$(mktemp -d)
# The VM has no network: execgate builds its runtimes (sandbox.runtimes:
# python3.11 and python3.13) into the state dir, as on a first start, from
# the pinned packages the host's go test fetched into .tools/cache/debs
# (each checked against the lock's SHA256 again).
mkdir -p "$state/runtimes/.debs"
if ! cp "$ROOT"/.tools/cache/debs/*.deb "$state/runtimes/.debs/"; then
  fail "runtime packages (no .debs in .tools/cache/debs: run go test ./rootfs on the host first; the VM cannot fetch them)"
fi
step "execgate smoke (state dir $state)"
"$BIN" smoke --state-dir "$state" || fail "smoke"

# smoke builds the default runtime only; serve builds every runtime at its
# start, so diagnose (which builds nothing) is run on what serve would have.
step "execgate rootfs build: every runtime of the lock, as serve does at its start"
for rt in $(/usr/bin/python3 -c 'import json; print(" ".join(r["name"] for r in json.load(open("rootfs/runtimes.lock.json"))["runtimes"]))'); do
  [ -d "$state/runtimes/$rt" ] && continue # smoke's
  "$BIN" rootfs build --state-dir "$state" --runtime "$rt" >/dev/null || fail "rootfs build --runtime $rt"
done

step "execgate diagnose"
"$BIN" diagnose --state-dir "$state" || fail "diagnose"

step "the README's curl probe against execgate serve"
scripts/vm-probe.sh "$BIN" "$state" || fail "serve probe"

step "a systemd-style delegated cgroup (Delegate=yes: trusted.delegate), shared with another process"
scripts/vm-cgroup-shapes.sh delegated "$BIN" "$state" || fail "delegated cgroup"

step "a container-style cgroup namespace whose root execgate shares with an init and a sidecar"
scripts/vm-cgroup-shapes.sh cgroupns "$BIN" "$state" || fail "cgroup namespace"

step "the same, its cgroup2 mounted read-only as a runtime gives a container that is not privileged"
scripts/vm-cgroup-shapes.sh cgroupns-ro "$BIN" "$state" || fail "read-only cgroup namespace"

step "a private cgroup namespace shown the host's hierarchy (a bind mount of the host's /sys/fs/cgroup): refused"
scripts/vm-cgroup-shapes.sh hostbind "$BIN" "$state" || fail "host cgroup2 bind-mounted"

step "systemd as PID 1 of a container managing deploy/systemd/execgate.service (Delegate=yes)"
scripts/vm-systemd.sh "$BIN" "$state" || fail "systemd unit"

if [ "${EXECGATE_VM_IMAGE:-0}" = 1 ]; then
  step "the shipped image under podman and its compose file (scripts/image.sh check)"
  scripts/image.sh check || fail "image"
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "vm: FAILED: ${failed[*]}"
  exit 1
fi
echo "vm: all v2 suites passed"
