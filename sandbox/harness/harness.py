"""execgate harness: runs one tool, once, inside the jail.

Started by nsjail as

    /usr/bin/python3 -I -S -B -u /opt/execgate/harness/harness.py

Protocol (PROTOCOL_VERSION):
  stdin   one JSON request, read to EOF:
          {protocol_version, execution_id, tenant_id, source, entrypoint, args,
           mode, variables, tools, deadline_unix_ms, output_bytes, cpu_ms,
           max_log_lines, deps}
  fd 3    one JSON envelope, written once at the end:
          {protocol_version, status, result, error: {type, message, traceback,
           line}, logs: [{level, message}]}
  stdout, stderr belong to the tool; nothing the tool prints can reach fd 3's
  envelope.

The harness is PID 1 of the jail's PID namespace, so it installs its own
SIGXCPU handler (PID 1 ignores signals without one) to report CPULimit when the
soft RLIMIT_CPU it sets is reached; the hard limit (set by nsjail one second
later) kills the jail if the tool never returns to the interpreter.
"""

import os
import sys

PROTOCOL_VERSION = 1
RESULT_FD = 3
HARNESS_DIR = os.path.dirname(os.path.abspath(__file__))
DEPS_DIR = "/opt/execgate/deps"
TOOL_FILE = "tool.py"
TOOL_MODULE = "tool"
DEFAULT_OUTPUT_BYTES = 1 << 20

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


def _error(type_, message, traceback="", line=0):
    err = {"type": type_, "message": message}
    if traceback:
        err["traceback"] = traceback
    if line:
        err["line"] = int(line)
    return err


def _emit(status, result_json=None, error=None, logs=()):
    """Write the envelope to fd 3 once, then leave without running atexit
    handlers or joining the tool's threads."""
    global _done
    if _done:
        return
    _done = True
    env = {"protocol_version": PROTOCOL_VERSION, "status": status, "logs": list(logs)}
    if error is not None:
        env["error"] = error
    head = _dumps(env)
    body = '{"result":' + (result_json if result_json is not None else "null") + "," + head[1:]
    data = memoryview(body.encode("utf-8"))
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    try:
        while data:
            n = os.write(RESULT_FD, data)
            data = data[n:]
    except OSError:
        os._exit(71)
    os._exit(0)


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
    _emit("error", error=_error("CPULimit", "the tool used more CPU time than allowed"), logs=_sink.export())


def _set_cpu_limit(cpu_ms):
    if not cpu_ms or cpu_ms <= 0:
        return
    import resource
    import signal

    signal.signal(signal.SIGXCPU, _on_sigxcpu)
    soft = max(1, -(-int(cpu_ms) // 1000))
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY and soft > hard:
        soft = hard
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


_sink = rt._LogSink()


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


def _run(req):
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
        return "error", None, _error("InvalidSource", "%s: %s" % (type(e).__name__, e.msg), tb, e.lineno or 0)
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
    cap = int(req.get("output_bytes") or DEFAULT_OUTPUT_BYTES)
    if len(text) > cap:
        return "error", None, _error("OutputLimit", "the result is %d bytes, over the output cap of %d bytes" % (len(text), cap))
    return "ok", text, None


def main():
    global _sink
    try:
        os.set_inheritable(RESULT_FD, False)
    except OSError:
        sys.stderr.write("execgate harness: fd %d (result channel) is not open\n" % RESULT_FD)
        os._exit(70)
    raw = sys.stdin.buffer.read()
    # The tool reads EOF from stdin.
    try:
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    except OSError:
        pass
    try:
        req = _loads(raw)
    except ValueError as e:
        _emit("error", error=_error("ProtocolMismatch", "the request is not valid JSON: %s" % e))
    if not isinstance(req, dict) or req.get("protocol_version") != PROTOCOL_VERSION:
        got = req.get("protocol_version") if isinstance(req, dict) else None
        _emit("error", error=_error("ProtocolMismatch", "the harness speaks protocol %d, the request has %r" % (PROTOCOL_VERSION, got)))
    _sink = rt._LogSink(max_lines=int(req.get("max_log_lines") or 1000))
    if req.get("deps"):
        sys.path.append(DEPS_DIR)
    _set_cpu_limit(req.get("cpu_ms"))
    status, result, error = _run(req)
    _emit(status, result, error, _sink.export())


if __name__ == "__main__":
    main()
