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

// EgressSession is one run's proxy. It records every attempt, allowed or
// denied: the first MaxEgressAttempts in order (Attempts, each Bounded), the
// rest only counted (Dropped). Close stops serving and cuts what is still
// relayed; Attempts and Dropped keep working after Close.
type EgressSession interface {
	Attempts() []EgressAttempt
	Dropped() int
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

// Bounds on what a run's egress attempts may hold. A tool chooses the hosts
// it asks the proxy for, so every string it controls is clipped and the list
// is capped where it is produced (package egress) and again where it is
// stored (package audit), with a count of what was left out.
const (
	// MaxEgressAttempts is how many attempts a run keeps, in order; later
	// ones are only counted (Result.EgressDropped).
	MaxEgressAttempts = 100
	// MaxEgressFieldBytes caps each string of an EgressAttempt (host,
	// reason, ip).
	MaxEgressFieldBytes = 255
)

// ClipEgressString returns s cut to at most MaxEgressFieldBytes, with bytes
// other than printable ASCII replaced by '?', so its JSON encoding is no
// longer than MaxEgressFieldBytes+2. A cut string ends in "...".
func ClipEgressString(s string) string {
	n := len(s)
	cut := n > MaxEgressFieldBytes
	if cut {
		n = MaxEgressFieldBytes - 3
	}
	clean := true
	for i := 0; i < n; i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			clean = false
			break
		}
	}
	if clean && !cut {
		return s
	}
	b := make([]byte, 0, n+3)
	for i := 0; i < n; i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			c = '?'
		}
		b = append(b, c)
	}
	if cut {
		b = append(b, "..."...)
	}
	return string(b)
}

// Bounded returns a copy of a with every string clipped (ClipEgressString).
func (a EgressAttempt) Bounded() EgressAttempt {
	a.Host = ClipEgressString(a.Host)
	a.Reason = ClipEgressString(a.Reason)
	a.IP = ClipEgressString(a.IP)
	return a
}

// BoundEgress returns at most MaxEgressAttempts of attempts, each Bounded,
// and how many it left out. attempts is not modified.
func BoundEgress(attempts []EgressAttempt) (kept []EgressAttempt, dropped int) {
	if len(attempts) > MaxEgressAttempts {
		dropped = len(attempts) - MaxEgressAttempts
		attempts = attempts[:MaxEgressAttempts]
	}
	if attempts == nil {
		return nil, dropped
	}
	kept = make([]EgressAttempt, len(attempts))
	for i, a := range attempts {
		kept[i] = a.Bounded()
	}
	return kept, dropped
}
