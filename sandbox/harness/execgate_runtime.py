"""execgate_runtime: what a tool running under execgate may import.

    from execgate_runtime import InvalidInput, logger

    def run(args, context):
        if "name" not in args:
            raise InvalidInput("args.name is required")
        context.log("greeting %s" % args["name"])
        return {"greeting": "hello " + args["name"]}

Offers:
  Context        the type of the `context` argument (tenant_id, execution_id,
                 variables, deadline, remaining(), log(), tools)
  logger / log   log lines that land in the result envelope's "logs"
  ToolFailure    base of the exceptions a tool raises on purpose;
                 ToolFailure(type, message) with type "ToolError" or "InvalidInput"
  InvalidInput   the tool rejected its arguments (envelope error InvalidInput)

Only the standard library is used; importing this module is cheap.
"""

import time as _time

__all__ = [
    "Context",
    "InvalidInput",
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


class _Tools:
    """context.tools: in test mode each attribute is a callable returning its fixture."""

    def __init__(self, fixtures, mode):
        self._fixtures = dict(fixtures or {})
        self._mode = mode

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if self._mode != "test":
            raise ToolFailure("ToolError", "host tools are not available to this run (tool %r)" % name)
        if name not in self._fixtures:
            raise ToolFailure("ToolError", "tool %r has no fixture in this test run" % name)
        value = self._fixtures[name]

        def call(*args, **kwargs):
            return _copy(value)

        call.__name__ = name
        return call

    def __dir__(self):
        return sorted(self._fixtures)

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


class Context:
    """The `context` a tool's run(args, context) receives."""

    def __init__(self, tenant_id="", execution_id="", variables=None, deadline=0.0, tools=None, mode="run", sink=None):
        self.tenant_id = tenant_id
        self.execution_id = execution_id
        self.variables = dict(variables or {})
        # deadline is the wall-clock deadline in Unix seconds (float).
        self.deadline = float(deadline)
        self.mode = mode
        self.tools = _Tools(tools, mode)
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
