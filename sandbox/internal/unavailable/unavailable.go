// Package unavailable holds the one error of the sandbox and its rooms
// for "this host cannot jail a tool right now": the runner exports it as
// sandbox.UnavailableError, and its sub-packages (cgroups, seccomp,
// zygote, uids, view) return it where a host refuses them something, so a
// caller tells it apart with one errors.As whichever room failed.
package unavailable

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
)

// Error means the jail could not be created: nsjail is missing, or the
// host refused namespaces, mounts, cgroups or seccomp. Nothing was run.
// The gateway maps it to 503 SandboxUnavailable.
type Error struct {
	Reason string   // one line: what failed
	Log    []string // nsjail's own log lines, if it ran
	Hint   string   // what the operator can do (privileges, seccomp, userns)
	Err    error    // underlying error, if any
}

func (e *Error) Error() string {
	msg := "sandbox unavailable: " + e.Reason
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Detail renders the log lines and hint for a traceback or terminal.
func (e *Error) Detail() string {
	var b strings.Builder
	for _, l := range e.Log {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	if e.Hint != "" {
		fmt.Fprintf(&b, "hint: %s\n", e.Hint)
	}
	return b.String()
}

// ErrUnsupported: nsjail, namespaces and cgroups are Linux-only.
var ErrUnsupported = errors.New("sandbox: jails need Linux (nsjail), not " + runtime.GOOS)
