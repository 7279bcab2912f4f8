"""POST /mcp with the Python MCP SDK (package mcp) against a real gateway."""

from __future__ import annotations

import pytest
from mcp import Client as MCPClient
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

pytestmark = pytest.mark.anyio


async def _call(gateway, token, fn):
    http = create_mcp_http_client(headers={"Authorization": "Bearer " + token})
    async with http:
        async with MCPClient(streamable_http_client(gateway.url + "/mcp", http_client=http)) as mc:
            return await fn(mc)


async def test_list_tools(gateway):
    tools = await _call(gateway, gateway.token(), lambda mc: mc.list_tools())
    assert sorted(t.name for t in tools.tools) == ["execute_javascript", "execute_python", "validate"]


async def test_execute_python_returns_the_envelope(gateway):
    r = await _call(gateway, gateway.token(), lambda mc: mc.call_tool(
        "execute_python", {"source": "def run(args, context):\n    return args['n'] + 1\n", "args": {"n": 41},
                           "execution_id": "py-mcp-ok"}))
    assert not r.is_error
    assert r.structured_content["status"] == "ok" and r.structured_content["result"] == 42
    assert "result: 42" in r.content[0].text
    rec = [a for a in gateway.audit() if a["execution_id"] == "py-mcp-ok"]
    assert rec and rec[0]["tenant_id"] == "demo"


async def test_a_policy_denial_is_a_tool_error_and_audited(gateway):
    r = await _call(gateway, gateway.token(), lambda mc: mc.call_tool(
        "execute_python", {"source": "def run(args, context):\n    return 1\n", "network_access": "host",
                           "execution_id": "py-mcp-denied"}))
    assert r.is_error
    assert r.structured_content["error"]["type"] == "PolicyDenied" and r.structured_content["error"]["reasons"]
    assert "PolicyDenied" in r.content[0].text
    rec = [a for a in gateway.audit() if a["execution_id"] == "py-mcp-denied"]
    assert len(rec) == 1 and rec[0]["tenant_id"] == "demo" and rec[0]["outcome"]["error_type"] == "PolicyDenied"


async def test_validate_tool(gateway):
    r = await _call(gateway, gateway.token(), lambda mc: mc.call_tool("validate", {"source": "def run(:\n"}))
    assert not r.is_error and r.structured_content["valid"] is False
