package sandbox

import (
	"errors"
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
type pool struct {
	r    *Runner
	size int

	mu      sync.Mutex // guards everything below
	idle    map[profile][]*jail
	filling map[profile]bool
	closed  bool
	fillers sync.WaitGroup
	stopTic chan struct{}

	hits atomic.Int64 // runs served by a warm jail (for tests and metrics)
}

func newPool(r *Runner, size int) *pool {
	p := &pool{r: r, size: size, idle: map[profile][]*jail{}, filling: map[profile]bool{}, stopTic: make(chan struct{})}
	go p.recycle()
	return p
}

// want registers prof as a profile to keep warm and starts filling it.
func (p *pool) want(prof profile) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.idle[prof]; !ok {
		if len(p.idle) >= maxWarmProfiles || p.closed {
			return
		}
		p.idle[prof] = nil
	}
	p.fillLocked(prof)
}

// take returns a live warm jail for prof, or nil.
func (p *pool) take(prof profile) *jail {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	var stale []*jail
	var got *jail
	if _, known := p.idle[prof]; !known && len(p.idle) < maxWarmProfiles {
		p.idle[prof] = nil
	}
	for list := p.idle[prof]; len(list) > 0; list = p.idle[prof] {
		j := list[0]
		p.idle[prof] = list[1:]
		if j.alive() && time.Since(j.started) < warmIdleMax {
			got = j
			break
		}
		stale = append(stale, j)
	}
	if _, known := p.idle[prof]; known {
		p.fillLocked(prof)
	}
	p.mu.Unlock()
	p.discard(stale)
	if got != nil {
		p.hits.Add(1)
	}
	return got
}

// fillLocked starts the background filler for prof unless one runs.
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
			if p.closed || len(p.idle[prof]) >= p.size {
				p.filling[prof] = false
				p.mu.Unlock()
				return
			}
			p.mu.Unlock()
			j, err := p.r.startJail(prof, true, "")
			if err != nil {
				p.r.log.Warn("starting a warm jail", "profile", prof.String(), "error", err)
				p.mu.Lock()
				p.filling[prof] = false
				p.mu.Unlock()
				return
			}
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				p.discard([]*jail{j})
				return
			}
			p.idle[prof] = append(p.idle[prof], j)
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
		for prof, list := range p.idle {
			keep := list[:0]
			for _, j := range list {
				if j.alive() && time.Since(j.started) < warmIdleMax*3/4 {
					keep = append(keep, j)
				} else {
					stale = append(stale, j)
				}
			}
			p.idle[prof] = keep
			if len(keep) < p.size {
				p.fillLocked(prof)
			}
		}
		p.mu.Unlock()
		p.discard(stale)
	}
}

func (p *pool) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, list := range p.idle {
		n += len(list)
	}
	return n
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
	for prof, list := range p.idle {
		all = append(all, list...)
		delete(p.idle, prof)
	}
	p.mu.Unlock()
	p.fillers.Wait()
	return p.discard(all)
}
