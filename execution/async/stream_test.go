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
	evs, skipped, closed, err := st.Next(context.Background(), 0)
	if err != nil || skipped != 0 || closed || len(evs) != 2 || evs[0].Kind != "stdout" || string(evs[1].Data) != "b" || evs[1].Seq != 1 {
		t.Fatalf("Next = %v %d %v %v", evs, skipped, closed, err)
	}
	got := make(chan []async.Event)
	go func() { // waits for what comes next
		evs, _, _, _ := st.Next(context.Background(), 2)
		got <- evs
	}()
	st.End([]byte(`{"status":"ok","logs":[{"level":"info","message":"m"}]}`))
	evs = <-got
	if len(evs) == 0 || evs[0].Kind != "log" {
		t.Fatalf("after End: %v", evs)
	}
	all, _, closed, _ := st.Next(context.Background(), 2)
	if !closed || len(all) != 2 || all[1].Kind != "envelope" {
		t.Fatalf("the end = %v closed %v", all, closed)
	}
	st.Output("stdout", []byte("late"))
	if evs, _, _, _ := st.Next(context.Background(), 4); len(evs) != 0 {
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
	evs, skipped, _, err := st.Next(context.Background(), 0)
	if err != nil || len(evs) != 11 || skipped != 39 || string(evs[0].Data) != "000000039" || evs[0].Seq != 39 {
		t.Fatalf("got %d events from seq %v, skipped %d", len(evs), evs, skipped)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, _, err := st.Next(ctx, 50); !errors.Is(err, context.Canceled) {
		t.Fatalf("waiting with a cancelled context: %v", err)
	}
}
