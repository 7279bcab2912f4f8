package execution

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/sandbox"
)

func TestEncodeEnvelopeWritesWhatEncodeJSONWrites(t *testing.T) {
	big := func(s string) string { return strings.Repeat(s, spliceMin/len(s)+1) }
	base := Envelope{ExecutionID: "e1", TenantID: "t1", Status: sandbox.StatusOK, Result: json.RawMessage(`{"ok":true}`),
		Logs: []sandbox.LogLine{{Level: "info", Message: "<hi>\x01"}}, TraceID: "abc",
		Decision: &EnvelopeDecision{ID: "d", NetworkAccess: "none", Egress: policy.Egress{Allow: []string{"*.example.com:443"}}}}
	tests := []struct {
		name   string
		mutate func(e *Envelope)
	}{
		{"small output", func(e *Envelope) { e.Stdout = "hi\n" }},
		{"control bytes", func(e *Envelope) { e.Stdout = big("\x01\x02"); e.Stderr = big("\x1f") }},
		{"html, quotes and separators", func(e *Envelope) { e.Stdout = big(`<a href="x">&</a>` + "\u2028\\") }},
		{"invalid UTF-8", func(e *Envelope) { e.Stderr = big("ok\xff\xe2\x82") }},
		{"large result, not compact", func(e *Envelope) {
			e.Result = json.RawMessage(`{"a": [1, 2, "` + big("x<") + `"], "b" : null}`)
		}},
		{"multi-byte characters across stream chunks", func(e *Envelope) {
			e.Stdout = strings.Repeat("é", streamChunk) + strings.Repeat("🎉\xe2\x82", streamChunk/3)
		}},
		{"large result and output", func(e *Envelope) {
			e.Result = json.RawMessage(`"` + big("\\u0001") + `"`)
			e.Stdout = big("é")
		}},
		{"no result", func(e *Envelope) { e.Result = nil; e.Stdout = big("x") }},
		{"output that looks like a placeholder", func(e *Envelope) {
			e.Stdout = big("\x00stdout-")
			e.Result = json.RawMessage(`"` + big(`\u0000stdout-`) + `"`)
		}},
		{"with an error", func(e *Envelope) {
			e.Status = sandbox.StatusError
			e.Error = &ErrorBody{Type: "ToolError", Message: "boom", Traceback: big("tb\n")}
			e.Stderr = big("err\n")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := base
			tt.mutate(&env)
			want, err := EncodeJSON(&env)
			if err != nil {
				t.Fatal(err)
			}
			e, err := EncodeEnvelope(&env)
			if err != nil {
				t.Fatal(err)
			}
			if e.size != len(want) {
				t.Errorf("size %d, encodeJSON writes %d bytes", e.size, len(want))
			}
			var streamed bytes.Buffer
			if err := e.Write(&streamed); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(streamed.Bytes(), want) {
				t.Errorf("writeTo differs from encodeJSON (%d vs %d bytes)", streamed.Len(), len(want))
			}
			got := e.Bytes()
			if !bytes.Equal(got, want) {
				t.Errorf("bytes differs from encodeJSON (%d vs %d bytes)", len(got), len(want))
			}
			if cap(got) != len(got) && len(env.Stdout)+len(env.Stderr)+len(env.Result) >= spliceMin {
				t.Errorf("body has capacity %d for %d bytes; want one allocation of its size", cap(got), len(got))
			}
		})
	}
}

func TestOutputBudget(t *testing.T) {
	limits := func(outputBytes, timeoutMS int64) sandbox.Limits {
		return sandbox.Limits{OutputBytes: outputBytes, TimeoutMS: timeoutMS}
	}
	t.Run("a run waits for room and gets it when another gives it back", func(t *testing.T) {
		b := newOutputBudget(outputReservation(1 << 20))
		b.freeOS = func() {}
		rel1, err := b.acquire(context.Background(), limits(1<<20, 60000))
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			rel2, err := b.acquire(context.Background(), limits(1<<20, 60000))
			if err == nil {
				rel2()
			}
			got <- err
		}()
		select {
		case err := <-got:
			t.Fatalf("the second run did not wait for room: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		rel1()
		if err := <-got; err != nil {
			t.Fatalf("the second run got %v once room was given back", err)
		}
		if n := b.reserved(); n != 0 {
			t.Errorf("%d bytes still reserved", n)
		}
	})
	t.Run("a run that finds no room within its time limit is Overloaded", func(t *testing.T) {
		b := newOutputBudget(outputReservation(1 << 20))
		b.freeOS = func() {}
		rel, err := b.acquire(context.Background(), limits(1<<20, 60000))
		if err != nil {
			t.Fatal(err)
		}
		defer rel()
		_, err = b.acquire(context.Background(), limits(1<<20, 20))
		if !errors.Is(err, errOutputBudget) {
			t.Fatalf("got %v, want errOutputBudget", err)
		}
		if ae := Refusal(err); ae.Status != 503 || ae.Type != TypeOverloaded {
			t.Errorf("answered %d %s, want 503 Overloaded", ae.Status, ae.Type)
		}
	})
	t.Run("a run larger than the whole budget runs alone", func(t *testing.T) {
		b := newOutputBudget(8 << 20)
		b.freeOS = func() {}
		rel, err := b.acquire(context.Background(), limits(16<<20, 1000))
		if err != nil {
			t.Fatal(err)
		}
		if n := b.reserved(); n != 8<<20 {
			t.Errorf("reserved %d, want the whole budget", n)
		}
		rel()
		rel() // idempotent
		if n := b.reserved(); n != 0 {
			t.Errorf("%d bytes still reserved", n)
		}
	})
	t.Run("a replay reserves its remembered response twice over", func(t *testing.T) {
		b := newOutputBudget(1 << 30)
		b.freeOS = func() {}
		rel, err := b.acquireReplay(context.Background(), 10<<20)
		if err != nil {
			t.Fatal(err)
		}
		if n := b.reserved(); n != 2*(10<<20)+4<<20 {
			t.Errorf("reserved %d", n)
		}
		rel()
	})
	t.Run("memory goes back to the OS once a large burst is over", func(t *testing.T) {
		b := newOutputBudget(1 << 30)
		var freed atomic.Int32
		done := make(chan struct{}, 8)
		b.freeOS = func() { freed.Add(1); done <- struct{}{} }
		b.footprint = func() uint64 { return 1 << 30 } // the burst's output is in the heap
		small, _ := b.acquire(context.Background(), limits(1<<10, 1000))
		small()
		if freed.Load() != 0 {
			t.Fatalf("freed after a small run")
		}
		r1, _ := b.acquire(context.Background(), limits(16<<20, 1000))
		r2, _ := b.acquire(context.Background(), limits(16<<20, 1000))
		r1()
		if freed.Load() != 0 {
			t.Fatalf("freed while a run still holds output")
		}
		r2()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("memory was not returned after the burst")
		}
	})
	t.Run("memory goes back to the OS only when the heap grew by a burst's worth since the last time", func(t *testing.T) {
		b := newOutputBudget(1 << 30)
		var mu sync.Mutex
		heap := uint64(8 << 20)
		setHeap := func(n uint64) { mu.Lock(); heap = n; mu.Unlock() }
		looked := make(chan struct{}, 8)
		b.footprint = func() uint64 { mu.Lock(); defer mu.Unlock(); looked <- struct{}{}; return heap }
		var freed atomic.Int32
		b.freeOS = func() { freed.Add(1); setHeap(10 << 20) } // what a GC and scavenge leave
		burst := func() {
			t.Helper()
			for len(looked) > 0 {
				<-looked
			}
			r1, _ := b.acquire(context.Background(), limits(16<<20, 1000))
			r2, _ := b.acquire(context.Background(), limits(16<<20, 1000))
			r1()
			r2()
			select {
			case <-looked:
			case <-time.After(10 * time.Second):
				t.Fatal("the heap was not looked at after the burst")
			}
			for b.freeing.Load() { // the look's goroutine ends
				time.Sleep(time.Millisecond)
			}
		}
		// Runs of small output: 64 MiB of reservations given back, a heap
		// of a few MiB. Forcing a GC here cost ≈ 1.6 ms per request.
		burst()
		if n := freed.Load(); n != 0 {
			t.Fatalf("memory returned %d times while the heap held 8 MiB", n)
		}
		setHeap(200 << 20)
		burst()
		if n := freed.Load(); n != 1 {
			t.Fatalf("memory returned %d times after the heap grew to 200 MiB, want 1", n)
		}
		setHeap(70 << 20) // 60 MiB more than after the last return, 70 in all
		burst()
		if n := freed.Load(); n != 1 {
			t.Fatalf("memory returned again (%d) though the heap grew by less than %d bytes", n, freeAfterBytes)
		}
		setHeap(80 << 20)
		burst()
		if n := freed.Load(); n != 2 {
			t.Fatalf("memory returned %d times after the heap grew by 70 MiB again, want 2", n)
		}
	})
}

// sink keeps an allocation live where the compiler cannot see it.
var sink []byte

func TestHeapFootprintSeesABurstAndItsReturn(t *testing.T) {
	runtime.GC()
	debug.FreeOSMemory()
	before := heapFootprint()
	sink = make([]byte, 128<<20)
	for i := range sink {
		sink[i] = byte(i)
	}
	held := heapFootprint()
	if held < 128<<20 {
		t.Fatalf("footprint %d with 128 MiB held (%d before)", held, before)
	}
	sink = nil
	dead := heapFootprint()
	if dead < 128<<20 {
		t.Fatalf("footprint %d once the 128 MiB are garbage (%d before): the burst would not be returned", dead, before)
	}
	runtime.GC()
	debug.FreeOSMemory()
	if after := heapFootprint(); after > dead-freeAfterBytes {
		t.Fatalf("footprint %d after a GC and scavenge, %d before them", after, dead)
	}
}
