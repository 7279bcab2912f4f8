"""Python client for execgate, the policy-governed code-execution gateway.

    from execgate import Client
    c = Client()  # $EXECGATE_URL (default http://127.0.0.1:8010), $EXECGATE_TOKEN
    print(c.execute("def run(args, context):\\n    return {'ok': True}\\n").result)
"""

from .client import DEFAULT_URL, AsyncClient, Client, new_execution_id
from .errors import *  # noqa: F401,F403  (one class per error type)
from .errors import ERRORS, ExecgateError, RequestError, RunError, TransportError, error_for
from .models import (
    Decision,
    Envelope,
    ErrorInfo,
    ExecuteRequest,
    Limits,
    SourceProblem,
    Truncated,
    Usage,
    ValidateResult,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "Client",
    "DEFAULT_URL",
    "Decision",
    "ERRORS",
    "Envelope",
    "ErrorInfo",
    "ExecgateError",
    "ExecuteRequest",
    "Limits",
    "RequestError",
    "RunError",
    "SourceProblem",
    "TransportError",
    "Truncated",
    "Usage",
    "ValidateResult",
    "error_for",
    "new_execution_id",
] + sorted(ERRORS)
