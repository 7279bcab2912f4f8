package quota

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// leaseOps is what an Admission needs from its backend.
type leaseOps interface {
	// heartbeat extends the lease; alive is false when it is gone.
	heartbeat(ctx context.Context, tenant, execID string) (alive bool, err error)
	// finish removes the lease and the reservation; with settle it also
	// charges cpuMS to today's budget.
	finish(ctx context.Context, tenant, execID string, cpuMS int64, settle bool) error
}

// finishTimeout bounds Settle and Release, which run detached from the
// caller's cancellation: the bookkeeping must happen even when the client
// has gone away.
const finishTimeout = 5 * time.Second

// Admission is one admitted run. It holds a concurrency lease, heart-beaten
// in a goroutine every LeaseTTL/3 until Settle or Release, and a budget
// reservation of CPUReserveMS. Exactly one of Settle or Release should be
// called; repeated calls after a successful one are no-ops. If a heartbeat
// finds the lease gone (expired, backend wiped) Lost is closed and the run
// should be killed: its slot may already be someone else's.
type Admission struct {
	TenantID    string
	ExecutionID string
	// Limits are the effective limits the run was admitted under.
	Limits Limits
	// ReservedMS is the CPU reserved from today's budget: CPUReserveMS, or
	// less when less was left of a limited budget (the run's cpu_ms is then
	// cut to it; see BudgetCPUMS).
	ReservedMS int64
	// Replayed is true when this execution id already held a live
	// admission and nothing new was consumed.
	Replayed bool
	// Degraded is true when the backend was down and the local rate
	// fallback admitted the run without lease or reservation.
	Degraded bool

	ops    leaseOps
	events *events
	ttl    time.Duration

	lost     chan struct{}
	lostOnce sync.Once

	stop     chan struct{} // closed to stop the heartbeat
	stopOnce sync.Once
	hbDone   chan struct{} // closed when the heartbeat goroutine returned

	mu       sync.Mutex // guards finished; held across finish to serialise Settle/Release
	finished bool
}

func newAdmission(req AdmitRequest, eff Limits, reserved int64, ops leaseOps, ev *events, ttl time.Duration) *Admission {
	a := &Admission{
		TenantID:    req.TenantID,
		ExecutionID: req.ExecutionID,
		Limits:      eff,
		ReservedMS:  reserved,
		ops:         ops,
		events:      ev,
		ttl:         ttl,
		lost:        make(chan struct{}),
		stop:        make(chan struct{}),
		hbDone:      make(chan struct{}),
	}
	if ops == nil { // degraded: nothing to keep alive
		a.Degraded = true
		close(a.hbDone)
		return a
	}
	go a.heartbeatLoop()
	return a
}

// BudgetCPUMS is the CPU limit, in ms, a run asking cpuMS may have under
// this admission: cpuMS, or what was left of a limited daily budget when
// less was (ReservedMS). A degraded admission reserved nothing and admits
// only tenants without a budget: cpuMS.
func (a *Admission) BudgetCPUMS(cpuMS int64) int64 {
	if a.Degraded || a.Limits.DailyCPUSeconds <= 0 || a.ReservedMS <= 0 {
		return cpuMS
	}
	return min(cpuMS, a.ReservedMS)
}

// Lost is closed when the lease was found gone while the run lasted.
func (a *Admission) Lost() <-chan struct{} { return a.lost }

func (a *Admission) heartbeatLoop() {
	defer close(a.hbDone)
	every := a.ttl / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		alive, err := a.ops.heartbeat(ctx, a.TenantID, a.ExecutionID)
		cancel()
		if err != nil {
			// Backend unreachable: keep trying. If it stays down past the
			// TTL the lease expires and the next heartbeat reports it.
			continue
		}
		if !alive {
			a.markLost()
			return
		}
	}
}

func (a *Admission) markLost() {
	a.lostOnce.Do(func() {
		// Count first: whoever wakes on Lost sees the event counted.
		a.events.record(a.TenantID, KindConcurrency, OutcomeLeaseLost)
		close(a.lost)
	})
}

// stopHeartbeat stops the heartbeat goroutine and waits for it.
func (a *Admission) stopHeartbeat() {
	a.stopOnce.Do(func() { close(a.stop) })
	<-a.hbDone
}

// Settle ends the run: it stops the heartbeat, releases the lease and
// replaces the reservation with the measured usage cpuMS. It runs detached
// from ctx's cancellation (bounded by its own timeout). On error (backend
// down) it may be called again; after a success it is a no-op.
func (a *Admission) Settle(ctx context.Context, cpuMS int64) error {
	if cpuMS < 0 {
		return fmt.Errorf("%w: settling: cpu_ms must be >= 0, got %d", ErrInvalid, cpuMS)
	}
	return a.finish(ctx, cpuMS, true)
}

// Release ends an admission whose run never happened: it releases the lease
// and the reservation and charges nothing. The rate token stays spent.
func (a *Admission) Release(ctx context.Context) error {
	return a.finish(ctx, 0, false)
}

func (a *Admission) finish(ctx context.Context, cpuMS int64, settle bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.finished {
		return nil
	}
	a.stopHeartbeat()
	if a.ops == nil {
		a.finished = true
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	if err := a.ops.finish(ctx, a.TenantID, a.ExecutionID, cpuMS, settle); err != nil {
		return err
	}
	a.finished = true
	return nil
}

// events counts fail-closed/fail-open/lease-lost events and forwards them to
// the observer.
type events struct {
	observer   Observer
	failClosed atomic.Uint64
	failOpen   atomic.Uint64
	leasesLost atomic.Uint64
}

func (e *events) record(tenant string, kind Kind, outcome string) {
	switch outcome {
	case OutcomeFailClosed:
		e.failClosed.Add(1)
	case OutcomeFailOpen:
		e.failOpen.Add(1)
	case OutcomeLeaseLost:
		e.leasesLost.Add(1)
	}
	if e.observer != nil {
		e.observer.QuotaEvent(tenant, kind, outcome)
	}
}

func (e *events) stats() Stats {
	return Stats{
		FailClosed: e.failClosed.Load(),
		FailOpen:   e.failOpen.Load(),
		LeasesLost: e.leasesLost.Load(),
	}
}

// admissionKey carries a run's Admission in its context.
type admissionKey struct{}

// NewContext returns ctx carrying a, the admission of the run ctx belongs
// to: a runner that queues (the gateway role's dispatcher) reads the
// effective limits from it (MaxQueued).
func NewContext(ctx context.Context, a *Admission) context.Context {
	return context.WithValue(ctx, admissionKey{}, a)
}

// FromContext returns the admission NewContext put in ctx.
func FromContext(ctx context.Context) (*Admission, bool) {
	a, ok := ctx.Value(admissionKey{}).(*Admission)
	return a, ok && a != nil
}
