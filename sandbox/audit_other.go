//go:build !linux

package sandbox

// SeccompAuditErr: there are no jails off Linux.
func SeccompAuditErr() error { return errUnsupported }
