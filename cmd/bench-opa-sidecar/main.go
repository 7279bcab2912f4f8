// Command bench-opa-sidecar compares the embedded policy engine with the same default
// policies served by a stock `opa run --server` over HTTP on loopback: N
// sequential decisions each, reporting p50/p90/p99 and mean latency.
//
// Run it through scripts/bench-opa-sidecar.sh, which starts the OPA server,
// or by hand:
//
//	opa run --server --addr 127.0.0.1:8181 <non-test policies dir> &
//	go run ./cmd/bench-opa-sidecar -opa http://127.0.0.1:8181 -n 5000
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/execgate/execgate/policies"
	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/tenancy"
)

func main() {
	opaURL := flag.String("opa", "", "base URL of an OPA server loaded with the default policies (empty: embedded only)")
	n := flag.Int("n", 5000, "decisions per measurement")
	warmup := flag.Int("warmup", 500, "decisions before measuring")
	flag.Parse()
	if err := run(*opaURL, *n, *warmup); err != nil {
		fmt.Fprintln(os.Stderr, "bench-opa-sidecar:", err)
		os.Exit(1)
	}
}

func inputs() map[string]policy.Input {
	t := tenancy.Tenant{ID: "demo", Plan: "standard", Policy: map[string]any{
		"network":      []any{"none", "proxy"},
		"egress_allow": []any{"*.example.com:443", "pypi.org"},
		"packages":     map[string]any{"allow": []any{"six"}, "deny": []any{}},
		"max_limits":   map[string]any{"timeout_ms": 30000, "memory_mb": 512},
		"tools":        []any{},
	}}
	p := tenancy.Principal{TenantID: "demo", Subject: "bench", Roles: []string{tenancy.RoleExecutor}}
	src := "async def run(args, context):\n    return {\"ok\": True}\n"
	return map[string]policy.Input{
		"probe": policy.BuildInput(t, p, policy.Request{Source: src, Entrypoint: "run"}),
		"full": policy.BuildInput(t, p, policy.Request{
			Source: src, Args: []byte(`{"q":"x"}`), Requirements: []string{"six==1.16.0"},
			NetworkAccess: "proxy", EgressAllow: []string{"api.example.com", "pypi.org:443"},
			Limits: policy.Limits{TimeoutMS: 10000, MemoryMB: 512},
		}),
	}
}

func run(opaURL string, n, warmup int) error {
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// e is the engine as `execgate serve` runs it (decision memo on, so a
	// repeated request shape is answered from memory); evaluated has the
	// memo off, so every decision runs OPA, like the sidecar.
	e, err := policy.New(ctx, policy.Options{Defaults: policies.FS, Logger: quiet})
	if err != nil {
		return err
	}
	evaluated, err := policy.New(ctx, policy.Options{Defaults: policies.FS, Logger: quiet, DecisionCache: -1})
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	fmt.Printf("%-8s %-22s %10s %10s %10s %10s %10s\n", "input", "path", "p50", "p90", "p99", "mean", "req/s")
	for _, name := range []string{"probe", "full"} {
		in := inputs()[name]
		embedded := func() (bool, error) {
			d, err := e.Decide(ctx, in)
			return d.Allow, err
		}
		if err := measure(name, "embedded (Decide)", n, warmup, embedded); err != nil {
			return err
		}
		evaluate := func() (bool, error) {
			d, err := evaluated.Decide(ctx, in)
			return d.Allow, err
		}
		if err := measure(name, "embedded, evaluated", n, warmup, evaluate); err != nil {
			return err
		}
		if opaURL == "" {
			continue
		}
		body, err := json.Marshal(map[string]any{"input": in})
		if err != nil {
			return err
		}
		sidecar := func() (bool, error) { return postDecision(ctx, client, opaURL, body) }
		if err := measure(name, "opa sidecar (HTTP)", n, warmup, sidecar); err != nil {
			return err
		}
	}
	return nil
}

func postDecision(ctx context.Context, c *http.Client, base string, body []byte) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/data/execgate/main/decision", bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	var out struct {
		Result *struct {
			Allow bool `json:"allow"`
		} `json:"result"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return false, fmt.Errorf("decoding OPA response: %w", err)
	}
	if resp.StatusCode != http.StatusOK || out.Result == nil {
		return false, fmt.Errorf("OPA answered %s without a decision", resp.Status)
	}
	return out.Result.Allow, nil
}

func measure(input, path string, n, warmup int, decide func() (bool, error)) error {
	for range warmup {
		if _, err := decide(); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	lat := make([]time.Duration, n)
	start := time.Now()
	for i := range n {
		t := time.Now()
		allow, err := decide()
		lat[i] = time.Since(t)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if !allow {
			return errors.New(path + ": the benchmark input was denied")
		}
	}
	total := time.Since(start)
	slices.Sort(lat)
	pct := func(p int) time.Duration { return lat[min(n-1, n*p/100)] }
	fmt.Printf("%-8s %-22s %10v %10v %10v %10v %10.0f\n", input, path,
		pct(50).Round(time.Microsecond), pct(90).Round(time.Microsecond), pct(99).Round(time.Microsecond),
		(total / time.Duration(n)).Round(time.Microsecond), float64(n)/total.Seconds())
	return nil
}
