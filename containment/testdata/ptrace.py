# Containment 9 and 36: ptrace another process and read another process's
# memory through /proc/<pid>/mem, both ways between this process and a
# child, for a forked child and for a child that exec'd a fresh interpreter;
# and try to make this process dumpable again.
#
# ptrace is an escape-class call: it kills the calling process. With
# args {"ptrace": target} this process (the harness's) calls it once on
# target (child, seize_child, init, exec_child); without, the memory and
# dumpability checks run and a forked child's ptrace of this process is
# reported by how the child ended.
import ctypes
import os
import signal
import subprocess
import sys
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


EXEC_CHILD = """
import json, os, sys, time
sys.path.insert(0, %r)
from tool_helpers import read_mem
print(json.dumps({"parent_mem": read_mem(os.getppid())}), flush=True)
time.sleep(30)
"""

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3


def exec_child():
    """A child that exec'd /usr/bin/python3: reads its parent's memory, then
    waits to have its own read."""
    helpers = "/tmp/helpers"
    os.makedirs(helpers, exist_ok=True)
    with open(os.path.join(helpers, "tool_helpers.py"), "w") as f:
        f.write("def read_mem(pid):\n")
        f.write("    try:\n")
        f.write("        with open('/proc/%d/maps' % pid) as f:\n")
        f.write("            start = int(f.readline().split('-')[0], 16)\n")
        f.write("        with open('/proc/%d/mem' % pid, 'rb', buffering=0) as f:\n")
        f.write("            f.seek(start)\n")
        f.write("            return {'read': len(f.read(16)), 'errno': 0}\n")
        f.write("    except OSError as e:\n")
        f.write("        return {'read': 0, 'errno': e.errno}\n")
    p = subprocess.Popen([sys.executable, "-I", "-c", EXEC_CHILD % helpers], stdout=subprocess.PIPE)
    line = p.stdout.readline()
    import json

    return p, {"from_child": json.loads(line), "child_mem": read_mem(p.pid)}


def set_dumpable(option):
    """prctl(PR_SET_DUMPABLE, 1) through syscall(2), with the option as
    given (the kernel reads only its low 32 bits)."""
    libc.syscall.restype = ctypes.c_long
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(157), ctypes.c_ulong(option), ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    err = ctypes.get_errno() if r == -1 else 0
    return {"ret": r, "errno": err, "now": libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0)}


def ptrace_one(target):
    """One ptrace call from this process; it is not expected to return."""
    if target == "init":
        return ptrace(PTRACE_ATTACH, 1)
    if target == "exec_child":
        p, _ = exec_child()
        return ptrace(PTRACE_ATTACH, p.pid)
    child = os.fork()
    if child == 0:
        time.sleep(30)
        os._exit(0)
    return ptrace(PTRACE_SEIZE if target == "seize_child" else PTRACE_ATTACH, child)


def run(args, context):
    if (args or {}).get("ptrace"):
        return ptrace_one(args["ptrace"])
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(r)
        os.write(w, repr({"parent_mem": read_mem(os.getppid())}).encode())
        os.close(w)
        ptrace(PTRACE_ATTACH, os.getppid())
        os._exit(0)
    os.close(w)
    from_child = b""
    while True:
        chunk = os.read(r, 4096)
        if not chunk:
            break
        from_child += chunk
    _, status = os.waitpid(child, 0)
    p, exec_out = exec_child()
    out = {
        "from_child": eval(from_child.decode()),
        "child_attach_parent_signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0,
        "exec": exec_out,
        "set_dumpable": set_dumpable(PR_SET_DUMPABLE),
        "set_dumpable_high_bits": set_dumpable(PR_SET_DUMPABLE | (1 << 32)),
    }
    # A second child to read the memory of (the first one is gone).
    child = os.fork()
    if child == 0:
        time.sleep(30)
        os._exit(0)
    out["child_mem"] = read_mem(child)
    for pid in (child, p.pid):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return out
