"""The live output of an async execution: GET /v1/executions/{id}/events.

The gateway sends Server-Sent Events, in order: ``stdout`` and ``stderr``
chunks as the tool writes them, ``dropped`` when this reader fell behind
and missed some (the run never waits for a reader), the run's ``log``
lines, then the ``envelope``, after which the stream ends. Each becomes a
typed event here: ``OutputEvent``, ``DroppedEvent``, ``LogEvent``,
``EnvelopeEvent``.

Events of a run that is live on the gateway carry an ``id`` (a sequence
number). After a dropped connection the clients reconnect with
``Last-Event-ID`` and continue after the last event they gave out, so no
event is given twice. Once the run has ended the gateway sends only its
log lines and the envelope, without ids: the log lines already given out
are skipped then, by count (they come in the same order). The stdout and
stderr missed while disconnected from an ended run are in the envelope.

Only the parsing and the bookkeeping live here; the clients do the I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

from .models import Envelope


@dataclass(frozen=True)
class OutputEvent:
    """A chunk of the tool's stdout or stderr, as it wrote it."""

    kind: Literal["stdout", "stderr"]
    text: str
    id: Optional[int] = None


@dataclass(frozen=True)
class LogEvent:
    """One of the run's ``context.log`` lines (they arrive at its end)."""

    level: str
    message: str
    id: Optional[int] = None
    kind: Literal["log"] = field(default="log", init=False)


@dataclass(frozen=True)
class DroppedEvent:
    """This reader fell behind: ``events`` events were skipped."""

    events: int
    id: Optional[int] = None
    kind: Literal["dropped"] = field(default="dropped", init=False)


@dataclass(frozen=True)
class EnvelopeEvent:
    """The run's envelope, exactly what POST /v1/execute answers; last."""

    envelope: Envelope
    id: Optional[int] = None
    kind: Literal["envelope"] = field(default="envelope", init=False)


Event = Union[OutputEvent, LogEvent, DroppedEvent, EnvelopeEvent]


@dataclass
class _Raw:
    kind: str
    data: str
    id: Optional[int]


class SSEDecoder:
    """Lines of a text/event-stream in, raw events out (the WHATWG rules for
    what the gateway sends: event, data, id; comments and retry ignored)."""

    def __init__(self) -> None:
        self._kind = ""
        self._data: list[str] = []
        self._id: Optional[int] = None

    def line(self, line: str) -> Optional[_Raw]:
        if line == "":
            if not self._data:
                self._kind, self._id = "", None
                return None
            ev = _Raw(self._kind or "message", "\n".join(self._data), self._id)
            self._kind, self._data, self._id = "", [], None
            return ev
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._kind = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            self._id = int(value) if value.isdigit() else None
        return None


def _decode(raw: _Raw) -> Optional[Event]:
    """The typed event, or None for a kind this client does not know."""
    try:
        d: Any = json.loads(raw.data)
    except ValueError as e:
        raise ValueError(f"the gateway sent a {raw.kind} event whose data is not JSON: {raw.data[:200]!r}") from e
    if not isinstance(d, dict):
        raise ValueError(f"the gateway sent a {raw.kind} event whose data is not a JSON object: {raw.data[:200]!r}")
    if raw.kind in ("stdout", "stderr"):
        return OutputEvent(raw.kind, str(d.get("text", "")), raw.id)  # type: ignore[arg-type]
    if raw.kind == "log":
        return LogEvent(str(d.get("level", "")), str(d.get("message", "")), raw.id)
    if raw.kind == "dropped":
        return DroppedEvent(int(d.get("events", 0)), raw.id)
    if raw.kind == "envelope":
        return EnvelopeEvent(Envelope.from_dict(d), raw.id)
    return None


class Follow:
    """One ``events()`` call across its connections: what was given out, so
    that a reconnection continues without giving an event twice."""

    def __init__(self, last_event_id: Optional[int]) -> None:
        self.last_event_id = last_event_id
        self.done = False
        self._logs = 0  # log events given out
        self._plain_logs = 0  # log events without an id on this connection

    def connected(self) -> SSEDecoder:
        """A new connection: its decoder."""
        self._plain_logs = 0
        return SSEDecoder()

    def accept(self, raw: _Raw) -> Optional[Event]:
        """The event to give out for raw, or None: already given, or unknown."""
        if raw.id is not None:
            if self.last_event_id is not None and raw.id <= self.last_event_id:
                return None
            self.last_event_id = raw.id
        elif raw.kind == "log":
            self._plain_logs += 1
            if self._plain_logs <= self._logs:
                return None
        ev = _decode(raw)
        if isinstance(ev, LogEvent):
            self._logs += 1
        elif isinstance(ev, EnvelopeEvent):
            self.done = True
        return ev

    def headers(self) -> dict[str, str]:
        h = {"Accept": "text/event-stream"}
        if self.last_event_id is not None:
            h["Last-Event-ID"] = str(self.last_event_id)
        return h
