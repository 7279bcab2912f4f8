package policy

import (
	"errors"
	"fmt"
)

// ErrUndefined means the policy produced no decision (for example no module
// defines data.execgate.main.decision, or its body was undefined for this
// input). It is a PolicyError at the edge and never an allow.
var ErrUndefined = errors.New("policy decision is undefined")

// ErrMalformed means the policy produced a decision that does not have the
// shape of Decision (wrong types, missing limits, an allow with reasons).
// Decide wraps it in an *EvalError.
var ErrMalformed = errors.New("malformed policy decision")

// EvalError is an error raised while evaluating the policy: a builtin error
// (builtin errors are strict), a conflict between rules, a cancelled
// context, or a malformed decision. It is a PolicyError at the edge and never
// an allow.
type EvalError struct {
	Err error
}

func (e *EvalError) Error() string { return fmt.Sprintf("evaluating policy: %v", e.Err) }

func (e *EvalError) Unwrap() error { return e.Err }

// IsPolicyError reports whether err is one Decide returns for a policy that
// could not decide (ErrUndefined or *EvalError): the gateway answers 500
// PolicyError, never an allow.
func IsPolicyError(err error) bool {
	var ee *EvalError
	return errors.Is(err, ErrUndefined) || errors.As(err, &ee)
}

// ModuleError is a policy module refused at load time: a parse or compile
// error, a forbidden builtin, or an extension module that reaches into the
// default policies.
type ModuleError struct {
	File   string
	Reason string
}

func (e *ModuleError) Error() string { return e.File + ": " + e.Reason }
