//go:build !linux

package seccomp

import "github.com/execgate/execgate/sandbox/internal/unavailable"

// AuditErr: there are no jails off Linux.
func AuditErr() error { return unavailable.ErrUnsupported }

// AuditOverflows: there is no audit socket off Linux.
func AuditOverflows() int { return 0 }
