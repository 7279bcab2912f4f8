package testenv

import (
	"errors"
	"testing"

	"github.com/execgate/execgate/sandbox"
)

// Deno returns the host Deno binary the rootfs builder copies into test
// rootfs trees (JavaScript and TypeScript tools): $EXECGATE_DENO, the
// repository's .tools/bin/deno (scripts/setup.sh), or $PATH. It skips when
// there is none, and fails under CI=true, like Nsjail.
func Deno(t testing.TB) string {
	t.Helper()
	p, err := sandbox.FindDeno("")
	if err != nil {
		var ue *sandbox.UnavailableError
		if errors.As(err, &ue) {
			SkipUnlessCI(t, "deno missing: %v\n%s", err, ue.Detail())
		}
		SkipUnlessCI(t, "deno missing: %v (run scripts/setup.sh)", err)
	}
	return p
}
