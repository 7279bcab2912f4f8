package testenv

import (
	"testing"

	"github.com/execgate/execgate/sandbox"
)

// EgressKey is what an egress record says of one attempt: where, and
// whether the proxy let it through.
type EgressKey struct {
	Host    string
	Port    int
	Allowed bool
}

// CheckEgress fails t unless egress records each key of want exactly as
// many times as want says (0: never), and every denied attempt with a
// reason.
func CheckEgress(t testing.TB, egress []sandbox.EgressAttempt, want map[EgressKey]int) {
	t.Helper()
	count := map[EgressKey]int{}
	for _, a := range egress {
		count[EgressKey{a.Host, a.Port, a.Allowed}]++
		if !a.Allowed && a.Reason == "" {
			t.Errorf("a denied attempt without a reason: %+v", a)
		}
	}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("%s:%d allowed=%t recorded %d times, want %d (all: %+v)", k.Host, k.Port, k.Allowed, count[k], n, egress)
		}
	}
}
