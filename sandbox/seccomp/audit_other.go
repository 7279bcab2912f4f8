//go:build !linux

package seccomp

import "github.com/execgate/execgate/sandbox/internal/unavailable"

// AuditErr: there are no jails off Linux.
func AuditErr() error { return unavailable.ErrUnsupported }

// AuditReport: there is no audit watch off Linux.
func AuditReport(int) string { return "no audit watch off Linux" }
