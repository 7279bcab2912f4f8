package testenv

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// InCI reports whether the tests run under CI (CI=true), where a missing
// privilege, nsjail, Redis or browser is a failure: CI must prove what
// these tests prove, never skip it.
func InCI() bool {
	switch strings.ToLower(os.Getenv("CI")) {
	case "1", "true", "yes":
		return true
	}
	return false
}

// SkipUnlessCI skips t with the formatted reason on a host that truly
// cannot run it, and fails it instead under CI=true. Every helper here that
// stops a test for a missing real component goes through it.
func SkipUnlessCI(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("CI=true forbids skipping: "+format, args...)
	}
	t.Skipf(format, args...)
}

// TimeScale is the factor by which a test stretches its wall-clock
// allowances on a host slower than the development VM:
// EXECGATE_TEST_TIME_SCALE (scripts/vm-test.sh sets it when the cgroup v2
// VM runs under emulation, 4-15x slower), else 1. Only allowances scale;
// what a test asserts does not.
func TimeScale() time.Duration {
	if n, err := strconv.Atoi(os.Getenv("EXECGATE_TEST_TIME_SCALE")); err == nil && n > 1 {
		return time.Duration(n)
	}
	return 1
}
