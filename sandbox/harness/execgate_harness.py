"""execgate harness: runs one tool, once, inside the jail.

Started by nsjail as

    /usr/bin/python3 -I -S -B -u /opt/execgate/harness/harness.py

Protocol (PROTOCOL_VERSION):
  stdin   one JSON request, read to EOF:
          {protocol_version, execution_id, tenant_id, source, entrypoint, args,
           mode, variables, tools, deadline_unix_ms, output_bytes, cpu_ms,
           max_log_lines, deps, stdin, secrets?: {NAME: value}}; the tool
           then reads the request's stdin (a memfd on fd 0), or end of file
           at once
  fd 3    one JSON envelope, written once at the end:
          {protocol_version, status, result, error: {type, message, traceback,
           line}, logs: [{level, message}], artifacts: {name: mime}}
          (artifacts: the media types context.artifacts.save was given)
  fd 5    the tool bridge: a unix socket, length-prefixed JSON frames
          (execgate_runtime._Bridge; request key "bridge" gives fd, version
          and the request cap); closed in forked children
  stdout, stderr belong to the tool; nothing the tool prints can reach fd 3's
  envelope.

The envelope is a claim, not a fact: the tool runs in this process and can
write on fd 3 itself. The runner decides every outcome that describes the
sandbox (Timeout, CPULimit, MemoryLimit, OutputLimit, SyscallDenied,
SandboxCrashed) from what it measures; the MemoryLimit (MemoryError) and
CPULimit (SIGXCPU) this harness reports stand only when the kernel's counters
confirm them, and the result is written whole for the runner to measure
against the output cap.

The harness is PID 1 of the jail's PID namespace, so it installs its own
SIGXCPU handler (PID 1 ignores signals without one) to report CPULimit when the
soft RLIMIT_CPU it sets is reached; the hard limit (set by nsjail one second
later) kills the jail if the tool never returns to the interpreter. RLIMIT_CPU
counts per process: the runner enforces the limit on the whole jail from its
cgroup, so a tool burning CPU in several processes is stopped as well.

Only the harness process itself ever writes the envelope: a forked child
(os.fork, multiprocessing) closes fd 3 right after the fork, dies of SIGXCPU
instead of reporting it, and leaves without writing if it ever returns into
the harness.

Other processes of the jail cannot read the harness's memory: the rootfs's
interpreter is not readable by the tool's user, which makes every process
started from it non-dumpable (and the seccomp policy refuses
PR_SET_DUMPABLE 1); where that is not so, the harness drops dumpability
itself before it reads the request.

Brokered secrets: the request's secrets become context.secrets (a read-only
mapping) and files SECRETS_DIR/NAME of mode 0400 on the run's own tmpfs
(mounted there by nsjail, or by the zygote's child at level process),
written before the tool is loaded; the directory is then made read-only for
the tool's user. A run whose secrets cannot be written ends with
EXIT_NO_SECRETS before any tool code ran.

Network mode proxy: the request names the egress socket (a unix socket bound
into the jail by the runner). The harness serves 127.0.0.1:3128 inside the
jail from a daemon thread and relays each connection to that socket; the
jail's environment points HTTP(S)_PROXY there.
"""

import os
import sys

PROTOCOL_VERSION = 1
RESULT_FD = 3
# The tool bridge socket (execgate_runtime._Bridge), passed by nsjail.
BRIDGE_FD = 5
HARNESS_DIR = os.path.dirname(os.path.abspath(__file__))
DEPS_DIR = "/opt/execgate/deps"
# matplotlib's font list, built once per environment by the runner
# (sandbox/fontcache.go, FontCacheDir).
FONT_CACHE_DIR = DEPS_DIR + "/.execgate/matplotlib"
TOOL_FILE = "tool.py"
TOOL_MODULE = "tool"
# The process that owns the result channel (PID 1 in the jail).
HARNESS_PID = os.getpid()
# Exit statuses of a harness that could not write an envelope (the runner's
# classifier knows them).
EXIT_NO_RESULT_FD = 70
EXIT_WRITE_FAILED = 71
EXIT_NO_RELAY = 72
EXIT_NO_SECRETS = 74
# Where a run's brokered secrets are written (jaillayout.SecretsDir).
SECRETS_DIR = "/run/execgate/secrets"
# Where the egress relay listens inside the jail (network mode proxy).
EGRESS_LISTEN = ("127.0.0.1", 3128)

# -I drops the script's directory from sys.path; tools import
# execgate_runtime from here.
if HARNESS_DIR not in sys.path:
    sys.path.insert(0, HARNESS_DIR)

import execgate_runtime as rt  # noqa: E402

try:
    # The json package imports re, enum and friends (~7 ms per start); the
    # harness only needs the C codec underneath it, so it drives _json
    # directly, exactly as json.loads/json.dumps would. Tools importing json
    # get the ordinary package.
    import _json

    class _DecodeContext:
        strict = True
        object_hook = None
        object_pairs_hook = None
        parse_float = float
        parse_int = int
        parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__
        memo = None

    _scan = _json.make_scanner(_DecodeContext())

    def _not_serialisable(o):
        raise TypeError("Object of type %s is not JSON serializable" % type(o).__name__)

    def _loads(text):
        if isinstance(text, (bytes, bytearray)):
            text = text.decode("utf-8")
        s = text.strip(" \t\n\r")
        try:
            obj, end = _scan(s, 0)
        except Exception:
            # Errors are rare: let the json package produce its precise
            # message (the C scanner needs it for that anyway).
            import json

            return json.loads(s)
        if end != len(s):
            raise ValueError("extra data after JSON at character %d" % end)
        return obj

    def _dumps(obj, allow_nan=True):
        enc = _json.make_encoder({}, _not_serialisable, _json.encode_basestring_ascii, None, ":", ",", False, False, allow_nan)
        return "".join(enc(obj, 0))

except ImportError:  # pragma: no cover - CPython always has _json
    import json

    def _loads(text):
        return json.loads(text)

    def _dumps(obj, allow_nan=True):
        return json.dumps(obj, allow_nan=allow_nan, separators=(",", ":"))

_done = False


def _error(type_, message, traceback="", line=0, column=0):
    err = {"type": type_, "message": message}
    if traceback:
        err["traceback"] = traceback
    if line:
        err["line"] = int(line)
    if column:
        err["column"] = int(column)
    return err


def _emit(status, result_json=None, error=None, logs=()):
    """Write the envelope to fd 3 once, then leave without running atexit
    handlers or joining the tool's threads."""
    global _done
    if os.getpid() != HARNESS_PID:
        # A forked child that returned into the harness: it has no say.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(0 if status == "ok" else 1)
    if _done:
        return
    _done = True
    env = {"protocol_version": PROTOCOL_VERSION, "status": status, "logs": list(logs)}
    if error is not None:
        env["error"] = error
    if rt._artifact_mimes:
        env["artifacts"] = rt._artifact_mimes
    head = _dumps(env)
    body = '{"result":' + (result_json if result_json is not None else "null") + "," + head[1:]
    data = memoryview(body.encode("utf-8"))
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    _end_output()
    try:
        while data:
            n = os.write(RESULT_FD, data)
            data = data[n:]
    except OSError:
        os._exit(EXIT_WRITE_FAILED)
    # EOF on the result channel tells the runner the envelope is whole; a
    # run at level process then ends without waiting for this process's
    # exit (zygote_linux.go, endedWithEnvelope).
    try:
        os.close(RESULT_FD)
    except OSError:
        pass
    os._exit(0)


def _end_output():
    """End stdout and stderr (flushed) before the envelope: the runner's
    output readers wait for every writer of their pipes to be gone, and
    left to this process's exit that is only once the kernel has torn its
    memory down, after the runner killed it for its whole envelope (about
    half a millisecond of every run at level process). /dev/null takes
    their place, so that a thread of the tool still writing writes nowhere
    and no file it opens meanwhile becomes fd 1 or 2."""
    try:
        null = os.open("/dev/null", os.O_WRONLY)
    except OSError:
        null = -1
    for fd in (1, 2):
        if fd == null:
            continue  # the tool had closed it: /dev/null is there now
        try:
            if null >= 0:
                os.dup2(null, fd)
            else:
                os.close(fd)
        except OSError:
            pass
    if null > 2:
        os.close(null)


def _user_tb(exc):
    """The exception's traceback from the first frame of the tool on."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != TOOL_FILE:
        tb = tb.tb_next
    return tb


def _format(exc):
    import traceback

    _register_source()
    return "".join(traceback.format_exception(type(exc), exc, _user_tb(exc)))


def _user_line(exc):
    line = 0
    tb = _user_tb(exc)
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == TOOL_FILE:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _describe(exc):
    msg = str(exc)
    name = type(exc).__name__
    return "%s: %s" % (name, msg) if msg else name


def _memory_error():
    # Free what the tool held before building the (small) envelope.
    mod = sys.modules.pop(TOOL_MODULE, None)
    if mod is not None:
        mod.__dict__.clear()
    import gc

    gc.collect()
    return _error("MemoryLimit", "the tool ran out of memory (MemoryError)")


_source = ""


def _register_source():
    """Let traceback show the tool's lines (imported only on error: linecache
    pulls in tokenize and re)."""
    import linecache

    linecache.cache[TOOL_FILE] = (len(_source), None, _source.splitlines(True), TOOL_FILE)


def _on_sigxcpu(signum, frame):
    if os.getpid() != HARNESS_PID:
        # A child over its own RLIMIT_CPU dies of it, as it would without
        # the harness; the runner watches the jail's total.
        import _signal  # the C module: `signal` drags in enum (~3 ms)

        _signal.signal(_signal.SIGXCPU, _signal.SIG_DFL)
        os.kill(os.getpid(), _signal.SIGXCPU)
        return
    _emit("error", error=_error("CPULimit", "the tool used more CPU time than allowed"), logs=_sink.export())


def _close_result_fd_in_child():
    """After os.fork (and multiprocessing's fork): the child has no use for
    the result channel, nor for the tool bridge (its parent's calls)."""
    for fd in (RESULT_FD, BRIDGE_FD):
        try:
            os.close(fd)
        except OSError:
            pass


PR_SET_DUMPABLE = 4


def _make_undumpable():
    """Keep other processes of the jail out of this one's memory
    (/proc/<pid>/mem). A process started from the rootfs's interpreter is
    already non-dumpable (the binary is not readable by the tool's user), and
    its /proc entries then belong to root rather than to the tool: one stat
    tells, and ctypes is loaded only when it is needed."""
    try:
        if os.stat("/proc/self/stat").st_uid != os.geteuid():
            return
    except OSError:
        pass
    try:
        import ctypes

        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except Exception:
        pass


def _set_cpu_limit(cpu_ms):
    if not cpu_ms or cpu_ms <= 0:
        return
    import _signal  # the C module: `signal` drags in enum (~3 ms)
    import resource

    _signal.signal(_signal.SIGXCPU, _on_sigxcpu)
    soft = max(1, -(-int(cpu_ms) // 1000))
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY and soft > hard:
        soft = hard
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


_sink = rt._LogSink()


def _start_egress_relay(path):
    """Serve EGRESS_LISTEN inside the jail and relay every connection to the
    egress proxy's unix socket at path, from one daemon thread (threads
    count against the pids limit, so there is one, not one per connection).
    A connection the proxy does not accept is closed: the tool sees an error,
    never a fake success."""
    import socket
    import threading

    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(EGRESS_LISTEN)
    ls.listen(128)
    ls.setblocking(False)
    threading.Thread(target=_relay_loop, args=(ls, path), name="execgate-egress", daemon=True).start()


def _relay_loop(listener, path):
    import selectors
    import socket

    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    # socket -> [peer, bytes waiting to be written to it, still reading from it]
    conns = {}
    high_water = 256 << 10

    def close_pair(s):
        for x in (s, conns.get(s, [None])[0]):
            if x is None or x not in conns:
                continue
            del conns[x]
            try:
                sel.unregister(x)
            except (KeyError, ValueError):
                pass
            x.close()

    def update(s):
        if s not in conns:
            return
        peer, out, reading = conns[s]
        ev = 0
        if reading and len(conns[peer][1]) < high_water:
            ev |= selectors.EVENT_READ
        if out:
            ev |= selectors.EVENT_WRITE
        try:
            if ev:
                try:
                    sel.modify(s, ev)
                except KeyError:
                    sel.register(s, ev)
            else:
                sel.unregister(s)
        except (KeyError, ValueError):
            pass

    def finish_if_done(s):
        peer = conns[s][0]
        if not conns[s][2] and not conns[peer][2] and not conns[s][1] and not conns[peer][1]:
            close_pair(s)

    while True:
        for key, mask in sel.select():
            s = key.fileobj
            if s is listener:
                try:
                    c, _ = listener.accept()
                except OSError:
                    continue
                u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    u.connect(path)
                except OSError:
                    c.close()
                    u.close()
                    continue
                c.setblocking(False)
                u.setblocking(False)
                conns[c] = [u, bytearray(), True]
                conns[u] = [c, bytearray(), True]
                update(c)
                update(u)
                continue
            if s not in conns:
                continue
            peer = conns[s][0]
            try:
                if mask & selectors.EVENT_WRITE and conns[s][1]:
                    n = s.send(conns[s][1])
                    del conns[s][1][:n]
                    if not conns[s][1] and not conns[peer][2]:
                        s.shutdown(socket.SHUT_WR)
                if mask & selectors.EVENT_READ and conns[s][2]:
                    data = s.recv(64 << 10)
                    if data:
                        conns[peer][1] += data
                    else:
                        conns[s][2] = False
                        if not conns[peer][1]:
                            peer.shutdown(socket.SHUT_WR)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                close_pair(s)
                continue
            update(s)
            update(peer)
            finish_if_done(s)


def _never_suspends(coro):
    """True when coro is a coroutine whose own code has no YIELD_VALUE: it
    awaits nothing, so it finishes on its first step without an event loop."""
    code = getattr(coro, "cr_code", None)
    if code is None or not hasattr(coro, "send"):
        return False
    import opcode

    yield_value = opcode.opmap.get("YIELD_VALUE")
    raw = code.co_code
    return yield_value is not None and all(raw[i] != yield_value for i in range(0, len(raw), 2))


def _await(aw):
    """Run an awaitable to completion. Importing asyncio costs tens of
    milliseconds, so a coroutine that awaits nothing (like the readiness
    probe) is stepped directly when the tool has not loaded asyncio itself;
    everything else goes through asyncio.run."""
    if "asyncio" not in sys.modules and _never_suspends(aw):
        try:
            aw.send(None)
        except StopIteration as done:
            return done.value
        aw.close()
        raise RuntimeError("a coroutine without await suspended")
    import asyncio

    async def main():
        return await aw

    return asyncio.run(main())


def _write_secrets(secrets):
    """Write each secret to SECRETS_DIR/NAME (0400, never following a link
    or replacing a file), then make the directory read-only."""
    for name, value in secrets.items():
        fd = os.open(os.path.join(SECRETS_DIR, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o400)
        try:
            data = memoryview(value.encode("utf-8"))
            while data:
                data = data[os.write(fd, data) :]
        finally:
            os.close(fd)
    os.chmod(SECRETS_DIR, 0o500)


def _secrets(req):
    """The request's secrets ({} when none), checked and written."""
    secrets = req.get("secrets") or {}
    if not isinstance(secrets, dict) or not all(isinstance(k, str) and isinstance(v, str) and k.isidentifier() for k, v in secrets.items()):
        _emit("error", error=_error("ProtocolMismatch", "the request's secrets are not a map of names to strings"))
    if secrets:
        try:
            _write_secrets(secrets)
        except OSError as e:
            sys.stderr.write("execgate harness: the run's secrets could not be written to %s: %s\n" % (SECRETS_DIR, e.strerror or e))
            os._exit(EXIT_NO_SECRETS)
    return secrets


def _run(req, secrets=None):
    """Run the tool described by req; return (status, result_json, error)."""
    source = req.get("source")
    entry = req.get("entrypoint") or "run"
    if not isinstance(source, str):
        return "error", None, _error("InvalidSource", "source must be a string")
    try:
        code = compile(source, TOOL_FILE, "exec", dont_inherit=True)
    except SyntaxError as e:
        import traceback

        tb = "".join(traceback.format_exception_only(type(e), e))
        return "error", None, _error("InvalidSource", "%s: %s" % (type(e).__name__, e.msg), tb, e.lineno or 0, e.offset or 0)
    except MemoryError:
        return "error", None, _memory_error()
    except (ValueError, OverflowError, RecursionError) as e:
        return "error", None, _error("InvalidSource", _describe(e))
    global _source
    _source = source

    module = type(sys)(TOOL_MODULE)
    module.__file__ = TOOL_FILE
    sys.modules[TOOL_MODULE] = module
    try:
        exec(code, module.__dict__)
    except MemoryError:
        return "error", None, _memory_error()
    except BaseException as e:  # noqa: BLE001 - SystemExit at import is a broken tool too
        return "error", None, _error("InvalidSource", "error while loading the tool: " + _describe(e), _format(e), _user_line(e))

    fn = module.__dict__.get(entry)
    if fn is None or not callable(fn):
        names = sorted(k for k, v in module.__dict__.items() if callable(v) and not k.startswith("_") and getattr(v, "__module__", None) == TOOL_MODULE)
        msg = "entrypoint %r not found in the tool" % entry
        if fn is not None:
            msg = "entrypoint %r is not callable (%s)" % (entry, type(fn).__name__)
        if names:
            msg += "; it defines: " + ", ".join(names)
        return "error", None, _error("EntrypointNotFound", msg)

    ctx = rt.Context(
        tenant_id=req.get("tenant_id") or "",
        execution_id=req.get("execution_id") or "",
        variables=req.get("variables") or {},
        deadline=(req.get("deadline_unix_ms") or 0) / 1000.0,
        tools=req.get("tools") or {},
        mode=req.get("mode") or "run",
        sink=_sink,
        bridge=req.get("bridge"),
        secrets=secrets,
    )
    rt._set_current(ctx)
    try:
        result = fn(req.get("args"), ctx)
        if hasattr(type(result), "__await__"):
            result = _await(result)
    except MemoryError:
        return "error", None, _memory_error()
    except rt.ToolFailure as e:
        return "error", None, _error(e.type, e.message, _format(e), _user_line(e))
    except BaseException as e:  # noqa: BLE001 - report everything the tool raised
        return "error", None, _error("ToolError", _describe(e), _format(e), _user_line(e))

    try:
        text = _dumps(result, allow_nan=False)
    except MemoryError:
        return "error", None, _memory_error()
    except (TypeError, ValueError, RecursionError) as e:
        return "error", None, _error("InvalidResult", "the result is not JSON-serialisable: " + _describe(e))
    # The runner measures the result against the output cap itself
    # (OutputLimit is its finding, never the harness's claim).
    return "ok", text, None


def _set_stdin(text):
    """Give the tool text on fd 0 (a memfd, so os.read(0), sys.stdin and
    subprocesses all read it), or /dev/null: end of file at once."""
    try:
        if text:
            fd = os.memfd_create("stdin", 0)
            data = memoryview(text.encode("utf-8", "surrogatepass"))
            while data:
                n = os.write(fd, data)
                data = data[n:]
            os.lseek(fd, 0, os.SEEK_SET)
        else:
            fd = os.open("/dev/null", os.O_RDONLY)
        os.dup2(fd, 0)
        os.close(fd)
    except OSError:
        return
    import io

    sys.stdin = io.TextIOWrapper(io.open(0, "rb", closefd=False), encoding="utf-8", errors="surrogateescape")


def _copy_font_cache():
    """Copy the environment's matplotlib font list, when it has one, into
    the run's MPLCONFIGDIR (its own /tmp), where matplotlib reads it
    instead of scanning every font (0.3 s); the run may change its copy,
    never the environment's."""
    try:
        names = [n for n in os.listdir(FONT_CACHE_DIR) if n.startswith("fontlist-") and n.endswith(".json")]
    except OSError:
        return
    dest = os.environ.get("MPLCONFIGDIR")
    if not dest or not names:
        return
    try:
        os.makedirs(dest, mode=0o700, exist_ok=True)
        for n in names:
            with open(os.path.join(FONT_CACHE_DIR, n), "rb") as src, open(os.path.join(dest, n), "wb") as dst:
                while True:
                    chunk = src.read(1 << 16)
                    if not chunk:
                        break
                    dst.write(chunk)
    except OSError:
        pass  # matplotlib builds its own


# A trivial tool of the shape most have (a coroutine entrypoint returning a
# dict), for _prewarm.
_PREWARM_SOURCE = "async def run(args, context):\n    return {'ok': True}\n"


def _prewarm():
    """Do, before the request is read, the one-time work every run does
    after it: load resource (_set_cpu_limit) and opcode (_never_suspends),
    and compile, call and step a coroutine and encode its result along the
    harness's own paths (CPython's compiler and interpreter set themselves
    up on first use). A warm jail does this while it waits for its run, off
    the run's path: from the hand-off to nsjail's exit, a trivial run took
    4.7 ms p50 instead of 9.0 (raw nsjail, alternated, load 5.5); a cold
    jail does the same work either way (its CPU is unchanged). Nothing of
    it is left for the tool but the two modules in sys.modules. Never an
    event loop: a coroutine that would suspend is closed unstepped."""
    try:
        import resource  # noqa: F401

        ns = {}
        exec(compile(_PREWARM_SOURCE, "<execgate-prewarm>", "exec", dont_inherit=True), ns)
        coro = ns["run"](None, None)
        try:
            if _never_suspends(coro):
                coro.send(None)
        except StopIteration as done:
            _dumps(done.value)
        finally:
            coro.close()
    except Exception:  # noqa: BLE001 - a warm-up never decides a run
        pass


def main(prewarm=False):
    """Run one request from stdin. prewarm: the jail's entry (harness.py)
    warms up before reading it (_prewarm); the zygote's children, forked
    from an interpreter that imported what runs need, do not."""
    global _sink
    try:
        os.set_inheritable(RESULT_FD, False)
    except OSError:
        sys.stderr.write("execgate harness: fd %d (result channel) is not open\n" % RESULT_FD)
        os._exit(EXIT_NO_RESULT_FD)
    try:
        os.set_inheritable(BRIDGE_FD, False)  # never into a subprocess
    except OSError:
        pass
    os.register_at_fork(after_in_child=_close_result_fd_in_child)
    _make_undumpable()
    if prewarm:
        _prewarm()
    raw = sys.stdin.buffer.read()
    try:
        req = _loads(raw)
    except ValueError as e:
        _emit("error", error=_error("ProtocolMismatch", "the request is not valid JSON: %s" % e))
    if not isinstance(req, dict) or req.get("protocol_version") != PROTOCOL_VERSION:
        got = req.get("protocol_version") if isinstance(req, dict) else None
        _emit("error", error=_error("ProtocolMismatch", "the harness speaks protocol %d, the request has %r" % (PROTOCOL_VERSION, got)))
    stdin = req.get("stdin")
    _set_stdin(stdin if isinstance(stdin, str) else "")
    _sink = rt._LogSink(max_lines=int(req.get("max_log_lines") or 1000))
    if req.get("deps"):
        sys.path.append(DEPS_DIR)
        _copy_font_cache()
    if req.get("egress_socket"):
        try:
            _start_egress_relay(req["egress_socket"])
        except (OSError, RuntimeError) as e:
            sys.stderr.write("execgate harness: the egress relay could not start on %s:%d: %s\n" % (EGRESS_LISTEN + (e,)))
            os._exit(EXIT_NO_RELAY)
    secrets = _secrets(req)
    _set_cpu_limit(req.get("cpu_ms"))
    status, result, error = _run(req, secrets)
    _emit(status, result, error, _sink.export())
