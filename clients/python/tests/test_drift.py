"""Every request field of gateway/openapi.yaml is a parameter of the client.

Reads the OpenAPI document itself (not the gateway's /openapi.json: this
needs no gateway) and compares each request body schema's properties with
the keyword arguments of the methods that send it, for both clients. A field
the document gains and the client lacks fails here; so does a parameter the
document does not have.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest
import yaml

from execgate import AsyncClient, Client, ExecuteRequest

DOC = Path(__file__).resolve().parents[3] / "gateway" / "openapi.yaml"

# operationId → the method sending its request body.
METHODS = {"execute": "execute", "submitExecution": "submit", "validate": "validate", "prepare": "prepare"}
# Request fields the clients take under another name.
ALIASES = {"egress": "egress_allow"}
# Parameters that are not request fields.
CLIENT_ONLY = {"self", "check"}
# Operations with a body that are not the clients' (JSON-RPC; admin routes).
NOT_OURS = {"mcp"}


def _doc() -> dict:
    return yaml.safe_load(DOC.read_text())


def _request_schemas(doc: dict) -> dict[str, str]:
    """operationId → its JSON request body schema's name, for every
    operation with a body outside the admin tag."""
    out = {}
    for item in doc["paths"].values():
        for method, op in item.items():
            if method == "parameters" or "requestBody" not in op or "admin" in op.get("tags", []):
                continue
            if op["operationId"] in NOT_OURS:
                continue
            ref = op["requestBody"]["content"]["application/json"]["schema"].get("$ref", "")
            out[op["operationId"]] = ref.rsplit("/", 1)[-1]
    return out


def test_every_request_route_has_a_client_method():
    ops = _request_schemas(_doc())
    assert set(ops) == set(METHODS), f"routes with a request body the clients lack (or lost): {set(ops) ^ set(METHODS)}"


@pytest.mark.parametrize("cls", [Client, AsyncClient], ids=["Client", "AsyncClient"])
@pytest.mark.parametrize("op", sorted(METHODS))
def test_every_request_field_is_a_parameter(cls, op):
    doc = _doc()
    schema = doc["components"]["schemas"][_request_schemas(doc)[op]]
    fields = {ALIASES.get(p, p) for p in schema["properties"]}
    params = set(inspect.signature(getattr(cls, METHODS[op])).parameters) - CLIENT_ONLY
    assert fields - params == set(), f"{cls.__name__}.{METHODS[op]} lacks {sorted(fields - params)}"
    assert params - fields == set(), f"{cls.__name__}.{METHODS[op]} has {sorted(params - fields)}, not in {op}'s schema"


def test_the_execute_request_model_has_every_field():
    doc = _doc()
    props = {ALIASES.get(p, p) for p in doc["components"]["schemas"]["ExecutionRequest"]["properties"]}
    assert {f.name for f in dataclasses.fields(ExecuteRequest)} == props
