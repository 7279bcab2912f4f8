package dispatch

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/execgate/execgate/sandbox"
)

// Live output of a dispatched run (SSE, DESIGN §14) travels back like its
// tool calls: the executor's remoteOutput RPUSHes each chunk the sandbox
// keeps on the run's output list; the gateway's await loop pops them and
// hands them to the run's own OutputFunc, and drains the list before it
// answers, so every chunk reaches it before the envelope.
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

type outputChunk struct {
	Stream string `json:"s"`
	Data   []byte `json:"d"`
}

// remoteOutput sends a run's output chunks to its gateway (executor side).
type remoteOutput struct {
	rdb     redis.UniversalClient
	key     string
	ch      chan outputChunk
	done    chan struct{}
	mu      sync.Mutex
	dropped int
}

func newRemoteOutput(rdb redis.UniversalClient, key string) *remoteOutput {
	o := &remoteOutput{rdb: rdb, key: key, ch: make(chan outputChunk, maxOutputPending), done: make(chan struct{})}
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
		b, _ := json.Marshal(c)
		ctx, cancel := context.WithTimeout(context.Background(), outputPushTimeout)
		pipe := o.rdb.Pipeline()
		pipe.RPush(ctx, o.key, b)
		pipe.Expire(ctx, o.key, bridgeKeyTTL)
		if _, err := pipe.Exec(ctx); err != nil {
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

// deliverOutput hands one chunk popped from the run's output list to fn
// (gateway side); a malformed one is dropped.
func deliverOutput(fn sandbox.OutputFunc, raw string) {
	var c outputChunk
	if fn == nil || json.Unmarshal([]byte(raw), &c) != nil {
		return
	}
	if c.Stream != sandbox.StreamStdout && c.Stream != sandbox.StreamStderr {
		return
	}
	fn(c.Stream, c.Data)
}

// drainOutput delivers what is left on the run's output list (gateway
// side, before the answer).
func (d *Dispatcher) drainOutput(ctx context.Context, fn sandbox.OutputFunc, key string) {
	for {
		v, err := d.rdb.LPop(ctx, key).Result()
		if err != nil {
			return
		}
		deliverOutput(fn, v)
	}
}
