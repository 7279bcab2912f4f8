"""The CPU floor of a JavaScript run outside any jail (issue #25 item 4c).

Level process for JavaScript starts a fresh Deno per run; the issue
suggested one warm Deno per tenant running each tool in a fresh Worker. This
measures both on the host, with no jail and no gateway, so the choice rests
on numbers anyone can reproduce:

  fresh process  `deno run` of a one-line module with the jail's flags, CPU
                 per run from getrusage(RUSAGE_CHILDREN);
  worker         one Deno that starts N Workers in a row (every permission
                 but reading its two modules denied, each its own module
                 graph, terminated once it answered), CPU per Worker =
                 (CPU with N - CPU with 0) / N.

Rounds alternate the two so a drift of the host's speed lands on both.

    /usr/bin/python3 -I -S -B scripts/deno-floor.py [--deno PATH] [--runs N]
        [--workers N] [--rounds N] [--v8-flags=--flag,...]
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

FLAGS = ["--no-remote", "--cached-only", "--no-config", "--no-lock", "--no-prompt", "--no-npm",
         "--v8-flags=--disallow-code-generation-from-strings"]

TOOL = "export function run(args) { return { ok: true }; }\n"

# A fresh process: import the tool and call it, as the harness does.
MAIN = """import { run } from "./tool.js";
const r = run({});
if (!r.ok) Deno.exit(1);
"""

# A Worker: the same, then answer the parent.
WORKER = """import { run } from "./tool.js";
self.postMessage(run({}).ok);
"""

# The warm Deno: N Workers one after another; each must answer before the
# next starts, and is terminated as a run at its end would be.
PARENT = """const n = Number(Deno.args[0]);
const url = new URL("./worker.js", import.meta.url);
// A Worker needs read access to load its modules from files; nothing else.
const read = [url.pathname, new URL("./tool.js", url).pathname];
for (let i = 0; i < n; i++) {
  const w = new Worker(url, { type: "module", deno: { permissions: { read, env: false, net: false, run: false, write: false, ffi: false, sys: false, import: false } } });
  const ok = await new Promise((resolve, reject) => {
    w.onmessage = (e) => resolve(e.data);
    w.onerror = (e) => { e.preventDefault(); reject(new Error(e.message)); };
  });
  w.terminate();
  if (ok !== true) throw new Error("worker " + i + " answered " + ok);
}
"""


def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(cmd, env):
    before, t0 = child_cpu(), time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdin=subprocess.DEVNULL)
    return child_cpu() - before, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deno", default=os.environ.get("EXECGATE_DENO", ".tools/bin/deno"))
    ap.add_argument("--runs", type=int, default=40, help="fresh processes per round")
    ap.add_argument("--workers", type=int, default=100, help="Workers in the warm Deno per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--v8-flags", default="", help="more V8 flags for both (comma-separated)")
    a = ap.parse_args()
    if a.runs < 1 or a.workers < 1 or a.rounds < 1:
        sys.exit("deno-floor: --runs, --workers and --rounds must be at least 1")
    if not os.access(a.deno, os.X_OK):
        sys.exit(f"deno-floor: no Deno at {a.deno} (--deno or $EXECGATE_DENO; scripts/setup.sh installs one in .tools/bin)")

    with tempfile.TemporaryDirectory(prefix="deno-floor-") as d:
        for name, text in (("tool.js", TOOL), ("main.js", MAIN), ("worker.js", WORKER), ("parent.js", PARENT)):
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        env = {"PATH": "/usr/bin:/bin", "DENO_DIR": os.path.join(d, "cache"), "NO_COLOR": "1",
               "DENO_NO_UPDATE_CHECK": "1", "DENO_EMIT_CACHE_MODE": "disable"}
        flags = [f + "," + a.v8_flags if f.startswith("--v8-flags=") and a.v8_flags else f for f in FLAGS]
        fresh = [a.deno, "run", *flags, os.path.join(d, "main.js")]
        parent = [a.deno, "run", "--unstable-worker-options", "--allow-read=" + d, *flags, os.path.join(d, "parent.js")]
        run(fresh, env)  # warm the page cache
        run(parent + ["1"], env)
        proc_cpu, proc_wall, worker_cpu, worker_wall = [], [], [], []
        for _ in range(a.rounds):
            for _ in range(a.runs):
                c, w = run(fresh, env)
                proc_cpu.append(c)
                proc_wall.append(w)
            c0, w0 = run(parent + ["0"], env)
            cn, wn = run(parent + [str(a.workers)], env)
            worker_cpu.append((cn - c0) / a.workers)
            worker_wall.append((wn - w0) / a.workers)

    ms = lambda xs: f"{statistics.median(xs) * 1e3:.2f} ms (min {min(xs) * 1e3:.2f}, max {max(xs) * 1e3:.2f})"
    print(f"deno: {a.deno}; more V8 flags: {a.v8_flags or 'none'}; {a.rounds} rounds of {a.runs} fresh processes and {a.workers} Workers")
    print(f"fresh process per run: CPU p50 {ms(proc_cpu)}, wall p50 {ms(proc_wall)}")
    print(f"Worker per run (round means): CPU p50 {ms(worker_cpu)}, wall p50 {ms(worker_wall)}")
    print(f"Worker / fresh process, CPU: {statistics.median(worker_cpu) / statistics.median(proc_cpu):.2f}x")


if __name__ == "__main__":
    main()
