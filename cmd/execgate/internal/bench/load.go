// Package bench is the benchmark harness behind `execgate bench` (DESIGN
// §11): process start-up costs (bare Python, raw nsjail, `execgate run`),
// the gateway end to end over real HTTP (cold and with a warm pool), the
// gateway's own overhead with a no-op executor, and memory. Every number it
// prints is measured in the run that prints it.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/execgate/execgate/internal/stats"
)

// LoadOptions describe one closed-loop HTTP load: Concurrency workers each
// send the next request as soon as their previous one is answered.
type LoadOptions struct {
	URL         string // full URL of POST /v1/execute
	Token       string // bearer token
	Body        string // request body
	Concurrency int    // default 1
	Requests    int    // measured requests, default 200
	Warmup      int    // unmeasured requests sent first, default 10
	// measured, when set, is called when the measured requests start; the
	// function it returns when they are all answered.
	measured func() func()
}

// LoadResult summarises the measured requests.
type LoadResult struct {
	Concurrency   int
	Requests      int
	Errors        int // anything but 200 with X-Execution-Status: ok
	Elapsed       time.Duration
	P50, P95, P99 time.Duration
	Max           time.Duration
	RPS           float64
}

func (r LoadResult) String() string {
	return fmt.Sprintf("concurrency %d: %d requests in %s, %.0f req/s, p50 %s, p95 %s, p99 %s, max %s, errors %d",
		r.Concurrency, r.Requests, r.Elapsed.Round(time.Millisecond), r.RPS,
		r.P50.Round(time.Microsecond), r.P95.Round(time.Microsecond), r.P99.Round(time.Microsecond), r.Max.Round(time.Microsecond), r.Errors)
}

// Load runs the load and returns latency percentiles and throughput.
func Load(ctx context.Context, o LoadOptions) (*LoadResult, error) {
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	if o.Requests <= 0 {
		o.Requests = 200
	}
	if o.Warmup < 0 {
		o.Warmup = 0
	}
	client := &http.Client{
		Timeout:   60 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: o.Concurrency, MaxConnsPerHost: o.Concurrency},
	}
	defer client.CloseIdleConnections()
	send := func() (time.Duration, bool) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.URL, strings.NewReader(o.Body))
		if err != nil {
			return 0, false
		}
		req.Header.Set("Authorization", "Bearer "+o.Token)
		req.Header.Set("Content-Type", "application/json")
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return time.Since(t0), false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return time.Since(t0), resp.StatusCode == http.StatusOK && resp.Header.Get("X-Execution-Status") == "ok"
	}
	run := func(n int) ([]time.Duration, int, time.Duration) {
		lat := make([]time.Duration, n)
		var (
			mu   sync.Mutex // guards errs and next
			errs int
			next int
			wg   sync.WaitGroup
		)
		t0 := time.Now()
		for w := 0; w < o.Concurrency; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					mu.Lock()
					i := next
					next++
					mu.Unlock()
					if i >= n || ctx.Err() != nil {
						return
					}
					d, ok := send()
					lat[i] = d
					if !ok {
						mu.Lock()
						errs++
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		return lat, errs, time.Since(t0)
	}
	if o.Warmup > 0 {
		if _, errs, _ := run(o.Warmup); errs == o.Warmup {
			return nil, errors.New("every warm-up request failed; is the gateway configured and ready?")
		}
	}
	var done func()
	if o.measured != nil {
		done = o.measured()
	}
	lat, errs, elapsed := run(o.Requests)
	if done != nil {
		done()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	slices.Sort(lat)
	return &LoadResult{
		Concurrency: o.Concurrency,
		Requests:    o.Requests,
		Errors:      errs,
		Elapsed:     elapsed,
		P50:         stats.Percentile(lat, 0.50),
		P95:         stats.Percentile(lat, 0.95),
		P99:         stats.Percentile(lat, 0.99),
		Max:         lat[len(lat)-1],
		RPS:         float64(o.Requests) / elapsed.Seconds(),
	}, nil
}
