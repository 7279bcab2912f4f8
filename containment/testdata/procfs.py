# Containment 18 and 19: what /proc shows and allows, and whether cgroupfs
# is reachable.
import os


def err_of(fn):
    try:
        fn()
        return 0
    except OSError as e:
        return e.errno


def read(path):
    with open(path, "rb") as f:
        return f.read()


def write(path, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def run(args, context):
    pids = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        entry = {}
        for what in ("cmdline", "environ"):
            try:
                entry[what] = read("/proc/%s/%s" % (name, what)).replace(b"\0", b" ").decode("latin-1")
            except OSError as e:
                entry[what] = "<errno %d>" % e.errno
        pids[name] = entry
    mounts = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            sep = parts.index("-")
            mounts.append({"point": parts[4], "fstype": parts[sep + 1]})
    return {
        "pids": pids,
        "write_proc_sys": err_of(lambda: write("/proc/sys/kernel/hostname", b"pwned")),
        "write_sysrq": err_of(lambda: write("/proc/sysrq-trigger", b"h")),
        "read_kcore": err_of(lambda: read("/proc/kcore")[:1]),
        "sys_fs_cgroup": os.path.exists("/sys/fs/cgroup"),
        "sys": os.path.exists("/sys"),
        "self_cgroup": read("/proc/self/cgroup").decode(),
        "mounts": mounts,
    }
