package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/execgate/execgate/internal/jsonsize"
	"github.com/execgate/execgate/sandbox"
)

// A tool controls how much output the gateway holds for its run: stdout,
// stderr and the result, each up to the run's output_bytes as encoded in
// the envelope (the sandbox counts encoded bytes, so the response body is
// at most three caps plus a bounded amount of logs and error text). This
// file bounds the rest of the path:
//
//   - the body is built in one allocation of its final size (encodeEnvelope),
//     never in encoding/json's doubling buffer, which its pool would keep;
//   - the output of all runs in flight shares one memory budget
//     (server.max_output_memory_mb): a run reserves outputReservation of its
//     output_bytes before it starts and gives it back once its response is
//     written; a run that cannot get it within its own time limit is
//     refused with 503 Overloaded;
//   - after a burst of large output the garbage is returned to the OS.

// outputReservation is what one run with output cap c may hold in this
// process at its peak: its capture buffers and the strings made of them
// (stdout and stderr, a cap each, both at the end of the run), the result
// (a cap, parsed out of an envelope of a cap), and the response body (three
// caps), counted as six caps, plus 4 MiB for logs, error text and framing.
func outputReservation(c int64) int64 { return 6*c + 4<<20 }

// platformMaxOutput is the largest output_bytes the default policies grant
// (policies/platform.rego); the default budget lets every run slot hold a
// run that uses it.
const platformMaxOutput = 16 << 20

// errOutputBudget: the run could not reserve memory for its output in time.
var errOutputBudget = errors.New("output memory budget exhausted")

// freeAfterBytes is how many reserved bytes must have been given back since
// the last time before an idle gateway returns its free memory to the OS.
const freeAfterBytes = 64 << 20

// outputBudget is the gateway-wide budget of memory for run output in
// flight. Waiters are served in arrival order (a large reservation is not
// starved by small ones).
type outputBudget struct {
	total int64
	sem   *semaphore.Weighted
	// freeOS returns free memory to the OS; tests count its calls.
	freeOS func()

	mu       sync.Mutex // guards inUse and released
	inUse    int64      // bytes reserved now
	released int64      // bytes given back since the last freeOS
	freeing  atomic.Bool
}

func newOutputBudget(total int64) *outputBudget {
	return &outputBudget{total: total, sem: semaphore.NewWeighted(total), freeOS: debug.FreeOSMemory}
}

// acquire reserves memory for the output of a run with limits l, waiting at
// most the run's own time limit (the caller is prepared to wait that long
// for its answer). A reservation larger than the whole budget is cut to
// the budget: such a run runs alone. The returned func gives the
// reservation back; call it once the response is written.
func (b *outputBudget) acquire(ctx context.Context, l sandbox.Limits) (release func(), err error) {
	n := min(outputReservation(l.OutputBytes), b.total)
	wctx, cancel := context.WithTimeout(ctx, time.Duration(l.TimeoutMS)*time.Millisecond)
	defer cancel()
	if err := b.sem.Acquire(wctx, n); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %d bytes for %d ms", errOutputBudget, n, l.TimeoutMS)
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
	// forced GC two minutes later. One forced GC and scavenge costs a few
	// milliseconds for the gateway's small live heap.
	if idle && free && b.freeing.CompareAndSwap(false, true) {
		go func() {
			defer b.freeing.Store(false)
			b.freeOS()
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

// encodeEnvelope encodes env exactly as encodeJSON does, in one allocation
// of the body's size: stdout, stderr and a large result, the parts a tool
// makes large, are written straight into the body instead of through
// encoding/json's buffer (which grows by doubling and is kept in a
// sync.Pool after use). The rest of the envelope is encoded with
// placeholders carrying a random nonce, which no tool can forge, and the
// parts are spliced in at their places.
func encodeEnvelope(env *Envelope) ([]byte, error) {
	if len(env.Stdout)+len(env.Stderr)+len(env.Result) < spliceMin {
		return encodeJSON(env)
	}
	nonce := newID()
	type part struct {
		mark  []byte // the placeholder as encoded
		size  int    // upper bound of the part's encoded size
		write func(dst []byte) ([]byte, error)
		at    int
	}
	skel := *env
	var parts []part
	text := func(field *string, name string) {
		s := *field
		ph := "\x00" + name + "-" + nonce
		*field = ph
		parts = append(parts, part{mark: jsonsize.AppendString(nil, ph), size: jsonsize.StringLen(s),
			write: func(dst []byte) ([]byte, error) { return jsonsize.AppendString(dst, s), nil }})
	}
	text(&skel.Stdout, "stdout")
	text(&skel.Stderr, "stderr")
	if len(env.Result) >= spliceMin/4 {
		raw := env.Result
		mark := jsonsize.AppendString(nil, "\x00result-"+nonce)
		skel.Result = mark
		parts = append(parts, part{mark: mark, size: len(raw), write: func(dst []byte) ([]byte, error) {
			// What encoding/json does with a RawMessage (HTML escaping off);
			// compacting never makes it longer.
			b := bytes.NewBuffer(dst)
			if err := json.Compact(b, raw); err != nil {
				return nil, fmt.Errorf("encoding the result: %w", err)
			}
			return b.Bytes(), nil
		}})
	}
	head, err := encodeJSON(&skel)
	if err != nil {
		return nil, err
	}
	size := len(head)
	for i := range parts {
		p := &parts[i]
		if p.at = bytes.Index(head, p.mark); p.at < 0 {
			return nil, errors.New("encoding the envelope: placeholder lost")
		}
		size += p.size - len(p.mark)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].at < parts[j].at })
	body := make([]byte, 0, size)
	last := 0
	for _, p := range parts {
		body = append(body, head[last:p.at]...)
		if body, err = p.write(body); err != nil {
			return nil, err
		}
		last = p.at + len(p.mark)
	}
	return append(body, head[last:]...), nil
}
