//go:build !linux

package toolbridge

import "time"

// onThreadCPU runs f; without a thread CPU clock it measures nothing (the
// fixed prices still apply).
func onThreadCPU(f func()) time.Duration {
	f()
	return 0
}
