package gateway

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"time"
)

// A client-supplied execution_id is an idempotency key: a repeat from the
// same tenant within the window gets the first response without a second
// run, and concurrent duplicates never both run (the second waits for the
// first). Only responses of runs (HTTP 200) are remembered; a refused
// request (4xx/5xx) abandons its claim so the client can retry.

// IdempotencyStore remembers run responses per key (tenant + execution_id).
type IdempotencyStore interface {
	// Claim reserves key for one run. When it returns claimed, the caller
	// must call Complete or Abandon. Otherwise it returns the stored
	// response of an earlier run, waiting (until ctx ends) while another
	// request holds the claim. A stored response whose fingerprint differs
	// is ErrIdempotencyConflict.
	Claim(ctx context.Context, key IdempotencyKey, fingerprint string) (stored *StoredResponse, claimed bool, err error)
	// Complete stores the response of the claimed run for the window.
	Complete(ctx context.Context, key IdempotencyKey, resp StoredResponse) error
	// Abandon drops the claim without storing anything.
	Abandon(ctx context.Context, key IdempotencyKey) error
}

// IdempotencyKey scopes an execution id to its tenant.
type IdempotencyKey struct {
	TenantID    string
	ExecutionID string
}

// StoredResponse is a remembered run response.
type StoredResponse struct {
	Fingerprint string `json:"fingerprint"`
	Status      int    `json:"status"`
	Body        []byte `json:"body"`
}

// ErrIdempotencyConflict means the execution_id was already used for a
// different request within the window.
var ErrIdempotencyConflict = errors.New("execution_id was already used for a different request")

// memoryBudget bounds the bytes a MemoryIdempotency keeps; the oldest
// entries go first.
const memoryBudget = 64 << 20

// MemoryIdempotency is the in-process store (embedded default, one
// process). Entries expire after the window; memory is bounded by
// memoryBudget.
type MemoryIdempotency struct {
	window time.Duration
	now    func() time.Time

	mu      sync.Mutex // guards entries, order, bytes
	entries map[IdempotencyKey]*memEntry
	order   *list.List // of *memEntry, oldest first (completion order)
	bytes   int
}

type memEntry struct {
	key     IdempotencyKey
	fp      string
	done    chan struct{} // closed when completed or abandoned
	resp    *StoredResponse
	expires time.Time
	elem    *list.Element
}

// NewMemoryIdempotency returns a store remembering responses for window.
func NewMemoryIdempotency(window time.Duration, now func() time.Time) *MemoryIdempotency {
	if now == nil {
		now = time.Now
	}
	return &MemoryIdempotency{window: window, now: now, entries: map[IdempotencyKey]*memEntry{}, order: list.New()}
}

var _ IdempotencyStore = (*MemoryIdempotency)(nil)

// Claim implements IdempotencyStore.
func (m *MemoryIdempotency) Claim(ctx context.Context, key IdempotencyKey, fp string) (*StoredResponse, bool, error) {
	for {
		m.mu.Lock()
		m.expireLocked()
		e, ok := m.entries[key]
		if !ok {
			m.entries[key] = &memEntry{key: key, fp: fp, done: make(chan struct{})}
			m.mu.Unlock()
			return nil, true, nil
		}
		if e.resp != nil {
			m.mu.Unlock()
			if e.resp.Fingerprint != fp {
				return nil, false, ErrIdempotencyConflict
			}
			return e.resp, false, nil
		}
		done := e.done
		m.mu.Unlock()
		select {
		case <-done: // completed or abandoned: look again
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// Complete implements IdempotencyStore.
func (m *MemoryIdempotency) Complete(_ context.Context, key IdempotencyKey, resp StoredResponse) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[key]
	if !ok || e.resp != nil {
		return nil
	}
	if m.window <= 0 {
		delete(m.entries, key)
		close(e.done)
		return nil
	}
	e.resp = &resp
	e.expires = m.now().Add(m.window)
	e.elem = m.order.PushBack(e)
	m.bytes += len(resp.Body) + len(key.TenantID) + len(key.ExecutionID)
	close(e.done)
	for m.bytes > memoryBudget && m.order.Len() > 0 {
		m.dropLocked(m.order.Front().Value.(*memEntry))
	}
	return nil
}

// Abandon implements IdempotencyStore.
func (m *MemoryIdempotency) Abandon(_ context.Context, key IdempotencyKey) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.entries[key]
	if !ok || e.resp != nil {
		return nil
	}
	delete(m.entries, key)
	close(e.done)
	return nil
}

func (m *MemoryIdempotency) expireLocked() {
	now := m.now()
	for m.order.Len() > 0 {
		e := m.order.Front().Value.(*memEntry)
		if now.Before(e.expires) {
			return
		}
		m.dropLocked(e)
	}
}

func (m *MemoryIdempotency) dropLocked(e *memEntry) {
	m.order.Remove(e.elem)
	m.bytes -= len(e.resp.Body) + len(e.key.TenantID) + len(e.key.ExecutionID)
	if m.entries[e.key] == e {
		delete(m.entries, e.key)
	}
}
