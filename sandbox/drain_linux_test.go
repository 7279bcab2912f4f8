package sandbox

import (
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// A run that ended with its envelope has its harness killed; its pipes
// reach EOF only once the kernel has torn the process down (≈ 4 ms for a
// Deno), so collectDrained ends the readers as soon as each pipe is empty.
// Here the write ends stay open for good: everything written is read all
// the same, and collectDrained returns long before its grace.
func TestCollectDrainedEndsReadersOnceTheirPipesAreEmpty(t *testing.T) {
	var readers sync.WaitGroup
	var ends []*os.File
	var writers []*os.File
	caps := make([]textCapture, 2)
	big := strings.Repeat("x", 200<<10) // more than a pipe holds: read while it drains
	for i := range caps {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		ends, writers = append(ends, r), append(writers, w)
		caps[i].max = 1 << 20
		readers.Add(1)
		go func() { defer readers.Done(); caps[i].readFrom(r) }()
	}
	for _, w := range writers {
		if _, err := w.WriteString(big); err != nil {
			t.Fatal(err)
		}
	}
	const grace = 20 * time.Second
	start := time.Now()
	collectDrained(&readers, ends, grace)
	if d := time.Since(start); d > grace/4 {
		t.Fatalf("collectDrained took %s with the writers still open: it waited for EOF", d)
	}
	for i := range caps {
		if caps[i].String() != big {
			t.Fatalf("pipe %d: %d bytes read, want all %d", i, len(caps[i].String()), len(big))
		}
	}
}

// The stdout of a Deno run at level process is closed once drained after
// its envelope frame (collectDrained): that ends the demultiplexer without
// breaking the framing or dropping the envelope.
func TestDemuxEndsWithoutBreakingWhenItsStdoutIsClosedAfterTheEnvelope(t *testing.T) {
	env := `{"protocol_version":1,"status":"ok","result":1}`
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	f := framedChannel{envelope: capture{max: 1 << 20}, envelopeIn: make(chan struct{})}
	out := textCapture{max: 1 << 20}
	done := make(chan struct{})
	go func() { defer close(done); f.demux(r, &out) }()
	if _, err := w.Write(append(frameBytes(frameStdout, "hi\n"), frameBytes(frameEnvelope, env)...)); err != nil {
		t.Fatal(err)
	}
	<-f.envelopeIn
	var readers sync.WaitGroup
	readers.Add(1)
	go func() { defer readers.Done(); <-done }()
	collectDrained(&readers, []*os.File{r}, 20*time.Second)
	if f.broken != "" || string(f.envelope.buf) != env || !f.whole || out.String() != "hi\n" {
		t.Fatalf("broken %q, envelope %q (whole %v), stdout %q", f.broken, f.envelope.buf, f.whole, out.String())
	}
}
