// The live output of an async execution: GET /v1/executions/{id}/events.
//
// The gateway sends Server-Sent Events, in order: stdout and stderr chunks as
// the tool writes them, dropped when this reader fell behind and missed some
// (the run never waits for a reader), the run's log lines, then the
// envelope, after which the stream ends. Each becomes an ExecutionEvent.
//
// Events of a run that is live on the gateway carry an id (a sequence
// number). After a dropped connection the client reconnects with
// Last-Event-ID and continues after the last event it gave out, so no event
// is given twice. Once the run has ended the gateway sends only its log
// lines and the envelope, without ids: the log lines already given out are
// skipped then, by count (they come in the same order). The stdout and
// stderr missed while disconnected from an ended run are in the envelope.
//
// Only the parsing and the bookkeeping live here; Client.events does the I/O.

import type { components } from "./schema.js";
import type { Envelope } from "./errors.js";

export type LogLevel = components["schemas"]["LogLine"]["level"];

/** One event of an execution's live output (a discriminated union on type). */
export type ExecutionEvent =
  | { type: "stdout" | "stderr"; id?: number; text: string }
  | { type: "log"; id?: number; level: LogLevel; message: string }
  | { type: "dropped"; id?: number; events: number }
  | { type: "envelope"; id?: number; envelope: Envelope };

interface RawEvent {
  kind: string;
  data: string;
  id?: number;
}

/** Lines of a text/event-stream in, raw events out (the WHATWG rules for
 * what the gateway sends: event, data, id; comments and retry ignored). */
export class SSEDecoder {
  private kind = "";
  private data: string[] = [];
  private id?: number;

  line(line: string): RawEvent | undefined {
    if (line === "") {
      if (this.data.length === 0) {
        this.kind = "";
        this.id = undefined;
        return undefined;
      }
      const ev: RawEvent = { kind: this.kind || "message", data: this.data.join("\n"), id: this.id };
      this.kind = "";
      this.data = [];
      this.id = undefined;
      return ev;
    }
    if (line.startsWith(":")) return undefined;
    const colon = line.indexOf(":");
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (name === "event") this.kind = value;
    else if (name === "data") this.data.push(value);
    else if (name === "id") this.id = /^[0-9]+$/.test(value) ? Number(value) : undefined;
    return undefined;
  }
}

/** Splits decoded text into lines (\n, \r\n or \r), across chunks. */
export class LineSplitter {
  private rest = "";
  private lastCR = false;

  push(text: string): string[] {
    if (this.lastCR && text.startsWith("\n")) text = text.slice(1); // the \n of a \r\n split across chunks
    this.lastCR = false;
    const s = this.rest + text;
    const lines: string[] = [];
    let start = 0;
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c !== 10 && c !== 13) continue;
      lines.push(s.slice(start, i));
      if (c === 13) {
        if (i + 1 === s.length) this.lastCR = true;
        else if (s.charCodeAt(i + 1) === 10) i++;
      }
      start = i + 1;
    }
    this.rest = s.slice(start);
    return lines;
  }
}

function decode(raw: RawEvent): ExecutionEvent | undefined {
  let d: unknown;
  try {
    d = JSON.parse(raw.data);
  } catch {
    throw new Error(`the gateway sent a ${raw.kind} event whose data is not JSON: ${raw.data.slice(0, 200)}`);
  }
  if (!d || typeof d !== "object") {
    throw new Error(`the gateway sent a ${raw.kind} event whose data is not a JSON object: ${raw.data.slice(0, 200)}`);
  }
  const o = d as Record<string, unknown>;
  const id = raw.id;
  switch (raw.kind) {
    case "stdout":
    case "stderr":
      return { type: raw.kind, id, text: String(o.text ?? "") };
    case "log":
      return { type: "log", id, level: o.level as LogLevel, message: String(o.message ?? "") };
    case "dropped":
      return { type: "dropped", id, events: Number(o.events ?? 0) };
    case "envelope":
      return { type: "envelope", id, envelope: o as unknown as Envelope };
    default:
      return undefined; // a kind this client does not know yet
  }
}

/** One events() call across its connections: what was given out, so that a
 * reconnection continues without giving an event twice. */
export class Follow {
  done = false;
  private logs = 0; // log events given out
  private plainLogs = 0; // log events without an id on this connection

  constructor(public lastEventId?: number) {}

  /** A new connection: its decoder. */
  connected(): SSEDecoder {
    this.plainLogs = 0;
    return new SSEDecoder();
  }

  /** The event to give out for raw, or undefined: already given, or unknown. */
  accept(raw: RawEvent): ExecutionEvent | undefined {
    if (raw.id !== undefined) {
      if (this.lastEventId !== undefined && raw.id <= this.lastEventId) return undefined;
      this.lastEventId = raw.id;
    } else if (raw.kind === "log") {
      this.plainLogs++;
      if (this.plainLogs <= this.logs) return undefined;
    }
    const ev = decode(raw);
    if (ev?.type === "log") this.logs++;
    else if (ev?.type === "envelope") this.done = true;
    return ev;
  }

  headers(h: Headers): void {
    h.set("Accept", "text/event-stream");
    if (this.lastEventId !== undefined) h.set("Last-Event-ID", String(this.lastEventId));
  }
}
