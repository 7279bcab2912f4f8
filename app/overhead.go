package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/tenancy"
)

// OverheadOptions configure MeasureOverhead.
type OverheadOptions struct {
	// Config to start from. Nil: the embedded default in a temporary state
	// dir. Listen is forced to 127.0.0.1:0 and a "bench" tenant with
	// effectively unlimited quota is added, so quota is exercised without
	// refusing.
	Config *config.Config
	// Concurrency is the number of client connections sending at once.
	// Default 1.
	Concurrency int
	// Requests is the number of measured requests. Default 1000.
	Requests int
	// Warmup requests are sent first and not measured. Default 50.
	Warmup int
}

// OverheadResult is the gateway's own cost per request: HTTP, auth,
// validation, policy, quota and audit, with a no-op executor.
type OverheadResult struct {
	Concurrency int
	Requests    int
	Errors      int // responses other than 200 ok
	Elapsed     time.Duration
	P50, P90    time.Duration
	P99, Max    time.Duration
	RPS         float64
}

func (r OverheadResult) String() string {
	return fmt.Sprintf("concurrency %d: %d requests in %s, %.0f req/s, p50 %s, p90 %s, p99 %s, max %s, errors %d",
		r.Concurrency, r.Requests, r.Elapsed.Round(time.Millisecond), r.RPS,
		r.P50.Round(time.Microsecond), r.P90.Round(time.Microsecond), r.P99.Round(time.Microsecond), r.Max.Round(time.Microsecond), r.Errors)
}

// benchTenant has quota high enough that admission always says yes.
func benchTenant() tenancy.Tenant {
	t := config.DemoTenant()
	t.ID = "bench"
	t.Quota = quota.Limits{RatePerMinute: 10_000_000, Burst: 1_000_000, Concurrency: 1_000_000, DailyCPUSeconds: 1_000_000_000}
	return t
}

// MeasureOverhead starts a gateway with NoopRunner on a loopback port and
// sends POST /v1/execute over real HTTP (keep-alive) at the given
// concurrency. It is what `go test -bench Overhead ./app` and
// `execgate bench` report as gateway overhead.
func MeasureOverhead(ctx context.Context, opts OverheadOptions) (*OverheadResult, error) {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 1
	}
	if opts.Requests <= 0 {
		opts.Requests = 1000
	}
	if opts.Warmup <= 0 {
		opts.Warmup = 50
	}
	cfg := opts.Config
	if cfg == nil {
		dir, err := os.MkdirTemp("", "execgate-overhead-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		if cfg, err = config.Load("", []string{"EXECGATE_STATE_DIR=" + dir}); err != nil {
			return nil, err
		}
	}
	c := *cfg
	c.Listen = "127.0.0.1:0"
	c.Tenants = append(slices.Clone(c.Tenants), benchTenant())
	if c.Server.MaxConcurrentRuns < opts.Concurrency {
		c.Server.MaxConcurrentRuns = opts.Concurrency
	}
	a, err := New(ctx, Options{Config: &c, Runner: NoopRunner{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Progress: io.Discard})
	if err != nil {
		return nil, err
	}
	if err := a.Start(); err != nil {
		_ = a.Stop(ctx)
		return nil, err
	}
	defer func() { _ = a.Stop(context.WithoutCancel(ctx)) }()
	s, err := a.Signer()
	if err != nil {
		return nil, fmt.Errorf("overhead needs the dev HS256 key: %w", err)
	}
	tok, err := s.Mint(auth.Claims{Subject: "bench", TenantID: "bench", Roles: []string{tenancy.RoleExecutor}}, time.Hour)
	if err != nil {
		return nil, err
	}
	client := &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: opts.Concurrency, MaxConnsPerHost: opts.Concurrency},
	}
	defer client.CloseIdleConnections()
	url := a.URL() + "/v1/execute"
	const body = `{"source":"def run(args, context):\n    return {\"ok\": True}\n","args":{"n":1}}`
	send := func() (time.Duration, bool) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			return 0, false
		}
		req.Header.Set("Authorization", "Bearer "+tok)
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
			mu     sync.Mutex // guards errs and next
			errs   int
			next   int
			wg     sync.WaitGroup
			t0     = time.Now()
			worker = func() {
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
			}
		)
		for w := 0; w < opts.Concurrency; w++ {
			wg.Add(1)
			go worker()
		}
		wg.Wait()
		return lat, errs, time.Since(t0)
	}
	if _, errs, _ := run(opts.Warmup); errs == opts.Warmup {
		return nil, errors.New("every warm-up request failed; is the gateway configured?")
	}
	lat, errs, elapsed := run(opts.Requests)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	return &OverheadResult{
		Concurrency: opts.Concurrency,
		Requests:    opts.Requests,
		Errors:      errs,
		Elapsed:     elapsed,
		P50:         pct(0.50),
		P90:         pct(0.90),
		P99:         pct(0.99),
		Max:         lat[len(lat)-1],
		RPS:         float64(opts.Requests) / elapsed.Seconds(),
	}, nil
}
