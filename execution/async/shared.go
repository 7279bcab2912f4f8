package async

import (
	"context"
	"sync"
)

// sharedCopies hands what a store copies out of its backend (an
// execution's envelope, an artifact) to its concurrent readers, one copy
// per key: the first reader fetches it, the others wait for that fetch
// and share its bytes, and the copy (with the memory reserved for it) is
// let go when its last reader releases it. A result read by twenty slow
// clients costs its size once, not twenty times (issue #23 §1).
type sharedCopies[K comparable, V any] struct {
	mu   sync.Mutex // guards open and every entry's refs
	open map[K]*sharedCopy[V]
}

// sharedEnvelopes are the envelopes being read, by execution.
type sharedEnvelopes = sharedCopies[Key, []byte]

// sharedCopy is one key's copy while it has readers. v, ok and err are
// set before ready closes and never change after.
type sharedCopy[V any] struct {
	ready   chan struct{}
	v       V
	ok      bool
	err     error
	release func() // the reservation of v's memory (nil: none)
	refs    int    // readers holding it; guarded by sharedCopies.mu
}

// fetchFunc reads one key's value from the backend, reserving its memory
// with reserve first; release gives the reservation back.
type fetchFunc[V any] func(ctx context.Context) (v V, release func(), ok bool, err error)

// get returns k's shared copy, fetching it when no reader holds it.
// The fetch does not stop when the first reader's ctx does (the others
// wait for it); a reader whose ctx ends while waiting gets ctx's error.
func (s *sharedCopies[K, V]) get(ctx context.Context, k K, fetch fetchFunc[V]) (V, func(), bool, error) {
	var zero V
	s.mu.Lock()
	if s.open == nil {
		s.open = map[K]*sharedCopy[V]{}
	}
	e, found := s.open[k]
	if !found {
		e = &sharedCopy[V]{ready: make(chan struct{})}
		s.open[k] = e
	}
	e.refs++
	s.mu.Unlock()
	if !found {
		e.v, e.release, e.ok, e.err = fetch(context.WithoutCancel(ctx))
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
			return zero, nil, false, ctx.Err()
		}
	}
	if e.err != nil || !e.ok {
		s.put(k, e)
		return zero, nil, false, e.err
	}
	var once sync.Once
	return e.v, func() { once.Do(func() { s.put(k, e) }) }, true, nil
}

// put drops one reader of e; the last one lets the copy go.
func (s *sharedCopies[K, V]) put(k K, e *sharedCopy[V]) {
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
