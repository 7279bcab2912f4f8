# Containment 12-17: read-only system paths, bounded scratch, symlinks to
# host paths, residue between runs, absent host paths, a minimal /dev.
import errno
import os
import stat


def err_of(fn, *a):
    try:
        fn(*a)
        return 0
    except OSError as e:
        return e.errno


def mount_of(path):
    """The mount (point, options) holding path, from mountinfo."""
    best = ("", "")
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            point, opts = parts[4], parts[5]
            if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= len(best[0]):
                best = (point, opts)
    return {"point": best[0], "ro": "ro" in best[1].split(","), "options": best[1]}


def fstype_of(point):
    """The filesystem type and super options of the mount at point."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            if parts[4] == point:
                rest = parts[parts.index("-") + 1:]
                return {"fstype": rest[0], "super": rest[2] if len(rest) > 2 else ""}
    return {"fstype": "", "super": ""}


def readonly(args):
    out = {}
    for d in args["dirs"]:
        out[d] = {
            "create": err_of(lambda: os.close(os.open(os.path.join(d, ".probe"), os.O_CREAT | os.O_WRONLY, 0o644))),
            "mkdir": err_of(os.mkdir, os.path.join(d, ".probe-dir")),
            "mount": mount_of(os.path.realpath(d)),
        }
    for p in args["files"]:
        out[p] = {
            "open_write": err_of(lambda: os.close(os.open(p, os.O_WRONLY | os.O_APPEND))),
            "unlink": err_of(os.unlink, p),
            "rename": err_of(os.rename, p, p + ".moved"),
            "mount": mount_of(p),
        }
    return out


def scratch(args):
    cap = args["tmp_mb"] << 20
    block = b"w" * (1 << 20)
    big_err, big = 0, 0
    try:
        with open("/tmp/big", "wb", buffering=0) as f:
            for _ in range(args["tmp_mb"] * 2):
                f.write(block)
                big += len(block)
    except OSError as e:
        big_err = e.errno
    big = os.path.getsize("/tmp/big")
    os.unlink("/tmp/big")
    small, count, small_err = b"m" * (64 << 10), 0, 0
    try:
        while count < 100000:
            with open("/tmp/small-%d" % count, "wb") as f:
                f.write(small)
            count += 1
    except OSError as e:
        small_err = e.errno
    total = 0
    for name in os.listdir("/tmp"):
        if name.startswith("small-"):
            total += os.path.getsize(os.path.join("/tmp", name))
    return {"cap": cap, "big": big, "big_errno": big_err, "small_total": total, "small_files": count, "small_errno": small_err}


def symlinks(args):
    out = {}
    for i, target in enumerate(args["targets"]):
        link = "/tmp/link-%d" % i
        os.symlink(target, link)
        try:
            with open(link, "rb") as f:
                out[target] = {"read": f.read(4096).decode("latin-1"), "errno": 0}
        except OSError as e:
            out[target] = {"read": "", "errno": e.errno}
    out["/proc/1/root"] = os.readlink("/proc/1/root")
    return out


def write_marker(args):
    with open("/tmp/" + args["name"], "w") as f:
        f.write("run A was here")
    return {"tmp": sorted(os.listdir("/tmp"))}


def read_marker(args):
    return {"exists": os.path.exists("/tmp/" + args["name"]), "tmp": sorted(os.listdir("/tmp"))}


def host_paths(args):
    out = {p: os.path.lexists(p) for p in args["paths"]}
    with open("/etc/passwd") as f:
        passwd = f.read()
    return {"exists": out, "passwd": passwd}


def dev(args):
    out = {}
    for name in sorted(os.listdir("/dev")):
        st = os.lstat("/dev/" + name)
        kind = "char" if stat.S_ISCHR(st.st_mode) else "block" if stat.S_ISBLK(st.st_mode) else \
            "link" if stat.S_ISLNK(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "other"
        out[name] = {"kind": kind, "major": os.major(st.st_rdev), "minor": os.minor(st.st_rdev)}
    with open("/dev/null", "wb") as f:
        f.write(b"discarded")
    with open("/dev/zero", "rb") as f:
        zero = f.read(4) == b"\0\0\0\0"
    with open("/dev/urandom", "rb") as f:
        rnd = len(f.read(16))
    shm = dict(mount_of("/dev/shm"), **fstype_of("/dev/shm")) if "shm" in out else None
    return {"entries": out, "zero_ok": zero, "urandom_bytes": rnd, "shm": shm}


def run(args, context):
    return globals()[args["check"]](args)
