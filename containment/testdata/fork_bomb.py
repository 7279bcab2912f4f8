# Containment 4 and 27: create processes until the kernel refuses, with
# os.fork, subprocess, a raw libc fork through ctypes, or multiprocessing; report how many were created and the errno that stopped it.
import errno
import os
import signal
import sys
import time


def run(args, context):
    mode = args["mode"]
    started, err = [], None
    if mode == "multiprocessing":
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        procs = []
        for _ in range(args["n"]):
            p = ctx.Process(target=time.sleep, args=(60,), daemon=True)
            try:
                p.start()
            except OSError as e:
                err = e.errno
                break
            procs.append(p)
        for p in procs:
            p.kill()
            p.join()
        return {"created": len(procs), "errno": err, "eagain": errno.EAGAIN}
    libc = None
    if mode == "ctypes":
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
    procs = []
    for _ in range(args["n"]):
        try:
            if mode == "fork":
                pid = os.fork()
            elif mode == "ctypes":
                pid = libc.fork()
                if pid < 0:
                    raise OSError(ctypes.get_errno(), "fork")
            else:
                import subprocess

                p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
                procs.append(p)
                started.append(p.pid)
                continue
        except OSError as e:
            err = e.errno
            break
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        started.append(pid)
    for pid in started:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass
    return {"created": len(started), "errno": err, "eagain": errno.EAGAIN}
