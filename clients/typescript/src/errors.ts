// One error class per error.type of the gateway (DESIGN §4, §14).
//
// RequestError: refused before or instead of a run (HTTP 4xx/5xx).
// RunError: the tool ran and ended in error (HTTP 200, envelope status error).
// Each carries what the gateway said: envelope (execute answers), body,
// status, errorType, reasons, traceback, retryAfter (seconds).
//
// How to add one: a class below, and its row in ERRORS (the compiler
// refuses a missing ErrorType of the OpenAPI document).

import type { components } from "./schema.js";

export type Envelope = components["schemas"]["Envelope"];
export type ErrorType = components["schemas"]["ErrorType"];

export interface ErrorDetails {
  status: number;
  errorType: string;
  envelope?: Envelope;
  body?: unknown;
  retryAfter?: number;
}

export class ExecgateError extends Error {
  readonly status: number;
  readonly errorType: string;
  readonly envelope?: Envelope;
  readonly body?: unknown;
  readonly retryAfter?: number;
  readonly reasons: string[];
  readonly traceback?: string;

  constructor(message: string, d: ErrorDetails) {
    super(message);
    this.name = new.target.name;
    this.status = d.status;
    this.errorType = d.errorType;
    this.envelope = d.envelope;
    this.body = d.body;
    this.retryAfter = d.retryAfter;
    const err = errorObject(d.body);
    this.reasons = Array.isArray(err?.reasons) ? (err.reasons as string[]) : [];
    this.traceback = typeof err?.traceback === "string" ? err.traceback : undefined;
  }

  get executionId(): string | undefined {
    return this.envelope?.execution_id;
  }
}

/** The gateway could not be reached or did not answer (after retries). */
export class TransportError extends ExecgateError {}
/** Refused before or instead of a run (HTTP 4xx/5xx). */
export class RequestError extends ExecgateError {}
/** The tool ran and ended in error (HTTP 200, status error). */
export class RunError extends ExecgateError {}

// Refusals.
export class BadRequest extends RequestError {}
export class Unauthenticated extends RequestError {}
export class Forbidden extends RequestError {}
export class PolicyDenied extends RequestError {}
export class NotFound extends RequestError {}
export class MethodNotAllowed extends RequestError {}
export class ResultExpired extends RequestError {}
export class PayloadTooLarge extends RequestError {}
export class QuotaExceeded extends RequestError {}
export class BudgetExhausted extends RequestError {}
export class PolicyError extends RequestError {}
export class AuditError extends RequestError {}
export class Internal extends RequestError {}
/** 502: dispatched, may have run (tool calls included); the gateway cannot know its
 * outcome (split mode, the dispatch Redis lost its data). Its execution_id stays
 * claimed: a repeat gets this answer, never a second run. Never retried. */
export class OutcomeUnknown extends RequestError {}
export class SandboxUnavailable extends RequestError {}
/** 503: a brokered secret granted to the run cannot be read (the message names it;
 * the gateway's log says why); nothing was run. */
export class SecretUnavailable extends RequestError {}
export class Overloaded extends RequestError {}
export class QuotaUnavailable extends RequestError {}

// Run outcomes.
export class ToolError extends RunError {}
export class InvalidSource extends RunError {}
export class EntrypointNotFound extends RunError {}
export class InvalidResult extends RunError {}
export class InvalidInput extends RunError {}
export class Timeout extends RunError {}
export class CPULimit extends RunError {}
export class MemoryLimit extends RunError {}
export class OutputLimit extends RunError {}
export class SyscallDenied extends RunError {}
export class DependencyError extends RunError {}
export class SandboxCrashed extends RunError {}
export class ProtocolMismatch extends RunError {}
export class ExecutorLost extends RunError {}
export class Cancelled extends RunError {}

type ErrorClass = new (message: string, d: ErrorDetails) => ExecgateError;

/** error.type → class. Every ErrorType of the OpenAPI document must be here
 * (checked by the compiler); DESIGN §14 types the document lacks yet too. */
export const ERRORS = {
  BadRequest, Unauthenticated, Forbidden, PolicyDenied, NotFound, MethodNotAllowed, ResultExpired,
  PayloadTooLarge, QuotaExceeded, BudgetExhausted, PolicyError, AuditError, Internal, OutcomeUnknown, SandboxUnavailable,
  SecretUnavailable, Overloaded, QuotaUnavailable, ToolError, InvalidSource, EntrypointNotFound, InvalidResult, InvalidInput,
  Timeout, CPULimit, MemoryLimit, OutputLimit, SyscallDenied, DependencyError, SandboxCrashed,
  ProtocolMismatch, ExecutorLost, Cancelled,
} satisfies Record<ErrorType, ErrorClass> & Record<string, ErrorClass>;

function errorObject(body: unknown): Record<string, unknown> | undefined {
  if (body && typeof body === "object" && "error" in body) {
    const e = (body as { error: unknown }).error;
    if (e && typeof e === "object") return e as Record<string, unknown>;
  }
  return undefined;
}

/** The exception for a gateway answer with an error object. */
export function errorFor(status: number, body: unknown, envelope?: Envelope, retryAfter?: number): ExecgateError {
  const err = errorObject(body);
  const type = typeof err?.type === "string" ? err.type : "";
  const message = typeof err?.message === "string" ? err.message : `HTTP ${status}`;
  const cls: ErrorClass =
    (ERRORS as Record<string, ErrorClass>)[type] ?? (status === 200 ? RunError : RequestError);
  return new cls(`${type || "HTTP" + status}: ${message}`, {
    status, errorType: type || `HTTP${status}`, envelope, body, retryAfter,
  });
}
