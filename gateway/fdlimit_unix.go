//go:build unix

package gateway

import "syscall"

// fdLimit is the process's soft RLIMIT_NOFILE (Go raises it to the hard
// limit at start-up); 0 when unknown.
func fdLimit() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 0
	}
	return int(rl.Cur)
}
