package sandbox

// EgressProxy starts a per-run egress proxy session for network mode proxy.
// Package egress implements it; the runner binds the session's unix socket
// into the jail and the harness relays 127.0.0.1:3128 inside the jail to it,
// with HTTP_PROXY/HTTPS_PROXY set, so the proxy is the only way out.
type EgressProxy interface {
	Start(socketPath string, allow []string) (EgressSession, error)
}

// EgressSession is one run's proxy: every attempt, allowed or denied, is kept.
type EgressSession interface {
	Attempts() []EgressAttempt
	Close() error
}
