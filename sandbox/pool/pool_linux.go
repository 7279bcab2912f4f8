// Package pool keeps warm jails: pre-started jails per profile, each
// waiting in its harness for the one request it will run, with the
// profiles' places shared fairly between tenants (CONTAINMENT 37). The
// runner (package sandbox) starts and discards the jails and says what a
// profile is; the pool decides which jails to keep and for whom.
package pool

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// maxWarmProfiles bounds how many distinct profiles keep warm jails; runs
// of further profiles start cold.
const maxWarmProfiles = 8

// MaxIdle is how long a warm jail may wait for a request before the pool
// replaces it; nsjail's own time_limit for warm jails is raised by as
// much, since it counts from the jail's start, not from the request.
const MaxIdle = 60 * time.Second

// Profile is what two runs must share to take the same warm jails (the
// runner's profile): comparable, with a description for logs and the name
// of its package environment's directory below the deps dir ("" for none).
type Profile interface {
	comparable
	String() string
	Env() string
}

// Jail is a warm jail as the pool keeps it.
type Jail interface {
	// Alive reports whether the jail is still running (it may die while
	// it waits).
	Alive() bool
	// Started is when the jail was started.
	Started() time.Time
	// Discard stops an unused jail and removes what it holds.
	Discard() error
	// Settle waits, at most max, until the jail has started (its harness
	// waits for its request) or stop returns true.
	Settle(max time.Duration, stop func() bool)
}

// settleMax bounds how long a filler waits for a jail it started to
// settle before it starts the next.
const settleMax = 250 * time.Millisecond

// Pool keeps up to size pre-started jails per profile, each blocked in the
// harness waiting for its request. Take hands one out (it is never put
// back: a jail runs one request); a background filler replaces it. Jails
// that waited longer than MaxIdle, or died while waiting, are replaced.
//
// The maxWarmProfiles places are shared fairly between tenants
// (CONTAINMENT 37). A profile is registered by the tenant whose run first
// missed it and counts against that tenant; any tenant's run of the same
// profile may take its jails (a warm jail has run nothing yet, so nothing
// of a tenant is in it). When the places are full and a tenant misses a
// new profile, the least recently used profile of the tenant holding the
// most places gives way — the newcomer's own when it holds as many as
// anyone — so a tenant cycling through many limit profiles only ever
// replaces its own and every other tenant keeps a place. The profile
// registered at start-up (the default limits, no tenant) is never evicted.
//
// A profile with a package environment (Profile.Env) is registered only
// by Warm — POST /v1/prepare with "warm": n — never by a miss: it holds
// min(n, size) jails, is registered to the preparing tenant and counts
// against its places like any other, so warming environments can neither
// exceed the pool's budget (maxWarmProfiles places of at most size jails)
// nor take another tenant's place while that tenant holds fewer. While it
// is registered, its filler keeps the environment's directory recently
// used, so the deps cache never evicts what a warm jail binds; when the
// directory is gone, the profile is dropped.
type Pool[P Profile, J Jail] struct {
	size    int
	depsDir string             // where the profiles' environments are (keepEnv)
	start   func(P) (J, error) // starts a warm jail of a profile
	log     *slog.Logger

	mu      sync.Mutex // guards everything below
	entries map[P]*warmEntry[J]
	filling map[P]bool
	tick    uint64 // LRU clock: bumped on every take
	closed  bool
	fillers sync.WaitGroup
	stopTic chan struct{}

	hits atomic.Int64 // runs served by a warm jail (for tests and metrics)
}

// warmEntry is one registered profile.
type warmEntry[J Jail] struct {
	idle   []J
	tenant string // who registered it; "" with pinned
	pinned bool   // registered at start-up: never evicted
	used   uint64 // pool.tick of the last take (or warm)
	size   int    // idle jails to keep; 0: the pool's size
}

// target is how many idle jails e keeps in a pool of size.
func (e *warmEntry[J]) target(size int) int {
	if e.size > 0 && e.size < size {
		return e.size
	}
	return size
}

// New returns a pool of up to size jails per profile, started by start;
// depsDir holds the profiles' package environments. Close it to discard
// every idle jail.
func New[P Profile, J Jail](size int, depsDir string, start func(P) (J, error), log *slog.Logger) *Pool[P, J] {
	p := &Pool[P, J]{size: size, depsDir: depsDir, start: start, log: log, entries: map[P]*warmEntry[J]{}, filling: map[P]bool{}, stopTic: make(chan struct{})}
	go p.recycle()
	return p
}

// Want registers prof as a profile every tenant uses, never evicted, and
// starts filling it.
func (p *Pool[P, J]) Want(prof P) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if e, ok := p.entries[prof]; ok {
		e.pinned = true
	} else {
		if len(p.entries) >= maxWarmProfiles {
			return
		}
		p.entries[prof] = &warmEntry[J]{pinned: true}
	}
	p.fillLocked(prof)
}

// Take returns a live warm jail for prof, or false. A miss registers prof
// for tenant (evicting as the type comment says) so later runs find it
// warm, unless prof has a package environment (only Warm registers those).
func (p *Pool[P, J]) Take(tenant string, prof P) (J, bool) {
	var got J
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return got, false
	}
	var stale []J
	found := false
	e := p.entries[prof]
	if e == nil && prof.Env() == "" {
		e, stale = p.registerLocked(tenant, prof)
	}
	if e != nil {
		p.tick++
		e.used = p.tick
		for len(e.idle) > 0 {
			j := e.idle[0]
			e.idle = e.idle[1:]
			if j.Alive() && time.Since(j.Started()) < MaxIdle {
				got, found = j, true
				break
			}
			stale = append(stale, j)
		}
		p.fillLocked(prof)
	}
	p.mu.Unlock()
	p.discard(stale)
	if found {
		p.hits.Add(1)
	}
	return got, found
}

// Warm registers prof for tenant (evicting as the type comment says) to
// keep min(n, size) idle jails, and starts filling it. It returns how many
// it keeps: 0 when n is, or when every place is pinned. A profile already
// registered keeps its tenant and the larger of its count and n.
func (p *Pool[P, J]) Warm(tenant string, prof P, n int) int {
	n = min(n, p.size)
	if n <= 0 {
		return 0
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return 0
	}
	var stale []J
	e := p.entries[prof]
	if e == nil {
		if e, stale = p.registerLocked(tenant, prof); e != nil {
			e.size = n
		}
	} else if e.size > 0 && e.size < n {
		e.size = n
	}
	if e != nil {
		p.tick++
		e.used = p.tick
		n = e.target(p.size)
		p.fillLocked(prof)
	} else {
		n = 0
	}
	p.mu.Unlock()
	p.discard(stale)
	return n
}

// registerLocked adds prof for tenant, making room if the places are full.
// It returns nil when there is no room (every place is pinned), and the
// idle jails of an evicted profile, for the caller to discard unlocked.
func (p *Pool[P, J]) registerLocked(tenant string, prof P) (*warmEntry[J], []J) {
	var freed []J
	if len(p.entries) >= maxWarmProfiles {
		victim, ok := p.victimLocked(tenant)
		if !ok {
			return nil, nil
		}
		freed = p.entries[victim].idle
		delete(p.entries, victim)
	}
	e := &warmEntry[J]{tenant: tenant}
	p.entries[prof] = e
	return e, freed
}

// victimLocked picks the profile to evict for a miss of tenant: the least
// recently used one of the tenant holding the most places, preferring
// tenant itself on a tie.
func (p *Pool[P, J]) victimLocked(tenant string) (P, bool) {
	held := map[string]int{}
	for _, e := range p.entries {
		if !e.pinned {
			held[e.tenant]++
		}
	}
	top, most := tenant, held[tenant]
	for t, n := range held {
		if n > most || (n == most && t < top && top != tenant) {
			top, most = t, n
		}
	}
	var victim P
	if most == 0 {
		return victim, false
	}
	var oldest *warmEntry[J]
	for prof, e := range p.entries {
		if !e.pinned && e.tenant == top && (oldest == nil || e.used < oldest.used) {
			victim, oldest = prof, e
		}
	}
	return victim, true
}

// fillLocked starts the background filler for prof unless one runs. The
// filler stops when prof is full, evicted, or the pool closes.
func (p *Pool[P, J]) fillLocked(prof P) {
	if p.filling[prof] || p.closed {
		return
	}
	p.filling[prof] = true
	p.fillers.Add(1)
	go func() {
		defer p.fillers.Done()
		for {
			p.mu.Lock()
			e := p.entries[prof]
			if p.closed || e == nil || len(e.idle) >= e.target(p.size) {
				p.filling[prof] = false
				p.mu.Unlock()
				return
			}
			p.mu.Unlock()
			if prof.Env() != "" && !p.keepEnv(prof) {
				return
			}
			j, err := p.start(prof)
			if err != nil {
				p.log.Warn("starting a warm jail", "profile", prof.String(), "error", err)
				p.mu.Lock()
				p.filling[prof] = false
				p.mu.Unlock()
				return
			}
			p.mu.Lock()
			e = p.entries[prof]
			if p.closed || e == nil {
				p.filling[prof] = false
				p.mu.Unlock()
				p.discard([]J{j})
				return
			}
			e.idle = append(e.idle, j)
			target := e.target(p.size)
			p.mu.Unlock()
			// One jail starting at a time while the profile holds more
			// than half its jails: a burst of runs taken from a full pool
			// then shares the CPUs with one jail's start, not with one per
			// run taken (on 2 CPUs a warm run took 10-17 ms instead of
			// ≈ 3 beside three starting). Below half, the next starts at
			// once, so that a steady stream of runs still finds jails.
			j.Settle(settleMax, func() bool { return 2*p.IdleOf(prof) <= target })
		}
	}()
}

// recycle replaces jails that have waited too long or died.
func (p *Pool[P, J]) recycle() {
	t := time.NewTicker(MaxIdle / 4)
	defer t.Stop()
	for {
		select {
		case <-p.stopTic:
			return
		case <-t.C:
		}
		var stale []J
		p.mu.Lock()
		for prof, e := range p.entries {
			keep := e.idle[:0]
			for _, j := range e.idle {
				if j.Alive() && time.Since(j.Started()) < MaxIdle*3/4 {
					keep = append(keep, j)
				} else {
					stale = append(stale, j)
				}
			}
			e.idle = keep
			if len(keep) < e.target(p.size) {
				p.fillLocked(prof)
			}
		}
		p.mu.Unlock()
		p.discard(stale)
	}
}

// keepEnv marks prof's environment directory used now, so the deps cache
// does not evict it under a warm jail (package environments evicts by
// mtime). When the directory is gone, prof is dropped (with its idle
// jails) and keepEnv returns false; the caller's filler must stop.
func (p *Pool[P, J]) keepEnv(prof P) bool {
	dir := filepath.Join(p.depsDir, prof.Env())
	now := time.Now()
	if err := os.Chtimes(dir, now, now); err == nil {
		return true
	}
	p.mu.Lock()
	var stale []J
	if e := p.entries[prof]; e != nil {
		stale = e.idle
		delete(p.entries, prof)
	}
	p.filling[prof] = false
	p.mu.Unlock()
	p.log.Info("dropping a warm profile whose environment is gone", "profile", prof.String())
	p.discard(stale)
	return false
}

// IdleCount is the number of idle warm jails, all profiles.
func (p *Pool[P, J]) IdleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, e := range p.entries {
		n += len(e.idle)
	}
	return n
}

// IdleOf is the number of idle jails of prof.
func (p *Pool[P, J]) IdleOf(prof P) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.entries[prof]; e != nil {
		return len(e.idle)
	}
	return 0
}

// ProfilesOf counts the registered profiles per tenant ("" for the pinned
// ones).
func (p *Pool[P, J]) ProfilesOf() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for _, e := range p.entries {
		out[e.tenant]++
	}
	return out
}

func (p *Pool[P, J]) discard(js []J) error {
	var errs []error
	for _, j := range js {
		if err := j.Discard(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Close stops filling and discards every idle jail.
func (p *Pool[P, J]) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.stopTic)
	var all []J
	for prof, e := range p.entries {
		all = append(all, e.idle...)
		delete(p.entries, prof)
	}
	p.mu.Unlock()
	p.fillers.Wait()
	return p.discard(all)
}

// Hits is the number of runs served by a warm jail.
func (p *Pool[P, J]) Hits() int64 { return p.hits.Load() }

// EnvsOf lists the package environments of the profiles registered to
// tenant.
func (p *Pool[P, J]) EnvsOf(tenant string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for prof, e := range p.entries {
		if e.tenant == tenant && prof.Env() != "" {
			out = append(out, prof.Env())
		}
	}
	return out
}
