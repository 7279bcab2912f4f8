package gateway

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestRunQueue(t *testing.T) {
	var last [2]int
	q := newRunQueue(1, 1, func(w, r int) { last = [2]int{w, r} })
	ctx := context.Background()

	a := q.enter()
	if a == nil || a.acquire(ctx) != nil {
		t.Fatal("the first request did not get the slot")
	}
	b := q.enter()
	if b == nil {
		t.Fatal("the second request found no waiting room")
	}
	if c := q.enter(); c != nil {
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
	if d := q.enter(); d == nil {
		t.Fatal("queue not free after everyone left")
	}
}
