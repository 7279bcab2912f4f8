package pool

import (
	"fmt"
	"testing"
	"time"
)

// testProfile and testJail stand for the runner's profile and jail.
type testProfile struct{ timeout int64 }

func (p testProfile) String() string { return fmt.Sprint(p.timeout) }
func (p testProfile) Env() string    { return "" }

type testJail struct{}

func (testJail) Alive() bool        { return true }
func (testJail) Started() time.Time { return time.Now() }
func (testJail) Discard() error     { return nil }

func TestWarmPlacesGoToTheTenantHoldingFewest(t *testing.T) {
	prof := func(timeout int64) testProfile { return testProfile{timeout} }
	// holders lists each registered profile's tenant in LRU order (oldest
	// first); "*" is the pinned start-up profile.
	for _, tc := range []struct {
		name       string
		holders    []string
		newcomer   string
		wantVictim int // index into holders; -1: no room
	}{
		{"a newcomer takes a place from the tenant holding seven", []string{"*", "a", "a", "a", "a", "a", "a", "a"}, "b", 1},
		{"the biggest holder cycles through its own places", []string{"*", "a", "b", "a", "a", "a", "a", "a"}, "a", 1},
		{"the biggest holder's least recently used place goes", []string{"*", "b", "a", "c", "a", "a", "b", "a"}, "c", 2},
		{"on a tie the newcomer gives up its own place", []string{"*", "a", "b", "a", "b", "a", "b", "a"}, "a", 1},
		{"on a tie among others, one of the biggest gives way", []string{"*", "a", "b", "a", "b", "a", "b", "c"}, "c", 1},
		{"pinned places are never evicted", []string{"*", "*", "*", "*", "*", "*", "*", "*"}, "a", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Pool[testProfile, testJail]{entries: map[testProfile]*warmEntry[testJail]{}}
			for i, h := range tc.holders {
				e := &warmEntry[testJail]{tenant: h, used: uint64(i + 1)}
				if h == "*" {
					e.tenant, e.pinned = "", true
				}
				p.entries[prof(int64(1000+i))] = e
			}
			victim, ok := p.victimLocked(tc.newcomer)
			if tc.wantVictim < 0 {
				if ok {
					t.Fatalf("evicted %v; want no room", victim)
				}
				return
			}
			if !ok || victim != prof(int64(1000+tc.wantVictim)) {
				t.Fatalf("evicted %v (ok %v); want the place of holder %d (%s)", victim, ok, tc.wantVictim, tc.holders[tc.wantVictim])
			}
		})
	}
}
