package execution

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http" // status codes only: the contract gives each error type one status (DESIGN §4)
	"strconv"
	"time"

	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/secrets"
	"github.com/execgate/execgate/tenancy"
)

// Error types (error.type) of responses refused before or instead of a run.
// The run outcome types (ToolError, Timeout, ...) come from package sandbox.
//
// How to add one:
//  1. Add the constant here and a case in Refusal (or, for a refusal only
//     the HTTP edge makes, in gateway's toAPIError).
//  2. Add it to the ErrorType enum in gateway/openapi.yaml and to the
//     route's responses there.
//  3. Add a row to the error-table test (gateway_test.go / app tests).
const (
	TypeBadRequest         = "BadRequest"         // 400: malformed JSON, missing/invalid field (the message names it)
	TypeUnauthenticated    = "Unauthenticated"    // 401: missing/invalid/expired token, wrong alg/iss/aud
	TypeForbidden          = "Forbidden"          // 403: role missing, tenant mismatch, unknown tenant
	TypePolicyDenied       = "PolicyDenied"       // 403: the policy said no; error.reasons lists why
	TypeNotFound           = "NotFound"           // 404: no such route or admin object
	TypeMethodNotAllowed   = "MethodNotAllowed"   // 405
	TypeResultExpired      = "ResultExpired"      // 409: the execution_id ran, its stored response was dropped; never run again
	TypePayloadTooLarge    = "PayloadTooLarge"    // 413: body, source or args over the caps
	TypeQuotaExceeded      = "QuotaExceeded"      // 429: rate or concurrency; Retry-After
	TypeBudgetExhausted    = "BudgetExhausted"    // 429: daily CPU budget spent; Retry-After to the reset
	TypePolicyError        = "PolicyError"        // 500: policy undefined or erroring (deny, never allow)
	TypeAuditError         = "AuditError"         // 500: the audit record could not be written; result withheld
	TypeInternal           = "Internal"           // 500: a bug; details in the log under the execution id
	TypeOutcomeUnknown     = "OutcomeUnknown"     // 502: dispatched, and the gateway cannot know whether it ran (split mode, dispatch state lost); its execution_id stays claimed, never run again
	TypeSandboxUnavailable = "SandboxUnavailable" // 503: nsjail missing/broken; traceback has its log and a hint
	TypeSecretUnavailable  = "SecretUnavailable"  // 503: a brokered secret granted to the run cannot be read (named; the log says why); nothing was run
	TypeOverloaded         = "Overloaded"         // 503: the local run queue is full
	TypeQuotaUnavailable   = "QuotaUnavailable"   // 503: quota backend down, failing closed
)

// Error is a refusal already classified: the status the contract gives
// it, a stable type, a message safe to show, and extras. Code that finds a
// problem itself returns one (BadRequest, TooLarge); Refusal turns every
// other error into one. A transport renders it; the flow records its
// status in the audit record.
type Error struct {
	Status     int
	Type       string
	Message    string
	Traceback  string
	Reasons    []string
	RetryAfter time.Duration
	// OriginalStatus: ResultExpired's original run outcome.
	OriginalStatus string
	Err            error // cause, for the log only
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Type + ": " + e.Message + ": " + e.Err.Error()
	}
	return e.Type + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Body is the error object of an envelope or an error response.
func (e *Error) Body() ErrorBody {
	return ErrorBody{Type: e.Type, Message: e.Message, Traceback: e.Traceback, Reasons: e.Reasons, OriginalStatus: e.OriginalStatus}
}

// Expected says whether e describes the host's state rather than a bug: a
// 5xx that is not logged as an error per request (metrics count them).
func (e *Error) Expected() bool {
	return e.Status < 500 || e.Type == TypeSandboxUnavailable || e.Type == TypeOverloaded || e.Type == TypeQuotaUnavailable ||
		e.Type == TypeOutcomeUnknown // the dispatcher logs it as an error itself
}

// KeepsClaim says whether the refusal keeps its execution_id claimed, as
// a run's answer does: the run may have run (OutcomeUnknown), so the id is
// never run again and a repeat gets this answer.
func (e *Error) KeepsClaim() bool { return keepsClaim(e.Type) }

func keepsClaim(errType string) bool { return errType == TypeOutcomeUnknown }

// BadRequest is a 400 naming the field at fault.
func BadRequest(field, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeBadRequest, Message: field + ": " + fmt.Sprintf(format, args...)}
}

// TooLarge is a 413: field's size is over limit.
func TooLarge(field string, size, limit int64) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Type: TypePayloadTooLarge,
		Message: fmt.Sprintf("%s: %d bytes is over the %d-byte cap", field, size, limit)}
}

// Oversize is a 413 naming field with a message of its own (a count or a
// sum over a limit, where TooLarge's "bytes over the cap" does not fit).
func Oversize(field, format string, args ...any) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Type: TypePayloadTooLarge, Message: field + ": " + fmt.Sprintf(format, args...)}
}

// Sentinels the flow wraps so Refusal can classify.
var (
	// ErrPolicy wraps every error of policy.Decide: undefined or erroring
	// policy is a PolicyError, never an allow.
	ErrPolicy = errors.New("policy evaluation failed")
	// errOverloaded: the local run queue is full.
	errOverloaded = errors.New("run queue full")
	// errAudit wraps a failed audit write.
	errAudit = errors.New("audit write failed")
)

// errCancelledBeforeRun is the refusal of a run its caller cancelled on
// purpose (sandbox.ErrCancelledByCaller) before it ran: 409 Cancelled,
// nothing was run, and its execution_id is free again. A run cancelled
// while running is a run outcome instead (200, sandbox.ErrCancelled).
func errCancelledBeforeRun(err error) *Error {
	return &Error{Status: http.StatusConflict, Type: sandbox.ErrCancelled,
		Message: "the execution was cancelled before it ran; nothing was run", Err: err}
}

// PolicyDeniedError carries the policy's reasons for a deny.
type PolicyDeniedError struct{ Reasons []string }

func (e *PolicyDeniedError) Error() string { return fmt.Sprintf("policy denied: %v", e.Reasons) }

// Denied is the deny of a decision's reasons ("denied by policy" when it
// gave none).
func Denied(reasons []string) *PolicyDeniedError {
	if len(reasons) == 0 {
		reasons = []string{"denied by policy"}
	}
	return &PolicyDeniedError{Reasons: reasons}
}

// Refusal classifies err: the one place a domain error gets its status,
// stable error.type and a fixed or caller-safe message. Errors only the
// HTTP edge meets (authentication, the body cap) are classified there
// first.
func Refusal(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var (
		forbid   *tenancy.ForbiddenError
		denied   *PolicyDeniedError
		exceeded *quota.ExceededError
		unavail  *sandbox.UnavailableError
		expired  *ResultExpiredError
		claims   *ClaimsExhaustedError
		unknown  *sandbox.OutcomeUnknownError
		secret   *secrets.UnavailableError
		busy     *environments.ResolvesBusyError
	)
	switch {
	case errors.As(err, &forbid):
		return &Error{Status: http.StatusForbidden, Type: TypeForbidden, Message: forbid.Reason, Err: err}
	case errors.Is(err, tenancy.ErrForbidden):
		return &Error{Status: http.StatusForbidden, Type: TypeForbidden, Message: "forbidden", Err: err}
	case errors.As(err, &denied):
		return &Error{Status: http.StatusForbidden, Type: TypePolicyDenied, Message: "denied by policy", Reasons: denied.Reasons, Err: err}
	case errors.Is(err, ErrPolicy):
		return &Error{Status: http.StatusInternalServerError, Type: TypePolicyError,
			Message: "the policy decision was undefined or failed; the request is denied", Err: err}
	case errors.As(err, &exceeded):
		if exceeded.Kind == quota.KindBudget {
			return &Error{Status: http.StatusTooManyRequests, Type: TypeBudgetExhausted,
				Message: budgetMessage(exceeded), RetryAfter: exceeded.RetryAfter, Err: err}
		}
		if exceeded.Kind == quota.KindQueued {
			return &Error{Status: http.StatusTooManyRequests, Type: TypeQuotaExceeded, RetryAfter: exceeded.RetryAfter, Err: err,
				Message: fmt.Sprintf("the tenant already has max_queued (%d) runs waiting for an executor; nothing was queued", exceeded.Limit)}
		}
		return &Error{Status: http.StatusTooManyRequests, Type: TypeQuotaExceeded,
			Message: fmt.Sprintf("the tenant's %s quota is exceeded", exceeded.Kind), RetryAfter: exceeded.RetryAfter, Err: err}
	case errors.As(err, &unknown):
		// 502, not 503: 503 says nothing was run (and clients retry it);
		// this run may have run. Not 200: the gateway has no outcome to
		// report, no usage, no output, only that it cannot know.
		return &Error{Status: http.StatusBadGateway, Type: TypeOutcomeUnknown,
			Message: "the gateway cannot know whether this run ran or how it ended: " + unknown.Reason +
				"; its execution_id stays claimed (a repeat gets this answer), so check the run's effects before running it again under a new execution_id", Err: err}
	case errors.As(err, &expired):
		ran := "already ran"
		if expired.Outcome == "error:"+TypeOutcomeUnknown {
			ran = "was already dispatched"
		}
		return &Error{Status: http.StatusConflict, Type: TypeResultExpired, OriginalStatus: expired.Outcome,
			Message: "this execution_id " + ran + " within the idempotency window (outcome " + expired.Outcome +
				") but its stored response was dropped; it is not run again (use a new execution_id for a new run)", Err: err}
	case errors.As(err, &claims):
		return &Error{Status: http.StatusTooManyRequests, Type: TypeQuotaExceeded, RetryAfter: claims.RetryAfter,
			Message: fmt.Sprintf("the tenant holds %d execution_id claims within the idempotency window (server.idempotency_max_claims); retry when the oldest expires", claims.Max), Err: err}
	case errors.Is(err, quota.ErrUnavailable):
		return &Error{Status: http.StatusServiceUnavailable, Type: TypeQuotaUnavailable,
			Message: "the quota backend is unavailable and admission fails closed", Err: err}
	case errors.As(err, &secret):
		// Not the cause (a path, a variable's name: the operator's log
		// has it), only which secret.
		return &Error{Status: http.StatusServiceUnavailable, Type: TypeSecretUnavailable, Message: secret.Public(), Err: err}
	case errors.As(err, &unavail):
		return &Error{Status: http.StatusServiceUnavailable, Type: TypeSandboxUnavailable,
			Message: "the sandbox is unavailable: " + unavail.Reason + "; nothing was run", Traceback: unavail.Detail(), Err: err}
	case errors.Is(err, errOverloaded):
		return &Error{Status: http.StatusServiceUnavailable, Type: TypeOverloaded,
			Message: "the gateway's run queue is full; retry later", RetryAfter: time.Second, Err: err}
	case errors.As(err, &busy):
		return &Error{Status: http.StatusServiceUnavailable, Type: TypeOverloaded, Message: busy.Error(), RetryAfter: time.Second, Err: err}
	case errors.Is(err, errOutputBudget):
		return &Error{Status: http.StatusServiceUnavailable, Type: TypeOverloaded,
			Message: "the gateway's memory for run output is in use by other runs; retry later", RetryAfter: time.Second, Err: err}
	case errors.Is(err, errAudit):
		return &Error{Status: http.StatusInternalServerError, Type: TypeAuditError,
			Message: "the audit record could not be written, so the result is withheld", Err: err}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &Error{Status: http.StatusInternalServerError, Type: TypeInternal, Message: "the request was cancelled before it finished", Err: err}
	default:
		return &Error{Status: http.StatusInternalServerError, Type: TypeInternal, Message: "internal error", Err: err}
	}
}

// RetryAfterSeconds renders d as a Retry-After value (the HTTP header, an
// MCP result's retry_after_seconds): whole seconds, rounded up, at least 1.
func RetryAfterSeconds(d time.Duration) string {
	s := int64(math.Ceil(d.Seconds()))
	if s < 1 {
		s = 1
	}
	return strconv.FormatInt(s, 10)
}

// budgetMessage says why the daily CPU budget refused a run: spent, or
// held by the tenant's runs in flight (a run gets whatever is left, so it
// is refused only when nothing is).
func budgetMessage(e *quota.ExceededError) string {
	if e.LimitMS <= 0 { // a backend that did not say
		return "the tenant's daily CPU budget is spent"
	}
	if e.Spent() {
		return fmt.Sprintf("the tenant's daily CPU budget is spent: %d of %d ms used today (it resets at 00:00 UTC)", e.UsedMS, e.LimitMS)
	}
	return fmt.Sprintf("the rest of the tenant's daily CPU budget is reserved by its runs in flight: %d ms used and %d ms reserved of %d; a run gets what they leave when they end", e.UsedMS, e.ReservedMS, e.LimitMS)
}
