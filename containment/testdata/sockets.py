# Containment 32: create a socket of one address family directly through
# libc's socket(2) or socketpair(2) via ctypes (not through Python's socket
# module, which might refuse on its own), and report the raw result. A
# socket that was created is closed at once: nothing is bound or connected
# (on a VM, AF_VSOCK reaches the hypervisor's services).
#
# args: {"call": "socket" | "socketpair" | "module", "family": int,
#        "type": int (default SOCK_STREAM), "protocol": int (default 0),
#        "thread": bool (make the call from a second thread)}
import ctypes
import os
import threading

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR_SOCKET, NR_SOCKETPAIR = 41, 53


def call(a):
    family, typ, proto = a["family"], a.get("type", 1), a.get("protocol", 0)
    ctypes.set_errno(0)
    if a["call"] == "module":
        import socket

        try:
            socket.socket(family, typ, proto).close()
            return 0, 0
        except OSError as e:
            return -1, e.errno or 0
    if a["call"] == "socket":
        # syscall(2) passes all 64 bits of family, as a tool could.
        ret = libc.syscall(ctypes.c_long(NR_SOCKET), ctypes.c_long(family), ctypes.c_long(typ), ctypes.c_long(proto))
        err = ctypes.get_errno() if ret == -1 else 0
        if ret >= 0:
            os.close(ret)
        return ret, err
    fds = (ctypes.c_int * 2)()
    ret = libc.syscall(ctypes.c_long(NR_SOCKETPAIR), ctypes.c_long(family), ctypes.c_long(typ), ctypes.c_long(proto), fds)
    err = ctypes.get_errno() if ret == -1 else 0
    if ret == 0:
        os.close(fds[0])
        os.close(fds[1])
    return ret, err


def run(args, context):
    if args.get("thread"):
        out = []
        t = threading.Thread(target=lambda: out.append(call(args)))
        t.start()
        t.join()
        ret, err = out[0]
    else:
        ret, err = call(args)
    return {"ret": ret, "errno": err}
