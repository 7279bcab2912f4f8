package gateway

import (
	"context"
	"sync"
)

// runQueue bounds the runs of this process: at most running runs at once
// and at most waiting more queued behind them. A request that finds both
// full is refused at once (503 Overloaded) instead of piling up.
//
// A request takes a ticket with enter (non-blocking), then a run slot with
// acquire (blocking, cancellable), and gives both back with the release
// func enter returned.
type runQueue struct {
	tickets chan struct{} // capacity running+waiting: everyone admitted
	slots   chan struct{} // capacity running: everyone running
	report  func(waiting, running int)

	mu       sync.Mutex // guards nWaiting, nRunning and report calls
	nWaiting int
	nRunning int
}

func newRunQueue(running, waiting int, report func(waiting, running int)) *runQueue {
	if report == nil {
		report = func(int, int) {}
	}
	return &runQueue{
		tickets: make(chan struct{}, running+waiting),
		slots:   make(chan struct{}, running),
		report:  report,
	}
}

// ticket is one request's place in the queue.
type ticket struct {
	q       *runQueue
	running bool
	done    bool
}

// enter takes a ticket, or returns nil when the queue is full.
func (q *runQueue) enter() *ticket {
	select {
	case q.tickets <- struct{}{}:
	default:
		return nil
	}
	q.update(+1, 0)
	return &ticket{q: q}
}

// acquire waits for a run slot.
func (t *ticket) acquire(ctx context.Context) error {
	select {
	case t.q.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	t.running = true
	t.q.update(-1, +1)
	return nil
}

// release gives the ticket (and the slot, if held) back. Idempotent.
func (t *ticket) release() {
	if t == nil || t.done {
		return
	}
	t.done = true
	if t.running {
		<-t.q.slots
		t.q.update(0, -1)
	} else {
		t.q.update(-1, 0)
	}
	<-t.q.tickets
}

func (q *runQueue) update(dWaiting, dRunning int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.nWaiting += dWaiting
	q.nRunning += dRunning
	q.report(q.nWaiting, q.nRunning)
}

func (q *runQueue) load() (waiting, running int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.nWaiting, q.nRunning
}
