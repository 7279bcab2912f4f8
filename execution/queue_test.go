package execution

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestRunQueue(t *testing.T) {
	var last [2]int
	q := newRunQueue(QueueLimits{Running: 1, Waiting: 1, TenantRunning: 1, TenantWaiting: 1}, func(w, r int) { last = [2]int{w, r} })
	ctx := context.Background()

	a := q.enter("t")
	if a == nil || a.acquire(ctx) != nil {
		t.Fatal("the first request did not get the slot")
	}
	b := q.enter("t")
	if b == nil {
		t.Fatal("the second request found no waiting room")
	}
	if c := q.enter("u"); c != nil {
		t.Fatal("a third request got in past running 1 + waiting 1")
	}
	if last != [2]int{1, 1} {
		t.Fatalf("reported (waiting, running) = %v, want [1 1]", last)
	}

	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := b.acquire(cctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting for a busy slot: err = %v", err)
	}

	a.release()
	a.release() // idempotent
	if err := b.acquire(ctx); err != nil {
		t.Fatalf("slot not handed over: %v", err)
	}
	b.release()
	if w, r := q.load(); w != 0 || r != 0 {
		t.Fatalf("after release: waiting %d running %d", w, r)
	}
	if d := q.enter("t"); d == nil {
		t.Fatal("queue not free after everyone left")
	}
}

// mustEnter takes a ticket for tenant or fails.
func mustEnter(t *testing.T, q *runQueue, tenant string) *ticket {
	t.Helper()
	tk := q.enter(tenant)
	if tk == nil {
		t.Fatalf("tenant %s found the queue full", tenant)
	}
	t.Cleanup(tk.release)
	return tk
}

// acquireAsync starts acquire and returns a channel that gets its error.
func acquireAsync(tk *ticket) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- tk.acquire(context.Background()) }()
	return ch
}

// granted waits briefly for acquire's answer: true when it got the slot.
func granted(t *testing.T, ch <-chan error, wait time.Duration) bool {
	t.Helper()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		return true
	case <-time.After(wait):
		return false
	}
}

func TestATenantAtItsCapLeavesSlotsToOthers(t *testing.T) {
	q := newRunQueue(QueueLimits{Running: 4, Waiting: 8, TenantRunning: 3, TenantWaiting: 4}, nil)
	for range 3 {
		if err := mustEnter(t, q, "a").acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	a4 := acquireAsync(mustEnter(t, q, "a"))
	if granted(t, a4, 100*time.Millisecond) {
		t.Fatal("tenant a got a 4th slot with a cap of 3")
	}
	if !granted(t, acquireAsync(mustEnter(t, q, "b")), 5*time.Second) {
		t.Fatal("tenant b did not get the free slot while a waited at its cap")
	}
	if w, r := q.load(); w != 1 || r != 4 {
		t.Fatalf("waiting %d running %d, want 1 and 4", w, r)
	}
}

func TestFreedSlotsGoToTenantsInTurn(t *testing.T) {
	q := newRunQueue(QueueLimits{Running: 1, Waiting: 8, TenantRunning: 1, TenantWaiting: 8}, nil)
	first := mustEnter(t, q, "a")
	if err := first.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	// a queues three, then b one: b must run second, not after all of a's.
	type waiter struct {
		name string
		tk   *ticket
		ch   <-chan error
	}
	var ws []waiter
	for _, name := range []string{"a1", "a2", "a3", "b1"} {
		tk := mustEnter(t, q, name[:1])
		ws = append(ws, waiter{name, tk, acquireAsync(tk)})
		// each waiter is queued before the next one arrives
		deadline := time.Now().Add(5 * time.Second)
		for {
			q.mu.Lock()
			n := 0
			for _, tq := range q.tenants {
				n += len(tq.waiters)
			}
			q.mu.Unlock()
			if n == len(ws) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never queued", name)
			}
			time.Sleep(time.Millisecond)
		}
	}
	var order []string
	running := first
	for range ws {
		running.release()
		got := ""
		deadline := time.After(5 * time.Second)
		for got == "" {
			for _, w := range ws {
				select {
				case err := <-w.ch:
					if err != nil {
						t.Fatal(err)
					}
					got, running = w.name, w.tk
				default:
				}
			}
			select {
			case <-deadline:
				t.Fatalf("no waiter got the slot after %v", order)
			case <-time.After(time.Millisecond):
			}
		}
		order = append(order, got)
	}
	want := []string{"a1", "b1", "a2", "a3"}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("slots went to %v, want %v", order, want)
		}
	}
}

func TestOneTenantCannotFillTheWaitingRoom(t *testing.T) {
	q := newRunQueue(QueueLimits{Running: 2, Waiting: 4, TenantRunning: 1, TenantWaiting: 2}, nil)
	for range 3 { // 1 running + 2 waiting
		mustEnter(t, q, "a")
	}
	if tk := q.enter("a"); tk != nil {
		t.Fatal("tenant a got a 4th ticket past 1 running + 2 waiting")
	}
	for range 3 {
		mustEnter(t, q, "b")
	}
	if tk := q.enter("c"); tk != nil {
		t.Fatal("the queue admitted past running 2 + waiting 4")
	}
}

func TestAWaiterThatGivesUpLeavesTheQueue(t *testing.T) {
	q := newRunQueue(QueueLimits{Running: 1, Waiting: 2, TenantRunning: 1, TenantWaiting: 2}, nil)
	a := mustEnter(t, q, "a")
	if err := a.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := mustEnter(t, q, "b")
	ch := make(chan error, 1)
	go func() { ch <- gaveUp.acquire(ctx) }()
	cancel()
	if err := <-ch; !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire after cancel: %v", err)
	}
	gaveUp.release()
	next := acquireAsync(mustEnter(t, q, "c"))
	a.release()
	if !granted(t, next, 5*time.Second) {
		t.Fatal("the slot went to a waiter that had given up")
	}
	if w, r := q.load(); w != 0 || r != 1 {
		t.Fatalf("waiting %d running %d, want 0 and 1", w, r)
	}
}

// BenchmarkRunQueue is the queue's cost on the per-request path: one
// tenant's ticket and slot, taken and given back, uncontended and with
// every CPU's goroutines sharing the slots.
func BenchmarkRunQueue(b *testing.B) {
	ctx := context.Background()
	cycle := func(q *runQueue) {
		tk := q.enter("bench")
		if tk == nil {
			b.Fatal("queue full")
		}
		if err := tk.acquire(ctx); err != nil {
			b.Fatal(err)
		}
		tk.release()
	}
	b.Run("uncontended", func(b *testing.B) {
		q := newRunQueue(QueueLimits{Running: 4, Waiting: 64, TenantRunning: 3, TenantWaiting: 32}, nil)
		b.ReportAllocs()
		for b.Loop() {
			cycle(q)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		q := newRunQueue(QueueLimits{Running: 4, Waiting: 1 << 20, TenantRunning: 3, TenantWaiting: 1 << 20}, nil)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				cycle(q)
			}
		})
	})
}
