package sandbox

import "errors"

// EgressProxy starts a per-run egress proxy session for network mode proxy.
// Package egress implements it; the runner binds the session's unix socket
// into the jail and the harness relays 127.0.0.1:3128 inside the jail to it,
// with HTTP_PROXY/HTTPS_PROXY set, so the proxy is the only way out.
//
// Start serves a new session on a unix socket it creates at socketPath
// (replacing whatever is there; the directory is the run's own), which the
// jail's unprivileged user must be able to connect to. An allow-list entry
// it cannot parse is an error wrapping ErrInvalidEgressAllow, which the
// runner reports as InvalidInput; any other error means the host could not
// serve the session.
type EgressProxy interface {
	Start(socketPath string, allow []string) (EgressSession, error)
}

// EgressSession is one run's proxy: every attempt, allowed or denied, is kept.
// Close stops serving and cuts what is still relayed; Attempts keeps working
// after Close.
type EgressSession interface {
	Attempts() []EgressAttempt
	Close() error
}

var (
	// ErrInvalidEgressAllow marks an EgressProxy.Start error caused by the
	// run's allow-list (Spec.EgressAllow), not by the host.
	ErrInvalidEgressAllow = errors.New("invalid egress allow-list")
	// ErrNoEgressProxy: a run asked for network mode proxy from a runner
	// created without WithEgress. Carried by an *UnavailableError.
	ErrNoEgressProxy = errors.New("no egress proxy")
)

// Option configures a Runner beyond its Config: collaborators that are
// not configuration.
type Option func(*Runner)

// WithEgress lets the runner serve network mode proxy through p. Without
// it, proxy-mode runs are refused with an *UnavailableError
// (ErrNoEgressProxy) and nothing runs.
func WithEgress(p EgressProxy) Option {
	return func(r *Runner) { r.egress = p }
}
