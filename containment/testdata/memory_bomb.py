# Containment 3: allocate (and touch) memory past the memory limit, in this
# process ("single"; "ctypes" with malloc+memset behind Python's back), in
# forked children ("fork") or in multiprocessing processes
# ("multiprocessing") while this one waits and then returns.
import os
import time

CHUNK = 8 << 20


def hog(total_mb):
    held = []
    for _ in range(total_mb * (1 << 20) // CHUNK):
        held.append(b"x" * CHUNK)  # bytes are filled, so every page is touched
    time.sleep(3)
    return len(held)


def run(args, context):
    mode, per = args["mode"], args["mb"]
    if mode == "single":
        held = []
        while True:
            held.append(b"x" * CHUNK)
    if mode == "ctypes":
        import ctypes

        libc = ctypes.CDLL(None)
        libc.malloc.restype = ctypes.c_void_p
        while True:
            p = libc.malloc(CHUNK)
            if not p:
                return {"malloc": "returned NULL"}
            ctypes.memset(p, 1, CHUNK)
    if mode == "fork":
        pids = []
        for _ in range(args["processes"]):
            pid = os.fork()
            if pid == 0:
                hog(per)
                os._exit(0)
            pids.append(pid)
        return {"statuses": [os.waitpid(p, 0)[1] for p in pids]}
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=hog, args=(per,)) for _ in range(args["processes"])]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return {"exitcodes": [p.exitcode for p in procs]}
