"""execgate zygote: a warm interpreter that forks one fresh process per run.

Isolation level "process" (sandbox/zygote_linux.go). Started by nsjail with
the same profile as a level-"jail" jail (same rootfs, namespaces, network,
rlimits and seccomp deny list; zygote_linux.go lists the differences) as

    /usr/bin/python3 -I -S -B -u /opt/execgate/harness/execgate_zygote.py

It imports the harness and the runtime once, then waits on its control
socket. It never runs tool code itself: every run is a child forked from it,
and the child only ever runs the harness's main(), exactly as a fresh jail's
harness would, after this setup (all before any tool code):

 1. unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC): a mount namespace
    and an IPC namespace of its own. The child maps its uid and gid to its
    own (the jail's tool ids) in the new user namespace, the only mapping an
    unprivileged owner may write. The IPC namespace holds every SysV shared
    memory segment, semaphore set and message queue and every POSIX message
    queue the run creates (the kernel gives it its own mqueue mount): no
    other run of the zygote can reach them by key, id or name, and the
    kernel destroys them all when the run's last process is gone (their
    pages are charged to the run's memory cgroup, which faulted them in).
 2. The host moves the child into the run's own cgroup (memory, pids, CPU)
    before anything else happens in it, so every process the run ever
    starts is born there and is killed with it.
 3. A fresh, empty tmpfs on /tmp and on /dev/shm, sized by the run's
    tmp_mb, private to this run, and one on /run/execgate/secrets for the
    run's brokered secrets (written by its harness from its request: they
    reach this process only, never the zygote or another spare); /proc
    remounted read-only; the run's workspace (sandbox/workspace: two tmpfs
    the host made and handed over as detached mounts) moved to /workspace
    (its input files, read-only) and /workspace/out (its artifacts), the
    working directory.
 4. A Landlock domain of its own that scopes abstract unix sockets
    (LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET, Linux 6.12 and later): the runs of
    a zygote share its network namespace, and with it the abstract socket
    namespace, so without it one run could connect to another's socket and
    pass it descriptors (an IPC namespace, a memfd, a /tmp file) that keep
    the first run's objects, and the memory charged to its ended cgroup,
    alive after it ended. The run's own processes still reach each other's
    sockets (they share the domain). Where the kernel lacks it, the zygote
    says so ("R 0") and the runner logs a warning when it starts one.
 5. Every capability dropped (bounding set included) and a seccomp filter
    added on top of the inherited one that kills mount, move_mount and
    unshare, the calls the zygote's own filter lets through for step 1 and
    3: the child's filter is then at least as strict as level jail's.
 6. The harness waits for the run's request on stdin, as a warm jail's
    does. Steps 1-5 happen ahead of the run (the host keeps a few such
    processes ready): the hand-off is the request.

JavaScript and TypeScript (a zygote of the Deno profile) start it as

    /usr/bin/python3 -I -S -B -u /opt/execgate/harness/execgate_zygote.py \
        --exec /usr/bin/deno run <flags of a level-jail run> execgate_harness.js

(the command nsjail runs at level jail: sandbox/language.go denoCommand).
Such a zygote imports no harness. Its run's process does steps 1-5 exactly
as above and then, instead of step 6, puts the run's stdin, stdout and
stderr on 0, 1 and 2, closes every other descriptor (the Deno harness
speaks on 0 and 1 only), sets every signal Python ignores (SIGPIPE,
SIGXFSZ) back to its default, and execve's that command with the zygote's
environment (nsjail's envars of the Deno profile, as at level jail): a
fresh Deno, started ahead of the run, waits for the request on stdin. The
filters of step 5 and the zygote's stay on across execve (no_new_privs is
set), as do the Landlock domain, RLIMIT_CPU and the run's namespaces and
cgroup; the capabilities dropped stay dropped (the process is not root in
its user namespace), and Deno, mode 0711 in the rootfs, starts
non-dumpable.

Control protocol (fd 5, a unix stream socket; one line per message):
  host -> zygote  "F <tmp_bytes> <cpu_seconds>\\n" with SCM_RIGHTS [sync]:
                  fork a process for a run (ahead of the run: the host keeps
                  a few ready)
  zygote -> host  "R <scoped>\\n" once ready (scoped: 1 when its runs get
                  step 4's Landlock scope, 0 when the kernel lacks it);
                  "f <pid>\\n" after each fork (pid in the jail's pid
                  namespace) or "e <errno>\\n" when fork failed;
                  "x <pid> <wait status>\\n" when a run's process exited
  sync (per run)  child -> host one byte "r" once set up to step 1 (the host
                  reads the child's host pid from the kernel's
                  SCM_CREDENTIALS and moves it into the run's cgroup);
                  host -> child "a" with SCM_RIGHTS [stdin, stdout, stderr,
                  result, bridge, workspace, workspace out] once it did:
                  the child goes on with steps 3 to 6
"""

import os
import sys

HARNESS_DIR = os.path.dirname(os.path.abspath(__file__))
if HARNESS_DIR not in sys.path:
    sys.path.insert(0, HARNESS_DIR)

import array  # noqa: E402
import ctypes  # noqa: E402
import gc  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402

# Fork hooks that threading, logging and concurrent.futures register when
# they are imported (below, for asyncio) are kept aside rather than
# registered: the zygote is single-threaded whenever it forks, so they have
# nothing to repair in a run's process, and running them there costs about
# 0.7 ms of copy-on-write faults per run. A run's process registers them
# (_child), so the tool's own forks get them as in a jail. Hooks of any other
# module are registered as usual.
_QUIET_FORK_HOOKS = ("threading", "logging", "concurrent.futures.thread")
_fork_hooks = []
_register_at_fork = os.register_at_fork


def _keep_fork_hooks(**hooks):
    if sys._getframe(1).f_globals.get("__name__") in _QUIET_FORK_HOOKS:
        _fork_hooks.append(hooks)
    else:
        _register_at_fork(**hooks)


# The command a run's process execve's after its setup (a zygote of the
# Deno profile: "--exec PATH ARGS..."), or None: it runs the Python harness.
_EXEC = sys.argv[2:] if len(sys.argv) > 2 and sys.argv[1] == "--exec" else None

os.register_at_fork = _keep_fork_hooks
try:
    if _EXEC is None:
        import execgate_harness as harness  # noqa: E402
        import execgate_runtime  # noqa: E402,F401 - imported once, here

        # What the harness imports when it runs, imported once here.
        import _signal  # noqa: E402,F401
        import asyncio  # noqa: E402,F401
        import json  # noqa: E402,F401
        import linecache  # noqa: E402,F401
        import traceback  # noqa: E402,F401
    import resource  # noqa: E402,F401
finally:
    os.register_at_fork = _register_at_fork

# The control socket (nsjail passes it as the harness's bridge fd).
CONTROL_FD = 5
# Exit status of a child whose setup failed (zygote_linux.go knows it).
EXIT_SETUP = 73
FORK_FDS = 1  # sync
RUN_FDS = 7  # stdin, stdout, stderr, result, bridge, workspace, workspace out

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MOVE_MOUNT_F_EMPTY_PATH = 4
SYS_MOVE_MOUNT = 429
AT_FDCWD = -100
PR_CAPBSET_DROP = 24
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
CAP_LAST = 63
# The run's secrets' tmpfs (jaillayout.SecretsDir; options as
# sandbox/render.go's secretsTmpfsOptions, with the tool's ids).
SECRETS_DIR = b"/run/execgate/secrets"
SECRETS_TMPFS = b"size=262144,nr_inodes=64,mode=0700,uid=%d,gid=%d"

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret, what):
    if ret != 0:
        e = ctypes.get_errno()
        raise OSError(e, "%s: %s" % (what, os.strerror(e)))


def _seccomp_program():
    """Kill mount, move_mount and unshare, refuse PR_SET_DUMPABLE other than 0 (EPERM),
    as level jail's policy does, and kill every call through another
    architecture's entry or with the x32 bit set, as execgate's own filter
    under nsjail does (sandbox/abi_linux.go); allow the rest: the inherited
    filters still apply, and the kernel takes the strictest answer of all."""
    AUDIT_ARCH_X86_64 = 0xC000003E
    X32_SYSCALL_BIT = 0x40000000
    KILL_PROCESS = 0x80000000
    ERRNO_EPERM = 0x00050000 | 1
    ALLOW = 0x7FFF0000
    LD_W_ABS = 0x20
    JEQ_K = 0x15
    JSET_K = 0x45
    RET_K = 0x06
    prog = [
        (LD_W_ABS, 0, 0, 4),  # 0: arch
        (JEQ_K, 1, 0, AUDIT_ARCH_X86_64),  # 1
        (RET_K, 0, 0, KILL_PROCESS),  # 2
        (LD_W_ABS, 0, 0, 0),  # 3: nr
        (JSET_K, 14, 0, X32_SYSCALL_BIT),  # 4: x32 -> 19
        (JEQ_K, 13, 0, 165),  # 5: mount -> 19
        (JEQ_K, 12, 0, SYS_MOVE_MOUNT),  # 6: move_mount -> 19
        (JEQ_K, 11, 0, 272),  # 7: unshare -> 19
        (JEQ_K, 1, 0, 157),  # 8: prctl -> 10
        (RET_K, 0, 0, ALLOW),  # 9
        (LD_W_ABS, 0, 0, 16),  # 10: option (an int: its low half)
        (JEQ_K, 1, 0, PR_SET_DUMPABLE),  # 11: -> 13
        (RET_K, 0, 0, ALLOW),  # 12
        (LD_W_ABS, 0, 0, 24),  # 13: value, low half
        (JEQ_K, 0, 3, 0),  # 14: -> 15, else 18
        (LD_W_ABS, 0, 0, 28),  # 15: value, high half
        (JEQ_K, 0, 1, 0),  # 16: -> 17, else 18
        (RET_K, 0, 0, ALLOW),  # 17
        (RET_K, 0, 0, ERRNO_EPERM),  # 18
        (RET_K, 0, 0, KILL_PROCESS),  # 19
    ]
    code = b"".join(struct.pack("HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(code, len(code))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    return SockFprog(len(prog), ctypes.addressof(buf)), buf


_PROG, _PROG_BUF = _seccomp_program()


def _cap_last():
    try:
        with open("/proc/sys/kernel/cap_last_cap", "rb") as f:
            return min(int(f.read()), CAP_LAST)
    except (OSError, ValueError):
        return CAP_LAST


_CAP_LAST = _cap_last()

SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_RESTRICT_SELF = 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET = 1
LANDLOCK_ABI_SCOPE = 6  # the first ABI with scopes


def _landlock_abi():
    abi = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_long(0), ctypes.c_long(LANDLOCK_CREATE_RULESET_VERSION))
    return max(abi, 0)


_SCOPED = _landlock_abi() >= LANDLOCK_ABI_SCOPE


def _scope_abstract_sockets():
    """Step 4: this process and its children may connect (or send) only to
    abstract unix sockets that processes of the same domain bound. A
    ruleset that handles no file system or network access restricts
    nothing else. no_new_privs is set (nsjail), as Landlock requires."""
    attr = struct.pack("QQQ", 0, 0, LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET)  # fs, net, scoped
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, buf, ctypes.c_long(len(attr)), ctypes.c_long(0))
    if fd < 0:
        _check(-1, "creating the Landlock ruleset")
    try:
        _check(_libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_long(fd), ctypes.c_long(0)), "landlock_restrict_self")
    finally:
        os.close(fd)
_NOFILE = resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _drop_caps():
    for cap in range(_CAP_LAST + 1):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            if ctypes.get_errno() == 22:  # EINVAL: past the kernel's last capability
                break
            _check(-1, "dropping capability %d from the bounding set" % cap)
    header = struct.pack("Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = b"\0" * 24  # two empty __user_cap_data_struct
    hbuf = ctypes.create_string_buffer(header, len(header))
    dbuf = ctypes.create_string_buffer(data, len(data))
    _check(_libc.syscall(126, hbuf, dbuf), "capset")  # SYS_capset


def _write(path, data):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _child(ctl, wake, fds, tmp_bytes, cpu_seconds):
    """The run's process. Never returns."""
    try:
        ctl.close()
        for fd in wake:
            os.close(fd)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for hooks in _fork_hooks:
            _register_at_fork(**hooks)
        # The zygote runs without RLIMIT_CPU; a run has level jail's.
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
        (sync,) = fds
        uid, gid = os.getuid(), os.getgid()
        _check(_libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC), "unshare")
        # This process can open its own id maps only while it is dumpable
        # (else its /proc files belong to a root the jail does not map).
        # Nothing of a run is in it yet: no request, no tool.
        _check(_libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "PR_SET_DUMPABLE 1")
        _write(b"/proc/self/uid_map", b"%d %d 1" % (uid, uid))
        _write(b"/proc/self/setgroups", b"deny")
        _write(b"/proc/self/gid_map", b"%d %d 1" % (gid, gid))
        _check(_libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), "PR_SET_DUMPABLE 0")
        os.write(sync, b"r")
        # In the run's cgroup, with the run's descriptors.
        sock = socket.socket(fileno=sync)
        msg, anc, _, _ = sock.recvmsg(16, socket.CMSG_SPACE(RUN_FDS * 4))
        sock.detach()
        os.close(sync)
        run_fds = _fds_of(anc)
        if msg != b"a" or len(run_fds) != RUN_FDS:
            os._exit(EXIT_SETUP)
        opts = b"size=%d,mode=1777" % tmp_bytes
        for target, o in ((b"/tmp", opts), (b"/dev/shm", opts), (SECRETS_DIR, SECRETS_TMPFS % (uid, gid))):
            _check(_libc.mount(b"tmpfs", target, b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, o), "mounting " + target.decode())
        _check(
            _libc.mount(None, b"/proc", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, None),
            "remounting /proc read-only",
        )
        ws, ws_out = run_fds[5], run_fds[6]
        for fd, target in ((ws, b"/workspace"), (ws_out, b"/workspace/out")):
            _check(_libc.syscall(SYS_MOVE_MOUNT, fd, b"", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH), "moving the workspace to " + target.decode())
            os.close(fd)
        os.chdir("/workspace")
        if _SCOPED:
            _scope_abstract_sockets()
        _drop_caps()
        _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(_PROG), 0, 0), "installing the seccomp filter")
        # Received in this order into the lowest free numbers (3 and up), so
        # no descriptor is overwritten below before it is copied.
        stdin, stdout, stderr, result, bridge = run_fds[:5]
        if _EXEC is not None:
            _exec_deno(stdin, stdout, stderr)  # never returns
        for src, dst in ((stdin, 0), (stdout, 1), (stderr, 2), (result, harness.RESULT_FD), (bridge, harness.BRIDGE_FD)):
            os.dup2(src, dst)
        # Nothing else of the zygote's reaches the tool (fd 4 is nsjail's
        # log fd number: never open in a harness).
        os.closerange(4, 5)
        os.closerange(6, _NOFILE)
    except BaseException as e:  # noqa: BLE001 - any failure ends the run before tool code
        try:
            os.write(2, ("execgate zygote: run setup failed: %s\n" % e).encode())
        except OSError:
            pass
        os._exit(EXIT_SETUP)
    harness.HARNESS_PID = os.getpid()
    try:
        harness.main()  # waits for the run's request on stdin
    finally:
        os._exit(0)


def _exec_deno(stdin, stdout, stderr):
    """Instead of step 6 (module doc): Deno on the harness, with the run's
    stdin, stdout and stderr and nothing else; raises only when execve
    fails (the setup's failure: EXIT_SETUP)."""
    for src, dst in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(src, dst)
    os.closerange(3, _NOFILE)
    # Python ignores SIGPIPE and SIGXFSZ; an ignored signal stays ignored
    # across execve, where nsjail's Deno starts with every default.
    for sig in signal.valid_signals():
        try:
            if signal.getsignal(sig) == signal.SIG_IGN:
                signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    os.execve(_EXEC[0], _EXEC, os.environ)


class _Preloaded:
    """Hides modules the zygote imported for the tool's sake (asyncio) until
    the tool imports them, then gives back the very modules, at the price
    of a dict update. The harness steps a coroutine that never suspends
    without asyncio.run only while asyncio is not in sys.modules, i.e. while
    the tool has not loaded it: with asyncio preloaded and visible, every
    async tool would pay for an event loop."""

    def __init__(self, roots):
        # In the zygote: what a run's process will hide.
        self.saved = {k: m for k, m in sys.modules.items() if k.split(".")[0] in roots}
        self.saved_specs = {k: getattr(m, "__spec__", None) for k, m in self.saved.items()}

    def hide(self):
        """Once, in the zygote: its children inherit the hidden modules."""
        for k in self.saved:
            del sys.modules[k]
        sys.meta_path.insert(0, self)

    def find_spec(self, name, path=None, target=None):
        if name not in self.saved:
            return None
        import importlib.machinery

        return importlib.machinery.ModuleSpec(name, self, is_package=hasattr(self.saved[name], "__path__"))

    def create_module(self, spec):
        return self.saved[spec.name]

    def exec_module(self, module):
        # The import system set __spec__ to ours: give back the real one,
        # and every hidden module at once (submodules included).
        module.__spec__ = self.saved_specs.get(module.__name__, module.__spec__)
        for k, m in self.saved.items():
            sys.modules.setdefault(k, m)
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


_PRELOADED = _Preloaded({"asyncio"})


def _send(ctl, text):
    ctl.sendall(text.encode())


def _fds_of(anc):
    fds = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            a = array.array("i")
            a.frombytes(data[: len(data) - (len(data) % a.itemsize)])
            fds.extend(a)
    return fds


def _fork_run(ctl, wake, msg, anc):
    fds = _fds_of(anc)
    try:
        parts = msg.split()
        if len(parts) != 3 or parts[0] != b"F" or len(fds) != FORK_FDS:
            raise ValueError("bad request %r with %d fds" % (msg[:40], len(fds)))
        tmp_bytes, cpu_seconds = int(parts[1]), int(parts[2])
        try:
            pid = os.fork()
        except OSError as e:
            _send(ctl, "e %d\n" % e.errno)
            return None
        if pid == 0:
            _child(ctl, wake, fds, tmp_bytes, cpu_seconds)
        _send(ctl, "f %d\n" % pid)
        return pid
    finally:
        for fd in fds:
            os.close(fd)


# The reference count CPython 3.12 and 3.13 (64-bit, with the GIL) give an
# immortal object (PEP 683): Py_INCREF and Py_DECREF leave it unwritten.
_IMMORTAL_REFCNT = 0xFFFFFFFF


def _immortalize():
    """Make every object the zygote reaches immortal (PEP 683), so that a
    run's process, forked from it, never writes their reference counts:
    each such write would copy the page the object sits on (a fault and a
    4 KiB copy), and a run touches hundreds of them (functions, modules,
    code, strings) even on a trivial tool. Objects reached from the
    collector (every container, and what each refers to) are counted once.
    The zygote and its runs never free them, which is what a zygote wants:
    it keeps them for its life and a run's process is gone after its run.
    Only for the builds whose layout this knows (CPython 3.12 and 3.13,
    64-bit, with the GIL); elsewhere nothing changes. Returns how many
    objects it made immortal."""
    if (
        sys.implementation.name != "cpython"
        or sys.version_info[:2] not in ((3, 12), (3, 13))
        or sys.maxsize <= 2**32
        or hasattr(sys, "gettotalrefcount")  # a debug build
        or getattr(sys, "_is_gil_enabled", lambda: True)() is False
    ):
        return 0
    refcnt = ctypes.c_ssize_t
    seen = set()
    todo = gc.get_objects()
    skip = {id(seen), id(todo)}
    made = 0
    while todo:
        o = todo.pop()
        i = id(o)
        if i in seen or i in skip:
            continue
        seen.add(i)
        todo.extend(gc.get_referents(o))
        count = refcnt.from_address(i)
        if 0 < count.value < 2**31:  # already immortal (statics, interned strings): left unwritten
            count.value = _IMMORTAL_REFCNT
            made += 1
    return made


def main():
    ctl = socket.socket(fileno=CONTROL_FD)
    os.set_inheritable(CONTROL_FD, False)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    runs = set()
    poll = select.poll()
    poll.register(ctl.fileno(), select.POLLIN)
    poll.register(wake_r, select.POLLIN)
    # Hidden here, once: a run's process starts with them hidden and does
    # not touch them (nor their pages) unless its tool imports asyncio.
    _PRELOADED.hide()
    # Objects the zygote made so far are never collected: the children's
    # collector leaves them (and their pages, shared copy-on-write) alone;
    # on 3.12 and later neither do their reference counts.
    gc.collect()
    _immortalize()
    gc.freeze()
    _send(ctl, "R %d\n" % _SCOPED)
    anc_size = socket.CMSG_SPACE(FORK_FDS * 4)
    while True:
        for fd, _ in poll.poll():
            if fd == wake_r:
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                while True:
                    try:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    # Orphans of runs are reparented to the zygote (PID 1):
                    # reaped, not reported.
                    if pid in runs:
                        runs.discard(pid)
                        _send(ctl, "x %d %d\n" % (pid, status))
                continue
            msg, anc, _, _ = ctl.recvmsg(256, anc_size)
            if not msg:
                os._exit(0)
            pid = _fork_run(ctl, (wake_r, wake_w), msg, anc)
            if pid:
                runs.add(pid)


if __name__ == "__main__":
    main()
