# Containment 23: look for a secret everywhere the jail can read: every
# readable file and every /proc/<pid>/environ and cmdline. The secret and a
# control token arrive XOR-masked so that neither appears in clear in the
# request; only this function's memory ever holds them.
#
# The control token is written to /tmp first: the scan must find it there,
# which proves the scan looks where it claims to.
import os

SKIP = ("/proc", "/sys", "/dev")
MAX_FILE = 64 << 20


def unmask(masked, key):
    return bytes(a ^ b for a, b in zip(bytes.fromhex(masked), bytes.fromhex(key)))


def run(args, context):
    secret = unmask(args["secret"], args["key"])
    control = unmask(args["control"], args["key"])
    with open("/tmp/control.txt", "wb") as f:
        f.write(b"before " + control + b" after")
    found = {"secret": [], "control": []}
    scanned, unreadable, scanned_bytes = 0, 0, 0

    def look(path, data):
        if secret in data:
            found["secret"].append(path)
        if control in data:
            found["control"].append(path)

    for root, dirs, files in os.walk("/"):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in SKIP]
        for name in files:
            p = os.path.join(root, name)
            try:
                if os.path.islink(p) or not os.path.isfile(p):
                    continue
                with open(p, "rb") as f:
                    data = f.read(MAX_FILE)
            except OSError:
                unreadable += 1
                continue
            scanned += 1
            scanned_bytes += len(data)
            look(p, data)
    procs = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        procs += 1
        for what in ("environ", "cmdline"):
            p = "/proc/%s/%s" % (pid, what)
            try:
                with open(p, "rb") as f:
                    look(p, f.read())
            except OSError:
                unreadable += 1
    return {"found": found, "files": scanned, "bytes": scanned_bytes, "unreadable": unreadable, "procs": procs}
