package dispatch

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/execgate/execgate/sandbox"
)

// Live output of a dispatched run (SSE, DESIGN §14) travels back like its
// tool calls: the executor's remoteOutput RPUSHes each chunk the sandbox
// keeps on the run's output list; the gateway's await loop pops them and
// hands them to the run's own OutputFunc, and drains the list before it
// answers, so every chunk reaches it before the envelope. Chunks are
// signed frames of the run (frames.go), numbered in order: a chunk the
// gateway did not get from the executor it confirmed, or not after the
// last one delivered, is refused and never reaches the caller.
//
// Bounds: the sandbox passes on only bytes its output caps keep (at most
// output_bytes per stream), chunks wait in a buffer of maxOutputPending and
// are dropped, counted and logged beyond it (the envelope still has the
// whole capped output), and the list expires with the run's other keys.

const (
	// maxOutputPending is how many chunks an executor holds for one run
	// while Redis takes them.
	maxOutputPending = 256
	// outputPushTimeout bounds one RPUSH.
	outputPushTimeout = 2 * time.Second
)

// maxOutputChunkWire bounds one chunk on the wire (the sandbox hands on
// pipe reads of at most 64 KiB; base64 and the frame's head).
const maxOutputChunkWire = 256 << 10

type outputChunk struct {
	frameHead        // Seq numbers the run's chunks from 1, in order
	Stream    string `json:"s"`
	Data      []byte `json:"d"`
}

// remoteOutput sends a run's output chunks to its gateway (executor side),
// each a signed frame of the run.
type remoteOutput struct {
	rdb     redis.UniversalClient
	key     string
	sig     signer
	head    frameHead
	ch      chan outputChunk
	done    chan struct{}
	mu      sync.Mutex
	dropped int
}

func newRemoteOutput(rdb redis.UniversalClient, key string, sig signer, head frameHead) *remoteOutput {
	o := &remoteOutput{rdb: rdb, key: key, sig: sig, head: head, ch: make(chan outputChunk, maxOutputPending), done: make(chan struct{})}
	go o.push()
	return o
}

// write is the run's sandbox.OutputFunc: it never blocks the capture.
func (o *remoteOutput) write(stream string, p []byte) {
	select {
	case o.ch <- outputChunk{Stream: stream, Data: append([]byte(nil), p...)}:
	default:
		o.mu.Lock()
		o.dropped++
		o.mu.Unlock()
	}
}

func (o *remoteOutput) push() {
	defer close(o.done)
	for c := range o.ch {
		o.head.Seq++
		c.frameHead = o.head
		b, err := sealFrame(o.sig, domainOutput, c)
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), outputPushTimeout)
		if err := push(ctx, o.rdb, o.key, b, bridgeKeyTTL); err != nil {
			o.mu.Lock()
			o.dropped++
			o.mu.Unlock()
		}
		cancel()
	}
}

// close waits until every chunk written was pushed (or dropped) and says
// how many were dropped; the reply goes after it.
func (o *remoteOutput) close() int {
	close(o.ch)
	<-o.done
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.dropped
}

// openOutput verifies one value of the run's output list: signed under
// the run's key by the executor the gateway confirmed, numbered after the
// last chunk delivered (gateway side).
func (w *watch) openOutput(raw string) (outputChunk, error) {
	var c outputChunk
	if err := openFrame(w.sig, domainOutput, raw, maxOutputChunkWire, &c); err != nil {
		return c, err
	}
	if err := c.check(w.runID, w.executor); err != nil {
		return c, err
	}
	if c.Seq <= w.outputSeq {
		return c, errors.New("sequence number not after the last chunk's (a replay)")
	}
	if c.Stream != sandbox.StreamStdout && c.Stream != sandbox.StreamStderr {
		return c, errors.New("unknown stream")
	}
	w.outputSeq = c.Seq
	return c, nil
}

// deliverOutput hands one value popped from the run's output list to the
// run's OutputFunc once it verifies; else it is refused.
func (d *Dispatcher) deliverOutput(w *watch, fn sandbox.OutputFunc, raw string) {
	c, err := w.openOutput(raw)
	if err != nil {
		d.refuseFrame(w, "output", err)
		return
	}
	if fn != nil {
		fn(c.Stream, c.Data)
	}
}

// drainOutput delivers what is left on the run's output list (gateway
// side, before the answer).
func (d *Dispatcher) drainOutput(ctx context.Context, w *watch, fn sandbox.OutputFunc) {
	for {
		v, err := d.rdb.LPop(ctx, d.k.output(w.runID)).Result()
		if err != nil {
			return
		}
		d.deliverOutput(w, fn, v)
	}
}
