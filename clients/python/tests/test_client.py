"""The sync client against a real gateway (conftest.py)."""

from __future__ import annotations

import json
import time

import httpx
import pytest

import execgate
from execgate import Client

OK = "def run(args, context):\n    print('hi', args)\n    return {'sum': args['a'] + args['b']}\n"
RANDOM = "import uuid\n\ndef run(args, context):\n    return uuid.uuid4().hex\n"
ONE = "def run(args, context):\n    return 1\n"


def client(gw, tenant="demo", **kw) -> Client:
    kw.setdefault("token", gw.token(tenant))
    return Client(gw.url, **kw)


def test_execute_returns_the_typed_envelope(gateway):
    with client(gateway) as c:
        env = c.execute(OK, args={"a": 2, "b": 3})
    assert env.ok and env.status == "ok"
    assert env.result == {"sum": 5}
    assert "hi {'a': 2, 'b': 3}" in env.stdout
    assert env.tenant_id == "demo" and len(env.execution_id) == 32
    assert env.decision is not None and env.decision.network_access == "none"
    assert env.usage.wall_ms > 0 and env.error is None


def test_token_and_url_come_from_the_environment(gateway, monkeypatch):
    monkeypatch.setenv("EXECGATE_URL", gateway.url)
    monkeypatch.setenv("EXECGATE_TOKEN", gateway.token())
    with Client() as c:
        assert c.execute(ONE).result == 1


def test_validate(gateway):
    with client(gateway) as c:
        assert c.validate(ONE).valid
        bad = c.validate("def run(:\n")
    assert not bad.valid and bad.errors[0].line == 1


def test_validate_takes_the_language(gateway):
    ts = "export function run(): number {\n  const s: string = 1;\n  return 2;\n}\n"
    with client(gateway) as c:
        bad = c.validate(ts, language="typescript")
        assert not bad.valid and bad.errors[0].line == 2 and "TS2322" in bad.errors[0].message, bad
        assert c.validate("export function run() { return 1 }\n", language="javascript").valid
        assert not c.validate("export function run() { return 1 }\n").valid  # Python by default


def test_execute_takes_isolation(gateway):
    with client(gateway) as c:
        assert c.execute(ONE, isolation="jail").usage.isolation == "jail"
        with pytest.raises(execgate.PolicyDenied) as ei:
            c.execute(ONE, isolation="process")  # demo is granted jail only
    assert any("isolation" in r for r in ei.value.reasons), ei.value.reasons


def test_execute_takes_the_runtime(gateway):
    with client(gateway) as c:
        env = c.execute(ONE, runtime="python3.11")
        assert env.usage.runtime == "python3.11" and env.decision.runtime == "python3.11"
        with pytest.raises(execgate.PolicyDenied) as ei:
            c.execute(ONE, runtime="python3.13")  # demo is granted python3.11 only (the default)
    assert any("python3.13" in r for r in ei.value.reasons), ei.value.reasons


def test_execute_takes_secrets(gateway):
    """The brokered secret reaches the tool; what comes back is masked."""
    from conftest import DEMO_SECRET

    src = "def run(args, context):\n    print(context.secrets['DEMO_KEY'])\n    return context.secrets['DEMO_KEY'] == args\n"
    with client(gateway) as c:
        env = c.execute(src, args=DEMO_SECRET, secrets=["DEMO_KEY"])
        assert env.result is True and env.stdout == "***\n" and env.decision.secrets == ["DEMO_KEY"], env.raw
        assert DEMO_SECRET not in json.dumps(env.raw)
        with pytest.raises(execgate.PolicyDenied) as ei:
            c.execute(src, secrets=["OTHER"])
    assert ei.value.reasons == ['secret "OTHER" is not granted to tenant "demo"'], ei.value.reasons


# Each refusal the gateway can be made to give here, with its class.
REFUSALS = [
    ("BadRequest", 400, dict(source=ONE, mode="sideways")),
    ("PayloadTooLarge", 413, dict(source="#" * 20000)),
    ("PolicyDenied", 403, dict(source=ONE, network_access="host")),
]


@pytest.mark.parametrize("name,status,kw", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_each_refusal_raises_its_class_with_the_envelope(gateway, name, status, kw):
    with client(gateway) as c:
        with pytest.raises(execgate.RequestError) as ei:
            c.execute(**kw)
    e = ei.value
    assert type(e) is getattr(execgate, name) and e.error_type == name and e.status_code == status
    assert e.envelope is not None and e.envelope.status == "error" and e.envelope.error.type == name
    if name == "PolicyDenied":
        assert e.reasons


def test_a_bad_token_is_unauthenticated(gateway):
    with Client(gateway.url, token="not-a-jwt") as c, pytest.raises(execgate.Unauthenticated) as ei:
        c.execute(ONE)
    assert ei.value.status_code == 401


def test_a_missing_role_is_forbidden(gateway):
    with Client(gateway.url, token=gateway.token("demo", "auditor")) as c, pytest.raises(execgate.Forbidden):
        c.execute(ONE)


def test_an_exhausted_budget_is_not_retried(gateway):
    sleeps = []
    with client(gateway, "broke", sleep=sleeps.append) as c, pytest.raises(execgate.BudgetExhausted) as ei:
        c.execute(ONE)
    assert ei.value.status_code == 429 and ei.value.retry_after and ei.value.retry_after > 30
    assert sleeps == []  # Retry-After to tomorrow is over max_retry_wait


# Each run outcome the sandbox can be made to give here, with its class.
RUN_ERRORS = [
    ("ToolError", dict(source="def run(args, context):\n    raise ValueError('nope')\n")),
    ("InvalidSource", dict(source="def run(:\n")),
    ("EntrypointNotFound", dict(source=ONE, entrypoint="main")),
    ("InvalidResult", dict(source="def run(args, context):\n    return object()\n")),
    ("Timeout", dict(source="import time\n\ndef run(args, context):\n    time.sleep(10)\n", limits={"timeout_ms": 500})),
    ("MemoryLimit", dict(source="def run(args, context):\n    return len(bytearray(400 << 20))\n", limits={"memory_mb": 64})),
    ("OutputLimit", dict(source="def run(args, context):\n    return 'x' * 100000\n", limits={"output_bytes": 4096})),
]


@pytest.mark.parametrize("name,kw", RUN_ERRORS, ids=[r[0] for r in RUN_ERRORS])
def test_each_run_error_raises_its_class_and_check_false_returns_it(gateway, name, kw):
    with client(gateway) as c:
        with pytest.raises(execgate.RunError) as ei:
            c.execute(**kw)
        e = ei.value
        assert type(e) is getattr(execgate, name), f"{type(e).__name__}: {e}"
        assert e.status_code == 200 and e.envelope is not None and e.envelope.error.type == name
        env = c.execute(check=False, **kw)
    assert not env.ok and env.error.type == name


def test_429_waits_for_retry_after_and_retries_with_the_same_execution_id(gateway):
    bodies = []
    hooks = {"request": [lambda r: bodies.append(json.loads(r.content))]}
    sleeps = []

    def sleep(s):
        sleeps.append(s)
        time.sleep(s)

    # Tenant limited: 60 a minute, burst 1.
    with client(gateway, "limited", max_retries=0) as c:
        c.execute(ONE)  # takes the burst
        with pytest.raises(execgate.QuotaExceeded) as ei:
            c.execute(ONE)
    assert ei.value.status_code == 429 and ei.value.retry_after == 1.0

    with Client(gateway.url, token=gateway.token("limited"), sleep=sleep, http_client=httpx.Client(event_hooks=hooks)) as c:
        start = time.monotonic()
        env = c.execute(ONE)
        elapsed = time.monotonic() - start
    assert env.ok and env.result == 1
    assert sleeps and sleeps[0] == 1.0, sleeps  # the gateway's Retry-After, not a guess
    assert elapsed >= 1.0
    assert len(bodies) == len(sleeps) + 1
    assert len({b["execution_id"] for b in bodies}) == 1, "a retry changed the execution_id"


def test_the_same_execution_id_returns_the_first_result(gateway):
    with client(gateway) as c:
        first = c.execute(RANDOM, execution_id="py-idem-1")
        again = c.execute(RANDOM, execution_id="py-idem-1")
    assert again.result == first.result and again.trace_id == first.trace_id


def test_a_timed_out_attempt_is_retried_without_running_twice(gateway):
    # The first attempt gives up reading after 0.7 s while the tool sleeps
    # 1.5 s; the retry (same execution_id) waits for that run's answer
    # instead of starting another. Today the gateway cancels a run whose
    # caller went away and remembers that outcome, so the answer is the
    # first run's, whatever it was: the point is that it is never run twice.
    slow = "import time, uuid\n\ndef run(args, context):\n    time.sleep(1.5)\n    return uuid.uuid4().hex\n"
    sleeps = []
    http = httpx.Client(timeout=httpx.Timeout(30.0, read=0.7))
    with Client(gateway.url, token=gateway.token(), http_client=http, sleep=sleeps.append, backoff=0.01) as c:
        env = c.execute(slow, execution_id="py-idem-timeout", limits={"timeout_ms": 10000}, check=False)
    http.close()
    assert sleeps, "the first attempt should have timed out and been retried"
    with client(gateway) as c:
        replay = c.execute(slow, execution_id="py-idem-timeout", limits={"timeout_ms": 10000}, check=False)
    assert (replay.status, replay.result, replay.trace_id) == (env.status, env.result, env.trace_id)
    ran = [r for r in gateway.audit() if r["execution_id"] == "py-idem-timeout" and r["usage"]["wall_ms"] > 0]
    assert len(ran) == 1, f"the tool ran {len(ran)} times"


def test_a_rotating_token_is_fetched_again_after_a_401(gateway):
    tokens = iter(["expired-or-garbage", gateway.token()])
    calls = []

    def token():
        calls.append(1)
        return next(tokens)

    with Client(gateway.url, token=token) as c:
        assert c.execute(ONE).result == 1
    assert len(calls) == 2


def test_traceparent_joins_the_callers_trace(gateway):
    from opentelemetry.sdk.trace import TracerProvider

    provider = TracerProvider()
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("caller") as span:
        with client(gateway) as c:
            env = c.execute(ONE)
    assert env.trace_id == format(span.get_span_context().trace_id, "032x")
