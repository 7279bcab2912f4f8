package toolbridge

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// onThreadCPU runs f locked to its thread and returns the thread's CPU
// time f used. f must not block.
func onThreadCPU(f func()) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var a, b unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &a) != nil {
		f()
		return 0
	}
	f()
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &b) != nil {
		return 0
	}
	return time.Duration(b.Nano() - a.Nano())
}
