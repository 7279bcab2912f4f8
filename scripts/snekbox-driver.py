"""Drive snekbox (python-discord/snekbox) in-process, as its HTTP API does,
for `execgate bench --sections snekbox` (scripts/bench-snekbox.sh sets it up).

Run with the Python of a venv holding snekbox installed from its source
checkout. It renders snekbox's own nsjail config (config/snekbox.cfg of the
checkout) with the few changes this host needs, prints one JSON line
{"ready": ...}, then answers each request line {"runs": N} on stdin with one
JSON line: the N runs' wall time and CPU. A run is what POST /eval with
{"input": CODE} does: snekbox.nsjail.NsJail(...).python3(["-c", CODE]).

CPU: the nsjail process tree's, from getrusage(RUSAGE_CHILDREN) around the
call (nsjail and every process it reaped), as execgate bench measures its
own jails; "self" is this process's CPU in the same call (snekbox's Python
work around the jail: its tmpfs home, the log file, reading output).

Changes to snekbox's config, all outside what a run does:
- the interpreter is the host's (--python, bound read-only as a single
  file as snekbox binds its own /usr/local/bin/python), not snekbox's
  build under /snekbin (that mount is dropped);
- /snekbox (PYTHONUSERBASE, empty in a run) is an empty directory here;
- the memory and pids cgroup parents are --cgroup-parent (created by
  snekbox's own cgroup init), so snekbox's jails never share execgate's;
- the memfs root (per-run tmpfs homes) is under --state instead of /memfs.
"""

import argparse
import functools
import json
import logging
import os
import resource
import subprocess
import sys
import time


def cpu(who):
    ru = resource.getrusage(who)
    return int((ru.ru_utime + ru.ru_stime) * 1e9)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True, help="the snekbox source checkout")
    ap.add_argument("--nsjail", required=True)
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--state", required=True, help="a directory for the config and the memfs root")
    ap.add_argument("--cgroup-parent", default="snekbox-bench")
    ap.add_argument("--code", default="print({'ok': True})")
    a = ap.parse_args()

    commit = subprocess.run(["git", "-C", a.src, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    from google.protobuf import text_format

    import snekbox.nsjail as sn
    from snekbox.config_pb2 import NsJailConfig

    cfg = NsJailConfig()
    with open(os.path.join(a.src, "config", "snekbox.cfg"), encoding="utf-8") as f:
        text_format.Parse(f.read(), cfg)
    os.makedirs(a.state, exist_ok=True)
    userbase = os.path.join(a.state, "snekbox-userbase")
    os.makedirs(userbase, exist_ok=True)
    python = os.path.realpath(a.python)
    keep = []
    for m in cfg.mount:
        if m.src in ("/snekbin", "/usr/local/bin/python"):
            continue
        if m.src == "/snekbox":
            m.src = userbase
        keep.append(m)
    del cfg.mount[:]
    cfg.mount.extend(keep)
    cfg.mount.add(src=python, dst=a.python, is_bind=True, rw=False)
    cfg.cgroup_mem_parent = a.cgroup_parent
    cfg.cgroup_pids_parent = a.cgroup_parent
    cfg_path = os.path.join(a.state, "snekbox.cfg")
    with open(cfg_path, "w", encoding="utf-8") as f:
        f.write(text_format.MessageToString(cfg))

    # snekbox logs every run at INFO; its warnings and errors still show.
    logging.getLogger("snekbox").setLevel(logging.WARNING)
    sn.MemFS = functools.partial(sn.MemFS, root_dir=os.path.join(a.state, "memfs"))
    jail = sn.NsJail(nsjail_path=a.nsjail, config_path=cfg_path)
    want = "{'ok': True}\n"

    def once():
        c0, s0, t0 = cpu(resource.RUSAGE_CHILDREN), cpu(resource.RUSAGE_SELF), time.perf_counter_ns()
        res = jail.python3(["-c", a.code], executable_path=a.python)
        wall = time.perf_counter_ns() - t0
        tree, own = cpu(resource.RUSAGE_CHILDREN) - c0, cpu(resource.RUSAGE_SELF) - s0
        if res.returncode != 0 or res.stdout != want:
            raise SystemExit(f"snekbox run failed: returncode {res.returncode}, output {res.stdout!r}")
        return {"wall_ns": wall, "cpu_ns": tree, "self_ns": own}

    once()  # warm-up: page cache, cgroup parents
    print(json.dumps({"ready": True, "commit": commit, "config": cfg_path, "args": jail._build_args(["-c", a.code], (), "LOG", "HOME", a.python)}), flush=True)
    for line in sys.stdin:
        n = int(json.loads(line)["runs"])
        print(json.dumps({"runs": [once() for _ in range(n)]}), flush=True)


if __name__ == "__main__":
    main()
