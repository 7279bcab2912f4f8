// The execgate HTTP API client: ESM, no runtime dependency beyond fetch.
//
// Retries are safe by design: execute fixes the execution_id (the gateway's
// idempotency key) before the first attempt and sends the same one on every
// retry, so a request that did run is answered from the gateway's memory,
// never run twice. Retried: network errors, 429 QuotaExceeded, 503
// Overloaded and QuotaUnavailable, after Retry-After when the gateway sends
// it (up to maxRetryWait seconds), else an exponential backoff. Nothing
// else is retried (BudgetExhausted waits for tomorrow; a failed run is an
// answer).
//
// Where the async API and SSE output go (DESIGN §14, not served yet):
// submit() → POST /v1/executions (202 + Location), get(id) → GET
// /v1/executions/{id}, events(id) → GET /v1/executions/{id}/events (SSE:
// read response.body as a stream of "event:/data:" lines), cancel(id) →
// DELETE. They reuse headers(), answerError() and the retry loop of send().

import type { components } from "./schema.js";
import { errorFor, ExecgateError, TransportError, type Envelope } from "./errors.js";

export type ExecuteRequest = components["schemas"]["ExecuteRequest"];
export type ValidateRequest = components["schemas"]["ValidateRequest"];
export type ValidateResponse = components["schemas"]["ValidateResponse"];

/** Everything of an execute request but its source. */
export type ExecuteOptions = Omit<ExecuteRequest, "source"> & {
  /** Throw the run's RunError when it ended in error (default true);
   * false returns its envelope instead. */
  check?: boolean;
  signal?: AbortSignal;
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

  /** Run a tool once (POST /v1/execute). A refusal throws its RequestError;
   * a run that ended in error throws its RunError unless check is false. */
  async execute(source: string, opts: ExecuteOptions = {}): Promise<Envelope> {
    const { check = true, signal, ...fields } = opts;
    const body: ExecuteRequest = { ...fields, source, execution_id: fields.execution_id ?? newExecutionId() };
    const res = await this.send("/v1/execute", body, true, signal);
    const envelope = (await res.json()) as Envelope;
    if (check && envelope.status !== "ok") throw errorFor(200, envelope, envelope);
    return envelope;
  }

  /** Check that source compiles and defines the entrypoint (POST /v1/validate). */
  async validate(source: string, opts: { entrypoint?: string; signal?: AbortSignal } = {}): Promise<ValidateResponse> {
    const body: ValidateRequest = { source, ...(opts.entrypoint ? { entrypoint: opts.entrypoint } : {}) };
    const res = await this.send("/v1/validate", body, false, opts.signal);
    return (await res.json()) as ValidateResponse;
  }

  private async currentToken(): Promise<string> {
    return typeof this.token === "function" ? await this.token() : this.token;
  }

  private async headers(): Promise<Headers> {
    const h = new Headers({
      Authorization: "Bearer " + (await this.currentToken()),
      "Content-Type": "application/json",
      Accept: "application/json",
    });
    await this.onRequest?.(h);
    return h;
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

  private async send(path: string, body: unknown, envelopeRoute: boolean, signal?: AbortSignal): Promise<Response> {
    const payload = JSON.stringify(body);
    let refreshed = false;
    for (let attempt = 0; ; ) {
      let err: ExecgateError;
      try {
        let res: Response;
        try {
          res = await this.fetch(this.baseUrl + path, { method: "POST", body: payload, headers: await this.headers(), signal });
        } catch (e) {
          if (signal?.aborted) throw e;
          throw new TransportError(`fetch failed: ${(e as Error).message}`, { status: 0, errorType: "TransportError" });
        }
        if (res.status < 400) return res;
        err = await this.answerError(res, envelopeRoute);
        if (res.status === 401 && typeof this.token === "function" && !refreshed) {
          refreshed = true; // the token may have rotated under us
          continue;
        }
      } catch (e) {
        if (!(e instanceof ExecgateError)) throw e;
        err = e;
      }
      const wait = this.waitBeforeRetry(attempt, err);
      if (wait === undefined) throw err;
      attempt++;
      await this.sleep(wait);
    }
  }
}
