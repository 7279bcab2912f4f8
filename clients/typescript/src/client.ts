// The execgate HTTP API client: ESM, no runtime dependency beyond fetch.
//
// Routes: execute (POST /v1/execute), validate (POST /v1/validate), submit
// (POST /v1/executions: 202 and the execution's id), get (GET
// /v1/executions/{id}), wait (get until done, then the envelope), cancel
// (DELETE /v1/executions/{id}), events (GET /v1/executions/{id}/events:
// Server-Sent Events as an async iterator, resumed with Last-Event-ID after a
// dropped connection; see events.ts), prepare (POST /v1/prepare) and tools
// (GET /v1/tools). Every request field of the OpenAPI document is an option
// of its method: REQUEST_FIELDS lists them (the compiler holds the list to
// the generated schema types, test/drift.test.ts to gateway/openapi.yaml),
// and the request bodies are built from it.
//
// Artifacts: an envelope lists them (envelope.artifacts, small ones with
// their bytes, base64); artifact(id, name) fetches one (GET
// /v1/executions/{id}/artifacts/{name}, read as it comes, at most maxBytes)
// and saveArtifacts(envelope, dir) writes every one into a directory, safely
// (artifacts.ts: plain names only, nothing written through a link, size and
// sha256 checked; needs node:fs). Artifact fetches are not retried.
//
// Retries are safe by design: execute and submit fix the execution_id (the
// gateway's idempotency key) before the first attempt and send the same one
// on every retry, so a request that did run is answered from the gateway's
// memory, never run twice. Retried: network errors, 429 QuotaExceeded, 503
// Overloaded and QuotaUnavailable, after Retry-After when the gateway sends
// it (up to maxRetryWait seconds), else an exponential backoff. Nothing else
// is retried (BudgetExhausted waits for tomorrow; a 502 OutcomeUnknown may
// have run; a failed run is an answer). A submission whose answer was lost is
// looked up (GET) before it is sent again: the gateway refuses an async
// execution_id it already has (400), and the lookup tells that it was the
// lost attempt that took it. A token function is called before every request
// and once more after a 401.

import type { components } from "./schema.js";
import { errorFor, BadRequest, ExecgateError, TransportError, type Envelope } from "./errors.js";
import { Follow, LineSplitter, type ExecutionEvent } from "./events.js";
import { ArtifactDir, artifactData, checkArtifactName, DEFAULT_MAX_ARTIFACT_BYTES } from "./artifacts.js";

type Schemas = components["schemas"];
export type ExecuteRequest = Schemas["ExecuteRequest"];
export type ExecutionRequest = Schemas["ExecutionRequest"];
export type ExecutionStatus = Schemas["ExecutionStatus"];
export type ValidateRequest = Schemas["ValidateRequest"];
export type ValidateResponse = Schemas["ValidateResponse"];
export type PrepareRequest = Schemas["PrepareRequest"];
export type PrepareResponse = Schemas["PrepareResponse"];
export type ToolsResponse = Schemas["ToolsResponse"];

/** The request fields each method sends: exactly the properties of its
 * request body schema. */
export const REQUEST_FIELDS = {
  execute: [
    "execution_id", "tenant_id", "language", "source", "entrypoint", "args", "requirements", "requirements_lock",
    "environment_id", "network_access", "isolation", "runtime", "egress", "limits", "mode", "tools", "secrets", "fixtures", "files",
    "stdin",
  ],
  submit: [
    "execution_id", "tenant_id", "language", "source", "entrypoint", "args", "requirements", "requirements_lock",
    "environment_id", "network_access", "isolation", "runtime", "egress", "limits", "mode", "tools", "secrets", "fixtures", "files",
    "stdin", "callback_url",
  ],
  validate: ["source", "entrypoint", "language"],
  prepare: ["tenant_id", "language", "requirements", "requirements_lock", "warm", "runtime"],
} as const satisfies {
  execute: readonly (keyof ExecuteRequest)[];
  submit: readonly (keyof ExecutionRequest)[];
  validate: readonly (keyof ValidateRequest)[];
  prepare: readonly (keyof PrepareRequest)[];
};

// The compiler refuses a field of the generated schema types missing from
// REQUEST_FIELDS, naming it ("does not satisfy the constraint 'never'").
type Missing<T, L extends readonly PropertyKey[]> = Exclude<keyof T, L[number]>;
type NoneMissing<M extends never> = M;
export type RequestFieldsComplete = [
  NoneMissing<Missing<ExecuteRequest, typeof REQUEST_FIELDS.execute>>,
  NoneMissing<Missing<ExecutionRequest, typeof REQUEST_FIELDS.submit>>,
  NoneMissing<Missing<ValidateRequest, typeof REQUEST_FIELDS.validate>>,
  NoneMissing<Missing<PrepareRequest, typeof REQUEST_FIELDS.prepare>>,
];

interface CallOptions {
  signal?: AbortSignal;
}

/** Everything of an execute request but its source. */
export type ExecuteOptions = Omit<ExecuteRequest, "source"> & CallOptions & {
  /** Throw the run's RunError when it ended in error (default true);
   * false returns its envelope instead. */
  check?: boolean;
};
/** Everything of an async submission but its source. */
export type SubmitOptions = Omit<ExecutionRequest, "source"> & CallOptions;
export type ValidateOptions = Omit<ValidateRequest, "source"> & CallOptions;
export type PrepareOptions = PrepareRequest & CallOptions;
/** tenant: an admin naming the execution's owner. */
export type ExecutionOptions = CallOptions & { tenant?: string };
export type WaitOptions = ExecutionOptions & {
  /** Seconds; past it wait() rejects with an Error. Default: no limit. */
  timeout?: number;
  /** Seconds between the first polls (growing to 2). Default 0.2. */
  poll?: number;
  /** Throw the refusal or the run's error like execute (default true). */
  check?: boolean;
};
export type ArtifactOptions = ExecutionOptions & {
  /** The most bytes read; more rejects with PayloadTooLarge. Default 64 MiB. */
  maxBytes?: number;
};
export type EventsOptions = ExecutionOptions & {
  /** Start after this event (resuming an earlier reader). */
  lastEventId?: number;
};

export type TokenSource = string | (() => string | Promise<string>);

export interface ClientOptions {
  /** Default: $EXECGATE_URL, then http://127.0.0.1:8010. */
  baseUrl?: string;
  /** A token, or a function returning the current one (called before every
   * request; after a 401 it is called once more and the request retried).
   * Default: $EXECGATE_TOKEN. */
  token?: TokenSource;
  maxRetries?: number; // default 3
  maxRetryWait?: number; // seconds, default 30
  backoff?: number; // seconds, default 0.5
  fetch?: typeof fetch;
  sleep?: (seconds: number) => Promise<void>;
  /** Called with each request's headers before it is sent: the place for
   * W3C trace context, e.g. with @opentelemetry/api:
   *   onRequest: (h) => propagation.inject(context.active(), h, { set: (c, k, v) => c.set(k, v) }) */
  onRequest?: (headers: Headers) => void | Promise<void>;
}

export const DEFAULT_URL = "http://127.0.0.1:8010";
const RETRYABLE = new Set(["QuotaExceeded", "Overloaded", "QuotaUnavailable"]);

function env(name: string): string | undefined {
  const p = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return p?.env?.[name];
}

/** A fresh execution id (32 hex digits, like the gateway's). */
export function newExecutionId(): string {
  return crypto.randomUUID().replaceAll("-", "");
}

/** The body of a request: the fields of opts the method takes; an option it
 * does not know is a TypeError naming it (as the gateway's 400 would). */
function body(method: string, fields: readonly string[], opts: object, clientOnly: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(opts)) {
    if (clientOnly.includes(k)) continue;
    if (!fields.includes(k)) throw new TypeError(`${method}(): unknown option "${k}" (takes ${fields.join(", ")})`);
    if (v !== undefined) out[k] = v;
  }
  return out;
}

function executionPath(id: string, tail = ""): string {
  if (!id || id.includes("/")) throw new TypeError(`not an execution id: ${JSON.stringify(id)}`);
  return "/v1/executions/" + encodeURIComponent(id) + tail;
}

function transportError(e: unknown): TransportError {
  return new TransportError(`fetch failed: ${(e as Error).message}`, { status: 0, errorType: "TransportError" });
}

/** The chunks of a response body as they come: a failed read is a
 * TransportError (unless signal aborted it), and the body is cancelled when
 * the consumer stops early. */
async function* bodyChunks(body: ReadableStream<Uint8Array>, signal?: AbortSignal): AsyncGenerator<Uint8Array, void, undefined> {
  const reader = body.getReader();
  try {
    for (;;) {
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await reader.read();
      } catch (e) {
        if (signal?.aborted) throw e;
        throw transportError(e);
      }
      if (chunk.done) return;
      yield chunk.value;
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
}

interface SendOptions extends CallOptions {
  body?: unknown;
  envelopeRoute?: boolean;
  query?: Record<string, string | undefined>;
  /** After an attempt whose answer was lost: may answer instead of the next attempt. */
  onLost?: () => Promise<Response | undefined>;
}

export class Client {
  readonly baseUrl: string;
  private readonly token: TokenSource;
  private readonly maxRetries: number;
  private readonly maxRetryWait: number;
  private readonly backoff: number;
  private readonly fetch: typeof fetch;
  private readonly sleep: (seconds: number) => Promise<void>;
  private readonly onRequest?: (headers: Headers) => void | Promise<void>;

  constructor(opts: ClientOptions = {}) {
    this.baseUrl = (opts.baseUrl ?? env("EXECGATE_URL") ?? DEFAULT_URL).replace(/\/+$/, "");
    const token = opts.token ?? env("EXECGATE_TOKEN");
    if (token === undefined) {
      throw new Error("no token: pass token (a string or a function returning one) or set EXECGATE_TOKEN");
    }
    this.token = token;
    this.maxRetries = opts.maxRetries ?? 3;
    this.maxRetryWait = opts.maxRetryWait ?? 30;
    this.backoff = opts.backoff ?? 0.5;
    this.fetch = opts.fetch ?? globalThis.fetch.bind(globalThis);
    this.sleep = opts.sleep ?? ((s) => new Promise((r) => setTimeout(r, s * 1000)));
    this.onRequest = opts.onRequest;
  }

  /** Run a tool once (POST /v1/execute). The options are the request's
   * fields. A refusal throws its RequestError; a run that ended in error
   * throws its RunError unless check is false. */
  async execute(source: string, opts: ExecuteOptions = {}): Promise<Envelope> {
    const { check = true, signal } = opts;
    const b: Record<string, unknown> = { ...body("execute", REQUEST_FIELDS.execute, opts, ["check", "signal"]), source };
    b.execution_id ??= newExecutionId();
    const res = await this.send("POST", "/v1/execute", { body: b, envelopeRoute: true, signal });
    const envelope = (await res.json()) as Envelope;
    if (check && envelope.status !== "ok") throw errorFor(200, envelope, envelope);
    return envelope;
  }

  /** Check that source compiles and defines the entrypoint (POST
   * /v1/validate); language "javascript" or "typescript" is checked with
   * deno check (type errors included). */
  async validate(source: string, opts: ValidateOptions = {}): Promise<ValidateResponse> {
    const b = { ...body("validate", REQUEST_FIELDS.validate, opts, ["signal"]), source };
    const res = await this.send("POST", "/v1/validate", { body: b, signal: opts.signal });
    return (await res.json()) as ValidateResponse;
  }

  /** Submit a run to go on in the background (POST /v1/executions): the
   * options of execute and callback_url (a webhook for the result).
   * Resolves to the queued execution; follow it with events(), get() or
   * wait(). A refusal throws its RequestError (with the envelope). */
  async submit(source: string, opts: SubmitOptions = {}): Promise<ExecutionStatus> {
    const b: Record<string, unknown> = { ...body("submit", REQUEST_FIELDS.submit, opts, ["signal"]), source };
    const id = (b.execution_id ??= newExecutionId()) as string;
    let looked = false;
    const lookup = async () => {
      looked = true;
      return this.lookup(id, opts.signal);
    };
    let res: Response;
    try {
      res = await this.send("POST", "/v1/executions", { body: b, envelopeRoute: true, signal: opts.signal, onLost: lookup });
    } catch (e) {
      // A lost attempt may have taken the id between the lookup and the retry.
      const found = e instanceof BadRequest && looked ? await this.lookup(id, opts.signal) : undefined;
      if (!found) throw e;
      res = found;
    }
    return (await res.json()) as ExecutionStatus;
  }

  /** An async execution's state and, once done, its envelope (GET
   * /v1/executions/{id}). */
  async get(id: string, opts: ExecutionOptions = {}): Promise<ExecutionStatus> {
    const res = await this.send("GET", executionPath(id), { query: { tenant: opts.tenant }, signal: opts.signal });
    return (await res.json()) as ExecutionStatus;
  }

  /** Cancel an async execution (DELETE /v1/executions/{id}): a queued one
   * ends without running, a running one is stopped (its envelope:
   * Cancelled); one already done is left as it is. */
  async cancel(id: string, opts: ExecutionOptions = {}): Promise<ExecutionStatus> {
    const res = await this.send("DELETE", executionPath(id), { query: { tenant: opts.tenant }, signal: opts.signal });
    return (await res.json()) as ExecutionStatus;
  }

  /** Poll get() until the execution is done and resolve to its envelope;
   * with check (default), a refusal or a failed run throws like execute. */
  async wait(id: string, opts: WaitOptions = {}): Promise<Envelope> {
    const { timeout, check = true } = opts;
    let poll = opts.poll ?? 0.2;
    const deadline = timeout === undefined ? undefined : Date.now() + timeout * 1000;
    for (;;) {
      const st = await this.get(id, opts);
      if (st.status === "done") {
        const envelope = st.envelope;
        if (!envelope) throw new Error(`execution ${id} is done but has no envelope`);
        if (check && st.http_status !== undefined && st.http_status >= 400) throw errorFor(st.http_status, envelope, envelope);
        if (check && envelope.status !== "ok") throw errorFor(200, envelope, envelope);
        return envelope;
      }
      if (deadline !== undefined && Date.now() >= deadline) {
        throw new Error(`execution ${id} is still ${st.status} after ${timeout} s`);
      }
      await this.sleep(deadline === undefined ? poll : Math.max(0, Math.min(poll, (deadline - Date.now()) / 1000)));
      poll = Math.min(poll * 1.5, 2);
    }
  }

  /** The execution's live output (GET /v1/executions/{id}/events) as an
   * async iterator of typed events, until its envelope event. A dropped
   * connection is reconnected with Last-Event-ID and the stream continues
   * after the last event given out, never twice. */
  async *events(id: string, opts: EventsOptions = {}): AsyncGenerator<ExecutionEvent, void, undefined> {
    const { signal } = opts;
    const follow = new Follow(opts.lastEventId);
    const url = this.url(executionPath(id, "/events"), { tenant: opts.tenant });
    let attempt = 0;
    let refreshed = false;
    for (;;) {
      let progress = false;
      let err: ExecgateError;
      try {
        const headers = await this.headers(false);
        follow.headers(headers);
        let res: Response;
        try {
          res = await this.fetch(url, { method: "GET", headers, signal });
        } catch (e) {
          if (signal?.aborted) throw e;
          throw transportError(e);
        }
        if (res.status >= 400) {
          const e = await this.answerError(res, false);
          if (res.status === 401 && typeof this.token === "function" && !refreshed) {
            refreshed = true;
            continue;
          }
          throw e;
        }
        if (!res.body) throw new TransportError("the event stream has no body", { status: res.status, errorType: "TransportError" });
        const dec = follow.connected();
        const lines = new LineSplitter();
        const text = new TextDecoder();
        for await (const chunk of bodyChunks(res.body, signal)) {
          for (const line of lines.push(text.decode(chunk, { stream: true }))) {
            const raw = dec.line(line);
            const ev = raw && follow.accept(raw);
            if (!ev) continue;
            progress = true;
            yield ev;
            if (follow.done) return;
          }
        }
        throw new TransportError("the event stream ended before the envelope", { status: 0, errorType: "TransportError" });
      } catch (e) {
        if (!(e instanceof ExecgateError)) throw e;
        err = e;
      }
      if (progress) attempt = 0;
      const wait = this.waitBeforeRetry(attempt, err);
      if (wait === undefined) throw err;
      attempt++;
      await this.sleep(wait);
    }
  }

  /** One artifact's bytes (GET /v1/executions/{id}/artifacts/{name}), read
   * as they come; more than maxBytes rejects with PayloadTooLarge. Another
   * tenant's, an expired or an unknown one is NotFound; a name that is not
   * a plain file name is a TypeError. */
  async artifact(id: string, name: string, opts: ArtifactOptions = {}): Promise<Uint8Array> {
    const max = opts.maxBytes ?? DEFAULT_MAX_ARTIFACT_BYTES;
    const parts: Uint8Array[] = [];
    let n = 0;
    for await (const chunk of this.artifactChunks(id, name, opts)) {
      n += chunk.length;
      if (n > max) {
        throw new ExecgateError(`artifact ${JSON.stringify(name)} is more than maxBytes (${max})`, { status: 0, errorType: "PayloadTooLarge" });
      }
      parts.push(chunk);
    }
    const out = new Uint8Array(n);
    let at = 0;
    for (const p of parts) {
      out.set(p, at);
      at += p.length;
    }
    return out;
  }

  /** Write every artifact of envelope into dir (made if missing) and
   * resolve to their paths: the inline bytes, or fetched (artifact()) for
   * the others. Every name is checked before anything is written
   * (TypeError); a regular file of the same name is replaced, a symbolic
   * link or anything else there is left alone (an Error with code EEXIST);
   * the bytes must be the listed size and sha256 (ArtifactMismatch). Node
   * (node:fs) only. */
  async saveArtifacts(envelope: Envelope, dir: string, opts: ExecutionOptions = {}): Promise<string[]> {
    const arts = envelope.artifacts ?? [];
    for (const a of arts) checkArtifactName(a.name);
    const d = await ArtifactDir.open(dir);
    const out: string[] = [];
    for (const a of arts) {
      const inline = artifactData(a);
      out.push(await d.write(a, inline ? [inline] : this.artifactChunks(envelope.execution_id, a.name, opts)));
    }
    return out;
  }

  /** The bytes of one artifact as they come (one attempt; a 401 with a
   * token function is tried once more). */
  private async *artifactChunks(id: string, name: string, opts: ExecutionOptions): AsyncGenerator<Uint8Array, void, undefined> {
    checkArtifactName(name);
    const url = this.url(executionPath(id, "/artifacts/" + encodeURIComponent(name)), { tenant: opts.tenant });
    for (let refreshed = false; ; refreshed = true) {
      const headers = await this.headers(false);
      headers.set("Accept", "*/*");
      let res: Response;
      try {
        res = await this.fetch(url, { method: "GET", headers, signal: opts.signal });
      } catch (e) {
        if (opts.signal?.aborted) throw e;
        throw transportError(e);
      }
      if (res.status >= 400) {
        const e = await this.answerError(res, false);
        if (res.status === 401 && typeof this.token === "function" && !refreshed) continue;
        throw e;
      }
      if (res.body) yield* bodyChunks(res.body, opts.signal);
      return;
    }
  }

  /** Resolve, check and install a package environment ahead of runs (POST
   * /v1/prepare); name it in runs with environment_id. A denied package
   * throws PolicyDenied; requirements that cannot be resolved throw
   * DependencyError (422, uv's output in traceback). */
  async prepare(opts: PrepareOptions): Promise<PrepareResponse> {
    const b = body("prepare", REQUEST_FIELDS.prepare, opts, ["signal"]);
    const res = await this.send("POST", "/v1/prepare", { body: b, signal: opts.signal });
    return (await res.json()) as PrepareResponse;
  }

  /** The tools a run would be granted (code mode, GET /v1/tools), with their
   * schemas and typed stubs; names (names or globs) narrows the grant as an
   * execute request's tools would. */
  async tools(opts: CallOptions & { names?: string[] } = {}): Promise<ToolsResponse> {
    const query = { tools: opts.names?.join(",") };
    const res = await this.send("GET", "/v1/tools", { query, signal: opts.signal });
    return (await res.json()) as ToolsResponse;
  }

  private async currentToken(): Promise<string> {
    return typeof this.token === "function" ? await this.token() : this.token;
  }

  private async headers(json: boolean): Promise<Headers> {
    const h = new Headers({ Authorization: "Bearer " + (await this.currentToken()), Accept: "application/json" });
    if (json) h.set("Content-Type", "application/json");
    await this.onRequest?.(h);
    return h;
  }

  private url(path: string, query?: Record<string, string | undefined>): string {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query ?? {})) if (v) q.set(k, v);
    const qs = q.toString();
    return this.baseUrl + path + (qs ? "?" + qs : "");
  }

  private async answerError(res: Response, envelopeRoute: boolean): Promise<ExecgateError> {
    const text = await res.text();
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = { error: { type: "", message: text.slice(0, 500) || `HTTP ${res.status}` } };
    }
    const envelope =
      envelopeRoute && body && typeof body === "object" && "execution_id" in body ? (body as Envelope) : undefined;
    const ra = res.headers.get("Retry-After");
    const retryAfter = ra !== null && !Number.isNaN(Number(ra)) ? Math.max(0, Number(ra)) : undefined;
    return errorFor(res.status, body, envelope, retryAfter);
  }

  /** Seconds to wait before retry attempt+1, or undefined: give up. */
  private waitBeforeRetry(attempt: number, e: ExecgateError): number | undefined {
    if (attempt >= this.maxRetries) return undefined;
    const backoff = () => Math.min(this.maxRetryWait, this.backoff * 2 ** attempt) * (0.5 + Math.random() / 2);
    if (e instanceof TransportError) return backoff();
    if (RETRYABLE.has(e.errorType)) {
      if (e.retryAfter !== undefined) return e.retryAfter <= this.maxRetryWait ? e.retryAfter : undefined;
      return backoff();
    }
    return undefined;
  }

  /** GET the execution once: the answer when it exists, else undefined. */
  private async lookup(id: string, signal?: AbortSignal): Promise<Response | undefined> {
    try {
      const res = await this.fetch(this.url(executionPath(id)), { method: "GET", headers: await this.headers(false), signal });
      if (res.status === 200) return res;
      await res.body?.cancel();
    } catch (e) {
      if (signal?.aborted) throw e;
    }
    return undefined;
  }

  private async send(method: string, path: string, o: SendOptions): Promise<Response> {
    const payload = o.body === undefined ? undefined : JSON.stringify(o.body);
    const url = this.url(path, o.query);
    let refreshed = false;
    let lost = false;
    for (let attempt = 0; ; ) {
      let err: ExecgateError;
      try {
        if (lost && o.onLost) {
          const found = await o.onLost();
          if (found) return found;
        }
        let res: Response;
        try {
          res = await this.fetch(url, { method, body: payload, headers: await this.headers(payload !== undefined), signal: o.signal });
        } catch (e) {
          if (o.signal?.aborted) throw e;
          throw transportError(e);
        }
        if (res.status < 400) return res;
        err = await this.answerError(res, o.envelopeRoute ?? false);
        if (res.status === 401 && typeof this.token === "function" && !refreshed) {
          refreshed = true; // the token may have rotated under us
          continue;
        }
      } catch (e) {
        if (!(e instanceof ExecgateError)) throw e;
        err = e;
      }
      lost ||= err instanceof TransportError;
      const wait = this.waitBeforeRetry(attempt, err);
      if (wait === undefined) throw err;
      attempt++;
      await this.sleep(wait);
    }
  }
}
