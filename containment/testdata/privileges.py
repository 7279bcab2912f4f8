# Containment 10: no capabilities, no_new_privs, setuid does not elevate,
# every mount is nosuid.
import os


def status():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


def attempt(fn, *a):
    try:
        fn(*a)
        return 0
    except OSError as e:
        return e.errno


def run(args, context):
    st = status()
    mounts = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            mounts.append({"point": parts[4], "options": parts[5]})
    return {
        "cap": {k: st[k] for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")},
        "no_new_privs": st.get("NoNewPrivs"),
        "seccomp": st.get("Seccomp"),
        "setuid0": attempt(os.setuid, 0),
        "setgid0": attempt(os.setgid, 0),
        "setresuid0": attempt(os.setresuid, 0, 0, 0),
        "mounts": mounts,
    }
