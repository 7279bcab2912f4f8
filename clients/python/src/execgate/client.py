"""Sync and async clients of the execgate HTTP API, on httpx.

Both share one core (``_Core``): how a request is built (token, traceparent),
when it is retried and how an answer becomes a model or an exception. Only
the I/O differs.

Routes: ``execute`` (POST /v1/execute), ``validate`` (POST /v1/validate),
``submit`` (POST /v1/executions: 202 and the execution's id), ``get``
(GET /v1/executions/{id}), ``wait`` (get until done, then the envelope),
``cancel`` (DELETE /v1/executions/{id}), ``events`` (GET
/v1/executions/{id}/events: Server-Sent Events as an iterator, resumed with
Last-Event-ID after a dropped connection; see ``execgate.events``),
``prepare`` (POST /v1/prepare) and ``tools`` (GET /v1/tools). Every request
field of the OpenAPI document is a keyword argument of its method
(tests/test_drift.py holds them to gateway/openapi.yaml).

Artifacts: an envelope lists them (``Envelope.artifacts``, small ones with
their bytes); ``artifact(id, name)`` fetches one (GET
/v1/executions/{id}/artifacts/{name}, streamed, at most ``max_bytes``), and
``save_artifacts(envelope, dir)`` writes every one into a directory, safely
(``execgate.artifacts``: plain names only, nothing written through a link,
sizes and sha256 checked). Artifact fetches are not retried.

Retries are safe by design: ``execute`` and ``submit`` fix the
``execution_id`` (the gateway's idempotency key) before the first attempt
and send the same one on every retry, so a request that did run is answered
from the gateway's memory, never run twice. Retried: transport errors and
timeouts, 429 ``QuotaExceeded``, 503 ``Overloaded`` and
``QuotaUnavailable``, waiting for Retry-After when the gateway sends it (up
to ``max_retry_wait``), else an exponential backoff. Not retried:
everything else (a 429 ``BudgetExhausted`` waits for tomorrow; a 502
``OutcomeUnknown`` may have run; a run that ended in error is an answer).
A submission whose answer was lost is looked up (GET) before it is sent
again: the gateway refuses an async ``execution_id`` it already has
(400), and the lookup tells that it was the lost attempt that took it.
A token callable is called before every request and once more after a 401.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator, Literal, Mapping, Optional, Sequence, Union
from urllib.parse import quote

import httpx

from . import errors
from .artifacts import DEFAULT_MAX_BYTES, ArtifactDir, check_name
from .events import Event, Follow
from .models import (
    Envelope,
    ExecuteRequest,
    ExecutionStatus,
    Isolation,
    Language,
    Limits,
    NetworkAccess,
    PreparedEnvironment,
    Runtime,
    ToolList,
    ValidateResult,
)

_otel_propagate: Any
try:  # W3C traceparent propagation, when OpenTelemetry is present.
    from opentelemetry import propagate as _otel_propagate
except ImportError:  # pragma: no cover - exercised without the package
    _otel_propagate = None

DEFAULT_URL = "http://127.0.0.1:8010"
TokenSource = Union[str, Callable[[], str]]
AsyncTokenSource = Union[str, Callable[[], str], Callable[[], Awaitable[str]]]

_RETRYABLE = {"QuotaExceeded", "Overloaded", "QuotaUnavailable"}

# The arguments of execute() and submit() that are not request fields.
_CLIENT_ONLY = frozenset({"self", "source", "check"})


def new_execution_id() -> str:
    """A fresh execution id (32 hex digits, like the gateway's)."""
    return uuid.uuid4().hex


def _fields(local: Mapping[str, Any]) -> dict[str, Any]:
    """The request fields among a method's arguments (its locals())."""
    return {k: v for k, v in local.items() if k not in _CLIENT_ONLY}


class _Core:
    """What the sync and async clients share: configuration, request
    building, answer decoding and the retry decision."""

    def __init__(
        self,
        base_url: Optional[str],
        token: Any,
        max_retries: int,
        max_retry_wait: float,
        backoff: float,
    ) -> None:
        self.base_url = (base_url or os.environ.get("EXECGATE_URL") or DEFAULT_URL).rstrip("/")
        if token is None:
            token = os.environ.get("EXECGATE_TOKEN")
        if token is None:
            raise ValueError("no token: pass token= (a string or a callable returning one) or set EXECGATE_TOKEN")
        self.token = token
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        self.backoff = backoff

    def headers(self, token: str, extra: Optional[Mapping[str, str]] = None) -> dict[str, str]:
        h = {"Authorization": "Bearer " + token, "Accept": "application/json"}
        if extra:
            h.update(extra)
        if _otel_propagate is not None:
            _otel_propagate.inject(h)
        return h

    @staticmethod
    def execute_body(source: str, kw: dict[str, Any]) -> dict[str, Any]:
        limits = kw.pop("limits", None)
        if isinstance(limits, dict):
            limits = Limits(**limits)
        for name in ("requirements", "egress_allow", "tools", "secrets", "files"):
            if kw.get(name) is not None:
                kw[name] = list(kw[name])
        body = ExecuteRequest(source=source, limits=limits, **kw).to_dict()
        body.setdefault("execution_id", new_execution_id())
        return body

    @staticmethod
    def prepare_body(kw: dict[str, Any]) -> dict[str, Any]:
        if kw.get("requirements") is not None:
            kw["requirements"] = list(kw["requirements"])
        return {k: v for k, v in kw.items() if v is not None}

    @staticmethod
    def execution_path(execution_id: str, tail: str = "") -> str:
        if not execution_id or "/" in execution_id:
            raise ValueError(f"not an execution id: {execution_id!r}")
        return "/v1/executions/" + execution_id + tail

    @staticmethod
    def artifact_path(execution_id: str, name: str) -> str:
        check_name(name)
        return _Core.execution_path(execution_id, "/artifacts/" + quote(name, safe=""))

    @staticmethod
    def too_large(name: str, max_bytes: int) -> errors.ExecgateError:
        return errors.ExecgateError(f"artifact {name!r} is more than max_bytes ({max_bytes})", error_type="PayloadTooLarge")

    @staticmethod
    def tenant_params(tenant: Optional[str]) -> Optional[dict[str, str]]:
        return {"tenant": tenant} if tenant else None

    @staticmethod
    def tools_params(names: Optional[Sequence[str]]) -> Optional[dict[str, str]]:
        if names is None:
            return None
        if isinstance(names, str):
            names = [names]
        return {"tools": ",".join(names)}

    @staticmethod
    def stream_timeout(http: Any, read: Optional[float]) -> httpx.Timeout:
        t = http.timeout
        return httpx.Timeout(connect=t.connect, read=read, write=t.write, pool=t.pool)

    @staticmethod
    def finished(st: ExecutionStatus, check: bool) -> Envelope:
        """The envelope of a done execution; with check, its error raised."""
        env = st.envelope
        if env is None:
            raise errors.ExecgateError(f"execution {st.execution_id} is done but has no envelope", error_type="Internal")
        if check and st.http_status is not None and st.http_status >= 400:
            raise errors.error_for(st.http_status, env.raw, envelope=env)
        if check and not env.ok:
            raise errors.error_for(200, env.raw, envelope=env)
        return env

    @staticmethod
    def retry_after(resp: httpx.Response) -> Optional[float]:
        v = resp.headers.get("Retry-After")
        if v is None:
            return None
        try:
            return max(0.0, float(v))
        except ValueError:
            return None

    def answer_error(self, resp: httpx.Response, envelope_route: bool) -> errors.ExecgateError:
        try:
            body = resp.json()
        except ValueError:
            body = {"error": {"type": "", "message": resp.text[:500] or f"HTTP {resp.status_code}"}}
        env = Envelope.from_dict(body) if envelope_route and isinstance(body, dict) and "execution_id" in body else None
        return errors.error_for(resp.status_code, body, envelope=env, retry_after=self.retry_after(resp))

    def wait_before_retry(self, attempt: int, exc: Exception) -> Optional[float]:
        """Seconds to wait before retry number attempt+1, or None: give up."""
        if attempt >= self.max_retries:
            return None
        if isinstance(exc, errors.TransportError):
            return self._backoff(attempt)
        if isinstance(exc, errors.ExecgateError) and exc.error_type in _RETRYABLE:
            if exc.retry_after is not None:
                return exc.retry_after if exc.retry_after <= self.max_retry_wait else None
            return self._backoff(attempt)
        return None

    def _backoff(self, attempt: int) -> float:
        return float(min(self.max_retry_wait, self.backoff * (2**attempt)) * (0.5 + random.random() / 2))


class Client:
    """Synchronous client.

    >>> c = Client("http://127.0.0.1:8010", token=os.environ["EXECGATE_TOKEN"])
    >>> c.execute("def run(args, context):\\n    return args['x'] * 2\\n", args={"x": 21}).result
    42

    ``token`` is a string or a callable returning the current token (called
    before every request, so a rotating token is picked up; after a 401 it
    is called once more and the request retried). Default: $EXECGATE_TOKEN.
    ``base_url`` defaults to $EXECGATE_URL, then http://127.0.0.1:8010.
    """

    def __init__(
        self,
        base_url: Optional[str] = None,
        *,
        token: Optional[TokenSource] = None,
        timeout: float = 120.0,
        max_retries: int = 3,
        max_retry_wait: float = 30.0,
        backoff: float = 0.5,
        http_client: Optional[httpx.Client] = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._core = _Core(base_url, token, max_retries, max_retry_wait, backoff)
        self._http = http_client or httpx.Client(timeout=timeout)
        self._own_http = http_client is None
        self._sleep = sleep

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._own_http:
            self._http.close()

    def _token(self) -> str:
        t = self._core.token
        return str(t() if callable(t) else t)

    def _send(
        self,
        method: str,
        path: str,
        body: Optional[dict[str, Any]] = None,
        *,
        envelope_route: bool = False,
        params: Optional[dict[str, str]] = None,
        on_lost: Optional[Callable[[], Optional[httpx.Response]]] = None,
    ) -> httpx.Response:
        """One request with the retries; on_lost, after an attempt whose
        answer was lost, may answer instead of the next attempt."""
        attempt, refreshed, lost = 0, False, False
        while True:
            try:
                if lost and on_lost is not None:
                    found = on_lost()
                    if found is not None:
                        return found
                try:
                    resp = self._http.request(method, self._core.base_url + path, json=body, params=params,
                                              headers=self._core.headers(self._token()))
                except httpx.TransportError as e:
                    raise errors.TransportError(f"{type(e).__name__}: {e}") from e
                if resp.status_code < 400:
                    return resp
                err = self._core.answer_error(resp, envelope_route)
                if resp.status_code == 401 and callable(self._core.token) and not refreshed:
                    refreshed = True  # the token may have rotated under us
                    continue
                raise err
            except errors.ExecgateError as e:
                lost = lost or isinstance(e, errors.TransportError)
                wait = self._core.wait_before_retry(attempt, e)
                if wait is None:
                    raise
                attempt += 1
                self._sleep(wait)

    def _lookup(self, execution_id: str) -> Optional[httpx.Response]:
        """GET the execution once: its answer when it exists, else None."""
        try:
            resp = self._http.get(self._core.base_url + self._core.execution_path(execution_id),
                                  headers=self._core.headers(self._token()))
        except httpx.TransportError:
            return None
        return resp if resp.status_code == 200 else None

    def execute(
        self,
        source: str,
        *,
        args: Any = None,
        entrypoint: Optional[str] = None,
        execution_id: Optional[str] = None,
        language: Optional[Language] = None,
        requirements: Optional[Sequence[str]] = None,
        requirements_lock: Optional[str] = None,
        environment_id: Optional[str] = None,
        network_access: Optional[NetworkAccess] = None,
        isolation: Optional[Isolation] = None,
        runtime: Optional[Runtime] = None,
        egress_allow: Optional[Sequence[str]] = None,
        limits: Union[Limits, dict[str, int], None] = None,
        mode: Optional[Literal["run", "test"]] = None,
        tools: Optional[Sequence[str]] = None,
        secrets: Optional[Sequence[str]] = None,
        fixtures: Optional[dict[str, Any]] = None,
        files: Optional[Sequence[Mapping[str, Any]]] = None,
        stdin: Optional[str] = None,
        tenant_id: Optional[str] = None,
        check: bool = True,
    ) -> Envelope:
        """Run a tool once (POST /v1/execute) and return its envelope.

        The keyword arguments are the request's fields (``egress_allow`` is
        ``egress.allow``); None leaves a field out. A refusal raises its
        ``RequestError``. A run that ended in error raises its ``RunError``
        when ``check`` (the default); with ``check=False`` its envelope is
        returned instead.
        """
        body = self._core.execute_body(source, _fields(locals()))
        env = Envelope.from_dict(self._send("POST", "/v1/execute", body, envelope_route=True).json())
        if check and not env.ok:
            raise errors.error_for(200, env.raw, envelope=env)
        return env

    def validate(self, source: str, *, entrypoint: Optional[str] = None, language: Optional[Language] = None) -> ValidateResult:
        """Check that source compiles and defines the entrypoint (POST
        /v1/validate); ``language`` "javascript" or "typescript" is checked
        with ``deno check`` (type errors included)."""
        body = {k: v for k, v in dict(source=source, entrypoint=entrypoint, language=language).items() if v is not None}
        return ValidateResult.from_dict(self._send("POST", "/v1/validate", body).json())

    def submit(
        self,
        source: str,
        *,
        args: Any = None,
        entrypoint: Optional[str] = None,
        execution_id: Optional[str] = None,
        language: Optional[Language] = None,
        requirements: Optional[Sequence[str]] = None,
        requirements_lock: Optional[str] = None,
        environment_id: Optional[str] = None,
        network_access: Optional[NetworkAccess] = None,
        isolation: Optional[Isolation] = None,
        runtime: Optional[Runtime] = None,
        egress_allow: Optional[Sequence[str]] = None,
        limits: Union[Limits, dict[str, int], None] = None,
        mode: Optional[Literal["run", "test"]] = None,
        tools: Optional[Sequence[str]] = None,
        secrets: Optional[Sequence[str]] = None,
        fixtures: Optional[dict[str, Any]] = None,
        files: Optional[Sequence[Mapping[str, Any]]] = None,
        stdin: Optional[str] = None,
        tenant_id: Optional[str] = None,
        callback_url: Optional[str] = None,
    ) -> ExecutionStatus:
        """Submit a run to go on in the background (POST /v1/executions):
        the arguments of ``execute`` and ``callback_url`` (a webhook for
        the result). Returns the queued execution; follow it with
        ``events``, ``get`` or ``wait``. A refusal raises its
        ``RequestError`` (with the envelope)."""
        body = self._core.execute_body(source, _fields(locals()))
        eid = body["execution_id"]
        looked: list[bool] = []

        def lookup() -> Optional[httpx.Response]:
            looked.append(True)
            return self._lookup(eid)

        try:
            resp = self._send("POST", "/v1/executions", body, envelope_route=True, on_lost=lookup)
        except errors.BadRequest:
            # A lost attempt may have taken the id between the lookup and the retry.
            found = self._lookup(eid) if looked else None
            if found is None:
                raise
            resp = found
        return ExecutionStatus.from_dict(resp.json())

    def get(self, execution_id: str, *, tenant: Optional[str] = None) -> ExecutionStatus:
        """An async execution's state and, once done, its envelope (GET
        /v1/executions/{id}). ``tenant``: an admin naming the owner."""
        path = self._core.execution_path(execution_id)
        return ExecutionStatus.from_dict(self._send("GET", path, params=self._core.tenant_params(tenant)).json())

    def cancel(self, execution_id: str, *, tenant: Optional[str] = None) -> ExecutionStatus:
        """Cancel an async execution (DELETE /v1/executions/{id}): a queued
        one ends without running, a running one is stopped (its envelope:
        ``Cancelled``); one already done is left as it is."""
        path = self._core.execution_path(execution_id)
        return ExecutionStatus.from_dict(self._send("DELETE", path, params=self._core.tenant_params(tenant)).json())

    def wait(
        self,
        execution_id: str,
        *,
        timeout: Optional[float] = None,
        poll: float = 0.2,
        tenant: Optional[str] = None,
        check: bool = True,
    ) -> Envelope:
        """Poll ``get`` until the execution is done and return its envelope;
        with ``check``, a refusal or a failed run raises like ``execute``.
        Past ``timeout`` seconds raises the builtin TimeoutError."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            st = self.get(execution_id, tenant=tenant)
            if st.done:
                return self._core.finished(st, check)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"execution {execution_id} is still {st.status} after {timeout} s")
            self._sleep(poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic())))
            poll = min(poll * 1.5, 2.0)

    def events(
        self,
        execution_id: str,
        *,
        last_event_id: Optional[int] = None,
        tenant: Optional[str] = None,
        read_timeout: Optional[float] = None,
    ) -> Iterator[Event]:
        """The execution's live output (GET /v1/executions/{id}/events), as
        typed events (``execgate.events``) until its ``EnvelopeEvent``.

        A dropped connection is reconnected with ``Last-Event-ID`` and the
        stream continues after the last event given out, never twice.
        ``last_event_id`` starts after that event (resuming an earlier
        reader). ``read_timeout`` (seconds, default none) bounds a silence
        of the stream; past it the client reconnects.
        """
        follow = Follow(last_event_id)
        path = self._core.execution_path(execution_id, "/events")
        timeout = self._core.stream_timeout(self._http, read_timeout)
        attempt, refreshed = 0, False
        while True:
            progress = False
            try:
                try:
                    with self._http.stream("GET", self._core.base_url + path, params=self._core.tenant_params(tenant),
                                           headers=self._core.headers(self._token(), follow.headers()),
                                           timeout=timeout) as resp:
                        if resp.status_code >= 400:
                            resp.read()
                            err = self._core.answer_error(resp, False)
                            if resp.status_code == 401 and callable(self._core.token) and not refreshed:
                                refreshed = True
                                continue
                            raise err
                        dec = follow.connected()
                        for line in resp.iter_lines():
                            raw = dec.line(line)
                            ev = follow.accept(raw) if raw is not None else None
                            if ev is None:
                                continue
                            progress = True
                            yield ev
                            if follow.done:
                                return
                except httpx.TransportError as e:
                    raise errors.TransportError(f"{type(e).__name__}: {e}") from e
                raise errors.TransportError("the event stream ended before the envelope")
            except errors.ExecgateError as e:
                if progress:
                    attempt = 0
                wait = self._core.wait_before_retry(attempt, e)
                if wait is None:
                    raise
                attempt += 1
                self._sleep(wait)

    def _artifact_chunks(self, execution_id: str, name: str, tenant: Optional[str]) -> Iterator[bytes]:
        """The bytes of one artifact as they come (one attempt; a 401 with
        a token callable is tried once more)."""
        path = self._core.artifact_path(execution_id, name)
        for refreshed in (False, True):
            try:
                with self._http.stream("GET", self._core.base_url + path, params=self._core.tenant_params(tenant),
                                       headers=self._core.headers(self._token(), {"Accept": "*/*"})) as resp:
                    if resp.status_code >= 400:
                        resp.read()
                        if resp.status_code == 401 and callable(self._core.token) and not refreshed:
                            continue
                        raise self._core.answer_error(resp, False)
                    yield from resp.iter_bytes()
                    return
            except httpx.TransportError as e:
                raise errors.TransportError(f"{type(e).__name__}: {e}") from e

    def artifact(self, execution_id: str, name: str, *, tenant: Optional[str] = None, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
        """One artifact's bytes (GET /v1/executions/{id}/artifacts/{name}),
        read as they come and refused (``PayloadTooLarge``) past
        ``max_bytes``. Another tenant's, an expired or an unknown one is
        ``NotFound``; a name that is not a plain file name is a ValueError."""
        buf, n = [], 0
        for chunk in self._artifact_chunks(execution_id, name, tenant):
            n += len(chunk)
            if n > max_bytes:
                raise self._core.too_large(name, max_bytes)
            buf.append(chunk)
        return b"".join(buf)

    def save_artifacts(self, envelope: Envelope, directory: Union[str, "os.PathLike[str]"], *, tenant: Optional[str] = None) -> list[Path]:
        """Write every artifact of envelope into directory (made if
        missing) and return their paths: the inline bytes, or fetched
        (``artifact``) for the others. Every name is checked before
        anything is written (ValueError); a regular file of the same name
        is replaced, a symbolic link or anything else there is left alone
        (FileExistsError); the bytes must be the listed size and sha256
        (``ArtifactMismatch``) (see ``execgate.artifacts``)."""
        out = []
        with ArtifactDir(directory, envelope.artifacts) as d:
            for a in envelope.artifacts:
                with d.begin(a) as f:
                    if not f.write_inline():
                        for chunk in self._artifact_chunks(envelope.execution_id, a.name, tenant):
                            f.write(chunk)
                    out.append(f.commit())
        return out

    def prepare(
        self,
        *,
        requirements: Optional[Sequence[str]] = None,
        requirements_lock: Optional[str] = None,
        warm: Optional[int] = None,
        runtime: Optional[Runtime] = None,
        tenant_id: Optional[str] = None,
        language: Optional[str] = None,
    ) -> PreparedEnvironment:
        """Resolve, check and install a package environment ahead of runs
        (POST /v1/prepare); name it in runs with ``environment_id``.
        ``language`` says whose packages: ``"python"`` (default, PEP 508)
        or ``"javascript"``/``"typescript"`` (npm, ``"left-pad@1.3.0"``). A
        denied package raises ``PolicyDenied``; requirements that cannot be
        resolved raise ``DependencyError`` (422, the resolver's output in
        ``traceback``)."""
        body = self._core.prepare_body(_fields(locals()))
        return PreparedEnvironment.from_dict(self._send("POST", "/v1/prepare", body).json())

    def tools(self, names: Optional[Sequence[str]] = None) -> ToolList:
        """The tools a run would be granted (code mode, GET /v1/tools), with
        their schemas and typed stubs; ``names`` (names or globs) narrows
        the grant as an execute request's ``tools`` would."""
        return ToolList.from_dict(self._send("GET", "/v1/tools", params=self._core.tools_params(names)).json())


class AsyncClient:
    """The asyncio twin of ``Client``: the same arguments and answers;
    ``token`` may also be an async callable, and ``events`` is an async
    iterator."""

    def __init__(
        self,
        base_url: Optional[str] = None,
        *,
        token: Optional[AsyncTokenSource] = None,
        timeout: float = 120.0,
        max_retries: int = 3,
        max_retry_wait: float = 30.0,
        backoff: float = 0.5,
        http_client: Optional[httpx.AsyncClient] = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._core = _Core(base_url, token, max_retries, max_retry_wait, backoff)
        self._http = http_client or httpx.AsyncClient(timeout=timeout)
        self._own_http = http_client is None
        self._sleep = sleep

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own_http:
            await self._http.aclose()

    async def _token(self) -> str:
        t = self._core.token
        if callable(t):
            v = t()
            if asyncio.iscoroutine(v) or isinstance(v, Awaitable):
                v = await v
            return str(v)
        return str(t)

    async def _send(
        self,
        method: str,
        path: str,
        body: Optional[dict[str, Any]] = None,
        *,
        envelope_route: bool = False,
        params: Optional[dict[str, str]] = None,
        on_lost: Optional[Callable[[], Awaitable[Optional[httpx.Response]]]] = None,
    ) -> httpx.Response:
        attempt, refreshed, lost = 0, False, False
        while True:
            try:
                if lost and on_lost is not None:
                    found = await on_lost()
                    if found is not None:
                        return found
                try:
                    resp = await self._http.request(method, self._core.base_url + path, json=body, params=params,
                                                    headers=self._core.headers(await self._token()))
                except httpx.TransportError as e:
                    raise errors.TransportError(f"{type(e).__name__}: {e}") from e
                if resp.status_code < 400:
                    return resp
                err = self._core.answer_error(resp, envelope_route)
                if resp.status_code == 401 and callable(self._core.token) and not refreshed:
                    refreshed = True
                    continue
                raise err
            except errors.ExecgateError as e:
                lost = lost or isinstance(e, errors.TransportError)
                wait = self._core.wait_before_retry(attempt, e)
                if wait is None:
                    raise
                attempt += 1
                await self._sleep(wait)

    async def _lookup(self, execution_id: str) -> Optional[httpx.Response]:
        try:
            resp = await self._http.get(self._core.base_url + self._core.execution_path(execution_id),
                                        headers=self._core.headers(await self._token()))
        except httpx.TransportError:
            return None
        return resp if resp.status_code == 200 else None

    async def execute(
        self,
        source: str,
        *,
        args: Any = None,
        entrypoint: Optional[str] = None,
        execution_id: Optional[str] = None,
        language: Optional[Language] = None,
        requirements: Optional[Sequence[str]] = None,
        requirements_lock: Optional[str] = None,
        environment_id: Optional[str] = None,
        network_access: Optional[NetworkAccess] = None,
        isolation: Optional[Isolation] = None,
        runtime: Optional[Runtime] = None,
        egress_allow: Optional[Sequence[str]] = None,
        limits: Union[Limits, dict[str, int], None] = None,
        mode: Optional[Literal["run", "test"]] = None,
        tools: Optional[Sequence[str]] = None,
        secrets: Optional[Sequence[str]] = None,
        fixtures: Optional[dict[str, Any]] = None,
        files: Optional[Sequence[Mapping[str, Any]]] = None,
        stdin: Optional[str] = None,
        tenant_id: Optional[str] = None,
        check: bool = True,
    ) -> Envelope:
        """See ``Client.execute``."""
        body = self._core.execute_body(source, _fields(locals()))
        env = Envelope.from_dict((await self._send("POST", "/v1/execute", body, envelope_route=True)).json())
        if check and not env.ok:
            raise errors.error_for(200, env.raw, envelope=env)
        return env

    async def validate(self, source: str, *, entrypoint: Optional[str] = None, language: Optional[Language] = None) -> ValidateResult:
        """See ``Client.validate``."""
        body = {k: v for k, v in dict(source=source, entrypoint=entrypoint, language=language).items() if v is not None}
        return ValidateResult.from_dict((await self._send("POST", "/v1/validate", body)).json())

    async def submit(
        self,
        source: str,
        *,
        args: Any = None,
        entrypoint: Optional[str] = None,
        execution_id: Optional[str] = None,
        language: Optional[Language] = None,
        requirements: Optional[Sequence[str]] = None,
        requirements_lock: Optional[str] = None,
        environment_id: Optional[str] = None,
        network_access: Optional[NetworkAccess] = None,
        isolation: Optional[Isolation] = None,
        runtime: Optional[Runtime] = None,
        egress_allow: Optional[Sequence[str]] = None,
        limits: Union[Limits, dict[str, int], None] = None,
        mode: Optional[Literal["run", "test"]] = None,
        tools: Optional[Sequence[str]] = None,
        secrets: Optional[Sequence[str]] = None,
        fixtures: Optional[dict[str, Any]] = None,
        files: Optional[Sequence[Mapping[str, Any]]] = None,
        stdin: Optional[str] = None,
        tenant_id: Optional[str] = None,
        callback_url: Optional[str] = None,
    ) -> ExecutionStatus:
        """See ``Client.submit``."""
        body = self._core.execute_body(source, _fields(locals()))
        eid = body["execution_id"]
        looked: list[bool] = []

        async def lookup() -> Optional[httpx.Response]:
            looked.append(True)
            return await self._lookup(eid)

        try:
            resp = await self._send("POST", "/v1/executions", body, envelope_route=True, on_lost=lookup)
        except errors.BadRequest:
            found = await self._lookup(eid) if looked else None
            if found is None:
                raise
            resp = found
        return ExecutionStatus.from_dict(resp.json())

    async def get(self, execution_id: str, *, tenant: Optional[str] = None) -> ExecutionStatus:
        """See ``Client.get``."""
        path = self._core.execution_path(execution_id)
        return ExecutionStatus.from_dict((await self._send("GET", path, params=self._core.tenant_params(tenant))).json())

    async def cancel(self, execution_id: str, *, tenant: Optional[str] = None) -> ExecutionStatus:
        """See ``Client.cancel``."""
        path = self._core.execution_path(execution_id)
        return ExecutionStatus.from_dict((await self._send("DELETE", path, params=self._core.tenant_params(tenant))).json())

    async def wait(
        self,
        execution_id: str,
        *,
        timeout: Optional[float] = None,
        poll: float = 0.2,
        tenant: Optional[str] = None,
        check: bool = True,
    ) -> Envelope:
        """See ``Client.wait``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            st = await self.get(execution_id, tenant=tenant)
            if st.done:
                return self._core.finished(st, check)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"execution {execution_id} is still {st.status} after {timeout} s")
            await self._sleep(poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic())))
            poll = min(poll * 1.5, 2.0)

    async def events(
        self,
        execution_id: str,
        *,
        last_event_id: Optional[int] = None,
        tenant: Optional[str] = None,
        read_timeout: Optional[float] = None,
    ) -> AsyncIterator[Event]:
        """See ``Client.events``; ``async for ev in client.events(id)``."""
        follow = Follow(last_event_id)
        path = self._core.execution_path(execution_id, "/events")
        timeout = self._core.stream_timeout(self._http, read_timeout)
        attempt, refreshed = 0, False
        while True:
            progress = False
            try:
                try:
                    async with self._http.stream("GET", self._core.base_url + path, params=self._core.tenant_params(tenant),
                                                 headers=self._core.headers(await self._token(), follow.headers()),
                                                 timeout=timeout) as resp:
                        if resp.status_code >= 400:
                            await resp.aread()
                            err = self._core.answer_error(resp, False)
                            if resp.status_code == 401 and callable(self._core.token) and not refreshed:
                                refreshed = True
                                continue
                            raise err
                        dec = follow.connected()
                        async for line in resp.aiter_lines():
                            raw = dec.line(line)
                            ev = follow.accept(raw) if raw is not None else None
                            if ev is None:
                                continue
                            progress = True
                            yield ev
                            if follow.done:
                                return
                except httpx.TransportError as e:
                    raise errors.TransportError(f"{type(e).__name__}: {e}") from e
                raise errors.TransportError("the event stream ended before the envelope")
            except errors.ExecgateError as e:
                if progress:
                    attempt = 0
                wait = self._core.wait_before_retry(attempt, e)
                if wait is None:
                    raise
                attempt += 1
                await self._sleep(wait)

    async def _artifact_chunks(self, execution_id: str, name: str, tenant: Optional[str]) -> AsyncIterator[bytes]:
        path = self._core.artifact_path(execution_id, name)
        for refreshed in (False, True):
            try:
                async with self._http.stream("GET", self._core.base_url + path, params=self._core.tenant_params(tenant),
                                             headers=self._core.headers(await self._token(), {"Accept": "*/*"})) as resp:
                    if resp.status_code >= 400:
                        await resp.aread()
                        if resp.status_code == 401 and callable(self._core.token) and not refreshed:
                            continue
                        raise self._core.answer_error(resp, False)
                    async for chunk in resp.aiter_bytes():
                        yield chunk
                    return
            except httpx.TransportError as e:
                raise errors.TransportError(f"{type(e).__name__}: {e}") from e

    async def artifact(self, execution_id: str, name: str, *, tenant: Optional[str] = None, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
        """See ``Client.artifact``."""
        buf, n = [], 0
        async for chunk in self._artifact_chunks(execution_id, name, tenant):
            n += len(chunk)
            if n > max_bytes:
                raise self._core.too_large(name, max_bytes)
            buf.append(chunk)
        return b"".join(buf)

    async def save_artifacts(self, envelope: Envelope, directory: Union[str, "os.PathLike[str]"], *, tenant: Optional[str] = None) -> list[Path]:
        """See ``Client.save_artifacts``."""
        out = []
        with ArtifactDir(directory, envelope.artifacts) as d:
            for a in envelope.artifacts:
                with d.begin(a) as f:
                    if not f.write_inline():
                        async for chunk in self._artifact_chunks(envelope.execution_id, a.name, tenant):
                            f.write(chunk)
                    out.append(f.commit())
        return out

    async def prepare(
        self,
        *,
        requirements: Optional[Sequence[str]] = None,
        requirements_lock: Optional[str] = None,
        warm: Optional[int] = None,
        runtime: Optional[Runtime] = None,
        tenant_id: Optional[str] = None,
        language: Optional[str] = None,
    ) -> PreparedEnvironment:
        """See ``Client.prepare``."""
        body = self._core.prepare_body(_fields(locals()))
        return PreparedEnvironment.from_dict((await self._send("POST", "/v1/prepare", body)).json())

    async def tools(self, names: Optional[Sequence[str]] = None) -> ToolList:
        """See ``Client.tools``."""
        return ToolList.from_dict((await self._send("GET", "/v1/tools", params=self._core.tools_params(names))).json())
