"""Typed models of the execute request and the result envelope (DESIGN §4).

Dataclasses, not pydantic: the gateway already validates every request
strictly (unknown fields and wrong types are a 400 naming the field), so a
second validator in the client would only drift from it, and a client
library should not force a pydantic major version on its users. The models
read what they know and keep the whole decoded body in ``raw``, so fields a
newer gateway adds are never lost.
"""

from __future__ import annotations

import base64 as _b64
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, ClassVar, Literal, Mapping, Optional

Status = Literal["ok", "error"]
NetworkAccess = Literal["none", "proxy", "host"]
Language = Literal["python", "javascript", "typescript"]
Isolation = Literal["jail", "process"]
# The Python runtimes a run may name (GET /v1/runtimes lists the ones served).
Runtime = Literal["python3.11", "python3.13", "host"]
ExecutionState = Literal["queued", "running", "done"]


@dataclass(frozen=True)
class Limits:
    """Requested run limits; None leaves a limit to policy."""

    timeout_ms: Optional[int] = None
    cpu_ms: Optional[int] = None
    memory_mb: Optional[int] = None
    pids: Optional[int] = None
    output_bytes: Optional[int] = None
    tmp_mb: Optional[int] = None
    files: Optional[int] = None
    files_bytes: Optional[int] = None
    artifacts: Optional[int] = None
    artifacts_bytes: Optional[int] = None

    def to_dict(self) -> dict[str, int]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: Optional[Mapping[str, Any]]) -> "Limits":
        d = d or {}
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class ExecuteRequest:
    """The body of POST /v1/execute (and, with ``callback_url``, of POST
    /v1/executions). ``execution_id`` is the idempotency key: the client
    fills one in when it is None, and keeps it across retries.
    ``egress_allow`` is the body's ``egress.allow``."""

    source: str
    execution_id: Optional[str] = None
    tenant_id: Optional[str] = None
    language: Optional[Language] = None
    entrypoint: Optional[str] = None
    args: Any = None
    requirements: Optional[list[str]] = None
    requirements_lock: Optional[str] = None
    environment_id: Optional[str] = None
    network_access: Optional[NetworkAccess] = None
    isolation: Optional[Isolation] = None
    runtime: Optional[Runtime] = None
    egress_allow: Optional[list[str]] = None
    limits: Optional[Limits] = None
    mode: Optional[Literal["run", "test"]] = None
    tools: Optional[list[str]] = None
    # secrets names the brokered secrets the run asks for (granted by
    # the tenant's policy; read in the tool as context.secrets["NAME"]).
    secrets: Optional[list[str]] = None
    fixtures: Optional[Mapping[str, Any]] = None
    # Input files, read-only under /workspace: {"path", "content",
    # "encoding": "utf8" | "base64"} each, sent as given.
    files: Optional[list[Mapping[str, Any]]] = None
    stdin: Optional[str] = None
    callback_url: Optional[str] = None

    # Sent as they are when set.
    _PLAIN: ClassVar[tuple[str, ...]] = ("execution_id", "tenant_id", "language", "entrypoint", "requirements", "requirements_lock",
              "environment_id", "network_access", "isolation", "runtime", "mode", "tools", "secrets", "stdin", "callback_url")

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"source": self.source}
        for name in self._PLAIN:
            v = getattr(self, name)
            if v is not None:
                body[name] = v
        if self.args is not None:
            body["args"] = self.args
        if self.egress_allow is not None:
            body["egress"] = {"allow": list(self.egress_allow)}
        if self.limits is not None:
            body["limits"] = self.limits.to_dict()
        if self.fixtures is not None:
            body["fixtures"] = dict(self.fixtures)
        if self.files is not None:
            body["files"] = [dict(f) for f in self.files]
        return body


@dataclass(frozen=True)
class ErrorInfo:
    type: str
    message: str
    traceback: Optional[str] = None
    reasons: list[str] = field(default_factory=list)
    line: Optional[int] = None
    column: Optional[int] = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ErrorInfo":
        return cls(
            type=str(d.get("type", "")),
            message=str(d.get("message", "")),
            traceback=d.get("traceback"),
            reasons=list(d.get("reasons") or []),
            line=d.get("line"),
            column=d.get("column"),
        )


@dataclass(frozen=True)
class Usage:
    wall_ms: int = 0
    cpu_ms: int = 0
    peak_memory_kb: int = 0
    # The level the run ran at ("jail" or "process"); "" when nothing ran.
    isolation: str = ""
    # What ran the tool: a Python runtime ("python3.13") or "deno"; "" when
    # nothing ran.
    runtime: str = ""

    @classmethod
    def from_dict(cls, d: Optional[Mapping[str, Any]]) -> "Usage":
        d = d or {}
        return cls(int(d.get("wall_ms", 0)), int(d.get("cpu_ms", 0)), int(d.get("peak_memory_kb", 0)), str(d.get("isolation", "")),
                   str(d.get("runtime", "")))


@dataclass(frozen=True)
class Artifact:
    """A file the run left in /workspace/out (in name order in the
    envelope). ``base64`` carries its bytes when the gateway inlined it (at
    most ``server.artifacts_inline_bytes``); every artifact can be fetched
    with ``Client.artifact`` (GET /v1/executions/{id}/artifacts/{name})
    while the gateway keeps it."""

    name: str
    bytes: int
    mime: str
    sha256: str
    base64: Optional[str] = None

    @property
    def data(self) -> Optional[bytes]:
        """The inline bytes, or None when the artifact must be fetched."""
        return None if self.base64 is None else _b64.b64decode(self.base64)

    @property
    def is_image(self) -> bool:
        return self.mime.startswith("image/")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Artifact":
        b = d.get("base64")
        return cls(str(d.get("name", "")), int(d.get("bytes") or 0), str(d.get("mime", "")), str(d.get("sha256", "")),
                   b if isinstance(b, str) else None)


@dataclass(frozen=True)
class DroppedArtifact:
    """A file of /workspace/out that was not collected, and why."""

    name: str
    reason: str


@dataclass(frozen=True)
class Truncated:
    stdout: bool = False
    stderr: bool = False
    # The first files of /workspace/out that were not collected, and how
    # many were not in all.
    artifacts: list[DroppedArtifact] = field(default_factory=list)
    artifacts_dropped: int = 0


@dataclass(frozen=True)
class Decision:
    id: str
    network_access: str
    limits: Limits
    egress_allow: list[str]
    # The decided Python runtime ("" for other languages).
    runtime: str = ""
    # secrets are the brokered secrets granted to the run, by name.
    secrets: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: Optional[Mapping[str, Any]]) -> Optional["Decision"]:
        if not d:
            return None
        return cls(
            id=str(d.get("id", "")),
            network_access=str(d.get("network_access", "")),
            limits=Limits.from_dict(d.get("limits")),
            egress_allow=list((d.get("egress") or {}).get("allow") or []),
            runtime=str(d.get("runtime", "")),
            secrets=list(d.get("secrets") or []),
        )


@dataclass(frozen=True)
class Envelope:
    """Every /v1/execute answer, run or refused."""

    execution_id: str
    tenant_id: str
    status: Status
    result: Any
    stdout: str
    stderr: str
    truncated: Truncated
    error: Optional[ErrorInfo]
    usage: Usage
    logs: list[dict[str, Any]]
    decision: Optional[Decision]
    trace_id: str
    egress: list[dict[str, Any]]
    raw: dict[str, Any] = field(repr=False, compare=False)
    artifacts: list[Artifact] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def images(self) -> list[Artifact]:
        """The artifacts whose media type is image/*."""
        return [a for a in self.artifacts if a.is_image]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Envelope":
        t = d.get("truncated") or {}
        err = d.get("error")
        return cls(
            execution_id=str(d.get("execution_id", "")),
            tenant_id=str(d.get("tenant_id", "")),
            status="ok" if d.get("status") == "ok" else "error",
            result=d.get("result"),
            stdout=str(d.get("stdout", "")),
            stderr=str(d.get("stderr", "")),
            truncated=Truncated(bool(t.get("stdout")), bool(t.get("stderr")),
                                [DroppedArtifact(str(x.get("name", "")), str(x.get("reason", ""))) for x in t.get("artifacts") or []],
                                int(t.get("artifacts_dropped") or 0)),
            error=ErrorInfo.from_dict(err) if err else None,
            usage=Usage.from_dict(d.get("usage")),
            logs=list(d.get("logs") or []),
            decision=Decision.from_dict(d.get("decision")),
            trace_id=str(d.get("trace_id", "")),
            egress=list(d.get("egress") or []),
            raw=dict(d),
            artifacts=[Artifact.from_dict(a) for a in d.get("artifacts") or [] if isinstance(a, Mapping)],
        )


@dataclass(frozen=True)
class SourceProblem:
    line: int
    col: int
    message: str


@dataclass(frozen=True)
class ValidateResult:
    """POST /v1/validate: whether the source compiles and defines the entrypoint."""

    valid: bool
    errors: list[SourceProblem]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ValidateResult":
        return cls(
            valid=bool(d.get("valid")),
            errors=[SourceProblem(int(e.get("line", 0)), int(e.get("col", 0)), str(e.get("message", ""))) for e in d.get("errors") or []],
        )


def _time(v: Any) -> Optional[datetime]:
    """An RFC 3339 time of the gateway (nanoseconds, Z) as an aware datetime."""
    if not isinstance(v, str) or not v:
        return None
    s = v.replace("Z", "+00:00")
    head, dot, rest = s.partition(".")
    if dot:  # at most the 6 fractional digits datetime holds
        digits = len(rest) - len(rest.lstrip("0123456789"))
        s = head + "." + rest[:min(digits, 6)].ljust(6, "0") + rest[digits:]
    try:
        t = datetime.fromisoformat(s)
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class ExecutionStatus:
    """An async execution (POST /v1/executions, GET and DELETE
    /v1/executions/{id}). Once ``done``, ``envelope`` is what POST
    /v1/execute would have answered, with ``http_status``."""

    execution_id: str
    tenant_id: str
    status: ExecutionState
    cancel_requested: bool = False
    submitted_at: Optional[datetime] = None
    started_at: Optional[datetime] = None
    finished_at: Optional[datetime] = None
    http_status: Optional[int] = None
    envelope: Optional[Envelope] = None
    # The artifacts are the envelope's (envelope.artifacts).
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def done(self) -> bool:
        return self.status == "done"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ExecutionStatus":
        env = d.get("envelope")
        return cls(
            execution_id=str(d.get("execution_id", "")),
            tenant_id=str(d.get("tenant_id", "")),
            status=str(d.get("status", "")),  # type: ignore[arg-type]  # kept as sent, a newer state too
            cancel_requested=bool(d.get("cancel_requested")),
            submitted_at=_time(d.get("submitted_at")),
            started_at=_time(d.get("started_at")),
            finished_at=_time(d.get("finished_at")),
            http_status=int(d["http_status"]) if d.get("http_status") else None,
            envelope=Envelope.from_dict(env) if isinstance(env, Mapping) else None,
            raw=dict(d),
        )


@dataclass(frozen=True)
class Package:
    """One package of a prepared environment's lock."""

    name: str
    version: str
    index: str
    via: list[str]


@dataclass(frozen=True)
class PreparedEnvironment:
    """POST /v1/prepare: an installed package environment. Name it in a run
    with ``environment_id``; ``lock`` reproduces it (``requirements_lock``)."""

    environment_id: str
    lock: str
    packages: list[Package]
    cached: bool
    warm: int
    limits: Limits
    network_access: str
    ms: int
    raw: dict[str, Any] = field(repr=False, compare=False)
    # The Python runtime it is for (ids are per runtime); "" for an npm
    # environment (JavaScript and TypeScript name no runtime).
    runtime: str = ""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "PreparedEnvironment":
        return cls(
            runtime=str(d.get("runtime", "")),
            environment_id=str(d.get("environment_id", "")),
            lock=str(d.get("lock", "")),
            packages=[Package(str(p.get("name", "")), str(p.get("version", "")), str(p.get("index", "")),
                              list(p.get("via") or [])) for p in d.get("packages") or []],
            cached=bool(d.get("cached")),
            warm=int(d.get("warm") or 0),
            limits=Limits.from_dict(d.get("limits")),
            network_access=str(d.get("network_access", "")),
            ms=int(d.get("ms") or 0),
            raw=dict(d),
        )


@dataclass(frozen=True)
class Tool:
    """A granted tool (code mode): ``name`` is "<server>.<tool>"."""

    name: str
    server: str
    description: str
    input_schema: Any


@dataclass(frozen=True)
class ToolList:
    """GET /v1/tools: the tools a run of the caller would be granted, the
    servers that could not be reached, typed stubs and a prompt section."""

    tenant_id: str
    decision_id: str
    tools: list[Tool]
    unavailable: list[dict[str, str]]
    python_stub: str
    typescript_stub: str
    prompt: str
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ToolList":
        return cls(
            tenant_id=str(d.get("tenant_id", "")),
            decision_id=str(d.get("decision_id", "")),
            tools=[Tool(str(t.get("name", "")), str(t.get("server", "")), str(t.get("description", "")),
                        t.get("input_schema")) for t in d.get("tools") or []],
            unavailable=[dict(u) for u in d.get("unavailable") or []],
            python_stub=str(d.get("python_stub", "")),
            typescript_stub=str(d.get("typescript_stub", "")),
            prompt=str(d.get("prompt", "")),
            raw=dict(d),
        )
