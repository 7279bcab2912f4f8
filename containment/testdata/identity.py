# Containment 20-22: environment, inherited file descriptors, id mapping.
import os
import stat


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
    with open("/proc/1/environ", "rb") as f:
        initial_env = [e.decode("latin-1") for e in f.read().split(b"\0") if e]
    with open("/proc/self/uid_map") as f:
        uid_map = f.read()
    with open("/proc/self/gid_map") as f:
        gid_map = f.read()
    return {
        "environ": dict(os.environ),
        "initial_environ": initial_env,
        "fds": fds,
        "write_log_fd_errno": write_log_fd,
        "uid_map": uid_map,
        "gid_map": gid_map,
        "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid()] + list(os.getresuid()) + list(os.getresgid()),
        "groups": os.getgroups(),
    }
