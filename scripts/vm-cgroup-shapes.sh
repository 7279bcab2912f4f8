#!/usr/bin/env bash
# scripts/vm-cgroup-shapes.sh delegated|cgroupns|cgroupns-ro|hostbind BIN [STATE_DIR]: runs `BIN smoke` (a
# real jailed run, its cgroups made by execgate) in one of the cgroup v2
# shapes production hosts give execgate, with other processes sharing its
# cgroup, and checks where execgate put its tree. For the cgroup v2 VM
# (scripts/vm-guest.sh); it changes the host's cgroup tree.
#
#   delegated  a systemd unit with Delegate=yes: its own cgroup
#              (system.slice/execgate-vm.service) marked with the
#              trusted.delegate xattr as systemd marks it, holding execgate
#              and a second process of the unit. execgate must keep its
#              tree inside that cgroup, moving the unit's processes into a
#              leaf.
#   cgroupns   a container: a private cgroup namespace and cgroup2 mount
#              whose root execgate shares with the container's init (a
#              shell entrypoint) and a sidecar. The root must delegate to
#              execgate's tree: every process in it is moved into a leaf.
#   cgroupns-ro  the same, with the cgroup2 mounted read-only as Docker,
#              podman and Kubernetes mount it for a container that is not
#              privileged: execgate (root, CAP_SYS_ADMIN) remounts it
#              read-write, then as cgroupns.
#   hostbind   a private cgroup namespace whose /sys/fs/cgroup is the
#              host's hierarchy (a bind mount of the host's): execgate
#              must refuse, naming the mismatch, and create nothing.
set -euo pipefail
shape="$1" BIN="$2"
CG=/sys/fs/cgroup
# A state dir whose rootfs an earlier step built saves building it again.
state="${3:-$(mktemp -d)}"
enable() { for c in memory pids cpu; do echo "+$c" >"$1/cgroup.subtree_control"; done; }
enable "$CG"
case "$shape" in
delegated)
  mkdir -p "$CG/system.slice"
  enable "$CG/system.slice"
  unit="$CG/system.slice/execgate-vm.service"
  rmdir "$unit"/execgate/* "$unit"/execgate "$unit"/*.supervisor 2>/dev/null || true
  mkdir -p "$unit"
  /usr/bin/python3 -c 'import os,sys; os.setxattr(sys.argv[1], "trusted.delegate", b"1")' "$unit"
  bash -c 'echo $$ >"$1/cgroup.procs"; sleep 600 & echo $! >"$3/sibling"; "$2" diagnose --json --state-dir "$3" >"$3/diagnose.json" || true; exec "$2" smoke --state-dir "$3"' _ "$unit" "$BIN" "$state"
  base="$unit"
  ;;
hostbind)
  ctr="$CG/execgate-vm-hostbind"
  mkdir -p "$ctr"
  rm -rf "$state/hostbind.out"
  set +e
  bash -c 'echo $$ >"$1/cgroup.procs"; exec unshare --cgroup --mount --propagation private "$2" smoke --state-dir "$3"' _ "$ctr" "$BIN" "$state" >"$state/hostbind.out" 2>&1
  rc=$?
  set -e
  cat "$state/hostbind.out"
  [ "$rc" != 0 ] || { echo "vm-cgroup-shapes: hostbind: smoke ran on the host's hierarchy seen from a private cgroup namespace"; exit 1; }
  grep -q "is not this process's cgroup namespace's hierarchy" "$state/hostbind.out" || { echo "vm-cgroup-shapes: hostbind: the refusal does not name the mismatch"; exit 1; }
  [ ! -e "$CG/execgate.supervisor" ] && [ ! -e "$ctr/execgate" ] || { echo "vm-cgroup-shapes: hostbind: execgate changed the tree before refusing"; exit 1; }
  rmdir "$ctr"
  echo "vm-cgroup-shapes: hostbind: refused, naming the mismatch; nothing created"
  exit 0
  ;;
cgroupns|cgroupns-ro)
  ro=""
  [ "$shape" = cgroupns-ro ] && ro="-o ro"
  ctr="$CG/execgate-vm-$shape"
  rmdir "$ctr"/execgate/* "$ctr"/execgate "$ctr"/*.supervisor 2>/dev/null || true
  mkdir -p "$ctr"
  bash -c 'echo $$ >"$1/cgroup.procs"; exec unshare --cgroup --mount --propagation private bash -c "
    umount -l /sys/fs/cgroup && mount -t cgroup2 $4 cgroup2 /sys/fs/cgroup || exit 1
    grep -q \"^0::/\$\" /proc/self/cgroup || { echo not at the namespace root; exit 1; }
    # The root of the namespace is an ordinary cgroup (the root of the host
    # has no cgroup.type): no internal processes once it delegates.
    [ -e /sys/fs/cgroup/cgroup.type ] || { echo the cgroup2 mount is not the one of the namespace; exit 1; }
    sleep 600 & echo \$! >\"\$2/sibling\"
    \"\$1\" diagnose --json --state-dir \"\$2\" >\"\$2/diagnose.json\" || true
    \"\$1\" smoke --state-dir \"\$2\"" _ "$2" "$3"' _ "$ctr" "$BIN" "$state" "$ro"
  base="$ctr"
  ;;
*) echo "usage: $0 delegated|cgroupns|cgroupns-ro|hostbind BIN"; exit 2 ;;
esac
sib=$(cat "$state/sibling")
leaf=$(grep -l -x "$sib" "$base"/*.supervisor/cgroup.procs 2>/dev/null | head -1 || true)
kill "$sib" 2>/dev/null || true
echo "diagnose (before the first run): $(/usr/bin/python3 -c 'import json,sys; print([c["detail"] for c in json.load(open(sys.argv[1])) if c["name"]=="cgroups"][0])' "$state/diagnose.json")"
diag=$(cat "$state/diagnose.json")
case "$shape" in
delegated) grep -q "runs below $base/execgate (its own cgroup, delegated (trusted.delegate))" <<<"$diag" || { echo "vm-cgroup-shapes: diagnose did not name the delegated cgroup"; exit 1; } ;;
cgroupns) grep -q "moves the [0-9]* process(es) sharing its base cgroup" <<<"$diag" || { echo "vm-cgroup-shapes: diagnose did not say it moves the processes sharing the namespace root"; exit 1; } ;;
cgroupns-ro) grep -q "remounts /sys/fs/cgroup read-write" <<<"$diag" || { echo "vm-cgroup-shapes: diagnose did not say it remounts the read-only cgroup2"; exit 1; } ;;
esac
[ -n "$leaf" ] || { echo "vm-cgroup-shapes: the process sharing $base was not moved into a leaf"; exit 1; }
[ -d "$base/execgate" ] || { echo "vm-cgroup-shapes: execgate's tree is not in $base"; exit 1; }
grep -qw memory "$base/cgroup.subtree_control" || { echo "vm-cgroup-shapes: $base does not delegate memory"; exit 1; }
echo "vm-cgroup-shapes: $shape: smoke ran with its tree in $base/execgate; the sibling moved into $(dirname "$leaf")"
