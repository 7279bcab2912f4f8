"""What a run at level process costs at least, outside any jail.

Forks the zygote's interpreter (sandbox/harness/execgate_zygote.py imported
as the zygote imports it: asyncio preloaded and hidden, the stdlib's fork
hooks kept out, its objects made immortal on 3.12 and 3.13, gc frozen) N
times and measures, per fork:

  exit  the child exits at once (os._exit): CPython's fork and exit alone
  run   the child runs the harness on the readiness probe's request, as a
        run's process does (no namespaces, mounts, cgroup or seccomp)

child CPU and minor faults come from wait4's rusage; parent CPU is this
process's own (the zygote's side of each fork). Run it with the
interpreter of the runtime measured, as the jail does: the host's
(/usr/bin/python3) for the host runtime, or a runtime's tree's own through
its own loader and libraries (a tree T of <runtimes_dir>):

    /usr/bin/python3 -I -S -B scripts/fork-floor.py [N]
    T/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 \
      --library-path T/usr/lib/x86_64-linux-gnu:T/usr/lib64:T/usr/lib \
      T/usr/bin/python3 -I -S -B scripts/fork-floor.py [N]
"""

import json
import os
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "sandbox", "harness"))

import execgate_zygote as zygote  # noqa: E402

harness = zygote.harness
zygote._PRELOADED.hide()
import gc  # noqa: E402

gc.collect()
IMMORTAL = zygote._immortalize()
gc.freeze()

SOURCE = "async def run(args, context):\n    return {'ok': True}\n"
REQUEST = json.dumps(
    {
        "protocol_version": harness.PROTOCOL_VERSION,
        "execution_id": "floor",
        "tenant_id": "floor",
        "source": SOURCE,
        "entrypoint": "run",
        "args": {},
        "mode": "run",
        "variables": {},
        "tools": {},
        "deadline_unix_ms": 0,
        "output_bytes": 1 << 20,
        "cpu_ms": 10000,
        "max_log_lines": 1000,
    }
).encode()


def measure(mode, n):
    child_cpu = faults = 0.0
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    for _ in range(n):
        r, w = os.pipe()
        rr, rw = os.pipe()
        pid = os.fork()
        if pid == 0:
            if mode == "exit":
                os._exit(0)
            os.close(w)
            os.close(rr)
            os.dup2(r, 0)
            os.dup2(rw, harness.RESULT_FD)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            for hooks in zygote._fork_hooks:
                zygote._register_at_fork(**hooks)
            harness.HARNESS_PID = os.getpid()
            try:
                harness.main()
            finally:
                os._exit(0)
        os.close(r)
        os.close(rw)
        if mode == "run":
            os.write(w, REQUEST)
        os.close(w)
        envelope = b""
        while True:
            chunk = os.read(rr, 65536)
            if not chunk:
                break
            envelope += chunk
        os.close(rr)
        _, status, ru = os.wait4(pid, 0)
        if mode == "run" and b'"status":"ok"' not in envelope:
            sys.exit("the harness did not answer ok: %r (status %d)" % (envelope[:200], status))
        child_cpu += ru.ru_utime + ru.ru_stime
        faults += ru.ru_minflt
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    parent = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    print(
        "%-4s child CPU %.3f ms, %.0f minor faults; parent CPU %.3f ms; wall %.3f ms per fork"
        % (mode, child_cpu / n * 1e3, faults / n, parent / n * 1e3, wall / n * 1e3)
    )


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    anon = [l for l in open("/proc/self/status").read().splitlines() if l.startswith("RssAnon")]
    print("zygote interpreter: %s, %d modules, %d objects made immortal" % (" ".join(anon[0].split()), len(sys.modules), IMMORTAL))
    for mode in ("exit", "run"):
        measure(mode, n)


if __name__ == "__main__":
    main()
