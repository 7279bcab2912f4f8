package execution

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A client-supplied execution_id is an idempotency key: within the window
// an id runs at most once per tenant, whatever else happens. A repeat gets
// the first response without a second run, and concurrent duplicates never
// both run (the second waits for the first). Only responses of runs (HTTP
// 200) are remembered; a refused request (4xx/5xx) abandons its claim so
// the client can retry.
//
// A store keeps two things per key, with separate bounds (issue #11):
//
//   - a claim: id, request fingerprint, outcome, times. Small, never evicted
//     by anyone's responses; it lives for the window after the run. A
//     tenant holds at most MaxClaims of them; beyond that its new ids are
//     refused (429 QuotaExceeded with Retry-After until its oldest claim
//     expires) rather than a claim being forgotten.
//   - the response body, in a per-tenant byte budget (TenantResponseBytes):
//     a tenant's new responses evict only that tenant's oldest ones, so
//     another tenant's traffic cannot drop them. A repeat whose response
//     was dropped is ResultExpiredError (409 ResultExpired), never a run.

// IdempotencyStore remembers run claims and responses per key (tenant +
// execution_id).
type IdempotencyStore interface {
	// Claim reserves key for one run. When it returns claimed, the caller
	// must call Complete or Abandon. Otherwise it returns the stored
	// response of an earlier run, waiting (until ctx ends) while another
	// request holds the claim. Errors callers branch on:
	// ErrIdempotencyConflict (the key was used with another fingerprint),
	// *ResultExpiredError (the run happened but its response was dropped)
	// and *ClaimsExhaustedError (the tenant holds too many claims).
	Claim(ctx context.Context, key IdempotencyKey, fingerprint string) (stored *StoredResponse, claimed bool, err error)
	// Complete records the claimed run's outcome and stores its response
	// for the window (or drops the body when the tenant's budget cannot
	// hold it; the claim stays).
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
	// Outcome is the run's X-Execution-Status (ok or error:<Type>); it
	// stays with the claim when the body is dropped.
	Outcome string `json:"outcome,omitempty"`
	Body    []byte `json:"body"`
}

// ErrIdempotencyConflict means the execution_id was already used for a
// different request within the window.
var ErrIdempotencyConflict = errors.New("execution_id was already used for a different request")

// ResultExpiredError means the execution_id already ran within the window
// but its stored response was dropped (the tenant's response budget). The
// id is not run again (409 ResultExpired).
type ResultExpiredError struct {
	// Outcome is the original run's X-Execution-Status: ok or error:<Type>.
	Outcome string
}

func (e *ResultExpiredError) Error() string {
	return fmt.Sprintf("execution_id already ran (outcome %s) but its stored response was dropped", e.Outcome)
}

// ClaimsExhaustedError means the tenant already holds its maximum number of
// execution_id claims within the window; a new id is refused rather than an
// old claim forgotten.
type ClaimsExhaustedError struct {
	Max        int
	RetryAfter time.Duration // until the tenant's oldest claim expires
}

func (e *ClaimsExhaustedError) Error() string {
	return fmt.Sprintf("the tenant holds %d execution_id claims within the idempotency window", e.Max)
}

// IdempotencyLimits bound a store per tenant. Zero fields take the defaults.
type IdempotencyLimits struct {
	// MaxClaims is how many execution_id claims (pending or completed,
	// within the window) one tenant may hold. Default 50000.
	MaxClaims int
	// TenantResponseBytes is the bytes of stored responses one tenant may
	// hold; its oldest go first, and a response larger than this is not
	// stored at all (its claim stays). Default 16 MiB.
	TenantResponseBytes int64
}

// Defaults of IdempotencyLimits.
const (
	DefaultIdempotencyMaxClaims     = 50000
	DefaultIdempotencyResponseBytes = 16 << 20
)

// WithDefaults returns l with zero fields set to the defaults.
func (l IdempotencyLimits) WithDefaults() IdempotencyLimits {
	if l.MaxClaims == 0 {
		l.MaxClaims = DefaultIdempotencyMaxClaims
	}
	if l.TenantResponseBytes == 0 {
		l.TenantResponseBytes = DefaultIdempotencyResponseBytes
	}
	return l
}

// MemoryIdempotency is the in-process store (embedded default, one
// process). Claims expire after the window; a tenant's memory is bounded by
// its claim count and response budget, so the whole store is bounded by
// the number of configured tenants times those.
type MemoryIdempotency struct {
	window time.Duration
	limits IdempotencyLimits
	now    func() time.Time

	mu      sync.Mutex // guards claims, tenants and everything they point to
	claims  map[IdempotencyKey]*memClaim
	tenants map[string]*memTenant
}

// memTenant is one tenant's share of the store.
type memTenant struct {
	held  int        // claims held, pending or completed
	done  *list.List // of *memClaim, completed, oldest first (= expiry order)
	resps *list.List // of *memClaim with a stored body, oldest first
	bytes int64      // of the stored bodies
}

type memClaim struct {
	key       IdempotencyKey
	fp        string
	done      chan struct{} // closed when completed or abandoned
	completed bool
	status    int
	outcome   string
	body      []byte // nil once dropped (or never stored)
	expires   time.Time
	doneElem  *list.Element
	respElem  *list.Element
}

// NewMemoryIdempotency returns a store remembering runs for window.
func NewMemoryIdempotency(window time.Duration, limits IdempotencyLimits, now func() time.Time) *MemoryIdempotency {
	if now == nil {
		now = time.Now
	}
	return &MemoryIdempotency{window: window, limits: limits.WithDefaults(), now: now,
		claims: map[IdempotencyKey]*memClaim{}, tenants: map[string]*memTenant{}}
}

var _ IdempotencyStore = (*MemoryIdempotency)(nil)

func (m *MemoryIdempotency) tenantLocked(id string) *memTenant {
	t, ok := m.tenants[id]
	if !ok {
		t = &memTenant{done: list.New(), resps: list.New()}
		m.tenants[id] = t
	}
	return t
}

// Claim implements IdempotencyStore.
func (m *MemoryIdempotency) Claim(ctx context.Context, key IdempotencyKey, fp string) (*StoredResponse, bool, error) {
	for {
		m.mu.Lock()
		t := m.tenantLocked(key.TenantID)
		now := m.now()
		m.expireLocked(t, now)
		c, ok := m.claims[key]
		if !ok {
			if t.held >= m.limits.MaxClaims {
				retry := m.window
				if f := t.done.Front(); f != nil {
					retry = f.Value.(*memClaim).expires.Sub(now)
				}
				m.mu.Unlock()
				return nil, false, &ClaimsExhaustedError{Max: m.limits.MaxClaims, RetryAfter: retry}
			}
			m.claims[key] = &memClaim{key: key, fp: fp, done: make(chan struct{})}
			t.held++
			m.mu.Unlock()
			return nil, true, nil
		}
		if c.completed {
			defer m.mu.Unlock()
			switch {
			case c.fp != fp:
				return nil, false, ErrIdempotencyConflict
			case c.body == nil:
				return nil, false, &ResultExpiredError{Outcome: c.outcome}
			}
			return &StoredResponse{Fingerprint: c.fp, Status: c.status, Outcome: c.outcome, Body: c.body}, false, nil
		}
		done := c.done
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
	c, ok := m.claims[key]
	if !ok || c.completed {
		return nil
	}
	t := m.tenantLocked(key.TenantID)
	if m.window <= 0 {
		m.forgetLocked(t, c)
		return nil
	}
	c.completed = true
	c.status, c.outcome = resp.Status, resp.Outcome
	c.expires = m.now().Add(m.window)
	c.doneElem = t.done.PushBack(c)
	close(c.done)
	if size := entrySize(key, resp.Body); size <= m.limits.TenantResponseBytes {
		c.body = resp.Body
		c.respElem = t.resps.PushBack(c)
		t.bytes += size
	}
	for t.bytes > m.limits.TenantResponseBytes {
		m.dropBodyLocked(t, t.resps.Front().Value.(*memClaim))
	}
	return nil
}

// Abandon implements IdempotencyStore.
func (m *MemoryIdempotency) Abandon(_ context.Context, key IdempotencyKey) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.claims[key]
	if !ok || c.completed {
		return nil
	}
	m.forgetLocked(m.tenantLocked(key.TenantID), c)
	return nil
}

// entrySize is what a stored body costs the tenant's budget.
func entrySize(key IdempotencyKey, body []byte) int64 {
	return int64(len(body) + len(key.TenantID) + len(key.ExecutionID))
}

// expireLocked forgets t's claims whose window has passed.
func (m *MemoryIdempotency) expireLocked(t *memTenant, now time.Time) {
	for t.done.Len() > 0 {
		c := t.done.Front().Value.(*memClaim)
		if now.Before(c.expires) {
			return
		}
		m.forgetLocked(t, c)
	}
}

// forgetLocked removes claim c (pending or completed) and its body.
func (m *MemoryIdempotency) forgetLocked(t *memTenant, c *memClaim) {
	m.dropBodyLocked(t, c)
	if c.doneElem != nil {
		t.done.Remove(c.doneElem)
		c.doneElem = nil
	} else {
		close(c.done) // pending: wake the waiters
	}
	if m.claims[c.key] == c {
		delete(m.claims, c.key)
		t.held--
	}
}

// dropBodyLocked drops c's stored body; its claim stays.
func (m *MemoryIdempotency) dropBodyLocked(t *memTenant, c *memClaim) {
	if c.respElem == nil {
		return
	}
	t.resps.Remove(c.respElem)
	t.bytes -= entrySize(c.key, c.body)
	c.respElem, c.body = nil, nil
}
