package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// maxWarmProfiles bounds how many distinct profiles keep warm jails; runs
// of further profiles start cold.
const maxWarmProfiles = 8

// pool keeps up to size pre-started jails per profile, each blocked in the
// harness waiting for its request. take hands one out (it is never put
// back: a jail runs one request); a background filler replaces it. Jails
// that waited longer than warmIdleMax, or died while waiting, are replaced.
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
// A profile with a package environment (profile.Deps) is registered only
// by warm — POST /v1/prepare with "warm": n — never by a miss: it holds
// min(n, size) jails, is registered to the preparing tenant and counts
// against its places like any other, so warming environments can neither
// exceed the pool's budget (maxWarmProfiles places of at most size jails)
// nor take another tenant's place while that tenant holds fewer. While it
// is registered, its filler keeps the environment's directory recently
// used, so the deps cache never evicts what a warm jail binds; when the
// directory is gone, the profile is dropped.
type pool struct {
	r    *Runner
	size int

	mu      sync.Mutex // guards everything below
	entries map[profile]*warmEntry
	filling map[profile]bool
	tick    uint64 // LRU clock: bumped on every take
	closed  bool
	fillers sync.WaitGroup
	stopTic chan struct{}

	hits atomic.Int64 // runs served by a warm jail (for tests and metrics)
}

// warmEntry is one registered profile.
type warmEntry struct {
	idle   []*jail
	tenant string // who registered it; "" with pinned
	pinned bool   // registered at start-up: never evicted
	used   uint64 // pool.tick of the last take (or warm)
	size   int    // idle jails to keep; 0: the pool's size
}

// target is how many idle jails e keeps in a pool of size.
func (e *warmEntry) target(size int) int {
	if e.size > 0 && e.size < size {
		return e.size
	}
	return size
}

func newPool(r *Runner, size int) *pool {
	p := &pool{r: r, size: size, entries: map[profile]*warmEntry{}, filling: map[profile]bool{}, stopTic: make(chan struct{})}
	go p.recycle()
	return p
}

// want registers prof as a profile every tenant uses, never evicted, and
// starts filling it.
func (p *pool) want(prof profile) {
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
		p.entries[prof] = &warmEntry{pinned: true}
	}
	p.fillLocked(prof)
}

// take returns a live warm jail for prof, or nil. A miss registers prof for
// tenant (evicting as the type comment says) so later runs find it warm,
// unless prof has a package environment (only warm registers those).
func (p *pool) take(tenant string, prof profile) *jail {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	var stale []*jail
	var got *jail
	e := p.entries[prof]
	if e == nil && prof.Deps == "" {
		e, stale = p.registerLocked(tenant, prof)
	}
	if e != nil {
		p.tick++
		e.used = p.tick
		for len(e.idle) > 0 {
			j := e.idle[0]
			e.idle = e.idle[1:]
			if j.alive() && time.Since(j.started) < warmIdleMax {
				got = j
				break
			}
			stale = append(stale, j)
		}
		p.fillLocked(prof)
	}
	p.mu.Unlock()
	p.discard(stale)
	if got != nil {
		p.hits.Add(1)
	}
	return got
}

// warm registers prof for tenant (evicting as the type comment says) to
// keep min(n, size) idle jails, and starts filling it. It returns how many
// it keeps: 0 when n is, or when every place is pinned. A profile already
// registered keeps its tenant and the larger of its count and n.
func (p *pool) warm(tenant string, prof profile, n int) int {
	n = min(n, p.size)
	if n <= 0 {
		return 0
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return 0
	}
	var stale []*jail
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
func (p *pool) registerLocked(tenant string, prof profile) (*warmEntry, []*jail) {
	var freed []*jail
	if len(p.entries) >= maxWarmProfiles {
		victim, ok := p.victimLocked(tenant)
		if !ok {
			return nil, nil
		}
		freed = p.entries[victim].idle
		delete(p.entries, victim)
	}
	e := &warmEntry{tenant: tenant}
	p.entries[prof] = e
	return e, freed
}

// victimLocked picks the profile to evict for a miss of tenant: the least
// recently used one of the tenant holding the most places, preferring
// tenant itself on a tie.
func (p *pool) victimLocked(tenant string) (profile, bool) {
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
	if most == 0 {
		return profile{}, false
	}
	var victim profile
	var oldest *warmEntry
	for prof, e := range p.entries {
		if !e.pinned && e.tenant == top && (oldest == nil || e.used < oldest.used) {
			victim, oldest = prof, e
		}
	}
	return victim, true
}

// fillLocked starts the background filler for prof unless one runs. The
// filler stops when prof is full, evicted, or the pool closes.
func (p *pool) fillLocked(prof profile) {
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
			if prof.Deps != "" && !p.keepDeps(prof) {
				return
			}
			j, err := p.r.startJail(prof, true)
			if err != nil {
				p.r.log.Warn("starting a warm jail", "profile", prof.String(), "error", err)
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
				p.discard([]*jail{j})
				return
			}
			e.idle = append(e.idle, j)
			p.mu.Unlock()
		}
	}()
}

// recycle replaces jails that have waited too long or died.
func (p *pool) recycle() {
	t := time.NewTicker(warmIdleMax / 4)
	defer t.Stop()
	for {
		select {
		case <-p.stopTic:
			return
		case <-t.C:
		}
		var stale []*jail
		p.mu.Lock()
		for prof, e := range p.entries {
			keep := e.idle[:0]
			for _, j := range e.idle {
				if j.alive() && time.Since(j.started) < warmIdleMax*3/4 {
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

// keepDeps marks prof's environment directory used now, so the deps
// cache does not evict it under a warm jail (Environments.evict goes by
// mtime). When the directory is gone, prof is dropped (with its idle
// jails) and keepDeps returns false; the caller's filler must stop.
func (p *pool) keepDeps(prof profile) bool {
	dir := filepath.Join(p.r.cfg.DepsDir, prof.Deps)
	now := time.Now()
	if err := os.Chtimes(dir, now, now); err == nil {
		return true
	}
	p.mu.Lock()
	var stale []*jail
	if e := p.entries[prof]; e != nil {
		stale = e.idle
		delete(p.entries, prof)
	}
	p.filling[prof] = false
	p.mu.Unlock()
	p.r.log.Info("dropping a warm profile whose environment is gone", "profile", prof.String())
	p.discard(stale)
	return false
}

func (p *pool) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, e := range p.entries {
		n += len(e.idle)
	}
	return n
}

// idleOf is the number of idle jails of prof.
func (p *pool) idleOf(prof profile) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.entries[prof]; e != nil {
		return len(e.idle)
	}
	return 0
}

// profilesOf counts the registered profiles per tenant ("" for the pinned
// ones).
func (p *pool) profilesOf() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for _, e := range p.entries {
		out[e.tenant]++
	}
	return out
}

func (p *pool) discard(js []*jail) error {
	var errs []error
	for _, j := range js {
		if err := j.discard(p.r.grace()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// close stops filling and discards every idle jail.
func (p *pool) close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.stopTic)
	var all []*jail
	for prof, e := range p.entries {
		all = append(all, e.idle...)
		delete(p.entries, prof)
	}
	p.mu.Unlock()
	p.fillers.Wait()
	return p.discard(all)
}
