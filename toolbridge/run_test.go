package toolbridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/policies"
	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/toolbridge"
	"github.com/execgate/execgate/toolbridge/toolbridgetest"
	"github.com/execgate/execgate/toolbridge/toolconfig"
)

const callRules = `package execgate.main

deny_tool_call contains "no more than 2 calls to pay.* per run" if {
	glob.match("pay.*", ["."], input.call.tool)
	sum([n | some t, n in input.call.counts; glob.match("pay.*", ["."], t)]) >= 2
}

deny_tool_call contains "shell.* is denied for role executor" if {
	glob.match("shell.*", ["."], input.call.tool)
	"executor" in input.subject.roles
}
`

func TestMain(m *testing.M) {
	toolbridgetest.ServeIfChild()
	os.Exit(m.Run())
}

func newEngine(t *testing.T) *policy.Engine {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "calls.rego"), []byte(callRules), 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := policy.New(context.Background(), policy.Options{Defaults: policies.FS, Dirs: []string{dir}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

type fixture struct {
	hub   *toolbridge.Hub
	srv   *toolbridgetest.Server
	reg   *prometheus.Registry
	token string
	logs  *testenv.SyncBuffer
}

// newFixture starts one MCP server and a hub whose tenant "acme" has it
// as "math", "pay" and "shell" (the same server under three names), with
// the token from a secret file.
func newFixture(t *testing.T, mod func(*toolconfig.Config)) *fixture {
	t.Helper()
	f := &fixture{token: "s3cr3t-" + strings.Repeat("z", 24), reg: prometheus.NewRegistry(), logs: &testenv.SyncBuffer{}}
	f.srv = toolbridgetest.Start(t, f.token)
	secret := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(secret, []byte("Bearer "+f.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hdr := map[string]toolconfig.Secret{"Authorization": {File: secret}}
	cfg := toolconfig.Config{Servers: []toolconfig.Server{
		{Name: "math", URL: f.srv.URL, Headers: hdr, Allow: []string{"add", "upper", "slow", "big", "fail"}, TimeoutMS: 500, MaxResultBytes: 64 << 10},
		{Name: "pay", URL: f.srv.URL, Headers: hdr, Allow: []string{"charge"}},
		{Name: "shell", URL: f.srv.URL, Headers: hdr, Allow: []string{"exec"}},
	}}
	if mod != nil {
		mod(&cfg)
	}
	hub, err := toolbridge.NewHub(map[string]toolconfig.Config{"acme": cfg}, toolbridge.Options{
		Policy:  newEngine(t),
		Metrics: toolbridge.NewMetrics(f.reg),
		Logger:  slog.New(slog.NewTextHandler(f.logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hub.Close)
	f.hub = hub
	return f
}

func (f *fixture) run(granted ...string) *toolbridge.Run {
	return f.hub.NewRun(toolbridge.RunInfo{TenantID: "acme", Subject: "u1", Roles: []string{"executor"}, DecisionID: "d-1", Granted: granted})
}

func toolErr(t *testing.T, err error) *sandbox.ToolError {
	t.Helper()
	var te *sandbox.ToolError
	if !errors.As(err, &te) {
		t.Fatalf("want a *sandbox.ToolError, got %v", err)
	}
	return te
}

func TestSearchDescribeAndRunTwoTools(t *testing.T) {
	f := newFixture(t, nil)
	r := f.run("math.*")
	ctx := context.Background()
	found, err := r.Search(ctx, "add", 10)
	if err != nil || len(found) != 1 || found[0].Name != "math.add" || found[0].Description != "Add two numbers." {
		t.Fatalf("search: %+v %v", found, err)
	}
	d, err := r.Describe(ctx, "math.add")
	if err != nil || !strings.Contains(string(d.InputSchema), `"a"`) {
		t.Fatalf("describe: %+v %v", d, err)
	}
	sum, err := r.Call(ctx, "math.add", json.RawMessage(`{"a":2,"b":40}`))
	if err != nil || string(sum) != `{"sum":42}` {
		t.Fatalf("add: %s %v", sum, err)
	}
	up, err := r.Call(ctx, "math.upper", json.RawMessage(`{"s":"hi"}`))
	if err != nil || string(up) != `{"text":"HI"}` {
		t.Fatalf("upper: %s %v", up, err)
	}
	calls := r.ToolCalls()
	if len(calls) != 2 || calls[0].Tool != "math.add" || calls[0].Server != "math" || calls[0].Outcome != "ok" || calls[0].DecisionID == "" || calls[0].ArgsSHA256 == "" || calls[0].Args != nil {
		t.Errorf("recorded calls: %+v", calls)
	}
	if got := testutil.ToFloat64(mustCounter(t, f.reg, "execgate_tool_calls_total", "acme", "math", "ok")); got != 2 {
		t.Errorf("calls metric %v, want 2", got)
	}
	for _, h := range f.srv.Authorizations() {
		if h != "Bearer "+f.token {
			t.Errorf("the server saw Authorization %q", h)
		}
	}
}

func TestUngrantedAndPolicyDeniedCallsNeverReachTheServer(t *testing.T) {
	f := newFixture(t, nil)
	r := f.run("math.add", "pay.*", "shell.*")
	ctx := context.Background()
	tests := []struct {
		name, tool, reason string
	}{
		{"a tool outside the grant", "math.upper", `tool "math.upper" is not granted to this run`},
		{"a tool the server config does not allow", "math.exec", `tool "math.exec" is not granted`},
		{"a role denied by a per-call rule", "shell.exec", "denied by policy: shell.* is denied for role executor"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Call(ctx, tc.tool, json.RawMessage(`{"cmd":"x","s":"x"}`))
			te := toolErr(t, err)
			if te.Type != sandbox.ErrToolDenied || !strings.Contains(te.Message, tc.reason) {
				t.Errorf("got %+v, want ToolDenied %q", te, tc.reason)
			}
		})
	}
	t.Run("a per-run cap: the third pay.* call is denied", func(t *testing.T) {
		for i := range 3 {
			_, err := r.Call(ctx, "pay.charge", json.RawMessage(`{"amount":1}`))
			if i < 2 && err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
			if i == 2 {
				if te := toolErr(t, err); te.Type != sandbox.ErrToolDenied || !strings.Contains(te.Message, "no more than 2 calls to pay.* per run") {
					t.Errorf("third call: %+v", te)
				}
			}
		}
		if n := f.srv.Calls("charge"); n != 2 {
			t.Errorf("charge reached the server %d times, want 2", n)
		}
	})
	if n := f.srv.Calls("upper") + f.srv.Calls("exec"); n != 0 {
		t.Errorf("denied calls reached the server %d times", n)
	}
	calls := r.ToolCalls()
	if len(calls) != 6 {
		t.Fatalf("want 6 recorded calls, got %+v", calls)
	}
	if c := calls[2]; c.Outcome != sandbox.ErrToolDenied || c.DecisionID == "" || !strings.Contains(c.Reason, "role executor") {
		t.Errorf("the policy-denied call is recorded as %+v", c)
	}
	if got := testutil.ToFloat64(mustCounter(t, f.reg, "execgate_tool_call_denials_total", "acme", "shell")); got != 1 {
		t.Errorf("denials metric for shell: %v", got)
	}
}

func TestArgumentsAreValidatedBeforeTheyLeave(t *testing.T) {
	f := newFixture(t, nil)
	r := f.run("math.*")
	_, err := r.Call(context.Background(), "math.add", json.RawMessage(`{"a":"two","b":1}`))
	if te := toolErr(t, err); te.Type != sandbox.ErrToolFailed || !strings.Contains(te.Message, "invalid arguments") {
		t.Errorf("got %+v", te)
	}
	_, err = r.Call(context.Background(), "math.add", json.RawMessage(`[1,2]`))
	if te := toolErr(t, err); te.Type != sandbox.ErrToolFailed {
		t.Errorf("got %+v", te)
	}
	if n := f.srv.Calls("add"); n != 0 {
		t.Errorf("invalid arguments reached the server %d times", n)
	}
}

func TestServerDownSlowHugeAndFailingAreTypedErrors(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	r := f.run("math.*")
	// A first call connects and caches the tool list.
	if _, err := r.Call(ctx, "math.add", json.RawMessage(`{"a":1,"b":1}`)); err != nil {
		t.Fatal(err)
	}
	t.Run("slow: past the per-call timeout", func(t *testing.T) {
		start := time.Now()
		_, err := r.Call(ctx, "math.slow", json.RawMessage(`{"ms":3000}`))
		if te := toolErr(t, err); te.Type != sandbox.ErrToolTimeout {
			t.Errorf("got %+v", te)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("the call took %v; the timeout is 500ms", d)
		}
	})
	t.Run("a tool error carries the server's message", func(t *testing.T) {
		_, err := r.Call(ctx, "math.fail", json.RawMessage(`{}`))
		if te := toolErr(t, err); te.Type != sandbox.ErrToolFailed || te.Message != "the tool failed on purpose" {
			t.Errorf("got %+v", te)
		}
	})
	t.Run("a 50 MB result: ToolFailed, memory bounded", func(t *testing.T) {
		// The server runs in a process of its own: the heap measured here
		// is the gateway side's alone.
		url := toolbridgetest.StartProcess(t, "")
		hub, err := toolbridge.NewHub(map[string]toolconfig.Config{"acme": {Servers: []toolconfig.Server{
			{Name: "bulk", URL: url, TimeoutMS: 30000, MaxResultBytes: 1 << 20},
		}}}, toolbridge.Options{Policy: newEngine(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer hub.Close()
		br := hub.NewRun(toolbridge.RunInfo{TenantID: "acme", Granted: []string{"bulk.*"}})
		if _, err := br.Call(ctx, "bulk.add", json.RawMessage(`{"a":1,"b":1}`)); err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		var peak uint64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			var m runtime.MemStats
			for {
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Millisecond):
					runtime.ReadMemStats(&m)
					peak = max(peak, m.HeapAlloc)
				}
			}
		}()
		_, err = br.Call(ctx, "bulk.big", json.RawMessage(`{"bytes":52428800}`))
		close(stop)
		wg.Wait()
		if te := toolErr(t, err); te.Type != sandbox.ErrToolFailed || !strings.Contains(te.Message, "max_result_bytes") {
			t.Errorf("got %+v", te)
		}
		t.Logf("heap before %d MiB, peak %d MiB", before.HeapAlloc>>20, peak>>20)
		if grown := int64(peak) - int64(before.HeapAlloc); grown > 16<<20 {
			t.Errorf("the heap grew by %d MiB during a call capped at 1 MiB", grown>>20)
		}
		out, err := br.Call(ctx, "bulk.add", json.RawMessage(`{"a":1,"b":2}`))
		if err != nil || string(out) != `{"sum":3}` {
			t.Errorf("after the oversized answer the server is usable again: %s %v", out, err)
		}
	})
	t.Run("the session is re-established after the oversized answer", func(t *testing.T) {
		out, err := r.Call(ctx, "math.add", json.RawMessage(`{"a":1,"b":2}`))
		if err != nil || string(out) != `{"sum":3}` {
			t.Errorf("%s %v", out, err)
		}
	})
	t.Run("down: ToolUnavailable without the address or credential", func(t *testing.T) {
		f.srv.Close()
		_, err := r.Call(ctx, "math.add", json.RawMessage(`{"a":1,"b":2}`))
		te := toolErr(t, err)
		if te.Type != sandbox.ErrToolUnavailable && te.Type != sandbox.ErrToolFailed {
			t.Errorf("got %+v", te)
		}
		if strings.Contains(te.Message, f.srv.Addr()) || strings.Contains(te.Message, f.token) {
			t.Errorf("the message leaks the server's address or token: %q", te.Message)
		}
	})
	if strings.Contains(f.logs.String(), f.token) {
		t.Errorf("the token is in the log:\n%s", f.logs.String())
	}
}

func TestAFloodOfCallsIsCutAtTheLimit(t *testing.T) {
	f := newFixture(t, func(c *toolconfig.Config) { c.Limits.MaxCalls = 20 })
	r := f.run("math.*")
	ctx := context.Background()
	var ok, denied int
	for range 10000 {
		_, err := r.Call(ctx, "math.add", json.RawMessage(`{"a":1,"b":1}`))
		switch {
		case err == nil:
			ok++
		case toolErr(t, err).Type == sandbox.ErrToolDenied:
			denied++
		}
	}
	if ok != 20 || denied != 9980 || f.srv.Calls("add") != 20 {
		t.Errorf("ok %d, denied %d, reached the server %d; want 20, 9980, 20", ok, denied, f.srv.Calls("add"))
	}
	if n := len(r.ToolCalls()); n > 20+16 {
		t.Errorf("%d calls recorded one by one; the record must stay bounded", n)
	}
	if r.Dropped() != 10000-len(r.ToolCalls()) {
		t.Errorf("dropped %d", r.Dropped())
	}
}

func TestToolListChangedRefreshesTheCache(t *testing.T) {
	f := newFixture(t, func(c *toolconfig.Config) {
		c.Servers[0].Allow = []string{"*"}
		c.Servers[0].ToolsTTLMS = 3600_000
	})
	r := f.run("math.*")
	ctx := context.Background()
	if found, _ := r.Search(ctx, "greet", 10); len(found) != 0 {
		t.Fatalf("greet before it exists: %+v", found)
	}
	toolbridgetest.AddGreet(f.srv)
	deadline := time.Now().Add(10 * time.Second)
	for {
		found, _ := r.Search(ctx, "greet", 10)
		if len(found) == 1 && found[0].Name == "math.greet" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the new tool never appeared: tools/list_changed was not honoured")
		}
		time.Sleep(20 * time.Millisecond) // polling interval, bounded by the deadline
	}
}

func TestBadToolConfigFailsAtStartWithoutSecretValues(t *testing.T) {
	t.Setenv("EXECGATE_TEST_TOKEN", "")
	_, err := toolbridge.NewHub(map[string]toolconfig.Config{
		"acme": {Servers: []toolconfig.Server{
			{Name: "a", URL: "http://127.0.0.1:1/mcp", Headers: map[string]toolconfig.Secret{"Authorization": {Env: "EXECGATE_TEST_TOKEN"}}},
		}},
		"beta": {Servers: []toolconfig.Server{
			{Name: "a", URL: "http://127.0.0.1:1/mcp", Headers: map[string]toolconfig.Secret{"Authorization": {File: "/nonexistent/token"}}},
			{Name: "b.c", URL: "http://user:pw@127.0.0.1:1/mcp"},
		}},
	}, toolbridge.Options{Policy: newEngine(t)})
	for _, want := range []string{"tenant acme", "EXECGATE_TEST_TOKEN", "tenant beta", "servers[1].name", "servers[1].url"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not name %q: %v", want, err)
		}
	}
	if err != nil && strings.Contains(err.Error(), "pw") {
		t.Errorf("the error shows the URL's password: %v", err)
	}
}

func mustCounter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var vals []string
			for _, lp := range m.GetLabel() {
				vals = append(vals, lp.GetValue())
			}
			slices.Sort(vals)
			want := slices.Sorted(slices.Values(labels))
			if slices.Equal(vals, want) {
				return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x", Help: "x"}, func() float64 { return m.GetCounter().GetValue() })
			}
		}
	}
	t.Fatalf("no %s%v", name, labels)
	return nil
}

func TestArgumentsAreRecordedOnlyWithRecordArgs(t *testing.T) {
	for _, record := range []bool{false, true} {
		f := newFixture(t, func(c *toolconfig.Config) { c.RecordArgs = record })
		r := f.run("math.*")
		if _, err := r.Call(context.Background(), "math.add", json.RawMessage(`{"a":1,"b":2}`)); err != nil {
			t.Fatal(err)
		}
		got := string(r.ToolCalls()[0].Args)
		if want := map[bool]string{false: "", true: `{"a":1,"b":2}`}[record]; got != want {
			t.Errorf("record_args %t: args %q, want %q", record, got, want)
		}
	}
}

// stdioRun is a run of tenant acme granted the tools of "local", a stdio
// server (this test binary, toolbridgetest.ServeIfChild) given the
// gateway's variable secretEnv as its StdioEnv.
func stdioRun(t *testing.T, secretEnv string) *toolbridge.Run {
	t.Helper()
	hub, err := toolbridge.NewHub(map[string]toolconfig.Config{"acme": {Servers: []toolconfig.Server{{
		Name:           "local",
		Command:        []string{os.Args[0], "-test.run=^$"},
		Env:            map[string]toolconfig.Secret{toolbridgetest.StdioEnv: {Env: secretEnv}},
		TimeoutMS:      30000,
		MaxResultBytes: 64 << 10,
	}}}}, toolbridge.Options{Policy: newEngine(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hub.Close)
	return hub.NewRun(toolbridge.RunInfo{TenantID: "acme", Granted: []string{"local.*"}})
}

func TestStdioServerIsLaunchedWithItsOwnEnvironmentOnly(t *testing.T) {
	t.Setenv("GATEWAY_ONLY_SECRET", "stdio-secret-value")
	r := stdioRun(t, "GATEWAY_ONLY_SECRET")
	ctx := context.Background()
	if out, err := r.Call(ctx, "local.add", json.RawMessage(`{"a":1,"b":2}`)); err != nil || string(out) != `{"sum":3}` {
		t.Fatalf("add over stdio: %s %v", out, err)
	}
	out, err := r.Call(ctx, "local.environ", json.RawMessage(`{}`))
	if err != nil || string(out) != `{"names":["EXECGATE_TOOLBRIDGETEST_STDIO","PATH"]}` {
		t.Errorf("the stdio server's environment: %s %v", out, err)
	}
	_, err = r.Call(ctx, "local.big", json.RawMessage(`{"bytes":52428800}`))
	if te := toolErr(t, err); te.Type != sandbox.ErrToolFailed || !strings.Contains(te.Message, "max_result_bytes") {
		t.Errorf("a 50 MB answer over stdio: %+v", te)
	}
	if out, err := r.Call(ctx, "local.add", json.RawMessage(`{"a":2,"b":2}`)); err != nil || string(out) != `{"sum":4}` {
		t.Errorf("the server is relaunched after the oversized answer: %s %v", out, err)
	}
}

func TestADownServerIsNotHammered(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepts atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepts.Add(1)
			c.Close() // a server that is up but broken
		}
	}()
	hub, err := toolbridge.NewHub(map[string]toolconfig.Config{"acme": {
		Servers: []toolconfig.Server{{Name: "math", URL: "http://" + ln.Addr().String() + "/mcp"}},
		Limits:  toolconfig.Limits{MaxCalls: 1000},
	}}, toolbridge.Options{Policy: newEngine(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	r := hub.NewRun(toolbridge.RunInfo{TenantID: "acme", Granted: []string{"math.*"}})
	start := time.Now()
	for range 200 {
		_, err := r.Call(context.Background(), "math.add", json.RawMessage(`{"a":1,"b":2}`))
		if te := toolErr(t, err); te.Type != sandbox.ErrToolUnavailable {
			t.Fatalf("got %+v", te)
		}
		_, _ = r.Search(context.Background(), "", 10)
	}
	// One attempt per backoff period (500 ms), each a few connections.
	if limit := int64(8 * (1 + time.Since(start)/(500*time.Millisecond))); accepts.Load() > limit {
		t.Errorf("%d connections to a down server in %v (limit %d)", accepts.Load(), time.Since(start), limit)
	}
}

// pipelined makes n calls of tool at once (released together, as a run's
// asyncio.gather sends them) and counts the outcomes.
func pipelined(t *testing.T, r *toolbridge.Run, n int, tool string, args string) map[string]int {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[string]int{}
	gate := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-gate
			_, err := r.Call(context.Background(), tool, json.RawMessage(args))
			outcome := "ok"
			if err != nil {
				outcome = toolErr(t, err).Type
			}
			mu.Lock()
			got[outcome]++
			mu.Unlock()
		})
	}
	close(gate)
	wg.Wait()
	return got
}

func TestPipelinedCallsPassAPerToolLimitExactly(t *testing.T) {
	// A tool list that is always stale: every call refetches it, the window
	// the attack used (counts read before, raised after).
	f := newFixture(t, func(c *toolconfig.Config) { c.Servers[1].ToolsTTLMS = 1 })
	for round := range 20 {
		r := f.run("pay.*")
		before := f.srv.Calls("charge")
		got := pipelined(t, r, 12, "pay.charge", `{"amount":1}`)
		if got["ok"] != 2 || got[sandbox.ErrToolDenied] != 10 {
			t.Fatalf("round %d: 12 pipelined calls under a limit of 2 came to %v; want 2 ok, 10 ToolDenied", round, got)
		}
		if n := f.srv.Calls("charge") - before; n != 2 {
			t.Fatalf("round %d: the server saw %d charges, want 2", round, n)
		}
	}
}

func TestPipelinedCallsPassMaxCallsExactly(t *testing.T) {
	f := newFixture(t, func(c *toolconfig.Config) {
		c.Limits.MaxCalls = 5
		c.Servers[0].ToolsTTLMS = 1
	})
	for round := range 20 {
		r := f.run("math.*")
		got := pipelined(t, r, 12, "math.add", `{"a":1,"b":2}`)
		if got["ok"] != 5 || got[sandbox.ErrToolDenied] != 7 {
			t.Fatalf("round %d: 12 pipelined calls under max_calls 5 came to %v; want 5 ok, 7 ToolDenied", round, got)
		}
	}
}

func TestLookupsHaveTheirOwnLimitAndEveryRequestIsCharged(t *testing.T) {
	f := newFixture(t, func(c *toolconfig.Config) { c.Limits.MaxLookups = 3 })
	r := f.run("math.*")
	ctx := context.Background()
	var ok, denied int
	for i := range 10 {
		var err error
		if i%2 == 0 {
			_, err = r.Search(ctx, "", 10)
		} else {
			_, err = r.Describe(ctx, "math.add")
		}
		switch {
		case err == nil:
			ok++
		case toolErr(t, err).Type == sandbox.ErrToolDenied && strings.Contains(err.Error(), "lookup limit (3"):
			denied++
		default:
			t.Fatalf("lookup %d: %v", i, err)
		}
	}
	if ok != 3 || denied != 7 {
		t.Fatalf("10 lookups under a limit of 3: %d answered, %d denied", ok, denied)
	}
	if _, err := r.Call(ctx, "math.add", json.RawMessage(`{"a":1,"b":2}`)); err != nil {
		t.Fatalf("a call after the lookups (not counted as one): %v", err)
	}
	if n := len(r.ToolCalls()); n != 1 {
		t.Errorf("lookups are not calls: %d calls recorded", n)
	}
	// 10 lookups and a call: at least their request prices and the call's.
	least := 11*toolbridge.RequestCPU + toolbridge.CallCPU
	if got := time.Duration(r.ChargedCPUMS()) * time.Millisecond; got < least {
		t.Errorf("charged %v, want at least %v", got, least)
	}
	// A frame the sandbox read is charged by its size, not by the clipped
	// query.
	r2 := f.run("math.*")
	_, _ = r2.Search(sandbox.WithRequestBytes(ctx, 1<<20), "", 10)
	if got, least := time.Duration(r2.ChargedCPUMS())*time.Millisecond, 1024*toolbridge.RequestKiBCPU; got < least {
		t.Errorf("a 1 MiB search frame was charged %v, want at least %v", got, least)
	}
	if got := testutil.ToFloat64(mustCounter(t, f.reg, "execgate_tool_lookups_total", "acme", "search", "ToolDenied")); got != 3 {
		t.Errorf("denied searches metric %v, want 3", got)
	}
}
