"""Python client for execgate, the policy-governed code-execution gateway.

    from execgate import Client
    c = Client()  # $EXECGATE_URL (default http://127.0.0.1:8010), $EXECGATE_TOKEN
    print(c.execute("def run(args, context):\\n    return {'ok': True}\\n").result)

    ex = c.submit(source)                 # async run: POST /v1/executions
    for ev in c.events(ex.execution_id):  # live output, resumed after a dropped connection
        print(ev)

    env = c.execute(chart_source, requirements=["matplotlib"], files=[{"path": "in.csv", "content": csv}])
    c.save_artifacts(env, "charts/")      # every artifact, written safely
"""

from .artifacts import ArtifactMismatch
from .client import DEFAULT_URL, AsyncClient, Client, new_execution_id
from .errors import *  # noqa: F401,F403  (one class per error type)
from .errors import ERRORS, ExecgateError, RequestError, RunError, TransportError, error_for
from .events import DroppedEvent, EnvelopeEvent, Event, LogEvent, OutputEvent
from .models import (
    Artifact,
    Decision,
    DroppedArtifact,
    Envelope,
    ErrorInfo,
    ExecuteRequest,
    ExecutionStatus,
    Limits,
    Package,
    PreparedEnvironment,
    SourceProblem,
    Tool,
    ToolList,
    Truncated,
    Usage,
    ValidateResult,
)

__version__ = "0.2.0"

__all__ = [
    "Artifact",
    "ArtifactMismatch",
    "AsyncClient",
    "Client",
    "DEFAULT_URL",
    "Decision",
    "DroppedArtifact",
    "DroppedEvent",
    "ERRORS",
    "Envelope",
    "EnvelopeEvent",
    "ErrorInfo",
    "Event",
    "ExecgateError",
    "ExecuteRequest",
    "ExecutionStatus",
    "Limits",
    "LogEvent",
    "OutputEvent",
    "Package",
    "PreparedEnvironment",
    "RequestError",
    "RunError",
    "SourceProblem",
    "Tool",
    "ToolList",
    "TransportError",
    "Truncated",
    "Usage",
    "ValidateResult",
    "error_for",
    "new_execution_id",
] + sorted(ERRORS)
