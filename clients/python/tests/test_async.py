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


TICKER = ("import time\n\ndef run(args, context):\n    for i in range(5):\n        print('line', i, flush=True)\n"
          "        time.sleep(0.2)\n    context.log('ticked')\n    return 5\n")


async def test_async_submit_events_get_and_wait(gateway):
    async with AsyncClient(gateway.url, token=gateway.token()) as c:
        st = await c.submit(TICKER, isolation="jail")
        evs = [ev async for ev in c.events(st.execution_id)]
        assert "".join(e.text for e in evs if isinstance(e, execgate.OutputEvent)) == "".join(f"line {i}\n" for i in range(5))
        assert isinstance(evs[-2], execgate.LogEvent) and evs[-2].message == "ticked"
        assert isinstance(evs[-1], execgate.EnvelopeEvent) and evs[-1].envelope.result == 5
        got = await c.get(st.execution_id)
        assert got.done and got.envelope.result == 5
        assert (await c.wait(st.execution_id)).result == 5


async def test_async_events_resume_with_last_event_id(gateway):
    async with AsyncClient(gateway.url, token=gateway.token()) as c:
        eid = (await c.submit(TICKER)).execution_id
        first = []
        async for ev in c.events(eid):
            first.append(ev)
            if len(first) == 2:
                break
        rest = [ev async for ev in c.events(eid, last_event_id=first[-1].id)]
    ids = [e.id for e in first + rest]
    assert ids == sorted(set(ids)) and None not in ids, ids
    assert isinstance(rest[-1], execgate.EnvelopeEvent)


async def test_async_cancel(gateway):
    async with AsyncClient(gateway.url, token=gateway.token()) as c:
        eid = (await c.submit("import time\n\ndef run(args, context):\n    time.sleep(20)\n", limits={"timeout_ms": 25000})).execution_id
        await c.cancel(eid)
        env = await c.wait(eid, timeout=30, check=False)
    assert env.error.type == "Cancelled"


async def test_async_prepare_and_tools(gateway):
    async with AsyncClient(gateway.url, token=gateway.token()) as c:
        env = await c.prepare(requirements=["egprobe"])
        run = await c.execute("import egprobe\n\ndef run(args, context):\n    return egprobe.VERSION\n", environment_id=env.environment_id)
        assert run.result == "1.0"
        with pytest.raises(execgate.PolicyDenied):
            await c.prepare(requirements=["egdenied"])
        assert [t.name for t in (await c.tools()).tools] == ["self.validate"]
        assert not (await c.validate("export const run = (): string => 1;\n", language="typescript")).valid
