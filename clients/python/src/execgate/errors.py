"""One exception class per error.type of the gateway (DESIGN §4, §14).

Two families:

* ``RequestError``: the request was refused before or instead of a run
  (HTTP 4xx/5xx: ``BadRequest``, ``PolicyDenied``, ``QuotaExceeded`` …).
* ``RunError``: the tool ran and ended in error (HTTP 200, envelope status
  ``error``: ``ToolError``, ``Timeout``, ``MemoryLimit`` …).

Every exception carries what the gateway said: ``envelope`` (an execute
answer; None for other routes), ``body`` (the decoded JSON), ``status_code``,
``error_type``, ``message``, ``reasons``, ``traceback`` and ``retry_after``
(seconds, from Retry-After). An error.type this client does not know yet
becomes the family's base class with ``error_type`` set.

How to add one: subclass the family with ``error_type = "Name"``; the
registry below picks it up.
"""

from __future__ import annotations

from typing import Any, Optional

from .models import Envelope


class ExecgateError(Exception):
    """Base of every error this client raises for a gateway answer."""

    error_type: str = ""

    def __init__(
        self,
        message: str,
        *,
        error_type: Optional[str] = None,
        status_code: int = 0,
        envelope: Optional[Envelope] = None,
        body: Optional[dict[str, Any]] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(message)
        if error_type:
            self.error_type = error_type
        self.message = message
        self.status_code = status_code
        self.envelope = envelope
        self.body = body or {}
        self.retry_after = retry_after
        err = (self.body.get("error") or {}) if isinstance(self.body, dict) else {}
        self.reasons: list[str] = list(err.get("reasons") or [])
        self.traceback: Optional[str] = err.get("traceback")

    @property
    def execution_id(self) -> Optional[str]:
        return self.envelope.execution_id if self.envelope else None

    def __str__(self) -> str:
        s = f"{self.error_type}: {self.message}"
        if self.reasons:
            s += " (" + "; ".join(self.reasons) + ")"
        return s


class TransportError(ExecgateError):
    """The gateway could not be reached or did not answer (after retries)."""

    error_type = "TransportError"


class RequestError(ExecgateError):
    """Refused before or instead of a run (HTTP 4xx/5xx)."""


class RunError(ExecgateError):
    """The tool ran and ended in error (HTTP 200, status error)."""


# Refusals (HTTP status in brackets).

class BadRequest(RequestError):
    """[400] malformed JSON, missing or invalid field (the message names it)"""

    error_type = "BadRequest"


class Unauthenticated(RequestError):
    """[401] missing, invalid or expired token"""

    error_type = "Unauthenticated"


class Forbidden(RequestError):
    """[403] role missing, tenant mismatch, unknown tenant"""

    error_type = "Forbidden"


class PolicyDenied(RequestError):
    """[403] the policy said no; .reasons lists why"""

    error_type = "PolicyDenied"


class NotFound(RequestError):
    """[404] no such route or object"""

    error_type = "NotFound"


class MethodNotAllowed(RequestError):
    """[405]"""

    error_type = "MethodNotAllowed"


class ResultExpired(RequestError):
    """[409] the execution_id ran but its stored result was dropped; never run again"""

    error_type = "ResultExpired"


class PayloadTooLarge(RequestError):
    """[413] body, source or args over the caps"""

    error_type = "PayloadTooLarge"


class QuotaExceeded(RequestError):
    """[429] rate or concurrency; .retry_after"""

    error_type = "QuotaExceeded"


class BudgetExhausted(RequestError):
    """[429] daily CPU budget spent; .retry_after to the reset"""

    error_type = "BudgetExhausted"


class PolicyError(RequestError):
    """[500] policy undefined or erroring (deny, never allow)"""

    error_type = "PolicyError"


class AuditError(RequestError):
    """[500] the audit record could not be written; result withheld"""

    error_type = "AuditError"


class Internal(RequestError):
    """[500] a bug in the gateway"""

    error_type = "Internal"


class OutcomeUnknown(RequestError):
    """[502] the run was dispatched and may have run (tool calls included), but
    the gateway cannot know its outcome (split mode, the dispatch Redis lost its
    data). Its execution_id stays claimed: a repeat gets this answer, never a
    second run. Not retried; check the run's effects before running it again
    under a new execution_id."""

    error_type = "OutcomeUnknown"


class SandboxUnavailable(RequestError):
    """[503] nsjail missing or broken; nothing was run"""

    error_type = "SandboxUnavailable"


class SecretUnavailable(RequestError):
    """[503] a brokered secret granted to the run cannot be read (the message
    names it; the gateway's log says why); nothing was run"""

    error_type = "SecretUnavailable"


class Overloaded(RequestError):
    """[503] the gateway's run queue is full"""

    error_type = "Overloaded"


class QuotaUnavailable(RequestError):
    """[503] the quota backend is down and admission fails closed"""

    error_type = "QuotaUnavailable"


# Run outcomes (HTTP 200, envelope status error).

class ToolError(RunError):
    """the tool raised; .traceback has the user frames"""

    error_type = "ToolError"


class InvalidSource(RunError):
    """syntax or import-time error"""

    error_type = "InvalidSource"


class EntrypointNotFound(RunError):
    """the entrypoint is not defined"""

    error_type = "EntrypointNotFound"


class InvalidResult(RunError):
    """the return value is not JSON-serialisable"""

    error_type = "InvalidResult"


class InvalidInput(RunError):
    """the args could not be handed to the tool"""

    error_type = "InvalidInput"


class Timeout(RunError):
    """wall-clock limit"""

    error_type = "Timeout"


class CPULimit(RunError):
    """CPU limit"""

    error_type = "CPULimit"


class MemoryLimit(RunError):
    """memory limit"""

    error_type = "MemoryLimit"


class OutputLimit(RunError):
    """result too large"""

    error_type = "OutputLimit"


class SyscallDenied(RunError):
    """seccomp refused a syscall"""

    error_type = "SyscallDenied"


class DependencyError(RunError):
    """requirements could not be installed"""

    error_type = "DependencyError"


class SandboxCrashed(RunError):
    """the jail died without an envelope"""

    error_type = "SandboxCrashed"


class ProtocolMismatch(RunError):
    """the harness and the gateway disagree on the envelope protocol"""

    error_type = "ProtocolMismatch"


class ExecutorLost(RunError):
    """the executor running the tool was lost"""

    error_type = "ExecutorLost"


class Cancelled(RunError):
    """the run was cancelled"""

    error_type = "Cancelled"


ERRORS: dict[str, type[ExecgateError]] = {
    cls.error_type: cls
    for cls in list(RequestError.__subclasses__()) + list(RunError.__subclasses__())
}


def error_for(
    status_code: int,
    body: Any,
    *,
    envelope: Optional[Envelope] = None,
    retry_after: Optional[float] = None,
) -> ExecgateError:
    """The exception for a gateway answer with an error object."""
    body = body if isinstance(body, dict) else {}
    err = body.get("error") or {}
    typ = str(err.get("type") or "")
    msg = str(err.get("message") or f"HTTP {status_code}")
    cls = ERRORS.get(typ)
    if cls is None:
        cls = RunError if status_code == 200 else RequestError
    return cls(msg, error_type=typ or f"HTTP{status_code}", status_code=status_code, envelope=envelope, body=body, retry_after=retry_after)


__all__ = ["ExecgateError", "TransportError", "RequestError", "RunError", "ERRORS", "error_for"] + sorted(ERRORS)
