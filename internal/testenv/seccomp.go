package testenv

import (
	"testing"

	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/sandbox/seccomp"
)

// RunNamingSyscall runs a case that seccomp must kill and returns its
// result. The call's name comes from the kernel's audit record, which the
// kernel sends on its own time: when a run's record never came (the runner
// waited for it and said "unknown") on a host that can read the records,
// the audit watch's report is logged and the case runs once more. The
// caller asserts the name on what this returns, so a record that never
// comes twice still fails the test.
func RunNamingSyscall(t testing.TB, run func() sandbox.Result) sandbox.Result {
	t.Helper()
	res := run()
	if res.DeniedSyscall == "unknown" && res.ErrorType() == sandbox.ErrSyscallDenied && seccomp.AuditErr() == nil {
		t.Logf("no audit record named the call (%q); running the case once more\n%s", res.Error.Message, seccomp.AuditReport(16))
		res = run()
	}
	return res
}
