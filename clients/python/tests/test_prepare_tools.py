"""prepare(), tools() and the execute fields that use them, against a real
gateway (conftest.py): packages come from clients/testdata/wheels (egprobe
allowed, egdenied not); tenant demo's tool server "self" is the gateway's own
/mcp, offering self.validate."""

from __future__ import annotations

import re

import pytest

import execgate
from execgate import Client

IMPORT_PROBE = "import egprobe\n\ndef run(args, context):\n    return egprobe.VERSION\n"


def client(gw) -> Client:
    return Client(gw.url, token=gw.token())


def test_prepare_then_run_by_environment_id_and_by_lock(gateway):
    with client(gateway) as c:
        env = c.prepare(requirements=["egprobe"])
        assert re.fullmatch(r"[0-9a-f]{64}", env.environment_id)
        assert [(p.name, p.version, p.via) for p in env.packages] == [("egprobe", "1.0", ["egprobe"])]
        assert "egprobe==1.0" in env.lock and "--hash=sha256:" in env.lock
        assert env.network_access == "none" and env.limits.timeout_ms and env.warm == 0 and env.ms >= 0
        again = c.prepare(requirements_lock=env.lock)
        assert again.environment_id == env.environment_id and again.cached
        assert c.execute(IMPORT_PROBE, environment_id=env.environment_id).result == "1.0"
        assert c.execute(IMPORT_PROBE, requirements_lock=env.lock).result == "1.0"
        assert c.execute(IMPORT_PROBE, requirements=["egprobe==1.0"]).result == "1.0"


def test_prepare_refusals(gateway):
    with client(gateway) as c:
        with pytest.raises(execgate.PolicyDenied) as ei:
            c.prepare(requirements=["egdenied"])
        assert ei.value.status_code == 403 and any("egdenied" in r for r in ei.value.reasons)
        with pytest.raises(execgate.DependencyError) as ei:
            c.prepare(requirements=["no-such-package"])
        assert ei.value.status_code == 422 and "no-such-package" in (ei.value.traceback or "")
        with pytest.raises(execgate.BadRequest) as ei:
            c.prepare(requirements=["egprobe"], warm=3)
        assert "warm" in ei.value.message


def test_tools_lists_the_granted_tools_with_their_schemas(gateway):
    with client(gateway) as c:
        tl = c.tools()
        assert tl.tenant_id == "demo" and tl.decision_id and tl.unavailable == []
        assert [t.name for t in tl.tools] == ["self.validate"]
        t = tl.tools[0]
        assert t.server == "self" and "source" in t.input_schema["properties"]
        assert "self.validate" in tl.python_stub and "self.validate" in tl.typescript_stub and "self.validate" in tl.prompt
        assert [t.name for t in c.tools(["self.val*"]).tools] == ["self.validate"]
        with pytest.raises(execgate.RequestError) as ei:
            c.tools(["other.*"])  # not granted by the tenant's policy
        assert ei.value.status_code in (400, 403), ei.value


def test_a_code_mode_run_calls_a_granted_tool(gateway):
    src = ("def run(args, context):\n"
           "    return context.tools.run('self.validate', {'source': 'def run(:\\n'})\n")
    with client(gateway) as c:
        env = c.execute(src, tools=["self.validate"])
        assert env.result["valid"] is False and env.raw["tool_calls"][0]["tool"] == "self.validate"
        with pytest.raises(execgate.RequestError):
            c.execute(src, tools=["other.*"])
