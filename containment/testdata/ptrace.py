# Containment 9: ptrace another process and read another process's memory
# through /proc/<pid>/mem, both ways between this process and a child.
import ctypes
import os
import signal
import time

PTRACE_ATTACH = 16
PTRACE_SEIZE = 0x4206

libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long


def ptrace(req, pid):
    ctypes.set_errno(0)
    r = libc.ptrace(ctypes.c_long(req), ctypes.c_long(pid), None, None)
    return {"ret": r, "errno": ctypes.get_errno() if r == -1 else 0}


def read_mem(pid):
    try:
        with open("/proc/%d/maps" % pid) as f:
            start = int(f.readline().split("-")[0], 16)
        with open("/proc/%d/mem" % pid, "rb", buffering=0) as f:
            f.seek(start)
            return {"read": len(f.read(16)), "errno": 0}
    except OSError as e:
        return {"read": 0, "errno": e.errno}


def run(args, context):
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(r)
        res = {"parent_mem": read_mem(os.getppid()), "attach_parent": ptrace(PTRACE_ATTACH, os.getppid())}
        os.write(w, repr(res).encode())
        os.close(w)
        time.sleep(30)
        os._exit(0)
    os.close(w)
    from_child = b""
    while True:
        chunk = os.read(r, 4096)
        if not chunk:
            break
        from_child += chunk
    out = {
        "attach_child": ptrace(PTRACE_ATTACH, child),
        "seize_child": ptrace(PTRACE_SEIZE, child),
        "attach_init": ptrace(PTRACE_ATTACH, 1),
        "child_mem": read_mem(child),
        "from_child": eval(from_child.decode()),
        "self_pid": os.getpid(),
    }
    os.kill(child, signal.SIGKILL)
    os.waitpid(child, 0)
    return out
