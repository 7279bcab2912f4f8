"""The event stream's parsing and resume bookkeeping (pure logic)."""

from __future__ import annotations

from execgate.events import DroppedEvent, EnvelopeEvent, Follow, LogEvent, OutputEvent


def feed(follow: Follow, text: str) -> list:
    dec = follow.connected()
    out = []
    for line in text.split("\n"):
        raw = dec.line(line)
        ev = follow.accept(raw) if raw is not None else None
        if ev is not None:
            out.append(ev)
    return out


LIVE = (
    'id: 0\nevent: stdout\ndata: {"text":"a"}\n\n'
    ': a comment\n'
    'id: 1\nevent: stderr\ndata: {"text":"b"}\n\n'
    'event: dropped\ndata: {"events":2}\n\n'
    'id: 4\nevent: log\ndata: {"level":"info","message":"one"}\n\n'
    'id: 5\nevent: log\ndata: {"level":"warning","message":"two"}\n\n'
    'id: 6\nevent: newkind\ndata: {}\n\n'
    'id: 7\nevent: envelope\ndata: {"execution_id":"x","status":"ok","result":1,"logs":[]}\n\n'
)
ENDED = (
    'event: log\ndata: {"level":"info","message":"one"}\n\n'
    'event: log\ndata: {"level":"warning","message":"two"}\n\n'
    'event: envelope\ndata: {"execution_id":"x","status":"ok","result":1}\n\n'
)


def test_typed_events_in_order():
    f = Follow(None)
    evs = feed(f, LIVE)
    assert evs[:3] == [OutputEvent("stdout", "a", 0), OutputEvent("stderr", "b", 1), DroppedEvent(2)]
    assert evs[3:5] == [LogEvent("info", "one", 4), LogEvent("warning", "two", 5)]
    assert isinstance(evs[5], EnvelopeEvent) and evs[5].envelope.result == 1 and evs[5].id == 7
    assert len(evs) == 6 and f.done and f.last_event_id == 7  # the unknown kind is skipped, its id kept
    assert [e.kind for e in evs] == ["stdout", "stderr", "dropped", "log", "log", "envelope"]


def test_a_reconnection_to_the_live_stream_skips_what_was_given():
    f = Follow(None)
    first = feed(f, LIVE.split("event: dropped")[0])  # dropped after id 1
    assert f.headers()["Last-Event-ID"] == "1" and len(first) == 2
    # A gateway resending from an earlier id gives nothing twice.
    again = feed(f, LIVE)
    assert [e.id for e in again] == [None, 4, 5, 7]


def test_a_reconnection_to_an_ended_run_skips_the_log_lines_given():
    f = Follow(None)
    feed(f, LIVE.split("id: 5")[0])  # up to the first log line
    assert f._logs == 1 and not f.done
    rest = feed(f, ENDED)
    assert rest[0] == LogEvent("warning", "two") and isinstance(rest[1], EnvelopeEvent) and len(rest) == 2


def test_a_half_sent_event_is_not_given_out():
    f = Follow(None)
    assert feed(f, 'id: 0\nevent: stdout\ndata: {"text":"a"}\n\nid: 1\nevent: stdout\ndata: {"te') == [OutputEvent("stdout", "a", 0)]
    assert f.last_event_id == 0


def test_multiline_data_is_joined():
    f = Follow(None)
    evs = feed(f, 'event: log\ndata: {"level":"info",\ndata: "message":"m"}\n\n')
    assert evs == [LogEvent("info", "m")]
