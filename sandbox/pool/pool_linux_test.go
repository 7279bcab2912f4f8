package pool

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testProfile and testJail stand for the runner's profile and jail.
type testProfile struct{ timeout int64 }

func (p testProfile) String() string { return fmt.Sprint(p.timeout) }
func (p testProfile) Env() string    { return "" }

type testJail struct{}

func (testJail) Alive() bool                       { return true }
func (testJail) Started() time.Time                { return time.Now() }
func (testJail) Discard() error                    { return nil }
func (testJail) Settle(time.Duration, func() bool) {}

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

// settlingJail is a warm jail whose start takes as long as settle lets it.
type settlingJail struct {
	testJail
	settle func(stop func() bool)
}

func (j settlingJail) Settle(_ time.Duration, stop func() bool) { j.settle(stop) }

// TestTheFillerStartsOneJailAtATimeWhileThePoolIsMoreThanHalfFull: runs
// taken from a full pool share the CPUs with one jail starting, not one per
// run taken; once the pool is down to half, the filler stops waiting and
// starts the rest at once.
func TestTheFillerStartsOneJailAtATimeWhileThePoolIsMoreThanHalfFull(t *testing.T) {
	var starts atomic.Int32
	var mu sync.Mutex
	slow := false // Settle waits (for stop) once the pool is full
	release := make(chan struct{})
	start := func(testProfile) (settlingJail, error) {
		starts.Add(1)
		return settlingJail{settle: func(stop func() bool) {
			mu.Lock()
			wait := slow
			mu.Unlock()
			for wait && !stop() {
				select {
				case <-release:
					return
				case <-time.After(time.Millisecond):
				}
			}
		}}, nil
	}
	p := New[testProfile, settlingJail](4, t.TempDir(), start, nil)
	defer p.Close()
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }) }
	defer releaseAll() // before Close, which waits for the filler
	prof := testProfile{1000}
	p.Want(prof)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d idle, %d started", what, p.IdleOf(prof), starts.Load())
			}
		}
	}
	waitFor("the pool fills", func() bool { return p.IdleOf(prof) == 4 })
	mu.Lock()
	slow = true
	mu.Unlock()
	base := starts.Load()
	for range 2 { // a burst: two runs
		if _, ok := p.Take("t", prof); !ok {
			t.Fatal("no warm jail in a full pool")
		}
	}
	waitFor("a replacement starts", func() bool { return starts.Load() > base })
	time.Sleep(50 * time.Millisecond)
	if n := starts.Load() - base; n != 1 {
		t.Fatalf("%d jails started while the pool held %d of 4; want one at a time", n, p.IdleOf(prof))
	}
	for range 2 { // the pool down to half
		if _, ok := p.Take("t", prof); !ok {
			t.Fatal("no warm jail")
		}
	}
	waitFor("the rest start without waiting", func() bool { return starts.Load()-base >= 3 })
	releaseAll()
	waitFor("the pool fills again", func() bool { return p.IdleOf(prof) == 4 })
}
