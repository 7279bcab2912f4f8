"""Sync and async clients of the execgate HTTP API, on httpx.

Both share one core (``_Core``): how a request is built (token, traceparent),
when it is retried and how an answer becomes an ``Envelope`` or an
exception. Only the I/O differs.

Retries are safe by design: ``execute`` fixes the ``execution_id`` (the
gateway's idempotency key) before the first attempt and sends the same one
on every retry, so a request that did run is answered from the gateway's
memory, never run twice. Retried: transport errors and timeouts, 429
``QuotaExceeded``, 503 ``Overloaded`` and ``QuotaUnavailable``, waiting for
Retry-After when the gateway sends it (up to ``max_retry_wait``), else an
exponential backoff. Not retried: everything else (a 429
``BudgetExhausted`` waits for tomorrow; a run that ended in error is an
answer).

Where the async API and SSE output go (DESIGN §14, not served yet):
``submit()`` → POST /v1/executions (202 + Location), ``get(id)`` → GET
/v1/executions/{id}, ``events(id)`` → GET /v1/executions/{id}/events (SSE:
stdout, stderr, log, envelope events; ``httpx`` streams with
``client.stream("GET", …)`` and ``iter_lines``), ``cancel(id)`` → DELETE.
They reuse ``_Core.headers``, ``_Core.answer`` and the retry loop as they
are; add them to both classes when the gateway serves those routes.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from typing import Any, Awaitable, Callable, Optional, Sequence, Union

import httpx

from . import errors
from .models import Envelope, ExecuteRequest, Limits, ValidateResult

try:  # W3C traceparent propagation, when OpenTelemetry is present.
    from opentelemetry import propagate as _otel_propagate
except ImportError:  # pragma: no cover - exercised without the package
    _otel_propagate = None

DEFAULT_URL = "http://127.0.0.1:8010"
TokenSource = Union[str, Callable[[], str]]
AsyncTokenSource = Union[str, Callable[[], str], Callable[[], Awaitable[str]]]

_RETRYABLE = {"QuotaExceeded", "Overloaded", "QuotaUnavailable"}


def new_execution_id() -> str:
    """A fresh execution id (32 hex digits, like the gateway's)."""
    return uuid.uuid4().hex


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

    def headers(self, token: str) -> dict[str, str]:
        h = {"Authorization": "Bearer " + token, "Accept": "application/json"}
        if _otel_propagate is not None:
            _otel_propagate.inject(h)
        return h

    @staticmethod
    def execute_body(source: str, kw: dict[str, Any]) -> dict[str, Any]:
        limits = kw.pop("limits", None)
        if isinstance(limits, dict):
            limits = Limits(**limits)
        req = ExecuteRequest(source=source, limits=limits, **kw)
        body = req.to_dict()
        body.setdefault("execution_id", new_execution_id())
        return body

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
        return min(self.max_retry_wait, self.backoff * (2**attempt)) * (0.5 + random.random() / 2)


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
        return t() if callable(t) else t

    def _send(self, path: str, body: dict[str, Any], envelope_route: bool) -> httpx.Response:
        attempt, refreshed = 0, False
        while True:
            try:
                try:
                    resp = self._http.post(self._core.base_url + path, json=body, headers=self._core.headers(self._token()))
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
                wait = self._core.wait_before_retry(attempt, e)
                if wait is None:
                    raise
                attempt += 1
                self._sleep(wait)

    def execute(
        self,
        source: str,
        *,
        args: Any = None,
        entrypoint: Optional[str] = None,
        execution_id: Optional[str] = None,
        language: Optional[str] = None,
        requirements: Optional[Sequence[str]] = None,
        network_access: Optional[str] = None,
        egress_allow: Optional[Sequence[str]] = None,
        limits: Union[Limits, dict[str, int], None] = None,
        mode: Optional[str] = None,
        fixtures: Optional[dict[str, Any]] = None,
        tenant_id: Optional[str] = None,
        check: bool = True,
    ) -> Envelope:
        """Run a tool once (POST /v1/execute) and return its envelope.

        A refusal raises its ``RequestError``. A run that ended in error
        raises its ``RunError`` when ``check`` (the default); with
        ``check=False`` its envelope is returned instead.
        """
        body = self._core.execute_body(source, dict(
            args=args, entrypoint=entrypoint, execution_id=execution_id, language=language,
            requirements=list(requirements) if requirements is not None else None, network_access=network_access,
            egress_allow=list(egress_allow) if egress_allow is not None else None, limits=limits, mode=mode,
            fixtures=fixtures, tenant_id=tenant_id))
        env = Envelope.from_dict(self._send("/v1/execute", body, True).json())
        if check and not env.ok:
            raise errors.error_for(200, env.raw, envelope=env)
        return env

    def validate(self, source: str, *, entrypoint: Optional[str] = None) -> ValidateResult:
        """Check that source compiles and defines the entrypoint (POST /v1/validate)."""
        body: dict[str, Any] = {"source": source}
        if entrypoint is not None:
            body["entrypoint"] = entrypoint
        return ValidateResult.from_dict(self._send("/v1/validate", body, False).json())


class AsyncClient:
    """The asyncio twin of ``Client``: the same arguments and answers;
    ``token`` may also be an async callable."""

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
            return v
        return t

    async def _send(self, path: str, body: dict[str, Any], envelope_route: bool) -> httpx.Response:
        attempt, refreshed = 0, False
        while True:
            try:
                try:
                    resp = await self._http.post(self._core.base_url + path, json=body, headers=self._core.headers(await self._token()))
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
                wait = self._core.wait_before_retry(attempt, e)
                if wait is None:
                    raise
                attempt += 1
                await self._sleep(wait)

    async def execute(
        self,
        source: str,
        *,
        args: Any = None,
        entrypoint: Optional[str] = None,
        execution_id: Optional[str] = None,
        language: Optional[str] = None,
        requirements: Optional[Sequence[str]] = None,
        network_access: Optional[str] = None,
        egress_allow: Optional[Sequence[str]] = None,
        limits: Union[Limits, dict[str, int], None] = None,
        mode: Optional[str] = None,
        fixtures: Optional[dict[str, Any]] = None,
        tenant_id: Optional[str] = None,
        check: bool = True,
    ) -> Envelope:
        """See ``Client.execute``."""
        body = self._core.execute_body(source, dict(
            args=args, entrypoint=entrypoint, execution_id=execution_id, language=language,
            requirements=list(requirements) if requirements is not None else None, network_access=network_access,
            egress_allow=list(egress_allow) if egress_allow is not None else None, limits=limits, mode=mode,
            fixtures=fixtures, tenant_id=tenant_id))
        env = Envelope.from_dict((await self._send("/v1/execute", body, True)).json())
        if check and not env.ok:
            raise errors.error_for(200, env.raw, envelope=env)
        return env

    async def validate(self, source: str, *, entrypoint: Optional[str] = None) -> ValidateResult:
        """See ``Client.validate``."""
        body: dict[str, Any] = {"source": source}
        if entrypoint is not None:
            body["entrypoint"] = entrypoint
        return ValidateResult.from_dict((await self._send("/v1/validate", body, False)).json())
