package gateway

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/execution"
)

// Error types (error.type) of every refusal. They are the execution
// package's (one list, one status each); these names keep the gateway's
// callers and the OpenAPI test reading them where the routes are.
const (
	TypeBadRequest         = execution.TypeBadRequest
	TypeUnauthenticated    = execution.TypeUnauthenticated
	TypeForbidden          = execution.TypeForbidden
	TypePolicyDenied       = execution.TypePolicyDenied
	TypeNotFound           = execution.TypeNotFound
	TypeMethodNotAllowed   = execution.TypeMethodNotAllowed
	TypeResultExpired      = execution.TypeResultExpired
	TypePayloadTooLarge    = execution.TypePayloadTooLarge
	TypeQuotaExceeded      = execution.TypeQuotaExceeded
	TypeBudgetExhausted    = execution.TypeBudgetExhausted
	TypePolicyError        = execution.TypePolicyError
	TypeAuditError         = execution.TypeAuditError
	TypeInternal           = execution.TypeInternal
	TypeSandboxUnavailable = execution.TypeSandboxUnavailable
	TypeOverloaded         = execution.TypeOverloaded
	TypeQuotaUnavailable   = execution.TypeQuotaUnavailable
)

// apiError is an error already decided: status, stable type, a message
// safe to show, and extras (execution.Error). Handlers return these for
// problems they find themselves; toAPIError turns every other error into
// one.
type apiError = execution.Error

func badRequest(field, format string, args ...any) *apiError {
	return execution.BadRequest(field, format, args...)
}

// toAPIError is where an error becomes HTTP: the edge's own refusals
// (authentication, the body cap) here, every other through
// execution.Refusal.
func toAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	var (
		authErr  *auth.Error
		maxBytes *http.MaxBytesError
	)
	switch {
	case errors.As(err, &authErr):
		return &apiError{Status: http.StatusUnauthorized, Type: TypeUnauthenticated, Message: authErr.Reason, Err: err}
	case errors.Is(err, auth.ErrUnauthenticated):
		return &apiError{Status: http.StatusUnauthorized, Type: TypeUnauthenticated, Message: "invalid token", Err: err}
	case errors.As(err, &maxBytes):
		return &apiError{Status: http.StatusRequestEntityTooLarge, Type: TypePayloadTooLarge,
			Message: fmt.Sprintf("body: over the %d-byte cap", maxBytes.Limit), Err: err}
	default:
		return execution.Refusal(err)
	}
}
