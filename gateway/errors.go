package gateway

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/tenancy"
)

// Error types (error.type) of responses refused before or instead of a run.
// The run outcome types (ToolError, Timeout, ...) come from package sandbox.
//
// How to add one:
//  1. Add the constant here and a case in toAPIError.
//  2. Add it to the ErrorType enum in openapi.yaml and to the route's
//     responses there.
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
	TypeSandboxUnavailable = "SandboxUnavailable" // 503: nsjail missing/broken; traceback has its log and a hint
	TypeOverloaded         = "Overloaded"         // 503: the local run queue is full
	TypeQuotaUnavailable   = "QuotaUnavailable"   // 503: quota backend down, failing closed
)

// apiError is an error already decided at the edge: status, stable type,
// a message safe to show, and extras. Handlers return these for problems
// they find themselves; toAPIError turns every other error into one.
type apiError struct {
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

func (e *apiError) Error() string {
	if e.Err != nil {
		return e.Type + ": " + e.Message + ": " + e.Err.Error()
	}
	return e.Type + ": " + e.Message
}

func (e *apiError) Unwrap() error { return e.Err }

func (e *apiError) body() ErrorBody {
	return ErrorBody{Type: e.Type, Message: e.Message, Traceback: e.Traceback, Reasons: e.Reasons, OriginalStatus: e.OriginalStatus}
}

func badRequest(field, format string, args ...any) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: TypeBadRequest, Message: field + ": " + fmt.Sprintf(format, args...)}
}

func tooLarge(field string, size, limit int64) *apiError {
	return &apiError{Status: http.StatusRequestEntityTooLarge, Type: TypePayloadTooLarge,
		Message: fmt.Sprintf("%s: %d bytes is over the %d-byte cap", field, size, limit)}
}

// Sentinels the handlers wrap so toAPIError can classify.
var (
	// errPolicy wraps every error of policy.Decide: undefined or erroring
	// policy is a PolicyError, never an allow.
	errPolicy = errors.New("policy evaluation failed")
	// errOverloaded: the local run queue is full.
	errOverloaded = errors.New("run queue full")
	// errAudit wraps a failed audit write.
	errAudit = errors.New("audit write failed")
)

// policyDenied carries the policy's reasons.
type policyDenied struct{ reasons []string }

func (e *policyDenied) Error() string { return fmt.Sprintf("policy denied: %v", e.reasons) }

// toAPIError is the one place an error becomes HTTP: status, stable
// error.type and a fixed or caller-safe message.
func toAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var (
		authErr  *auth.Error
		forbid   *tenancy.ForbiddenError
		denied   *policyDenied
		exceeded *quota.ExceededError
		unavail  *sandbox.UnavailableError
		maxBytes *http.MaxBytesError
		expired  *ResultExpiredError
		claims   *ClaimsExhaustedError
	)
	switch {
	case errors.As(err, &authErr):
		return &apiError{Status: http.StatusUnauthorized, Type: TypeUnauthenticated, Message: authErr.Reason, Err: err}
	case errors.Is(err, auth.ErrUnauthenticated):
		return &apiError{Status: http.StatusUnauthorized, Type: TypeUnauthenticated, Message: "invalid token", Err: err}
	case errors.As(err, &forbid):
		return &apiError{Status: http.StatusForbidden, Type: TypeForbidden, Message: forbid.Reason, Err: err}
	case errors.Is(err, tenancy.ErrForbidden):
		return &apiError{Status: http.StatusForbidden, Type: TypeForbidden, Message: "forbidden", Err: err}
	case errors.As(err, &denied):
		return &apiError{Status: http.StatusForbidden, Type: TypePolicyDenied, Message: "denied by policy", Reasons: denied.reasons, Err: err}
	case errors.Is(err, errPolicy):
		return &apiError{Status: http.StatusInternalServerError, Type: TypePolicyError,
			Message: "the policy decision was undefined or failed; the request is denied", Err: err}
	case errors.As(err, &exceeded):
		if exceeded.Kind == quota.KindBudget {
			return &apiError{Status: http.StatusTooManyRequests, Type: TypeBudgetExhausted,
				Message: "the tenant's daily CPU budget is spent", RetryAfter: exceeded.RetryAfter, Err: err}
		}
		return &apiError{Status: http.StatusTooManyRequests, Type: TypeQuotaExceeded,
			Message: fmt.Sprintf("the tenant's %s quota is exceeded", exceeded.Kind), RetryAfter: exceeded.RetryAfter, Err: err}
	case errors.As(err, &expired):
		return &apiError{Status: http.StatusConflict, Type: TypeResultExpired, OriginalStatus: expired.Outcome,
			Message: "this execution_id already ran within the idempotency window (outcome " + expired.Outcome +
				") but its stored response was dropped; it is not run again (use a new execution_id for a new run)", Err: err}
	case errors.As(err, &claims):
		return &apiError{Status: http.StatusTooManyRequests, Type: TypeQuotaExceeded, RetryAfter: claims.RetryAfter,
			Message: fmt.Sprintf("the tenant holds %d execution_id claims within the idempotency window (server.idempotency_max_claims); retry when the oldest expires", claims.Max), Err: err}
	case errors.Is(err, quota.ErrUnavailable):
		return &apiError{Status: http.StatusServiceUnavailable, Type: TypeQuotaUnavailable,
			Message: "the quota backend is unavailable and admission fails closed", Err: err}
	case errors.As(err, &unavail):
		return &apiError{Status: http.StatusServiceUnavailable, Type: TypeSandboxUnavailable,
			Message: "the sandbox is unavailable: " + unavail.Reason + "; nothing was run", Traceback: unavail.Detail(), Err: err}
	case errors.Is(err, errOverloaded):
		return &apiError{Status: http.StatusServiceUnavailable, Type: TypeOverloaded,
			Message: "the gateway's run queue is full; retry later", RetryAfter: time.Second, Err: err}
	case errors.Is(err, errOutputBudget):
		return &apiError{Status: http.StatusServiceUnavailable, Type: TypeOverloaded,
			Message: "the gateway's memory for run output is in use by other runs; retry later", RetryAfter: time.Second, Err: err}
	case errors.Is(err, errAudit):
		return &apiError{Status: http.StatusInternalServerError, Type: TypeAuditError,
			Message: "the audit record could not be written, so the result is withheld", Err: err}
	case errors.As(err, &maxBytes):
		return &apiError{Status: http.StatusRequestEntityTooLarge, Type: TypePayloadTooLarge,
			Message: fmt.Sprintf("body: over the %d-byte cap", maxBytes.Limit), Err: err}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &apiError{Status: http.StatusInternalServerError, Type: TypeInternal, Message: "the request was cancelled before it finished", Err: err}
	default:
		return &apiError{Status: http.StatusInternalServerError, Type: TypeInternal, Message: "internal error", Err: err}
	}
}

// retryAfterSeconds renders d for a Retry-After header: whole seconds,
// rounded up, at least 1.
func retryAfterSeconds(d time.Duration) string {
	s := int64(math.Ceil(d.Seconds()))
	if s < 1 {
		s = 1
	}
	return strconv.FormatInt(s, 10)
}
