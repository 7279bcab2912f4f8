# State a run could leave for another run (zygote_integration_test.go,
# TestProcessRunLeavesNothingToAnotherRun). With args {"plant": secret} the
# run first leaves the secret in every family below, then looks; without,
# it only looks. Looking reports, per family, what of another run it found
# (None: nothing), so a planting run must find its own secret everywhere
# (the probe works) and any other run nothing.
import builtins
import ctypes
import gc
import os
import sys
import threading

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

KEY = 0x45474C4B  # the SysV key every family uses ("EGLK")
MQ_NAME = b"execgate-leak"  # the kernel's name: glibc strips the "/"
MARK = "execgate-leak-heap"
IPC_CREAT, IPC_NOWAIT = 0o1000, 0o4000
SHM_STAT, SEM_STAT, MSG_STAT = 13, 18, 11
GETVAL, SETVAL = 12, 16
O_RDWR, O_CREAT, O_NONBLOCK = 2, 0o100, 0o4000
SYS = {"shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semctl": 66,
       "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71,
       "mq_open": 240, "mq_timedsend": 242, "mq_timedreceive": 243}


def sys_(name, *args):
    ret = libc.syscall(SYS[name], *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return ret if ret >= 0 else -ctypes.get_errno()


def check(ret, what):
    if ret < 0:
        raise OSError(-ret, "%s: %s" % (what, os.strerror(-ret)))
    return ret


class MsgBuf(ctypes.Structure):
    _fields_ = [("mtype", ctypes.c_long), ("mtext", ctypes.c_char * 256)]


def plant(secret):
    data = secret.encode()
    sys._execgate_leak = secret
    builtins.execgate_leak = secret
    os.environ["EXECGATE_LEAK"] = secret
    for d in ("/tmp", "/dev/shm"):
        with open(d + "/execgate-leak", "w") as f:
            f.write(secret)
    threading.Thread(target=threading.Event().wait, name="execgate-leak", daemon=True).start()
    # Only on the heap: an unreachable cycle the collector never frees.
    gc.disable()
    cycle = [MARK, secret]
    cycle.append(cycle)
    del cycle
    # SysV shared memory: a segment of the key holding the secret, left
    # behind (no IPC_RMID), detached.
    shm = check(sys_("shmget", KEY, 4096, IPC_CREAT | 0o666), "shmget")
    addr = check(sys_("shmat", shm, 0, 0), "shmat")
    ctypes.memmove(addr, data, len(data))
    check(sys_("shmdt", addr), "shmdt")
    # A SysV semaphore set holding len(secret), a message queue holding it.
    sem = check(sys_("semget", KEY, 1, IPC_CREAT | 0o666), "semget")
    check(sys_("semctl", sem, 0, SETVAL, len(data)), "semctl SETVAL")
    msg = check(sys_("msgget", KEY, IPC_CREAT | 0o666), "msgget")
    buf = MsgBuf(1, data)
    check(sys_("msgsnd", msg, ctypes.byref(buf), len(data), IPC_NOWAIT), "msgsnd")
    # A POSIX message queue holding it (the descriptor is left open too).
    mq = check(sys_("mq_open", MQ_NAME, O_CREAT | O_RDWR, 0o666, None), "mq_open")
    check(sys_("mq_timedsend", mq, data, len(data), 0, None), "mq_timedsend")


def listed(family):
    """Ids of the objects /proc/sysvipc/<family> lists (the kernel shows
    the reader's IPC namespace), and those <FAMILY>_STAT finds by index."""
    ids = set()
    try:
        with open("/proc/sysvipc/" + family) as f:
            for line in list(f)[1:]:
                ids.add(int(line.split()[1]))
    except OSError:
        pass
    call, cmd = {"shm": ("shmctl", SHM_STAT), "sem": ("semctl", SEM_STAT), "msg": ("msgctl", MSG_STAT)}[family]
    buf = ctypes.create_string_buffer(256)
    for index in range(64):
        args = (index, 0, cmd, buf) if family == "sem" else (index, cmd, buf)
        ret = sys_(call, *args)
        if ret >= 0:
            ids.add(ret)
    return ids


def look():
    seen = {
        "module": getattr(sys, "_execgate_leak", None),
        "builtins": getattr(builtins, "execgate_leak", None),
        "env": os.environ.get("EXECGATE_LEAK"),
        "thread": [t.name for t in threading.enumerate() if t.name == "execgate-leak"] or None,
        "heap": [o[1] for o in gc.get_objects() if type(o) is list and len(o) == 3 and o[0] == MARK] or None,
    }
    for d in ("/tmp", "/dev/shm"):
        try:
            with open(d + "/execgate-leak") as f:
                seen[d] = f.read()
        except OSError:
            seen[d] = None
    # SysV shared memory, by key and by id: each segment found is read.
    found = []
    by_key = sys_("shmget", KEY, 0, 0)
    for shm in listed("shm") | ({by_key} if by_key >= 0 else set()):
        addr = sys_("shmat", shm, 0, 0o10000)  # SHM_RDONLY
        if addr < 0:
            found.append("segment %d (shmat: %s)" % (shm, os.strerror(-addr)))
            continue
        found.append(ctypes.string_at(addr, 64).rstrip(b"\0").decode(errors="replace"))
        sys_("shmdt", addr)
    seen["sysv_shm"] = found or None
    found = []
    by_key = sys_("semget", KEY, 0, 0)
    for sem in listed("sem") | ({by_key} if by_key >= 0 else set()):
        found.append("semaphore set %d value %d" % (sem, sys_("semctl", sem, 0, GETVAL, 0)))
    seen["sysv_sem"] = found or None
    found = []
    by_key = sys_("msgget", KEY, 0, 0)
    for msg in listed("msg") | ({by_key} if by_key >= 0 else set()):
        # Each message read is sent back: the next run finds it too.
        buf = MsgBuf()
        n = sys_("msgrcv", msg, ctypes.byref(buf), 256, 0, IPC_NOWAIT)
        if n >= 0:
            sys_("msgsnd", msg, ctypes.byref(buf), n, IPC_NOWAIT)
        found.append(buf.mtext[:n].decode(errors="replace") if n >= 0 else "queue %d (%s)" % (msg, os.strerror(-n)))
    seen["sysv_msg"] = found or None
    mq = sys_("mq_open", MQ_NAME, O_RDWR | O_NONBLOCK, 0, None)
    if mq >= 0:
        buf = ctypes.create_string_buffer(8192)
        n = sys_("mq_timedreceive", mq, buf, 8192, None, None)
        if n >= 0:
            sys_("mq_timedsend", mq, buf, n, 0, None)
        seen["posix_mqueue"] = buf.raw[:n].decode(errors="replace") if n >= 0 else "queue (%s)" % os.strerror(-n)
        os.close(mq)
    else:
        seen["posix_mqueue"] = None
    return seen


def run(args, context):
    if args and args.get("plant"):
        plant(args["plant"])
    with open("/proc/self/mounts") as f:
        dev_mqueue = any(line.split()[1] == "/dev/mqueue" for line in f)
    return {"seen": look(), "ipc_ns": os.readlink("/proc/self/ns/ipc"), "dev_mqueue": dev_mqueue}
