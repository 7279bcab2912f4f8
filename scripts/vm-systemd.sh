#!/usr/bin/env bash
# scripts/vm-systemd.sh BIN STATE_DIR: boots systemd as PID 1 of a
# container (systemd-nspawn: the VM's own /usr, a volatile root) on the
# cgroup v2 VM and starts deploy/systemd/execgate.service in it as shipped,
# with a drop-in that only points its paths at this checkout (the binary,
# the tools, a loopback port). Then: /readyz 200, the README's probe ok,
# and the unit's cgroup as systemd made it: delegated (trusted.delegate),
# execgate's tree inside it, execgate itself moved into its supervisor
# leaf; stopping the unit leaves no run cgroup behind. For the VM
# (scripts/vm-guest.sh): the VM's own init is virtme-ng's, so this is where
# a real systemd manages the unit.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$(realpath "$1")" STATE="$2" PORT=18040
SCALE="${EXECGATE_TEST_TIME_SCALE:-1}"
CG=/sys/fs/cgroup
command -v systemd-nspawn >/dev/null || { echo "vm-systemd: missing systemd-nspawn (Debian package systemd-container)"; exit 1; }

units=$(mktemp -d)
mkdir -p "$units/execgate.service.d"
cp "$ROOT/deploy/systemd/execgate.service" "$units/"
# Only paths change: the binary and tools of this checkout, the embedded
# default on a loopback port, the zygotes' start stretched on a slow host.
cat >"$units/execgate.service.d/vm.conf" <<EOF
[Unit]
After=
Wants=
[Service]
Environment=EXECGATE_NSJAIL=$ROOT/.tools/bin/nsjail EXECGATE_UV=$ROOT/.tools/bin/uv EXECGATE_DENO=$ROOT/.tools/bin/deno
Environment=EXECGATE_SANDBOX_ZYGOTES_START_MS=$((10000 * SCALE))
ExecStart=
ExecStart=$BIN serve --listen 127.0.0.1:$PORT
EOF
# The container's /etc is empty (a volatile root): its first boot would
# stop at systemd-firstboot's questions.
ln -s /dev/null "$units/systemd-firstboot.service"
cat >"$units/execgate-vm.target" <<'EOF'
[Unit]
Description=execgate under systemd in the cgroup v2 VM
Requires=execgate.service
After=execgate.service
AllowIsolate=yes
EOF

log="$STATE/nspawn.log"
# --volatile=yes: a tmpfs root with the VM's /usr (nspawn refuses the
# root directory itself); the checkout read-only; the state dir (its rootfs
# built by an earlier step) as the unit's StateDirectory; the VM's CA
# certificates (/etc/ssl: a rootfs build takes its trust store from there,
# and the volatile /etc is empty).
systemd-nspawn -q -D / --volatile=yes --register=no --keep-unit \
  --bind-ro="$ROOT" --bind="$STATE:/var/lib/execgate" --bind-ro="$units:/etc/systemd/system.control" --bind-ro=/etc/ssl \
  -b -- --unit=execgate-vm.target systemd.firstboot=off >"$log" 2>&1 &
ns=$!
stop() { kill -TERM "$ns" 2>/dev/null; for _ in $(seq 1 $((60 * SCALE))); do kill -0 "$ns" 2>/dev/null || return 0; sleep 1; done; kill -KILL "$ns" 2>/dev/null || true; }
trap 'stop; rm -rf "$units"' EXIT

code=""
# systemd's boot and execgate's start: a minute, stretched on a slow host.
deadline=$(( $(date +%s) + 60 * SCALE ))
while [ "$(date +%s)" -lt "$deadline" ]; do
  kill -0 "$ns" 2>/dev/null || { echo "vm-systemd: the container stopped:"; tail -40 "$log"; exit 1; }
  code=$(curl -s -m 10 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/readyz" || true)
  [ "$code" = 200 ] && break
  sleep 2
done
if [ "$code" != 200 ]; then
  echo "vm-systemd: /readyz answered ${code:-nothing}, not 200: $(curl -s -m 10 "http://127.0.0.1:$PORT/readyz" | head -c 3000)"
  tail -40 "$log"
  sd=$(pgrep -x systemd | head -1)
  [ -n "$sd" ] && nsenter -t "$sd" -m -u -i -p journalctl -u execgate.service --no-pager 2>&1 | tail -40
  exit 1
fi

TOKEN=$("$BIN" token --tenant demo --state-dir "$STATE")
body=$(curl -s -i "http://127.0.0.1:$PORT/v1/execute" -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  -d '{"execution_id":"probe-systemd","tenant_id":"demo","source":"async def run(args, context):\n    return {\"ok\": True}\n","entrypoint":"run"}')
grep -q '"status":"ok"' <<<"$body" && grep -q '"result":{"ok":true}' <<<"$body" || { echo "$body"; echo "vm-systemd: the probe did not answer ok"; exit 1; }

# The unit's cgroup, as the VM sees it (below nspawn's).
unit=$(find "$CG" -type d -name execgate.service -path '*system.slice*' | head -1)
[ -n "$unit" ] || { echo "vm-systemd: no execgate.service cgroup under $CG"; exit 1; }
attr=$(/usr/bin/python3 -c 'import os,sys; print(os.getxattr(sys.argv[1], "trusted.delegate").decode())' "$unit" 2>/dev/null || true)
[ -n "$attr" ] || { echo "vm-systemd: systemd did not mark $unit delegated (trusted.delegate)"; exit 1; }
[ -d "$unit/execgate" ] || { echo "vm-systemd: execgate's tree is not inside the unit's cgroup $unit"; ls "$unit"; exit 1; }
serve=$(pgrep -f "$BIN serve --listen 127.0.0.1:$PORT" | head -1)
leaf=$(grep -l -x "$serve" "$unit"/*.supervisor/cgroup.procs 2>/dev/null | head -1 || true)
[ -n "$leaf" ] || { echo "vm-systemd: execgate (pid $serve) is not in a supervisor leaf of $unit"; cat "/proc/$serve/cgroup"; exit 1; }
echo "vm-systemd: systemd started execgate.service; the probe ran with its tree in $unit/execgate (trusted.delegate=$attr), execgate in $(dirname "$leaf")"

# Stop the unit through the container's systemd: every jail ends with it
# (KillMode=control-group) and no run cgroup is left.
sd=$(pgrep -x systemd | head -1)
nsenter -t "$sd" -m -u -i -p systemctl stop execgate.service
for _ in $(seq 1 $((30 * SCALE))); do
  pgrep -f "$BIN serve --listen 127.0.0.1:$PORT" >/dev/null || pgrep -x nsjail >/dev/null || break
  sleep 1
done
! pgrep -f "$BIN serve --listen 127.0.0.1:$PORT" >/dev/null && ! pgrep -x nsjail >/dev/null || { echo "vm-systemd: processes of the unit outlived its stop"; exit 1; }
left=$(find "$unit" -mindepth 1 -type d 2>/dev/null | head -3 || true)
[ -z "$left" ] || { echo "vm-systemd: cgroups left after the unit stopped: $left"; exit 1; }
echo "vm-systemd: systemctl stop ended every process of the unit; no cgroup of it left"
