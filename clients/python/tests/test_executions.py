"""The async API with the sync client against a real gateway (conftest.py):
submit, get, wait, cancel, events (resumed after a dropped connection)."""

from __future__ import annotations

import time
from typing import Iterator

import httpx
import pytest

import execgate
from execgate import Client, EnvelopeEvent, LogEvent, OutputEvent

# Prints LINES lines, one every 0.3 s, logs once, returns LINES.
LINES = 10
TICKER = (
    "import time\n\n"
    "def run(args, context):\n"
    f"    for i in range({LINES}):\n"
    "        print('line', i, flush=True)\n"
    "        time.sleep(0.3)\n"
    "    context.log('ticked')\n"
    f"    return {LINES}\n"
)
EXPECTED = "".join(f"line {i}\n" for i in range(LINES))
SLEEPER = "import time\n\ndef run(args, context):\n    time.sleep(20)\n    return 'woke'\n"


def client(gw, **kw) -> Client:
    kw.setdefault("token", gw.token())
    return Client(gw.url, **kw)


def test_submit_then_wait_returns_the_envelope(gateway):
    with client(gateway) as c:
        st = c.submit("def run(args, context):\n    return args * 2\n", args=21)
        assert st.status == "queued" and len(st.execution_id) == 32 and st.tenant_id == "demo"
        env = c.wait(st.execution_id, timeout=60)
        assert env.ok and env.result == 42 and env.execution_id == st.execution_id
        done = c.get(st.execution_id)
    assert done.done and done.http_status == 200 and done.envelope is not None and done.envelope.result == 42
    assert done.submitted_at is not None and done.started_at is not None and done.finished_at is not None
    assert done.submitted_at <= done.started_at <= done.finished_at


def test_submit_takes_every_execute_field_and_callback_url(gateway):
    with client(gateway) as c:
        # isolation reaches the policy (decided in the background): demo is
        # granted jail only. wait() raises the refusal as execute would.
        eid = c.submit("def run(args, context):\n    return 1\n", isolation="process").execution_id
        with pytest.raises(execgate.PolicyDenied) as ei:
            c.wait(eid, timeout=60)
        assert ei.value.status_code == 403 and any("isolation" in r for r in ei.value.reasons), ei.value.reasons
        assert ei.value.envelope is not None and ei.value.envelope.execution_id == eid
        assert c.get(eid).http_status == 403
        # callback_url reaches the gateway: a host off the tenant's callbacks
        # list is refused at submit.
        with pytest.raises(execgate.PolicyDenied) as ei:
            c.submit("def run(args, context):\n    return 1\n", callback_url="https://hooks.example.com/x")
        assert any("callback host hooks.example.com" in r for r in ei.value.reasons), ei.value.reasons
        assert ei.value.envelope is not None
        env = c.wait(c.submit("export function run(a: {n: number}) { return a.n + 1 }\n", language="typescript",
                              args={"n": 1}, isolation="jail").execution_id, timeout=60)
    assert env.result == 2 and env.usage.isolation == "jail"


def test_wait_raises_the_runs_error_like_execute(gateway):
    with client(gateway) as c:
        eid = c.submit("def run(args, context):\n    raise ValueError('nope')\n").execution_id
        with pytest.raises(execgate.ToolError) as ei:
            c.wait(eid, timeout=60)
        assert ei.value.envelope.execution_id == eid
        assert c.wait(eid, check=False).error.type == "ToolError"
        slow = c.submit(SLEEPER, limits={"timeout_ms": 25000}).execution_id
        with pytest.raises(TimeoutError):
            c.wait(slow, timeout=0.5)
        c.cancel(slow)


def test_an_admin_names_the_owning_tenant(gateway):
    with client(gateway) as c:
        eid = c.submit("def run(args, context):\n    return 7\n").execution_id
        c.wait(eid, timeout=60)
    with Client(gateway.url, token=gateway.token("limited", "admin")) as admin:
        with pytest.raises(execgate.NotFound):
            admin.get(eid)  # not an execution of the admin's own tenant
        assert admin.get(eid, tenant="demo").envelope.result == 7
        assert isinstance(list(admin.events(eid, tenant="demo"))[-1], EnvelopeEvent)
        assert admin.cancel(eid, tenant="demo").done


def test_an_unknown_execution_is_not_found(gateway):
    with client(gateway) as c, pytest.raises(execgate.NotFound):
        c.get("py-never-submitted")


def test_events_stream_the_output_then_the_log_then_the_envelope(gateway):
    with client(gateway) as c:
        eid = c.submit(TICKER).execution_id
        evs = list(c.events(eid))
    out = [e for e in evs if isinstance(e, OutputEvent)]
    assert out and all(e.kind == "stdout" for e in out)
    assert "".join(e.text for e in out) == EXPECTED
    assert [(e.level, e.message) for e in evs if isinstance(e, LogEvent)] == [("info", "ticked")]
    assert isinstance(evs[-1], EnvelopeEvent) and evs[-1].envelope.result == LINES
    ids = [e.id for e in evs]
    assert all(i is not None for i in ids) and ids == sorted(set(ids)), ids


class _CutAfter(httpx.SyncByteStream):
    """The first events response, cut after `events` whole events plus a
    few bytes of the next one (a half-sent event must not be given out)."""

    def __init__(self, inner: httpx.SyncByteStream, events: int) -> None:
        self.inner, self.events = inner, events

    def __iter__(self) -> Iterator[bytes]:
        buf = b""
        for chunk in self.inner:  # nothing is passed on before the cut: it is exact
            buf += chunk
            end = -2
            for _ in range(self.events):
                end = buf.find(b"\n\n", end + 2)
                if end < 0:
                    break
            if end >= 0:
                yield buf[: end + 2 + 8]
                raise httpx.ReadError("connection dropped by the test")
        yield buf

    def close(self) -> None:
        self.inner.close()


class DropOnce(httpx.BaseTransport):
    """A real HTTP transport that cuts the first event stream."""

    def __init__(self, events: int) -> None:
        self.inner = httpx.HTTPTransport()
        self.events = events
        self.requests: list[httpx.Request] = []
        self.cut = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        resp = self.inner.handle_request(request)
        if request.url.path.endswith("/events") and not self.cut:
            self.cut = True
            return httpx.Response(resp.status_code, headers=resp.headers, stream=_CutAfter(resp.stream, self.events),
                                  extensions=resp.extensions)
        return resp

    def close(self) -> None:
        self.inner.close()


def test_events_resume_after_a_dropped_connection_without_duplicates(gateway):
    t = DropOnce(events=3)
    sleeps: list[float] = []
    with Client(gateway.url, token=gateway.token(), http_client=httpx.Client(transport=t), backoff=0.02,
                sleep=sleeps.append) as c:
        eid = c.submit(TICKER).execution_id
        evs = list(c.events(eid))
    streams = [r for r in t.requests if r.url.path.endswith("/events")]
    assert len(streams) == 2 and len(sleeps) == 1, (streams, sleeps)
    assert "Last-Event-ID" not in streams[0].headers
    ids = [e.id for e in evs]
    # The reconnection named the last event given out, and the run was still
    # live: everything after it came, with ids, once.
    assert streams[1].headers["Last-Event-ID"] == str(ids[2]), (streams[1].headers, ids)
    assert all(i is not None for i in ids) and ids == sorted(set(ids)), ids
    assert "".join(e.text for e in evs if isinstance(e, OutputEvent)) == EXPECTED
    assert isinstance(evs[-1], EnvelopeEvent) and evs[-1].envelope.stdout == EXPECTED
    assert sum(isinstance(e, LogEvent) for e in evs) == 1


def test_events_start_after_last_event_id(gateway):
    with client(gateway) as c:
        eid = c.submit(TICKER).execution_id
        first = []
        for ev in c.events(eid):
            first.append(ev)
            if len(first) == 2:
                break
        rest = list(c.events(eid, last_event_id=first[-1].id))
    ids = [e.id for e in first + rest]
    assert ids == sorted(set(ids)), ids
    assert "".join(e.text for e in first + rest if isinstance(e, OutputEvent)) == EXPECTED


def test_events_of_an_ended_execution_are_its_log_and_envelope(gateway):
    with client(gateway) as c:
        eid = c.submit(TICKER.replace("time.sleep(0.3)", "pass")).execution_id
        c.wait(eid, timeout=60)
        evs = list(c.events(eid))
    assert [type(e) for e in evs] == [LogEvent, EnvelopeEvent]
    assert evs[1].envelope.stdout == EXPECTED and evs[1].id is None


def test_events_fetch_a_rotating_token_again_after_a_401(gateway):
    with client(gateway) as c:
        eid = c.submit(TICKER.replace("time.sleep(0.3)", "pass")).execution_id
    tokens = iter(["expired-or-garbage", gateway.token()])
    with Client(gateway.url, token=lambda: next(tokens)) as c:
        assert isinstance(list(c.events(eid))[-1], EnvelopeEvent)


def test_cancel_stops_a_running_execution(gateway):
    with client(gateway) as c:
        eid = c.submit(SLEEPER, limits={"timeout_ms": 25000}).execution_id
        deadline = time.monotonic() + 30
        while c.get(eid).status != "running":
            assert time.monotonic() < deadline, "the execution never started"
            time.sleep(0.1)
        start = time.monotonic()
        st = c.cancel(eid)
        assert st.execution_id == eid and (st.cancel_requested or st.done), st
        with pytest.raises(execgate.Cancelled) as ei:
            c.wait(eid, timeout=30)
        assert time.monotonic() - start < 15, "the run was not stopped"
        assert ei.value.envelope.status == "error"
        again = c.cancel(eid)  # done: left as it is
    assert again.done and again.execution_id == eid


class LoseAnswers(httpx.BaseTransport):
    """A real transport that loses the answer to the first submission (it
    reached the gateway) and, with fail_lookup, fails the first lookup."""

    def __init__(self, fail_lookup: bool = False) -> None:
        self.inner = httpx.HTTPTransport()
        self.fail_lookup = fail_lookup
        self.requests: list[tuple[str, str]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((request.method, request.url.path))
        if request.method == "GET" and self.fail_lookup:
            self.fail_lookup = False
            raise httpx.ConnectError("lookup failed by the test")
        resp = self.inner.handle_request(request)
        if request.method == "POST" and self.requests.count(("POST", "/v1/executions")) == 1:
            resp.read()
            resp.close()
            raise httpx.ReadError("answer lost by the test")
        return resp

    def close(self) -> None:
        self.inner.close()


@pytest.mark.parametrize("fail_lookup", [False, True], ids=["lookup-finds-it", "lookup-fails-then-400"])
def test_a_submission_whose_answer_was_lost_is_not_submitted_twice(gateway, fail_lookup):
    t = LoseAnswers(fail_lookup)
    with Client(gateway.url, token=gateway.token(), http_client=httpx.Client(transport=t), backoff=0.01,
                sleep=lambda s: None) as c:
        st = c.submit("import uuid\n\ndef run(args, context):\n    return uuid.uuid4().hex\n")
    want = [("POST", "/v1/executions"), ("GET", f"/v1/executions/{st.execution_id}")]
    if fail_lookup:  # the retry is refused (the id is taken) and looked up again
        want += [("POST", "/v1/executions"), ("GET", f"/v1/executions/{st.execution_id}")]
    assert t.requests == want
    with client(gateway) as c:
        assert c.wait(st.execution_id, timeout=60).ok
    ran = [r for r in gateway.audit() if r["execution_id"] == st.execution_id and r["usage"]["wall_ms"] > 0]
    assert len(ran) == 1, f"the tool ran {len(ran)} times"
