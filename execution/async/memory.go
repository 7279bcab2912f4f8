package async

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// MemoryStore keeps executions in this process (one gateway). A tenant
// holds at most Limits.MaxActive active records, Limits.MaxResults finished
// ones and Limits.TenantResultBytes of envelopes; done records are forgotten after ResultTTL, active ones
// after ActiveTTL. Artifacts are kept beside them (artifacts.go).
type MemoryStore struct {
	limits Limits
	now    func() time.Time

	mu      sync.Mutex // guards recs, tenants and what they point to
	recs    map[Key]*memRec
	tenants map[string]*memTenant

	artifacts memArtifacts // the runs' artifacts (artifacts.go)
}

type memRec struct {
	Record
	expires time.Time
	elem    *list.Element // in active or done of its tenant
}

type memTenant struct {
	active *list.List // of *memRec, oldest first (= expiry order)
	done   *list.List // of *memRec, oldest first (= expiry order)
	bytes  int64      // of the kept envelopes
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty store. now nil: time.Now.
func NewMemoryStore(l Limits, now func() time.Time) *MemoryStore {
	if now == nil {
		now = time.Now
	}
	return &MemoryStore{limits: l.WithDefaults(), now: now, recs: map[Key]*memRec{}, tenants: map[string]*memTenant{}}
}

func (m *MemoryStore) tenantLocked(id string) *memTenant {
	t, ok := m.tenants[id]
	if !ok {
		t = &memTenant{active: list.New(), done: list.New()}
		m.tenants[id] = t
	}
	return t
}

// expireLocked forgets t's records past their time.
func (m *MemoryStore) expireLocked(t *memTenant, now time.Time) {
	for _, l := range []*list.List{t.active, t.done} {
		for l.Len() > 0 {
			r := l.Front().Value.(*memRec)
			if now.Before(r.expires) {
				break
			}
			l.Remove(r.elem)
			t.bytes -= int64(len(r.Envelope))
			delete(m.recs, r.Key)
		}
	}
}

// Create implements Store.
func (m *MemoryStore) Create(_ context.Context, k Key) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	t := m.tenantLocked(k.TenantID)
	m.expireLocked(t, now)
	if _, ok := m.recs[k]; ok {
		return ErrExists
	}
	if t.active.Len() >= m.limits.MaxActive {
		return &TooManyError{Max: m.limits.MaxActive}
	}
	r := &memRec{Record: Record{Key: k, State: StateQueued, SubmittedAt: now}, expires: now.Add(m.limits.ActiveTTL)}
	r.elem = t.active.PushBack(r)
	m.recs[k] = r
	return nil
}

// Start implements Store.
func (m *MemoryStore) Start(_ context.Context, k Key) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.recs[k]
	if !ok || r.State != StateQueued {
		return ok && r.CancelRequested, nil
	}
	r.State, r.StartedAt = StateRunning, m.now()
	return r.CancelRequested, nil
}

// Finish implements Store.
func (m *MemoryStore) Finish(_ context.Context, k Key, status int, env []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	t := m.tenantLocked(k.TenantID)
	r, ok := m.recs[k]
	if !ok { // forgotten (ActiveTTL): keep the result all the same
		r = &memRec{Record: Record{Key: k, SubmittedAt: now}}
		m.recs[k] = r
	} else if r.State == StateDone {
		return nil
	} else {
		t.active.Remove(r.elem)
	}
	r.State, r.FinishedAt, r.HTTPStatus, r.expires = StateDone, now, status, now.Add(m.limits.ResultTTL)
	if int64(len(env)) <= m.limits.TenantResultBytes {
		r.Envelope = env
		t.bytes += int64(len(env))
	} else {
		r.Expired = true
	}
	r.elem = t.done.PushBack(r)
	for t.done.Len() > m.limits.MaxResults {
		old := t.done.Front().Value.(*memRec)
		t.done.Remove(old.elem)
		t.bytes -= int64(len(old.Envelope))
		delete(m.recs, old.Key)
	}
	for e := t.done.Front(); e != nil && t.bytes > m.limits.TenantResultBytes; e = e.Next() {
		old := e.Value.(*memRec)
		t.bytes -= int64(len(old.Envelope))
		old.Envelope, old.Expired = nil, true
	}
	return nil
}

// Get implements Store.
func (m *MemoryStore) Get(_ context.Context, k Key) (Record, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expireLocked(m.tenantLocked(k.TenantID), m.now())
	r, ok := m.recs[k]
	if !ok {
		return Record{}, false, nil
	}
	return r.Record, true, nil
}

// Head implements Store.
func (m *MemoryStore) Head(ctx context.Context, k Key) (Record, bool, error) {
	rec, ok, err := m.Get(ctx, k)
	rec.Envelope = nil
	return rec, ok, err
}

// Envelope implements Store: the envelope it keeps (never copied, so
// reserve is not asked), kept alive by its readers if it is dropped
// meanwhile.
func (m *MemoryStore) Envelope(ctx context.Context, k Key, _ Reserve) ([]byte, func(), bool, error) {
	rec, ok, err := m.Get(ctx, k)
	if err != nil || !ok || rec.State != StateDone || rec.Envelope == nil {
		return nil, nil, false, err
	}
	return rec.Envelope, func() {}, true, nil
}

// RequestCancel implements Store.
func (m *MemoryStore) RequestCancel(_ context.Context, k Key) (Record, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expireLocked(m.tenantLocked(k.TenantID), m.now())
	r, ok := m.recs[k]
	if !ok {
		return Record{}, false, nil
	}
	was := r.Record
	was.Envelope = nil // as RedisStore: a cancel never reads the result
	if r.State != StateDone {
		r.CancelRequested = true
	}
	return was, true, nil
}

// CancelRequested implements Store.
func (m *MemoryStore) CancelRequested(_ context.Context, k Key) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.recs[k]
	return ok && r.CancelRequested, nil
}
