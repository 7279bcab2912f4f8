"""The async client against a real gateway (conftest.py)."""

from __future__ import annotations

import asyncio

import pytest

import execgate
from execgate import AsyncClient

pytestmark = pytest.mark.anyio

ONE = "def run(args, context):\n    return 1\n"


async def test_async_execute_and_validate(gateway):
    async with AsyncClient(gateway.url, token=gateway.token()) as c:
        envs = await asyncio.gather(*(c.execute("def run(args, context):\n    return args * 2\n", args=i) for i in range(3)))
        assert [e.result for e in envs] == [0, 2, 4]
        assert (await c.validate(ONE)).valid


async def test_async_errors_carry_the_envelope(gateway):
    async with AsyncClient(gateway.url, token=gateway.token()) as c:
        with pytest.raises(execgate.PolicyDenied) as ei:
            await c.execute(ONE, network_access="host")
        assert ei.value.envelope.error.reasons
        with pytest.raises(execgate.ToolError):
            await c.execute("def run(args, context):\n    raise KeyError('k')\n")


async def test_async_token_callable_may_be_a_coroutine(gateway):
    async def token():
        return gateway.token()

    async with AsyncClient(gateway.url, token=token) as c:
        assert (await c.execute(ONE)).result == 1


async def test_async_retries_keep_the_execution_id(gateway):
    async with AsyncClient(gateway.url, token=gateway.token()) as c:
        a = await c.execute("import uuid\n\ndef run(args, context):\n    return uuid.uuid4().hex\n", execution_id="py-async-idem")
        b = await c.execute("import uuid\n\ndef run(args, context):\n    return uuid.uuid4().hex\n", execution_id="py-async-idem")
    assert a.result == b.result
