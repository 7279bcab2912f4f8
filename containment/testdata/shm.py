# Containment 5: shared memory must not exceed the memory and tmpfs caps.
# Each mode tries to fill `mb` MiB and reports how far it got and why it
# stopped (if it was not killed first).
import errno
import os

CHUNK = 1 << 20


def fill(write, mb):
    written, err = 0, None
    block = b"s" * CHUNK
    try:
        for _ in range(mb):
            write(block)
            written += CHUNK
    except OSError as e:
        err = e.errno
    return written, err


def run(args, context):
    mode, mb = args["mode"], args["mb"]
    if mode == "memfd":
        # One memfd is capped by RLIMIT_FSIZE (EFBIG); keep opening new ones,
        # so only the memory limit can stop it.
        fds, written, err = [], 0, None
        while written < mb * CHUNK:
            fds.append(os.memfd_create("bomb-%d" % len(fds)))
            w, err = fill(lambda b: os.write(fds[-1], b), mb - written // CHUNK)
            written += w
            if err is not None and err != errno.EFBIG:
                break
            if w == 0:
                break
    elif mode == "dev_shm":
        try:
            f = open("/dev/shm/bomb", "wb", buffering=0)
        except OSError as e:
            return {"written": 0, "errno": e.errno, "where": "open"}
        written, err = fill(f.write, mb)
    elif mode == "shared_memory":
        from multiprocessing import shared_memory

        try:
            shm = shared_memory.SharedMemory(create=True, size=mb * CHUNK)
        except OSError as e:
            return {"written": 0, "errno": e.errno, "where": "create"}
        written = 0
        for off in range(0, mb * CHUNK, CHUNK):
            shm.buf[off:off + CHUNK] = b"s" * CHUNK
            written += CHUNK
        err = None
    elif mode == "shared_memory_many":
        # Segments each under the file-size limit, together over /dev/shm:
        # the kernel answers a write through the mapping with SIGBUS.
        from multiprocessing import shared_memory

        segs, written, err = [], 0, None
        while written < mb * CHUNK:
            try:
                segs.append(shared_memory.SharedMemory(create=True, size=4 * CHUNK))
            except OSError as e:
                err = e.errno
                break
            for off in range(0, 4 * CHUNK, CHUNK):
                segs[-1].buf[off:off + CHUNK] = b"s" * CHUNK
                written += CHUNK
        return {"written": written, "errno": err, "where": "create"}
    else:
        raise ValueError(mode)
    return {"written": written, "errno": err, "where": "write"}
