// The event stream's parsing and resume bookkeeping (pure logic).
import { test } from "node:test";
import assert from "node:assert/strict";

import { Follow, LineSplitter, type ExecutionEvent } from "../src/events.js";

function feed(f: Follow, text: string): ExecutionEvent[] {
  const dec = f.connected();
  const out: ExecutionEvent[] = [];
  for (const line of text.split("\n")) {
    const raw = dec.line(line);
    const ev = raw && f.accept(raw);
    if (ev) out.push(ev);
  }
  return out;
}

const LIVE =
  'id: 0\nevent: stdout\ndata: {"text":"a"}\n\n' +
  ": a comment\n" +
  'id: 1\nevent: stderr\ndata: {"text":"b"}\n\n' +
  'event: dropped\ndata: {"events":2}\n\n' +
  'id: 4\nevent: log\ndata: {"level":"info","message":"one"}\n\n' +
  'id: 5\nevent: log\ndata: {"level":"warning","message":"two"}\n\n' +
  "id: 6\nevent: newkind\ndata: {}\n\n" +
  'id: 7\nevent: envelope\ndata: {"execution_id":"x","status":"ok","result":1}\n\n';
const ENDED =
  'event: log\ndata: {"level":"info","message":"one"}\n\n' +
  'event: log\ndata: {"level":"warning","message":"two"}\n\n' +
  'event: envelope\ndata: {"execution_id":"x","status":"ok","result":1}\n\n';

test("typed events in order; an unknown kind is skipped, its id kept", () => {
  const f = new Follow();
  const evs = feed(f, LIVE);
  assert.deepEqual(evs.slice(0, 5), [
    { type: "stdout", id: 0, text: "a" },
    { type: "stderr", id: 1, text: "b" },
    { type: "dropped", id: undefined, events: 2 },
    { type: "log", id: 4, level: "info", message: "one" },
    { type: "log", id: 5, level: "warning", message: "two" },
  ]);
  const last = evs[5];
  assert.ok(last.type === "envelope" && last.envelope.result === 1 && last.id === 7);
  assert.equal(evs.length, 6);
  assert.ok(f.done);
  assert.equal(f.lastEventId, 7);
});

test("a reconnection to the live stream skips what was given", () => {
  const f = new Follow();
  assert.equal(feed(f, LIVE.split("event: dropped")[0]).length, 2);
  const h = new Headers();
  f.headers(h);
  assert.equal(h.get("Last-Event-ID"), "1");
  assert.deepEqual(feed(f, LIVE).map((e) => e.id), [undefined, 4, 5, 7]);
});

test("a reconnection to an ended run skips the log lines given", () => {
  const f = new Follow();
  feed(f, LIVE.split("id: 5")[0]);
  const rest = feed(f, ENDED);
  assert.deepEqual(rest[0], { type: "log", id: undefined, level: "warning", message: "two" });
  assert.equal(rest[1].type, "envelope");
  assert.equal(rest.length, 2);
});

test("a half-sent event is not given out", () => {
  const f = new Follow();
  assert.deepEqual(feed(f, 'id: 0\nevent: stdout\ndata: {"text":"a"}\n\nid: 1\nevent: stdout\ndata: {"te'), [
    { type: "stdout", id: 0, text: "a" },
  ]);
  assert.equal(f.lastEventId, 0);
});

test("lines split on \\n, \\r\\n and \\r across chunks", () => {
  const s = new LineSplitter();
  assert.deepEqual(s.push("a\r"), ["a"]);
  assert.deepEqual(s.push("\nb\n\nc"), ["b", ""]);
  assert.deepEqual(s.push("\rd\r\n"), ["c", "d"]);
});
