package async

import (
	"context"
	"sync"
)

// sharedEnvelopes hands the envelopes a store copies out of its backend to
// their concurrent readers, one copy per execution: the first reader
// fetches it, the others wait for that fetch and share its bytes, and the
// copy (with the memory reserved for it) is let go when its last reader
// releases it. A result read by twenty slow clients costs its size once,
// not twenty times (issue #23 §1).
type sharedEnvelopes struct {
	mu   sync.Mutex // guards open and every entry's refs
	open map[Key]*sharedEnvelope
}

// sharedEnvelope is one execution's envelope while it has readers. env,
// ok and err are set before ready closes and never change after.
type sharedEnvelope struct {
	ready   chan struct{}
	env     []byte
	ok      bool
	err     error
	release func() // the reservation of env's memory (nil: none)
	refs    int    // readers holding it; guarded by sharedEnvelopes.mu
}

// fetchFunc reads one execution's envelope from the backend, reserving its
// memory with reserve first; release gives the reservation back.
type fetchFunc func(ctx context.Context) (env []byte, release func(), ok bool, err error)

// get returns k's shared envelope, fetching it when no reader holds it.
// The fetch does not stop when the first reader's ctx does (the others
// wait for it); a reader whose ctx ends while waiting gets ctx's error.
func (s *sharedEnvelopes) get(ctx context.Context, k Key, fetch fetchFunc) ([]byte, func(), bool, error) {
	s.mu.Lock()
	if s.open == nil {
		s.open = map[Key]*sharedEnvelope{}
	}
	e, found := s.open[k]
	if !found {
		e = &sharedEnvelope{ready: make(chan struct{})}
		s.open[k] = e
	}
	e.refs++
	s.mu.Unlock()
	if !found {
		e.env, e.release, e.ok, e.err = fetch(context.WithoutCancel(ctx))
		if e.err != nil || !e.ok {
			// Nothing to share: the next reader asks the backend again.
			s.mu.Lock()
			if s.open[k] == e {
				delete(s.open, k)
			}
			s.mu.Unlock()
		}
		close(e.ready)
	} else {
		select {
		case <-e.ready:
		case <-ctx.Done():
			s.put(k, e)
			return nil, nil, false, ctx.Err()
		}
	}
	if e.err != nil || !e.ok {
		s.put(k, e)
		return nil, nil, false, e.err
	}
	var once sync.Once
	return e.env, func() { once.Do(func() { s.put(k, e) }) }, true, nil
}

// put drops one reader of e; the last one lets the copy go.
func (s *sharedEnvelopes) put(k Key, e *sharedEnvelope) {
	s.mu.Lock()
	e.refs--
	last := e.refs == 0
	if last && s.open[k] == e {
		delete(s.open, k)
	}
	s.mu.Unlock()
	if last && e.release != nil {
		e.release()
	}
}
