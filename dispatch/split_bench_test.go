package dispatch

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/limits"
)

// BenchmarkSplitLatency compares a warm sync run in-process (server.role
// all) with the same run through the split (a gateway and one executor
// over Redis), each a separate OS process with a warm pool of 4, at
// concurrency 1 (p50) and 8 (req/s):
//
//	go test -run '^$' -bench BenchmarkSplitLatency -benchtime 1x ./dispatch/
func BenchmarkSplitLatency(b *testing.B) {
	const body = `{"tenant_id":"acme","source":"def run(args, context):\n    return {\"ok\": True}\n"}`
	measure := func(e *splitEnv, name string) {
		waitFor(b, 60*time.Second, name+" ready", func() bool {
			resp, err := http.Get(e.gwURL + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		})
		for _, c := range []int{1, 8} {
			load(b, e, body, c, 20) // warm-up
			p50, p95, rps := load(b, e, body, c, 200)
			b.Logf("%-10s c=%d: p50 %v, p95 %v, %.1f req/s", name, c, p50, p95, rps)
			b.ReportMetric(float64(p50.Microseconds())/1000, fmt.Sprintf("%s-c%d-p50-ms", name, c))
			b.ReportMetric(rps, fmt.Sprintf("%s-c%d-req/s", name, c))
		}
	}
	for i := 0; i < b.N; i++ {
		in := newSplitEnv(b)
		in.startServer("all", fmt.Sprintf("{nsjail_path: %s, runtimes_dir: %s, runtimes: [%s], work_dir: %s, warm_pool: 4}", in.nsjail, filepath.Dir(in.rootfs), limits.DefaultRuntime, testenv.JailDir(b)))
		measure(in, "in-process")
		_ = in.gw.cmd.Process.Kill()

		split := newSplitEnv(b)
		split.startServer("gateway", "{nsjail_path: /nonexistent/nsjail}")
		split.startExecutorWith("ex-bench", 16, 4)
		measure(split, "split")
		if n := strings.Count(split.execs["ex-bench"].logs.String(), `"msg":"dispatch: ran"`); n < 440 {
			b.Fatalf("the executor ran %d runs, want every measured one", n)
		}
	}
}

// load sends n requests from c closed-loop workers (bench.Load's method;
// bench imports app, which imports this package) and returns p50, p95 and
// req/s. Any answer but 200 with X-Execution-Status ok fails b.
func load(b *testing.B, e *splitEnv, body string, c, n int) (p50, p95 time.Duration, rps float64) {
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: c, MaxConnsPerHost: c}}
	defer client.CloseIdleConnections()
	lat := make([]time.Duration, n)
	var mu sync.Mutex // guards next, failed
	next, failed := 0, ""
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				req, _ := http.NewRequest(http.MethodPost, e.gwURL+"/v1/execute", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+e.token)
				req.Header.Set("Content-Type", "application/json")
				s := time.Now()
				resp, err := client.Do(req)
				lat[i] = time.Since(s)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Execution-Status") != "ok" {
						err = fmt.Errorf("status %d, execution %s", resp.StatusCode, resp.Header.Get("X-Execution-Status"))
					}
				}
				if err != nil {
					mu.Lock()
					failed = err.Error()
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	if failed != "" {
		b.Fatalf("a request failed: %s", failed)
	}
	slices.Sort(lat)
	return lat[n/2], lat[n*95/100], float64(n) / elapsed.Seconds()
}
