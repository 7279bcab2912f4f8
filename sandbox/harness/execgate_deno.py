"""execgate_deno: type-checks a JavaScript/TypeScript tool with `deno check`, in the jail.

Mode validate of a JavaScript or TypeScript run starts this launcher
(python3 -I -S -B -u execgate_deno.py [--deps]): it reads the request (protocol 1)
from stdin, writes the source to /tmp/.execgate/tool.js or tool.ts (the
jail's own tmpfs), runs `deno check` on it (offline, read-only DENO_DIR,
the same flags and import map as a run) and writes the result envelope
({"valid", "errors": [{"line", "col", "message"}]}) on fd 3 itself. Nothing
of the tool runs. Runs (modes run and test) start Deno directly on
execgate_harness.js instead.
"""

import json
import os
import re
import subprocess
import sys

PROTOCOL_VERSION = 1
RESULT_FD = 3
WORK = "/tmp/.execgate"
DENO = "/usr/bin/deno"
HERE = "/opt/execgate/harness"
IMPORT_MAP = HERE + "/import_map.json"
DENO_DIR = "/opt/execgate/deno-cache"

EXIT_NO_RESULT_FD = 70
EXIT_WRITE_FAILED = 71

# With --deps, a JavaScript package environment is bound at DEPS: its import
# map adds the packages' bare names (npm: targets read from its Deno cache).
DEPS = "/opt/execgate/deps"
DEPS_IMPORT_MAP = DEPS + "/import_map.json"
DEPS_DENO_DIR = DEPS + "/deno"

# The flags of a run (sandbox/language.go denoFlags): nothing fetched,
# nothing written, no config; the import map blocks every file:/node:/npm:/
# jsr:/remote specifier (npm resolution only for an environment's packages).
# (deno check takes no --no-prompt; it runs nothing.)
COMMON_FLAGS = ["--no-remote", "--cached-only", "--no-config", "--no-lock"]


def check_flags(deps):
    if deps:
        return COMMON_FLAGS + ["--import-map=" + DEPS_IMPORT_MAP]
    return COMMON_FLAGS + ["--no-npm", "--import-map=" + IMPORT_MAP]


def deno_env(deps):
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "TMPDIR", "LANG")}
    env.update({"DENO_DIR": DEPS_DENO_DIR if deps else DENO_DIR, "NO_COLOR": "1", "DENO_NO_UPDATE_CHECK": "1", "DENO_NO_PACKAGE_JSON": "1"})
    return env


def emit(status, result=None, error=None):
    env = {"protocol_version": PROTOCOL_VERSION, "status": status, "result": result, "logs": []}
    if error is not None:
        env["error"] = error
    data = json.dumps(env).encode()
    try:
        while data:
            n = os.write(RESULT_FD, data)
            data = data[n:]
    except OSError:
        os._exit(EXIT_WRITE_FAILED)
    os._exit(0)


# "TS2322 [ERROR]: message\n    ...\n    at file:///tmp/.execgate/tool.ts:3:7"
# and parse errors "error: The module's source code could not be parsed:
# Expected ... at file:///tmp/.execgate/tool.ts:2:15".
_AT = re.compile(r"at file:///tmp/\.execgate/tool\.(?:js|ts):(\d+):(\d+)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def diagnostics(text):
    text = _ANSI.sub("", text)
    errors = []
    blocks = re.split(r"\n(?=(?:TS\d+ \[ERROR\]|error): )", "\n" + text)
    for b in blocks:
        b = b.strip()
        if not b or not (b.startswith("TS") or b.startswith("error:")):
            continue
        if b.startswith("error: Type checking failed"):
            continue
        m = _AT.search(b)
        head = b.split("\n", 1)[0]
        head = re.sub(r"^error: ", "", head)
        if head.startswith("The module's source code could not be parsed"):
            rest = b.split("\n", 1)[1] if "\n" in b else ""
            head = rest.strip().split("\n", 1)[0] or head
            head = re.sub(r"\s+at file:.*$", "", head)
        head = head.replace(" [ERROR]:", ":").replace("/tmp/.execgate/", "")
        errors.append({"line": int(m.group(1)) if m else 0, "col": int(m.group(2)) if m else 0, "message": head})
    return errors


_EXPORT = {
    "fn": r"export\s+(?:default\s+)?(?:async\s+)?function\s*\*?\s*{name}\b",
    "var": r"export\s+(?:const|let|var)\s+{name}\b",
    "list": r"export\s*\{{[^}}]*\b(?:as\s+)?{name}\b[^}}]*\}}",
}


def exports_entry(source, entry):
    for pat in _EXPORT.values():
        if re.search(pat.format(name=re.escape(entry)), source):
            return True
    return entry == "run" and re.search(r"export\s+default\b", source) is not None


def validate(path, source, entry, timeout_s, deps):
    try:
        p = subprocess.run(
            [DENO, "check", *check_flags(deps), path],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env=deno_env(deps), timeout=timeout_s, pass_fds=(),
        )
    except subprocess.TimeoutExpired:
        return {"valid": False, "errors": [{"line": 0, "col": 0, "message": "type checking did not finish in time"}]}
    out = p.stdout.decode("utf-8", "replace")
    if p.returncode == 0:
        errors = []
    else:
        errors = diagnostics(out) or [{"line": 0, "col": 0, "message": _ANSI.sub("", out).strip()[:2000] or "deno check failed"}]
    if not errors and not exports_entry(source, entry):
        errors.append({"line": 0, "col": 0, "message": "entrypoint %r is not exported (export function %s(args, context) {...})" % (entry, entry)})
    return {"valid": not errors, "errors": errors}


def main():
    try:
        os.set_inheritable(RESULT_FD, False)
    except OSError:
        sys.stderr.write("execgate launcher: fd %d (result channel) is not open\n" % RESULT_FD)
        os._exit(EXIT_NO_RESULT_FD)
    raw = sys.stdin.buffer.read()
    try:
        req = json.loads(raw)
    except ValueError as e:
        emit("error", error={"type": "ProtocolMismatch", "message": "the request is not valid JSON: %s" % e})
    if not isinstance(req, dict) or req.get("protocol_version") != PROTOCOL_VERSION:
        got = req.get("protocol_version") if isinstance(req, dict) else None
        emit("error", error={"type": "ProtocolMismatch", "message": "the launcher speaks protocol %d, the request has %r" % (PROTOCOL_VERSION, got)})
    ext = "ts" if req.get("language") == "typescript" else "js"
    source = req.get("source")
    if not isinstance(source, str):
        emit("error", error={"type": "InvalidSource", "message": "source must be a string"})
    os.mkdir(WORK, 0o700)
    tool = "%s/tool.%s" % (WORK, ext)
    fd = os.open(tool, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(fd, "wb") as f:
        f.write(source.encode("utf-8", "surrogatepass"))

    left = (req.get("deadline_unix_ms") or 0) / 1000.0
    import time

    deps = "--deps" in sys.argv[1:]
    emit("ok", validate(tool, source, req.get("entrypoint") or "run", max(1.0, left - time.time() - 0.5), deps))


if __name__ == "__main__":
    main()
