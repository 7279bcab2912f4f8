# Containment 37: per-user kernel limits are per jail.
# mode "hold": take every inotify instance, every POSIX message queue byte
# and every process the jail may have, name itself "eg-limits-hold" (so the
# test finds it from the host) and wait hold_ms.
# mode "probe": report whether inotify_init, mq_open and fork work.
import ctypes
import errno
import os
import time

libc = ctypes.CDLL(None, use_errno=True)
O_RDWR, O_CREAT = 2, 0o100


def err():
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))


def inotify():
    fd = libc.inotify_init()
    return fd, ("ok" if fd >= 0 else err())


def mq(i):
    libc.mq_open.restype = ctypes.c_int
    fd = libc.mq_open(("/eg-%d-%d" % (os.getpid(), i)).encode(), O_RDWR | O_CREAT, 0o600, None)
    return fd, ("ok" if fd >= 0 else err())


def fork():
    try:
        pid = os.fork()
    except OSError as e:
        return 0, errno.errorcode.get(e.errno, str(e.errno))
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    return pid, "ok"


def run(args, context):
    if args["mode"] == "probe":
        pid, forked = fork()
        if pid:
            os.kill(pid, 9)
        return {"inotify_init": inotify()[1], "mq_open": mq(0)[1], "fork": forked}
    held = {"inotify": 0, "mq": 0, "procs": 0}
    ends = {}
    for key, take in (("inotify", lambda i: inotify()), ("mq", mq), ("procs", lambda i: fork())):
        i = 0
        while i < 100000:
            fd, outcome = take(i)
            if outcome != "ok":
                ends[key] = outcome
                break
            held[key] += 1
            i += 1
    libc.prctl(15, b"eg-limits-hold", 0, 0, 0)  # PR_SET_NAME
    time.sleep(args["hold_ms"] / 1000)
    return {"held": held, "ends": ends}
