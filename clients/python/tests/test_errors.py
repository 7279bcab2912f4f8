"""The error registry: every error.type of DESIGN §4 and §14 has its class."""

from __future__ import annotations

import pytest

import execgate
from execgate import Envelope, error_for

REFUSALS = ["BadRequest", "Unauthenticated", "Forbidden", "PolicyDenied", "NotFound", "MethodNotAllowed",
            "ResultExpired", "PayloadTooLarge", "QuotaExceeded", "BudgetExhausted", "PolicyError", "AuditError",
            "Internal", "OutcomeUnknown", "SandboxUnavailable", "SecretUnavailable", "Overloaded", "QuotaUnavailable"]
RUN_ERRORS = ["ToolError", "InvalidSource", "EntrypointNotFound", "InvalidResult", "InvalidInput", "Timeout", "CPULimit",
              "MemoryLimit", "OutputLimit", "SyscallDenied", "DependencyError", "SandboxCrashed", "ProtocolMismatch", "ExecutorLost",
              "Cancelled"]


@pytest.mark.parametrize("name", REFUSALS)
def test_every_refusal_type_has_a_request_error_class(name):
    body = {"execution_id": "x", "status": "error", "error": {"type": name, "message": "m", "reasons": ["r"]}}
    e = error_for(429, body, envelope=Envelope.from_dict(body), retry_after=2.0)
    assert type(e) is getattr(execgate, name) and isinstance(e, execgate.RequestError)
    assert e.envelope.execution_id == "x" and e.reasons == ["r"] and e.retry_after == 2.0


@pytest.mark.parametrize("name", RUN_ERRORS)
def test_every_run_outcome_has_a_run_error_class(name):
    e = error_for(200, {"status": "error", "error": {"type": name, "message": "m"}})
    assert type(e) is getattr(execgate, name) and isinstance(e, execgate.RunError)


def test_an_unknown_outcome_is_not_retried():
    """502 OutcomeUnknown may have run: retrying (even under the same id) must not be the client's choice."""
    from execgate.client import _RETRYABLE

    e = error_for(502, {"status": "error", "error": {"type": "OutcomeUnknown", "message": "m"}})
    assert type(e) is execgate.OutcomeUnknown and e.status_code == 502
    assert "OutcomeUnknown" not in _RETRYABLE


def test_an_unknown_type_falls_back_to_its_family():
    e = error_for(503, {"error": {"type": "SomethingNew", "message": "m"}})
    assert type(e) is execgate.RequestError and e.error_type == "SomethingNew"
    e = error_for(200, {"status": "error", "error": {"type": "NewOutcome", "message": "m"}})
    assert type(e) is execgate.RunError and e.error_type == "NewOutcome"


def test_every_error_type_of_the_openapi_document_has_a_class(gateway):
    import httpx

    doc = httpx.get(gateway.url + "/openapi.json").json()
    missing = [t for t in doc["components"]["schemas"]["ErrorType"]["enum"] if t not in execgate.ERRORS]
    assert missing == []
