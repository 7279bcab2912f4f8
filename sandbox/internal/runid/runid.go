// Package runid names what a run leaves on the host (its cgroups, its jail
// directory) so that a later execgate can tell whose it was and remove what
// a dead process left behind: "run-<pid>-<random>", the pid its owner's.
package runid

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"syscall"
)

// New names a run "run-<pid>-<random>": random so runners sharing the
// parent cgroup never collide, and carrying the owner's pid so a later
// runner can remove what a dead process left behind (Orphaned).
func New() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // never fails on Linux
	}
	return fmt.Sprintf("run-%d-%s", os.Getpid(), hex.EncodeToString(b[:]))
}

var runRE = regexp.MustCompile(`^run-([0-9]+)-[0-9a-f]+$`)

// Orphaned reports whether name is a run's (New) whose owner is gone: not
// this process, and no live process has its pid. Names without an owner
// are never orphaned.
func Orphaned(name string) bool {
	m := runRE.FindStringSubmatch(name)
	if m == nil {
		return false
	}
	pid, err := strconv.Atoi(m[1])
	return err == nil && Gone(pid)
}

// Gone reports whether pid is another process's that no longer exists.
func Gone(pid int) bool {
	if pid == os.Getpid() {
		return false
	}
	err := syscall.Kill(pid, 0)
	return !(err == nil || errors.Is(err, syscall.EPERM))
}
