# Containment 8, 11, 19, 27: call one system call directly through ctypes
# (libc's syscall(2)), never through a Python helper that might refuse on
# its own, and report the raw return value and errno.
#
# Arguments are chosen so that a call the kernel actually executed would
# NOT fail with EPERM where that is possible (bad flags, bad fds, bad
# pointers, harmless no-ops), so EPERM shows the seccomp filter, not the
# kernel, refused it.
import ctypes
import os

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

# x86_64 syscall numbers.
NR = {
    "ptrace": 101, "mount": 165, "umount2": 166, "pivot_root": 155,
    "open_tree": 428, "fsopen": 430, "unshare": 272, "setns": 308,
    "clone": 56, "clone3": 435, "keyctl": 250, "add_key": 248,
    "request_key": 249, "bpf": 321, "perf_event_open": 298,
    "userfaultfd": 323, "io_uring_setup": 425, "kexec_load": 246,
    "init_module": 175, "finit_module": 313, "reboot": 169,
    "process_vm_readv": 310, "process_vm_writev": 311, "setrlimit": 160,
}

SIGCHLD = 17
CLONE_NEW = {
    "user": 0x10000000, "ns": 0x00020000, "net": 0x40000000, "pid": 0x20000000,
    "uts": 0x04000000, "ipc": 0x08000000, "cgroup": 0x02000000,
}
KEY_SPEC_PROCESS_KEYRING = -2
KEY_SPEC_SESSION_KEYRING = -3
KEYCTL_GET_KEYRING_ID = 0
UFFD_USER_MODE_ONLY = 1
PTRACE_PEEKDATA = 2


def L(v):
    return ctypes.c_long(v)


def call(name, *args):
    ctypes.set_errno(0)
    ret = libc.syscall(L(NR[name]), *args)
    err = ctypes.get_errno() if ret == -1 else 0
    if name in ("clone", "unshare") and ret == 0 and name == "clone":
        os._exit(0)  # a clone that succeeded: the child leaves at once
    return ret, err


def cases(name, a):
    s = ctypes.c_char_p
    if name == "ptrace":
        return call("ptrace", L(PTRACE_PEEKDATA), L(999999), L(0), L(0))  # kernel: ESRCH
    if name == "mount":
        return call("mount", L(1), L(1), L(1), L(0), L(0))  # kernel: EFAULT
    if name == "mount_cgroup":
        os.makedirs("/tmp/cg", exist_ok=True)
        return call("mount", s(b"cgroup2"), s(b"/tmp/cg"), s(b"cgroup2"), L(0), L(0))
    if name == "umount2":
        return call("umount2", s(b"/"), L(0xFFFF))  # kernel: EINVAL (bad flags)
    if name == "pivot_root":
        return call("pivot_root", s(b"/tmp"), s(b"/tmp"))
    if name == "open_tree":
        return call("open_tree", L(-1), s(b""), L(0xFFFFFFFF))  # kernel: EINVAL
    if name == "fsopen":
        return call("fsopen", s(b"tmpfs"), L(0))
    if name == "unshare":
        return call("unshare", L(CLONE_NEW[a["ns"]]))
    if name == "unshare_noop":
        return call("unshare", L(0))  # kernel: 0 (success, a no-op)
    if name == "setns":
        fd = os.open("/proc/self/ns/" + a.get("nsfile", "net"), os.O_RDONLY)
        return call("setns", L(fd), L(0))
    if name == "setns_badfd":
        return call("setns", L(-1), L(0))  # kernel: EBADF
    if name == "clone":
        return call("clone", L(CLONE_NEW[a["ns"]] | SIGCHLD), L(0), L(0), L(0), L(0))
    if name == "clone3":
        return call("clone3", L(0), L(0))  # kernel: EINVAL (size 0)
    if name == "keyctl":
        return call("keyctl", L(KEYCTL_GET_KEYRING_ID), L(KEY_SPEC_SESSION_KEYRING), L(0))  # kernel: success
    if name == "add_key":
        return call("add_key", s(b"user"), s(b"execgate"), s(b"data"), L(4), L(KEY_SPEC_PROCESS_KEYRING))  # kernel: success
    if name == "request_key":
        return call("request_key", s(b"user"), s(b"execgate-none"), L(0), L(0))  # kernel: ENOKEY
    if name == "bpf":
        return call("bpf", L(-1), L(0), L(0))  # kernel: EINVAL or EPERM
    if name == "perf_event_open":
        return call("perf_event_open", L(0), L(0), L(-1), L(-1), L(0))  # kernel: EFAULT
    if name == "userfaultfd":
        return call("userfaultfd", L(UFFD_USER_MODE_ONLY))  # kernel: success
    if name == "io_uring_setup":
        return call("io_uring_setup", L(0), L(0))  # kernel: EINVAL/EFAULT
    if name == "kexec_load":
        return call("kexec_load", L(0), L(0), L(0), L(0))
    if name == "init_module":
        return call("init_module", L(0), L(0), s(b""))
    if name == "finit_module":
        return call("finit_module", L(-1), s(b""), L(0))
    if name == "reboot":
        return call("reboot", L(0), L(0), L(0), L(0))  # bad magic: harmless either way
    if name == "process_vm_readv":
        return call("process_vm_readv", L(os.getpid()), L(0), L(0), L(0), L(0), L(0))  # kernel: 0
    if name == "process_vm_writev":
        return call("process_vm_writev", L(os.getpid()), L(0), L(0), L(0), L(0), L(0))  # kernel: 0
    if name == "raw":
        return raw(a)
    if name == "ia32_unshare":
        # The 32-bit entry (int 0x80) has its own syscall numbers: unshare
        # is 310 there.
        return ia32(310, CLONE_NEW["user"])
    if name == "ia32_getpid":
        # getpid (20 there): harmless, and killed all the same.
        return ia32(20, 0)
    if name == "x32":
        # The x32 ABI: an x86_64 number with bit 30 (__X32_SYSCALL_BIT)
        # set, through the ordinary syscall instruction.
        return raw({"nr": 0x40000000 | NR[a["call"]], "args": a.get("args", [])})
    if name == "raise_rlimit":
        import resource

        out = {}
        for rname in ("RLIMIT_NPROC", "RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NOFILE"):
            r = getattr(resource, rname)
            soft, hard = resource.getrlimit(r)
            try:
                resource.setrlimit(r, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
                out[rname] = "raised" if hard != resource.RLIM_INFINITY else "already infinite"
            except (ValueError, OSError) as e:
                out[rname] = "refused: %s" % e
        return out, 0
    raise ValueError("unknown case " + name)


def ia32(nr, ebx):
    """One call through the 32-bit entry: push rbx; mov eax, nr;
    mov ebx, ebx; int 0x80; pop rbx; ret."""
    import mmap

    code = b"\x53\xb8" + nr.to_bytes(4, "little") + b"\xbb" + ebx.to_bytes(4, "little") + b"\xcd\x80\x5b\xc3"
    buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    buf.write(code)
    fn = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))
    ret = fn()
    return ret, (-ret if ret < 0 else 0)


def raw(a):
    """Any syscall by number with integer arguments."""
    ctypes.set_errno(0)
    ret = libc.syscall(L(a["nr"]), *[L(x) for x in a.get("args", [])])
    return ret, (ctypes.get_errno() if ret == -1 else 0)


def in_child(a):
    """The call from a forked child: report how the child ended."""
    pid = os.fork()
    if pid == 0:
        cases(a["name"], a)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return {"signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0,
            "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1}, 0


def run(args, context):
    if args.get("child"):
        ret, err = in_child(args)
    elif args.get("thread"):
        import threading

        out = []
        t = threading.Thread(target=lambda: out.append(cases(args["name"], args)), daemon=True)
        t.start()
        t.join(2)
        # A kill of the calling thread alone leaves nothing in out: the
        # tool returns normally, as a tool that ignores its threads would.
        ret, err = out[0] if out else ("the thread is gone", 0)
    else:
        ret, err = cases(args["name"], args)
    return {"ret": ret, "errno": err}
