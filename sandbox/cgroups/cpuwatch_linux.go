package cgroups

import (
	"runtime"
	"time"
)

// CPU watch polling (a run's CPU time read from its cgroup while it runs,
// CPUUsage): often enough that a jail overshoots its CPU limit by
// at most a few milliseconds per CPU, rarely while the limit is far away
// (the jail cannot use more than every CPU of the host meanwhile).
const (
	cpuPollMin = 10 * time.Millisecond
	cpuPollMax = 250 * time.Millisecond
)

// CPUPollDelay is how long the watch may wait with remaining CPU time left.
func CPUPollDelay(remaining time.Duration) time.Duration {
	return min(max(remaining/time.Duration(runtime.NumCPU()), cpuPollMin), cpuPollMax)
}
