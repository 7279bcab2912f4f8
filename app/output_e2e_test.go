package app_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/execgate/execgate/config"
)

// floodSource writes args["bytes"] bytes of args["byte"] to stdout and,
// when args["both"], to stderr as well.
const floodSource = `import os
def run(args, context):
    block = bytes([args["byte"]]) * (1 << 20)
    for _ in range(args["bytes"] >> 20):
        os.write(1, block)
        if args.get("both"):
            os.write(2, block)
    return "done"
`

const platformMaxOutput = 16 << 20

func floodBody(b byte, both bool) map[string]any {
	return map[string]any{
		"source": floodSource,
		"args":   map[string]any{"byte": b, "bytes": platformMaxOutput, "both": both},
		"limits": map[string]any{"output_bytes": platformMaxOutput, "timeout_ms": 30000, "cpu_ms": 30000},
	}
}

// Issue #10 class 2: a control byte is six bytes in the envelope, so a
// 16 MiB cap counted in bytes written gave a 96 MiB stdout. The cap holds
// for what the gateway sends.
func TestAControlByteFloodGivesAResponseBoundedByTheCap(t *testing.T) {
	s := start(t, setup{})
	r := s.execute(s.token("demo"), floodBody(0x01, false))
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %.500s", r.status, r.body)
	}
	var env struct {
		Status    string `json:"status"`
		Stdout    string `json:"stdout"`
		Truncated struct{ Stdout, Stderr bool }
		Decision  struct {
			Limits struct {
				OutputBytes int `json:"output_bytes"`
			} `json:"limits"`
		} `json:"decision"`
	}
	if err := json.Unmarshal(r.body, &env); err != nil {
		t.Fatal(err)
	}
	if got := env.Decision.Limits.OutputBytes; got != platformMaxOutput {
		t.Fatalf("the policy granted output_bytes %d, want %d", got, platformMaxOutput)
	}
	// stdout is at most the cap once encoded; the rest of the envelope is small.
	if max := platformMaxOutput + 64<<10; len(r.body) > max {
		t.Errorf("the response is %d bytes (%.1f× the cap of %d); want at most %d", len(r.body), float64(len(r.body))/platformMaxOutput, platformMaxOutput, max)
	}
	if env.Status != "ok" || !env.Truncated.Stdout || env.Truncated.Stderr {
		t.Errorf("status %q truncated %+v, want ok with stdout truncated", env.Status, env.Truncated)
	}
	if n := len(env.Stdout); n < platformMaxOutput/6-8 || n > platformMaxOutput/6 {
		t.Errorf("kept %d control bytes of stdout, want the %d that encode to the cap", n, platformMaxOutput/6)
	}
}

// Floods from many runs at once share the gateway's output memory budget:
// runs beyond it wait (or are refused with Overloaded), and the heap stays
// bounded instead of growing with every run's output.
func TestOutputFloodsBeyondTheBudgetWaitAndTheHeapStaysBounded(t *testing.T) {
	s := start(t, setup{mutate: func(c *config.Config) {
		c.Server.MaxConcurrentRuns = 4
		c.Server.MaxOutputMemoryMB = 100 // one run at the 16 MiB cap at a time
	}})
	token := s.token("demo")
	body, err := json.Marshal(floodBody(0x01, true))
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()

	const runs = 4
	answers := make([]floodAnswer, runs)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = postDiscarding(s, token, body)
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled

	ran := 0
	for i, a := range answers {
		switch {
		case a.err != nil:
			t.Errorf("run %d: %v", i, a.err)
		case a.status == http.StatusOK && a.trunc:
			ran++
		case a.status == http.StatusServiceUnavailable && a.errType == "Overloaded":
		default:
			t.Errorf("run %d: status %d %s truncated=%t, want 200 with both streams truncated or 503 Overloaded", i, a.status, a.errType, a.trunc)
		}
		if a.bytes > 2*platformMaxOutput+64<<10 {
			t.Errorf("run %d: a %d-byte response for two streams capped at %d", i, a.bytes, platformMaxOutput)
		}
	}
	if ran == 0 {
		t.Errorf("no run got through")
	}
	// One run's output at a time: two streams (a sixth of the cap each as
	// control bytes kept) and a body of two caps, plus the GC's slack.
	grew := int64(peak.Load()) - int64(before.HeapInuse)
	t.Logf("heap in use: %d MiB before, peak %d MiB (%d runs ran)", before.HeapInuse>>20, peak.Load()>>20, ran)
	if grew > 200<<20 {
		t.Errorf("the heap grew by %d MiB while %d runs flooded 2×16 MiB each; want at most 200 MiB", grew>>20, runs)
	}
}

type floodAnswer = struct {
	status  int
	errType string
	bytes   int64
	trunc   bool
	err     error
}

// postDiscarding posts body to /v1/execute and reads the answer without
// keeping it (the test measures the gateway's heap, not the client's): it
// keeps the head of the body for the error type and the truncated flags.
func postDiscarding(s *server, token string, body []byte) floodAnswer {
	req, err := http.NewRequest(http.MethodPost, s.app.URL()+"/v1/execute", bytes.NewReader(body))
	if err != nil {
		return floodAnswer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := s.client.Do(req)
	if err != nil {
		return floodAnswer{err: err}
	}
	defer resp.Body.Close()
	var tail tailWriter
	n, err := io.Copy(&tail, resp.Body)
	if err != nil {
		return floodAnswer{err: err}
	}
	a := floodAnswer{status: resp.StatusCode, bytes: n, trunc: bytes.Contains(tail.b, []byte(`"truncated":{"stdout":true,"stderr":true}`))}
	if i := bytes.Index(tail.b, []byte(`"type":"`)); i >= 0 {
		a.errType = string(bytes.SplitN(tail.b[i+8:], []byte(`"`), 2)[0])
	}
	if a.status != http.StatusOK && a.errType == "" {
		a.err = fmt.Errorf("status %d without an error type: %.300s", a.status, tail.b)
	}
	return a
}

// tailWriter keeps the last 4 KiB written to it (the envelope's fields
// after stdout and stderr).
type tailWriter struct{ b []byte }

func (w *tailWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	if len(w.b) > 4<<10 {
		w.b = append(w.b[:0], w.b[len(w.b)-4<<10:]...)
	}
	return len(p), nil
}

// A run that finds the output memory budget held by another run waits at
// most its own time limit, then gets 503 Overloaded with Retry-After; the
// run holding the budget is unaffected.
func TestARunThatFindsNoOutputMemoryIsOverloaded(t *testing.T) {
	s := start(t, setup{mutate: func(c *config.Config) {
		c.Server.MaxOutputMemoryMB = 8 // less than one run's reservation: runs go one at a time
	}})
	token := s.token("demo")
	first := make(chan response, 1)
	go func() {
		first <- s.execute(token, map[string]any{
			"source": "import time\ndef run(args, context):\n    time.sleep(5)\n    return 'slept'\n",
			"limits": map[string]any{"timeout_ms": 20000},
		})
	}()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if v, ok := obsMetric(s.scrape(), "execgate_runs_in_flight", map[string]string{}); ok && v == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first run never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := s.execute(token, map[string]any{"source": "def run(args, context):\n    return 1\n", "limits": map[string]any{"timeout_ms": 300}})
	if r.status != http.StatusServiceUnavailable || r.errType(t) != "Overloaded" || r.header.Get("Retry-After") == "" {
		t.Errorf("the second run: %d %s (Retry-After %q), want 503 Overloaded with Retry-After", r.status, r.body, r.header.Get("Retry-After"))
	}
	if r := <-first; r.status != http.StatusOK || !bytes.Contains(r.body, []byte(`"result":"slept"`)) {
		t.Errorf("the first run: %d %.300s", r.status, r.body)
	}
}
