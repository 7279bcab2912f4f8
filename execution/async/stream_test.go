package async_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/execgate/execgate/execution/async"
)

func TestAStreamGivesEveryReaderItsEventsInOrderThenTheEnd(t *testing.T) {
	st := async.NewStream(1 << 10)
	st.Output("stdout", []byte("a"))
	st.Output("stderr", []byte("b"))
	evs, skipped, closed, err := st.Next(context.Background(), 0, 0)
	if err != nil || skipped != 0 || closed || len(evs) != 2 || evs[0].Kind != "stdout" || string(evs[1].Data) != `{"text":"b"}` || evs[1].Seq != 1 {
		t.Fatalf("Next = %v %d %v %v", evs, skipped, closed, err)
	}
	got := make(chan []async.Event)
	go func() { // waits for what comes next
		evs, _, _, _ := st.Next(context.Background(), 2, 0)
		got <- evs
	}()
	st.End([]byte(`{"status":"ok","logs":[{"level":"info","message":"m"}]}`))
	evs = <-got
	if len(evs) == 0 || evs[0].Kind != "log" {
		t.Fatalf("after End: %v", evs)
	}
	all, _, closed, _ := st.Next(context.Background(), 2, 0)
	if !closed || len(all) != 2 || all[1].Kind != "envelope" {
		t.Fatalf("the end = %v closed %v", all, closed)
	}
	st.Output("stdout", []byte("late"))
	if evs, _, _, _ := st.Next(context.Background(), 4, 0); len(evs) != 0 {
		t.Fatalf("published after Close: %v", evs)
	}
}

// A slow reader never holds the run up: the stream keeps its bound and the
// reader learns how many events it missed.
func TestAStreamDropsItsOldestEventsForASlowReaderAndSaysHowMany(t *testing.T) {
	st := async.NewStream(100)
	done := make(chan struct{})
	go func() { // the run: never blocks, whoever reads
		for i := range 50 {
			st.Output("stdout", fmt.Appendf(nil, "%09d", i)) // 9 bytes each
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("publishing blocked without a reader")
	}
	// Each event is {"text":"%09d"}: 20 bytes, five of them in 100.
	evs, skipped, _, err := st.Next(context.Background(), 0, 0)
	if err != nil || len(evs) != 5 || skipped != 45 || string(evs[0].Data) != `{"text":"000000045"}` || evs[0].Seq != 45 {
		t.Fatalf("got %d events from seq %v, skipped %d", len(evs), evs, skipped)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, _, err := st.Next(ctx, 50, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("waiting with a cancelled context: %v", err)
	}
}

// A reader takes at most maxBytes of events at a time (at least one), so
// what it holds while it writes them is bounded; closed comes with the
// last of them.
func TestAStreamHandsAReaderAtMostItsByteBoundAtATime(t *testing.T) {
	st := async.NewStream(1 << 20)
	for i := range 10 {
		st.Output("stdout", fmt.Appendf(nil, "%09d", i)) // 20 bytes each
	}
	st.Publish("envelope", make([]byte, 1000))
	st.Close()
	var got []int
	from := int64(0)
	for {
		evs, _, closed, err := st.Next(context.Background(), from, 50)
		if err != nil || len(evs) == 0 {
			t.Fatalf("Next from %d = %v, %v", from, evs, err)
		}
		got = append(got, len(evs))
		from = evs[len(evs)-1].Seq + 1
		if closed {
			break
		}
	}
	if fmt.Sprint(got) != "[2 2 2 2 2 1]" {
		t.Fatalf("batches of %v events", got)
	}
}
