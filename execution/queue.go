package execution

import (
	"context"
	"sync"
)

// runQueue bounds the runs of this process and shares them fairly between
// tenants (CONTAINMENT 37):
//
//   - at most slots runs at once, and at most tenantRuns of them for one
//     tenant, so a tenant busy with long runs always leaves slots free for
//     the others (there is no preemption: a slot a run holds stays held
//     until the run ends, so only a cap keeps one free);
//   - at most slots+waiting requests admitted in all (running or waiting),
//     and at most tenantRuns+tenantWaiting for one tenant, so one tenant
//     cannot fill the waiting room and get everyone else refused;
//   - when a slot frees, the tenants with waiting requests take turns
//     (round robin); each tenant's own requests run in arrival order.
//
// A request that finds the queue (or its tenant's part of it) full is
// refused at once (503 Overloaded) instead of piling up.
//
// A request takes a ticket with enter (non-blocking), then a run slot with
// acquire (blocking, cancellable), and gives both back with release.
type runQueue struct {
	slots         int // run slots in all
	tickets       int // slots + waiting room: requests admitted in all
	tenantRuns    int // run slots one tenant may hold
	tenantTickets int // tenantRuns + the tenant's part of the waiting room
	report        func(waiting, running int)

	mu       sync.Mutex // guards everything below and report calls
	tenants  map[string]*tenantQueue
	turns    []*tenantQueue // tenants with waiters, next turn first
	nTickets int
	nRunning int
}

// QueueLimits are the bounds of the run queue (server.max_concurrent_runs,
// server.max_queue, server.tenant_max_runs, server.tenant_max_queue).
type QueueLimits struct {
	Running, Waiting             int // in all
	TenantRunning, TenantWaiting int // for one tenant
}

// tenantQueue is one tenant's part of the queue; it exists while the
// tenant holds a ticket.
type tenantQueue struct {
	id      string
	tickets int
	running int
	waiters []*ticket // blocked in acquire, in arrival order
}

func newRunQueue(l QueueLimits, report func(waiting, running int)) *runQueue {
	if report == nil {
		report = func(int, int) {}
	}
	return &runQueue{
		slots:         l.Running,
		tickets:       l.Running + l.Waiting,
		tenantRuns:    max(1, min(l.TenantRunning, l.Running)),
		tenantTickets: max(1, min(l.TenantRunning, l.Running)) + max(0, min(l.TenantWaiting, l.Waiting)),
		report:        report,
		tenants:       map[string]*tenantQueue{},
	}
}

// ticket is one request's place in the queue.
type ticket struct {
	q       *runQueue
	tq      *tenantQueue
	granted chan struct{} // made when acquire must wait; closed when it gets a slot
	running bool          // guarded by q.mu
	done    bool          // guarded by q.mu
}

// enter takes a ticket for tenant, or returns nil when the queue or the
// tenant's part of it is full.
func (q *runQueue) enter(tenant string) *ticket {
	q.mu.Lock()
	defer q.mu.Unlock()
	tq := q.tenants[tenant]
	if q.nTickets >= q.tickets || (tq != nil && tq.tickets >= q.tenantTickets) {
		return nil
	}
	if tq == nil {
		tq = &tenantQueue{id: tenant}
		q.tenants[tenant] = tq
	}
	tq.tickets++
	q.nTickets++
	q.reportLocked()
	return &ticket{q: q, tq: tq}
}

// acquire waits for a run slot.
func (t *ticket) acquire(ctx context.Context) error {
	q := t.q
	q.mu.Lock()
	if q.nRunning < q.slots && t.tq.running < q.tenantRuns && len(t.tq.waiters) == 0 {
		// A free slot with waiters left means their tenants are at their
		// caps (dispatchLocked runs on every change), so t jumps nobody.
		t.running = true
		t.tq.running++
		q.nRunning++
		q.reportLocked()
		q.mu.Unlock()
		return nil
	}
	t.granted = make(chan struct{})
	if len(t.tq.waiters) == 0 {
		q.turns = append(q.turns, t.tq)
	}
	t.tq.waiters = append(t.tq.waiters, t)
	q.dispatchLocked()
	q.reportLocked()
	q.mu.Unlock()

	select {
	case <-t.granted:
		return nil
	case <-ctx.Done():
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.running { // granted while ctx ended: give the slot on
		t.running = false
		t.tq.running--
		q.nRunning--
	} else {
		q.removeWaiterLocked(t)
	}
	q.dispatchLocked()
	q.reportLocked()
	return ctx.Err()
}

// release gives the ticket (and the slot, if held) back. Idempotent.
func (t *ticket) release() {
	if t == nil {
		return
	}
	q := t.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.done {
		return
	}
	t.done = true
	if t.running {
		t.running = false
		t.tq.running--
		q.nRunning--
	}
	t.tq.tickets--
	q.nTickets--
	if t.tq.tickets == 0 {
		delete(q.tenants, t.tq.id)
	}
	q.dispatchLocked()
	q.reportLocked()
}

// dispatchLocked hands free slots to waiters: the first tenant in turn
// order that is below its cap gets one for its oldest waiter and goes to
// the back of the line.
func (q *runQueue) dispatchLocked() {
	for q.nRunning < q.slots {
		i := 0
		for i < len(q.turns) && q.turns[i].running >= q.tenantRuns {
			i++
		}
		if i == len(q.turns) {
			return
		}
		tq := q.turns[i]
		t := tq.waiters[0]
		tq.waiters = tq.waiters[1:]
		q.turns = append(q.turns[:i], q.turns[i+1:]...)
		if len(tq.waiters) > 0 {
			q.turns = append(q.turns, tq)
		}
		t.running = true
		tq.running++
		q.nRunning++
		close(t.granted)
	}
}

// removeWaiterLocked takes t out of its tenant's waiters (it gave up).
func (q *runQueue) removeWaiterLocked(t *ticket) {
	tq := t.tq
	for i, w := range tq.waiters {
		if w == t {
			tq.waiters = append(tq.waiters[:i], tq.waiters[i+1:]...)
			break
		}
	}
	if len(tq.waiters) > 0 {
		return
	}
	for i, x := range q.turns {
		if x == tq {
			q.turns = append(q.turns[:i], q.turns[i+1:]...)
			return
		}
	}
}

func (q *runQueue) reportLocked() {
	q.report(q.nTickets-q.nRunning, q.nRunning)
}

func (q *runQueue) load() (waiting, running int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.nTickets - q.nRunning, q.nRunning
}
