package gateway

import (
	"testing"
	"time"
)

// The refusal bucket with a fixed clock: a burst, then 429 until it
// refills; one record per refusalRecordEvery counting the others; the
// episode's rest handed over once the key is served again.
func TestRefusalLimiterBucketAndRecords(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	l := newRefusalLimiter(60, 3, func() time.Time { return now }) // one a second, burst 3
	k := l.key("demo", "noisy")
	for i := range 3 {
		if retry, _, _ := l.limited(k, true); retry != 0 {
			t.Fatalf("refusal %d within the burst limited", i)
		}
		l.refused(k)
	}
	retry, record, dropped := l.limited(k, true)
	if retry != time.Second || !record || dropped != 0 {
		t.Fatalf("the first limited request: retry %s, record %v, dropped %d; want 1s, a record, 0", retry, record, dropped)
	}
	for range 4 {
		if _, record, _ := l.limited(k, true); record {
			t.Fatal("a second record within refusalRecordEvery")
		}
	}
	if other := l.key("demo", "quiet"); func() bool { r, _, _ := l.limited(other, true); return r != 0 }() {
		t.Fatal("another subject is limited")
	}
	now = now.Add(time.Second) // one token back: served again
	if retry, _, _ := l.limited(k, true); retry != 0 {
		t.Fatalf("after a refill: retry %s", retry)
	}
	if n := l.pending(k); n != 4 {
		t.Fatalf("pending %d, want the 4 limited requests without a record", n)
	}
	if n := l.pending(k); n != 0 {
		t.Fatalf("pending twice: %d", n)
	}
	off := newRefusalLimiter(-1, 3, time.Now)
	for range 10 {
		off.refused(1)
	}
	if r, _, _ := off.limited(1, true); r != 0 {
		t.Fatal("a disabled limiter limits")
	}
}
