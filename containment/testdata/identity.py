# Containment 20-22: environment, inherited file descriptors, id mapping.
# With hold_ms, it then waits that long so the test can look at the jail's
# processes from the host.
import errno
import os
import stat
import time


def run(args, context):
    fds = {}
    for fd in range(0, 1024):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        kind = "fifo" if stat.S_ISFIFO(st.st_mode) else "chr" if stat.S_ISCHR(st.st_mode) else \
            "reg" if stat.S_ISREG(st.st_mode) else "sock" if stat.S_ISSOCK(st.st_mode) else "other"
        fds[str(fd)] = kind
    write_log_fd = 0
    try:
        os.write(args["log_fd"], b"[F] forged nsjail log line\n")
    except OSError as e:
        write_log_fd = e.errno
    # Every process of the jail is non-dumpable, so the kernel keeps even
    # its own /proc/<pid>/environ (mode 0400, owned by root) from it.
    initial_env, initial_env_errno = None, 0
    try:
        with open("/proc/1/environ", "rb") as f:
            initial_env = [e.decode("latin-1") for e in f.read().split(b"\0") if e]
    except OSError as e:
        initial_env_errno = e.errno
    with open("/proc/self/uid_map") as f:
        uid_map = f.read()
    with open("/proc/self/gid_map") as f:
        gid_map = f.read()
    if args.get("hold_ms"):
        time.sleep(args["hold_ms"] / 1000)
    return {
        "environ": dict(os.environ),
        "initial_environ": initial_env,
        "initial_environ_errno": initial_env_errno,
        "fds": fds,
        "write_log_fd_errno": write_log_fd,
        "uid_map": uid_map,
        "gid_map": gid_map,
        "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid()] + list(os.getresuid()) + list(os.getresgid()),
        "groups": os.getgroups(),
    }
