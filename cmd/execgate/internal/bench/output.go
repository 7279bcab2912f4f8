package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/execgate/execgate/app"
	"github.com/execgate/execgate/sandbox"
)

// OutputFloodBytes is what each flood run writes to stdout and to stderr,
// and its output_bytes: the platform's largest cap (policies/platform.rego).
const OutputFloodBytes = 16 << 20

// outputFloodSource writes args["bytes"] bytes of 0x01, which the envelope
// carries as six-byte escapes, to stdout and stderr.
const outputFloodSource = `import os
def run(args, context):
    block = b"\x01" * (1 << 20)
    for _ in range(args["bytes"] >> 20):
        os.write(1, block)
        os.write(2, block)
    return "flooded"
`

// OutputReport is the gateway's resident memory around concurrent runs
// flooding stdout and stderr with control bytes up to the platform's
// largest output cap (issue #10 class 2). RSS in KiB.
type OutputReport struct {
	FloodStats
}

// FloodStats is what a flood row measures, the output floods' and the
// artifact floods' alike.
type FloodStats struct {
	Concurrency  int   // clients sending at once (2×CPUs)
	Requests     int   // flood runs sent in all
	OK           int   // 200 as expected (see the report's row)
	Overloaded   int   // 503 Overloaded (output memory budget)
	Errors       int   // anything else
	MaxBodyBytes int64 // largest response body
	IdleKB       int64 // before the floods
	PeakKB       int64 // highest RSS sampled during them
	AfterKB      int64 // RSS afterFlood after the last answer
	Wall         time.Duration
	BudgetMB     int64 // server.max_output_memory_mb in effect
}

// afterFlood is when OutputReport.AfterKB is read.
const afterFlood = 2 * time.Second

// outputFlood measures OutputReport against an in-process gateway (this
// process's RSS is the gateway's: the client discards the bodies as they
// arrive).
func (r *Report) outputFlood(ctx context.Context) error {
	tg, err := r.sandboxTarget(ctx, 0)
	if err != nil {
		return err
	}
	defer func() { _ = tg.stop(ctx) }()
	conc := 2 * runtime.NumCPU()
	rep := &OutputReport{FloodStats{Concurrency: conc, Requests: 2 * conc, BudgetMB: r.Options.Config.Server.WithDefaults().MaxOutputMemoryMB}}
	body, _ := json.Marshal(map[string]any{
		"source": outputFloodSource,
		"args":   map[string]any{"bytes": OutputFloodBytes},
		"limits": map[string]any{"output_bytes": OutputFloodBytes, "timeout_ms": 30000, "cpu_ms": 30000},
	})
	// One small run first so the idle figure includes a run's lazy set-up.
	if a := postFlood(ctx, tg, []byte(probeBody(r.Options.Runtimes[0], sandbox.IsolationJail))); a.status != http.StatusOK {
		return fmt.Errorf("bench: output: the probe answered %d", a.status)
	}
	runtime.GC()
	debug.FreeOSMemory()
	rep.IdleKB = selfRSSKB()

	r.progress("output: %d flood runs (2×%d MiB of 0x01 each) at concurrency %d", rep.Requests, OutputFloodBytes>>20, conc)
	f := runFlood(rep.Requests, conc, func() floodAnswer {
		a := postFlood(ctx, tg, body)
		a.ok = a.status == http.StatusOK && a.truncated
		return a
	})
	rep.OK, rep.Overloaded, rep.Errors, rep.MaxBodyBytes, rep.Wall, rep.PeakKB = f.ok, f.overloaded, f.errors, f.maxBody, f.wall, f.peakKB
	rep.AfterKB = f.afterKB
	r.Output = rep
	return nil
}

// flood is what runFlood saw.
type flood struct {
	ok, overloaded, errors int
	maxBody                int64
	wall                   time.Duration
	peakKB, afterKB        int64
}

// runFlood sends requests with conc clients at once (post sends one and
// says how it was answered), sampling this process's RSS meanwhile and
// afterFlood after the last answer (no GC from here: the gateway returns
// the memory itself once the burst is over).
func runFlood(requests, conc int, post func() floodAnswer) flood {
	var f flood
	stop := make(chan struct{})
	peak := make(chan int64, 1)
	go sampleRSS(stop, peak)
	start := time.Now()
	next := make(chan struct{}, requests)
	for range requests {
		next <- struct{}{}
	}
	close(next)
	var mu sync.Mutex // guards f's counters
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				a := post()
				mu.Lock()
				switch {
				case a.ok:
					f.ok++
				case a.status == http.StatusServiceUnavailable && a.overloaded:
					f.overloaded++
				default:
					f.errors++
				}
				f.maxBody = max(f.maxBody, a.bytes)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	f.wall = time.Since(start)
	close(stop)
	f.peakKB = <-peak
	time.Sleep(afterFlood)
	f.afterKB = selfRSSKB()
	return f
}

type floodAnswer struct {
	status     int
	bytes      int64
	truncated  bool
	overloaded bool
	ok         bool // the answer the flood wants
}

// postFlood sends one request and reads the answer without keeping it,
// except its last 4 KiB (the fields after stdout and stderr).
func postFlood(ctx context.Context, tg *target, body []byte) floodAnswer {
	resp, err := tg.post(ctx, body)
	if err != nil {
		return floodAnswer{}
	}
	defer resp.Body.Close()
	var tail tailBuffer
	n, _ := io.Copy(&tail, resp.Body)
	return floodAnswer{
		status:     resp.StatusCode,
		bytes:      n,
		truncated:  bytes.Contains(tail.b, []byte(`"truncated":{"stdout":true,"stderr":true}`)),
		overloaded: bytes.Contains(tail.b, []byte(`"type":"Overloaded"`)),
	}
}

// tailBuffer keeps the last 4 KiB written to it.
type tailBuffer struct{ b []byte }

func (w *tailBuffer) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	if len(w.b) > 4<<10 {
		w.b = append(w.b[:0], w.b[len(w.b)-4<<10:]...)
	}
	return len(p), nil
}

// post sends body to the target's POST /v1/execute with its token.
func (tg *target) post(ctx context.Context, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, tg.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tg.token)
	return http.DefaultClient.Do(req)
}

// sandboxTarget is an in-process gateway over the real sandbox with warm
// jails, serving the first of the benchmarked runtimes, refused when the
// sandbox is unavailable.
func (r *Report) sandboxTarget(ctx context.Context, warm int) (*target, error) {
	tg, err := startTarget(ctx, r.Options.Config, warm, r.Options.Runtimes[:1], app.Options{Progress: r.Options.Progress})
	if err != nil {
		return nil, err
	}
	if err := tg.app.SandboxErr(); err != nil {
		_ = tg.stop(ctx)
		return nil, fmt.Errorf("bench: the sandbox is unavailable: %w", err)
	}
	return tg, nil
}
