package execution

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"runtime/metrics"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/execgate/execgate/internal/jsonsize"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
)

// A tool controls how much output the gateway holds for its run: stdout,
// stderr and the result, each up to the run's output_bytes as encoded in
// the envelope (the sandbox counts encoded bytes, so the response body is
// at most three caps plus a bounded amount of logs and error text). This
// file bounds the rest of the path:
//
//   - the body never goes through encoding/json's doubling buffer, which its
//     pool would keep (encodeEnvelope): it is streamed to the client, or,
//     when the idempotency store keeps it, built in one allocation of its
//     size;
//   - the output of all runs in flight shares one memory budget
//     (server.max_output_memory_mb): a run reserves outputReservation of its
//     output_bytes before it starts and gives it back once its response is
//     written; a run that cannot get it within its own time limit is
//     refused with 503 Overloaded;
//   - after a burst of large output the garbage is returned to the OS
//     (once, when the heap really grew: not after every few small runs).

// outputReservation is what one run with output cap c may hold in this
// process at its peak: its capture buffers and the strings made of them
// (stdout and stderr, a cap each, both at the end of the run), the result
// (a cap, parsed out of an envelope of a cap), and the response body (three
// caps), counted as six caps, plus 4 MiB for logs, error text and framing.
func outputReservation(c int64) int64 { return 6*c + 4<<20 }

// OutputMemoryFor is the output memory that lets runs run slots each hold
// a run with the largest output and artifacts the default policies grant
// (limits.Max, policies/platform.rego).
func OutputMemoryFor(runs int) int64 { return int64(runs) * runReservation(limits.Max) }

// errOutputBudget: the run could not reserve memory for its output in time.
var errOutputBudget = errors.New("output memory budget exhausted")

// freeAfterBytes is how many reserved bytes must have been given back since
// the last look before an idle gateway looks at its heap, and how much the
// heap must have grown since it last returned memory to the OS before it
// does so again.
const freeAfterBytes = 64 << 20

// outputBudget is the gateway-wide budget of memory for run output in
// flight. Waiters are served in arrival order (a large reservation is not
// starved by small ones).
type outputBudget struct {
	total int64
	sem   *semaphore.Weighted
	// freeOS returns free memory to the OS; tests count its calls.
	freeOS func()
	// footprint is the heap memory the process holds (heapFootprint);
	// tests fake it.
	footprint func() uint64
	// baseline is footprint() right after the last freeOS (0 before the
	// first); only the goroutine holding freeing reads or writes it.
	baseline uint64

	mu       sync.Mutex // guards inUse and released
	inUse    int64      // bytes reserved now
	released int64      // bytes given back since the last freeOS
	freeing  atomic.Bool
}

func newOutputBudget(total int64) *outputBudget {
	return &outputBudget{total: total, sem: semaphore.NewWeighted(total), freeOS: debug.FreeOSMemory, footprint: heapFootprint}
}

// heapFootprint is the heap memory the Go runtime holds: objects, live or
// not yet collected, and free spans not yet returned to the OS. Reading it
// stops nothing (runtime/metrics), unlike a GC.
func heapFootprint() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/free:bytes"}}
	metrics.Read(s)
	var n uint64
	for _, v := range s {
		if v.Value.Kind() == metrics.KindUint64 {
			n += v.Value.Uint64()
		}
	}
	return n
}

// acquire reserves memory for the output of a run with limits l, waiting at
// most the run's own time limit (the caller is prepared to wait that long
// for its answer). A reservation larger than the whole budget is cut to
// the budget: such a run runs alone. The returned func gives the
// reservation back; call it once the response is written.
func (b *outputBudget) acquire(ctx context.Context, l sandbox.Limits) (release func(), err error) {
	return b.reserve(ctx, runReservation(l), time.Duration(l.TimeoutMS)*time.Millisecond)
}

// runReservation is what a run with limits l reserves: its output's and
// its artifacts'.
func runReservation(l sandbox.Limits) int64 {
	return outputReservation(l.OutputBytes) + artifactReservation(l)
}

// acquireReplay reserves memory for replaying a remembered response of
// size bytes: the response as fetched and the envelope decoded from it
// (never larger), waiting at most the default run time limit.
func (b *outputBudget) acquireReplay(ctx context.Context, size int) (release func(), err error) {
	return b.reserve(ctx, 2*int64(size)+4<<20, time.Duration(limits.Default.TimeoutMS)*time.Millisecond)
}

// ReserveOutput reserves n bytes of the output memory budget for
// something the gateway holds outside a run (a stored result copied out of
// the async store for its readers), waiting at most the default run time
// limit; the error is 503 Overloaded at the edge. The returned func gives
// them back (once).
func (f *Flow) ReserveOutput(ctx context.Context, n int64) (release func(), err error) {
	return f.output.reserve(ctx, n, time.Duration(limits.Default.TimeoutMS)*time.Millisecond)
}

func (b *outputBudget) reserve(ctx context.Context, n int64, wait time.Duration) (release func(), err error) {
	n = min(n, b.total)
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := b.sem.Acquire(wctx, n); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %d bytes for %v", errOutputBudget, n, wait)
	}
	b.mu.Lock()
	b.inUse += n
	b.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { b.release(n) }) }, nil
}

func (b *outputBudget) release(n int64) {
	b.sem.Release(n)
	b.mu.Lock()
	b.inUse -= n
	b.released += n
	idle, free := b.inUse == 0, b.released >= freeAfterBytes
	if idle && free {
		b.released = 0
	}
	b.mu.Unlock()
	// Nothing else may allocate for a while once a burst is over, so no GC
	// would run and the runtime would keep the burst's memory until the
	// forced GC two minutes later. A forced GC and scavenge costs a few
	// milliseconds and makes the next runs fault their memory in again, so
	// it is done only when the heap holds freeAfterBytes more than it did
	// after the last one: reservations are caps, and runs of small output
	// (most) give back 64 MiB of them every few runs while the heap stays
	// at a few MiB. (Done after every few idle runs, it took ≈ 1.6 ms of
	// CPU per request at concurrency 1.)
	if idle && free && b.freeing.CompareAndSwap(false, true) {
		go func() {
			defer b.freeing.Store(false)
			if b.footprint() < b.baseline+freeAfterBytes {
				return
			}
			b.freeOS()
			b.baseline = b.footprint()
		}()
	}
}

// reserved is the number of bytes reserved now.
func (b *outputBudget) reserved() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inUse
}

// spliceMin is the amount of tool output below which an envelope is simply
// encoded with encodeJSON.
const spliceMin = 64 << 10

// EncodedEnvelope is an envelope ready to be written: the JSON of
// everything but the tool's large parts (stdout, stderr, a large result),
// with placeholders where they go, and those parts. Its bytes are exactly
// what encodeJSON writes for the envelope, but they are never all in one
// buffer of encoding/json's (which grows by doubling and is kept in a
// sync.Pool after use): Bytes builds them in one allocation of their
// size, Write streams them.
type EncodedEnvelope struct {
	head  []byte
	parts []envelopePart // in the order they appear in head
	size  int
	body  []byte // the whole body once bytes made it
}

type envelopePart struct {
	at, markLen int    // where the placeholder is in head
	text        string // a string, encoded here, or
	raw         []byte // JSON written as is (compact)
}

func (p envelopePart) size() int {
	if p.raw != nil {
		return len(p.raw)
	}
	return jsonsize.StringLen(p.text)
}

// EncodeEnvelope prepares env for writing. The placeholders carry a random
// nonce, so no tool output can pose as one.
func EncodeEnvelope(env *Envelope) (*EncodedEnvelope, error) {
	if len(env.Stdout)+len(env.Stderr)+len(env.Result) < spliceMin {
		b, err := EncodeJSON(env)
		return &EncodedEnvelope{head: b, size: len(b)}, err
	}
	nonce := NewID()
	skel := *env
	type mark struct {
		mark []byte
		part envelopePart
	}
	var marks []mark
	text := func(field *string, name string) {
		ph := "\x00" + name + "-" + nonce
		marks = append(marks, mark{jsonsize.AppendString(nil, ph), envelopePart{text: *field}})
		*field = ph
	}
	text(&skel.Stdout, "stdout")
	text(&skel.Stderr, "stderr")
	if len(env.Result) >= spliceMin/4 {
		// What encoding/json does with a RawMessage (HTML escaping off).
		var b bytes.Buffer
		b.Grow(len(env.Result))
		if err := json.Compact(&b, env.Result); err != nil {
			return nil, fmt.Errorf("encoding the result: %w", err)
		}
		m := jsonsize.AppendString(nil, "\x00result-"+nonce)
		marks = append(marks, mark{m, envelopePart{raw: b.Bytes()}})
		skel.Result = m
	}
	head, err := EncodeJSON(&skel)
	if err != nil {
		return nil, err
	}
	e := &EncodedEnvelope{head: head, size: len(head)}
	for _, m := range marks {
		p := m.part
		if p.at = bytes.Index(head, m.mark); p.at < 0 {
			return nil, errors.New("encoding the envelope: placeholder lost")
		}
		p.markLen = len(m.mark)
		e.size += p.size() - p.markLen
		e.parts = append(e.parts, p)
	}
	sort.Slice(e.parts, func(i, j int) bool { return e.parts[i].at < e.parts[j].at })
	return e, nil
}

// Size is the length of the body in bytes.
func (e *EncodedEnvelope) Size() int { return e.size }

// Bytes returns the whole body, in one allocation of its size.
func (e *EncodedEnvelope) Bytes() []byte {
	if len(e.parts) == 0 {
		return e.head
	}
	if e.body != nil {
		return e.body
	}
	body := make([]byte, 0, e.size)
	last := 0
	for _, p := range e.parts {
		body = append(body, e.head[last:p.at]...)
		if p.raw != nil {
			body = append(body, p.raw...)
		} else {
			body = jsonsize.AppendString(body, p.text)
		}
		last = p.at + p.markLen
	}
	e.body = append(body, e.head[last:]...)
	return e.body
}

// streamChunk is how many bytes of a string Write encodes at a time.
const streamChunk = 32 << 10

// Write writes the body to w, holding at most a small buffer of it.
func (e *EncodedEnvelope) Write(w io.Writer) error {
	if len(e.parts) == 0 || e.body != nil {
		_, err := w.Write(e.Bytes())
		return err
	}
	buf := make([]byte, 0, 6*streamChunk+8)
	last := 0
	for _, p := range e.parts {
		if _, err := w.Write(e.head[last:p.at]); err != nil {
			return err
		}
		last = p.at + p.markLen
		if p.raw != nil {
			if _, err := w.Write(p.raw); err != nil {
				return err
			}
			continue
		}
		buf = append(buf[:0], '"')
		for s := p.text; ; {
			n := jsonsize.CutAt(s, streamChunk)
			buf = jsonsize.AppendStringContent(buf, s[:n])
			if s = s[n:]; s == "" {
				break
			}
			if _, err := w.Write(buf); err != nil {
				return err
			}
			buf = buf[:0]
		}
		if _, err := w.Write(append(buf, '"')); err != nil {
			return err
		}
	}
	_, err := w.Write(e.head[last:])
	return err
}
