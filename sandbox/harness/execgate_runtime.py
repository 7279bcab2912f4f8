"""execgate_runtime: what a tool running under execgate may import.

    from execgate_runtime import InvalidInput, logger

    def run(args, context):
        if "name" not in args:
            raise InvalidInput("args.name is required")
        context.log("greeting %s" % args["name"])
        return {"greeting": "hello " + args["name"]}

Offers:
  Context        the type of the `context` argument (tenant_id, execution_id,
                 variables, deadline, remaining(), log(), tools, artifacts)
  logger / log   log lines that land in the result envelope's "logs"
  ToolFailure    base of the exceptions a tool raises on purpose;
                 ToolFailure(type, message) with type "ToolError" or "InvalidInput"
  InvalidInput   the tool rejected its arguments (envelope error InvalidInput)
  ToolDenied, ToolUnavailable, ToolTimeout, ToolFailed
                 what context.tools.run raises (all are ToolFailure)

Only the standard library is used; importing this module is cheap.
"""

import os
import time as _time

__all__ = [
    "Artifacts",
    "Context",
    "InvalidInput",
    "ToolDenied",
    "ToolFailed",
    "ToolTimeout",
    "ToolUnavailable",
    "LEVELS",
    "ToolFailure",
    "current_context",
    "log",
    "logger",
]

# Log levels a tool may use; anything else is recorded as "info".
LEVELS = ("debug", "info", "warning", "error")

# Error types a tool may declare through ToolFailure. Everything else (Timeout,
# MemoryLimit, ...) is decided by execgate, never by the tool.
TOOL_ERROR_TYPES = ("ToolError", "InvalidInput")


class ToolFailure(Exception):
    """A failure the tool reports on purpose: ToolFailure(type, message).

    The envelope error gets this type and message (no traceback noise beyond
    the tool's own frames). Unknown types are reported as ToolError.
    """

    def __init__(self, type, message=""):
        if type not in TOOL_ERROR_TYPES:
            message = "%s: %s" % (type, message) if message else str(type)
            type = "ToolError"
        super().__init__(message)
        self.type = type
        self.message = str(message)


class InvalidInput(ToolFailure):
    """The tool's arguments were not acceptable (envelope error InvalidInput)."""

    def __init__(self, message=""):
        super().__init__("InvalidInput", message)


class _LogSink:
    """Collects log lines for the envelope, bounded in count and size."""

    def __init__(self, max_lines=1000, max_line_bytes=8192):
        self.lines = []
        self.dropped = 0
        self.max_lines = max_lines
        self.max_line_bytes = max_line_bytes

    def add(self, message, level="info"):
        if not isinstance(message, str):
            message = str(message)
        level = level if level in LEVELS else "info"
        if len(self.lines) >= self.max_lines:
            self.dropped += 1
            return
        if len(message) > self.max_line_bytes:
            message = message[: self.max_line_bytes] + "...[truncated]"
        self.lines.append({"level": level, "message": message})

    def export(self):
        out = list(self.lines)
        if self.dropped:
            out.append({"level": "warning", "message": "%d log lines dropped (limit %d)" % (self.dropped, self.max_lines)})
        return out


class ToolBridgeError(ToolFailure):
    """Base of the errors context.tools raises; uncaught, the run ends in a
    ToolError naming the bridge error type."""

    type_name = "ToolFailed"

    def __init__(self, message="", tool=None):
        super().__init__("ToolError", "%s: %s" % (self.type_name, message))
        self.reason = str(message)  # the bridge's message alone
        self.tool = tool


class ToolDenied(ToolBridgeError):
    """The tool is not granted to this run, or policy or a limit denied the call."""

    type_name = "ToolDenied"


class ToolUnavailable(ToolBridgeError):
    """The tool's server cannot be reached, or the bridge is gone."""

    type_name = "ToolUnavailable"


class ToolTimeout(ToolBridgeError):
    """The call outlived its timeout or the run's deadline."""

    type_name = "ToolTimeout"


class ToolFailed(ToolBridgeError):
    """The tool's server answered with an error (message), or an unusable result."""

    type_name = "ToolFailed"


_BRIDGE_ERRORS = {c.type_name: c for c in (ToolDenied, ToolUnavailable, ToolTimeout, ToolFailed)}

# Where a run's artifacts go (jaillayout.WorkspaceOutDir): every file left
# there is collected by the runner after the run.
OUT_DIR = "/workspace/out"
# The most media types remembered for the envelope.
_MAX_MIMES = 1000
# Media types given to context.artifacts.save, by name (the harness puts
# them in the envelope; the runner labels the artifacts with them).
_artifact_mimes = {}


def _check_artifact_name(name):
    """The rules of sandbox/workspace CheckName: a file directly in
    /workspace/out."""
    if not isinstance(name, str):
        raise TypeError("an artifact's name must be a str, not %s" % type(name).__name__)
    raw = name.encode("utf-8", "surrogatepass")
    if not raw or len(raw) > 255:
        raise ValueError("an artifact's name must be 1 to 255 bytes, not %d" % len(raw))
    if name in (".", ".."):
        raise ValueError("an artifact's name cannot be %r" % name)
    for ch in name:
        o = ord(ch)
        if o < 0x20 or o == 0x7F or 0x80 <= o < 0xA0 or 0xD800 <= o < 0xE000:
            raise ValueError("an artifact's name cannot contain %r" % ch)
        if ch in "/\\":
            raise ValueError("an artifact's name cannot contain %r (artifacts are files directly in %s)" % (ch, OUT_DIR))


_MIME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_MIME_MORE = frozenset("!#$&-^_.+")


def _mime_token(t):
    if not t or len(t) > 63 or t[0] not in _MIME_CHARS:
        return False
    return all(c in _MIME_CHARS or c in _MIME_MORE for c in t)


def _check_mime(mime):
    """The rules of sandbox/workspace CheckMIME: type/subtype, lower case,
    no parameters."""
    if not isinstance(mime, str):
        raise TypeError("mime must be a str, not %s" % type(mime).__name__)
    typ, sep, sub = mime.partition("/")
    if len(mime) > 127 or not sep or not _mime_token(typ) or not _mime_token(sub):
        raise ValueError("mime %r is not a media type (type/subtype, lower case, no parameters)" % mime)


class Artifacts:
    """context.artifacts: the files a run hands back. Every file the tool
    leaves in /workspace/out is one; save() writes one there."""

    def save(self, name, data, mime=None):
        """Write data (str, as UTF-8, or bytes) to /workspace/out/<name> and
        return its path. mime labels it (else its extension does). A file
        of that name is replaced."""
        _check_artifact_name(name)
        if mime is not None:
            _check_mime(mime)
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogatepass")
        elif isinstance(data, (bytes, bytearray, memoryview)):
            data = memoryview(data).cast("B")
        else:
            raise TypeError("data must be str or bytes, not %s" % type(data).__name__)
        path = OUT_DIR + "/" + name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
        finally:
            os.close(fd)
        if mime is None:
            _artifact_mimes.pop(name, None)
        elif name in _artifact_mimes or len(_artifact_mimes) < _MAX_MIMES:
            _artifact_mimes[name] = mime
        return path

    def __repr__(self):
        return "Artifacts(%r)" % OUT_DIR


class _Bridge:
    """The jail's end of the tool bridge: length-prefixed JSON frames on an
    inherited unix socket (protocol `version`). One daemon reader thread
    routes answers to their callers by id, so calls may overlap
    (run_async)."""

    def __init__(self, fd, version, max_request_bytes):
        import threading

        self._fd = fd
        self._version = version
        self._max = max_request_bytes
        self._lock = threading.Lock()  # guards _next, _waiting, _dead, writes
        self._next = 1
        self._waiting = {}
        self._dead = None
        self._reader = None
        self._threading = threading

    def request(self, op, fields, on_answer):
        """Send a request; on_answer(answer_dict) is called from the reader thread."""
        import json

        with self._lock:
            if self._dead is not None:
                raise ToolUnavailable(self._dead)
            rid = self._next
            self._next += 1
            msg = dict(fields, v=self._version, id=rid, op=op)
            try:
                data = json.dumps(msg, allow_nan=False, separators=(",", ":")).encode()
            except (TypeError, ValueError) as e:
                raise ToolFailed("the arguments are not JSON-serialisable: %s" % e) from None
            if len(data) > self._max:
                raise ToolDenied("the request is %d bytes, over the bridge's %d-byte cap" % (len(data), self._max))
            self._waiting[rid] = on_answer
            if self._reader is None:
                self._reader = self._threading.Thread(target=self._read_loop, name="execgate-tools", daemon=True)
                self._reader.start()
            frame = len(data).to_bytes(4, "big") + data
            try:
                view = memoryview(frame)
                while view:
                    n = os.write(self._fd, view)
                    view = view[n:]
            except OSError as e:
                self._waiting.pop(rid, None)
                self._dead = "the tool bridge is closed (%s)" % e.strerror
                raise ToolUnavailable(self._dead) from None

    def call(self, op, **fields):
        box = []
        done = self._threading.Event()

        def on_answer(a):
            box.append(a)
            done.set()

        self.request(op, fields, on_answer)
        done.wait()
        return _answer(box[0], fields.get("name"))

    async def call_async(self, op, **fields):
        import asyncio

        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def settle(a):
            if not fut.done():
                fut.set_result(a)

        self.request(op, fields, lambda a: loop.call_soon_threadsafe(settle, a))
        return _answer(await fut, fields.get("name"))

    def _read_exact(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = os.read(self._fd, n - len(buf))
            if not chunk:
                raise EOFError
            buf += chunk
        return bytes(buf)

    def _read_loop(self):
        import json

        reason = "the tool bridge is closed"
        try:
            while True:
                n = int.from_bytes(self._read_exact(4), "big")
                a = json.loads(self._read_exact(n))
                with self._lock:
                    cb = self._waiting.pop(a.get("id"), None)
                if cb is not None:
                    try:
                        cb(a)
                    except Exception:  # noqa: BLE001 - e.g. an event loop closed meanwhile
                        pass
                elif a.get("id") == 0 and a.get("error"):
                    reason = a["error"].get("message") or reason
                    break
        except (OSError, EOFError, ValueError):
            pass
        with self._lock:
            self._dead = reason
            waiting, self._waiting = self._waiting, {}
        for cb in waiting.values():
            cb({"error": {"type": "ToolUnavailable", "message": reason}})


def _answer(a, tool):
    err = a.get("error")
    if err:
        cls = _BRIDGE_ERRORS.get(err.get("type"), ToolFailed)
        raise cls(err.get("message") or cls.type_name, tool)
    return a.get("result")


class _Tools:
    """context.tools: the governed tool bridge (search, describe, run,
    run_async). context.tools.<name>(...) answers from fixtures in test mode
    and calls the tool <name> otherwise."""

    def __init__(self, fixtures, mode, bridge=None):
        self._fixtures = dict(fixtures or {})
        self._mode = mode
        self._bridge_info = bridge or {}
        self._bridge = None

    def _channel(self):
        if self._bridge is None:
            info = self._bridge_info
            if not info.get("fd"):
                raise ToolUnavailable("this run has no tool bridge")
            self._bridge = _Bridge(int(info["fd"]), int(info.get("version") or 1), int(info.get("max_request_bytes") or (1 << 20)))
        return self._bridge

    def search(self, query="", limit=10):
        """Names and one-line descriptions of the granted tools matching query."""
        return self._channel().call("search", query=str(query), limit=int(limit))

    def describe(self, name):
        """The tool's description and input schema (JSON Schema)."""
        return self._channel().call("describe", name=str(name))

    def run(self, name, args=None):
        """Call the tool with args (a dict); returns its structured result or
        raises ToolDenied, ToolUnavailable, ToolTimeout or ToolFailed."""
        return self._channel().call("run", name=str(name), args={} if args is None else args)

    async def run_async(self, name, args=None):
        """run, awaitable: several calls may be in flight at once."""
        return await self._channel().call_async("run", name=str(name), args={} if args is None else args)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if self._mode != "test":

            def call(*args, **kwargs):
                payload = args[0] if len(args) == 1 and not kwargs and isinstance(args[0], dict) else kwargs
                return self.run(name, payload)

            call.__name__ = name
            return call
        if name not in self._fixtures:
            raise ToolFailure("ToolError", "tool %r has no fixture in this test run" % name)
        value = self._fixtures[name]

        def call(*args, **kwargs):
            return _copy(value)

        call.__name__ = name
        return call

    def __dir__(self):
        return sorted(set(self._fixtures) | {"search", "describe", "run", "run_async"})

    def __contains__(self, name):
        return name in self._fixtures


def _copy(value):
    # Fixtures come from JSON: dicts, lists and scalars. Copy so one call's
    # mutation does not leak into the next.
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


_MappingProxy = type(type.__dict__)  # types.MappingProxyType, without importing types


class Context:
    """The `context` a tool's run(args, context) receives."""

    def __init__(self, tenant_id="", execution_id="", variables=None, deadline=0.0, tools=None, mode="run", sink=None, bridge=None, secrets=None):
        self.tenant_id = tenant_id
        self.execution_id = execution_id
        self.variables = dict(variables or {})
        # secrets are the brokered secrets granted to this run, by name
        # (read-only; also files under /run/execgate/secrets/). A secret not
        # granted is absent: context.secrets["X"] raises KeyError.
        self.secrets = _MappingProxy(dict(secrets or {}))
        # deadline is the wall-clock deadline in Unix seconds (float).
        self.deadline = float(deadline)
        self.mode = mode
        self.tools = _Tools(tools, mode, bridge)
        self.artifacts = Artifacts()
        self._sink = sink if sink is not None else _LogSink()

    def remaining(self):
        """Seconds left before the run is stopped (never negative)."""
        return max(0.0, self.deadline - _time.time())

    def log(self, message, level="info"):
        """Record a log line for the result envelope."""
        self._sink.add(message, level)

    def __repr__(self):
        return "Context(tenant_id=%r, execution_id=%r, mode=%r)" % (self.tenant_id, self.execution_id, self.mode)


_current = None


def current_context():
    """The Context of the running tool (None outside a run)."""
    return _current


def _set_current(ctx):
    global _current
    _current = ctx


def log(message, level="info"):
    """Log through the running tool's context (dropped outside a run)."""
    if _current is not None:
        _current.log(message, level)


class _Logger:
    """logger.info("...") etc.; lines land in the envelope's logs."""

    def debug(self, message, *args):
        log(_fmt(message, args), "debug")

    def info(self, message, *args):
        log(_fmt(message, args), "info")

    def warning(self, message, *args):
        log(_fmt(message, args), "warning")

    warn = warning

    def error(self, message, *args):
        log(_fmt(message, args), "error")


def _fmt(message, args):
    if not args:
        return message
    try:
        return str(message) % args
    except (TypeError, ValueError):
        return " ".join([str(message)] + [str(a) for a in args])


logger = _Logger()
