package app_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/execgate/execgate/app"
	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/egress"
	"github.com/execgate/execgate/gateway"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/telemetry"
	"github.com/execgate/execgate/tenancy"
)

// setup describes one test server.
type setup struct {
	mutate func(*config.Config)
	// realSandbox: the App builds the sandbox itself (rootfs check, nsjail
	// lookup). Otherwise the test builds a real runner and wraps it to count
	// runs.
	realSandbox bool
	noop        bool // app.NoopRunner (gateway-only tests)
	// runner replaces the sandbox with a fake (counted like the others).
	runner gateway.Runner
	// egressResolver is app.Options.EgressResolver (realSandbox only).
	egressResolver egress.Resolver
}

// server is a started App with its helpers.
type server struct {
	t      *testing.T
	app    *app.App
	cfg    *config.Config
	signer *auth.Signer
	runs   *atomic.Int64 // runs that reached the runner (when counted)
	// sandbox is the real runner the harness built (nil otherwise).
	sandbox *sandbox.Runner
	spans   *tracetest.SpanRecorder
	traces  *telemetry.SpanRing // what GET /v1/admin/traces/{id} serves
	logs    *testenv.SyncBuffer
	spec    *specChecker
	client  *http.Client
}

// countingRunner counts the runs that reach the real sandbox.
type countingRunner struct {
	inner gateway.Runner
	n     *atomic.Int64
}

func (c countingRunner) Run(ctx context.Context, s sandbox.Spec) (sandbox.Result, error) {
	c.n.Add(1)
	return c.inner.Run(ctx, s)
}

// Warm passes on to the inner runner when it warms (gateway.Warmer).
func (c countingRunner) Warm(ctx context.Context, s sandbox.Spec, n int) (int, error) {
	if w, ok := c.inner.(gateway.Warmer); ok {
		return w.Warm(ctx, s, n)
	}
	return 0, nil
}

// testConfig is the embedded default with the test's sandbox, a temp state
// dir, a free port, and a second tenant "acme" that may use the proxy.
func testConfig(t *testing.T, sb sandbox.Config) *config.Config {
	t.Helper()
	state := t.TempDir()
	cfg, err := config.Load("", []string{"EXECGATE_STATE_DIR=" + state, "EXECGATE_LISTEN=127.0.0.1:0"})
	if err != nil {
		t.Fatalf("config.Load: %v", err)
	}
	// The state and work dirs stay as t.TempDir makes them, 0700: the jail
	// reaches what it needs through the runner's view (sandbox/view).
	cfg.Sandbox = sb
	acme := config.DemoTenant()
	acme.ID = "acme"
	cfg.Tenants = append(cfg.Tenants, acme)
	cfg.Server.ShutdownGraceSeconds = 10
	return cfg
}

func start(t *testing.T, s setup) *server {
	t.Helper()
	var sb sandbox.Config
	if !s.noop && s.runner == nil {
		sb = testenv.SandboxConfig(t) // skips without root or nsjail
	} else {
		sb = sandbox.Config{RootfsDir: t.TempDir(), WorkDir: t.TempDir()}
	}
	cfg := testConfig(t, sb)
	if s.mutate != nil {
		s.mutate(cfg)
	}
	srv := &server{t: t, cfg: cfg, runs: &atomic.Int64{}, logs: &testenv.SyncBuffer{}, spec: loadSpec(t), spans: tracetest.NewSpanRecorder(),
		traces: telemetry.NewSpanRing(telemetry.RingOptions{})}
	opts := app.Options{
		Config:         cfg,
		Logger:         slog.New(slog.NewJSONHandler(srv.logs, nil)),
		Progress:       io.Discard,
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(srv.spans), sdktrace.WithSpanProcessor(srv.traces)),
		Traces:         srv.traces,
		EgressResolver: s.egressResolver,
	}
	switch {
	case s.runner != nil:
		opts.Runner = countingRunner{inner: s.runner, n: srv.runs}
	case s.noop:
		opts.Runner = countingRunner{inner: app.NoopRunner{}, n: srv.runs}
	case !s.realSandbox:
		r, err := sandbox.NewRunner(cfg.Sandbox)
		if err != nil {
			t.Fatalf("sandbox.NewRunner: %v", err)
		}
		t.Cleanup(func() { _ = r.Close() })
		opts.Runner = countingRunner{inner: r, n: srv.runs}
		srv.sandbox = r
	}
	a, err := app.New(context.Background(), opts)
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	if err := a.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := a.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	srv.app = a
	srv.signer, err = a.Signer()
	if err != nil {
		t.Fatalf("Signer: %v", err)
	}
	srv.client = &http.Client{Timeout: 60 * time.Second}
	return srv
}

// token mints a token for tenant with roles.
func (s *server) token(tenant string, roles ...string) string {
	s.t.Helper()
	if len(roles) == 0 {
		roles = []string{tenancy.RoleExecutor}
	}
	tok, err := s.signer.Mint(auth.Claims{Subject: "tester", TenantID: tenant, Roles: roles}, time.Hour)
	if err != nil {
		s.t.Fatal(err)
	}
	return tok
}

// response is a decoded response.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("response is not a JSON object: %v\n%s", err, r.body)
	}
	return m
}

// errType is error.type of an envelope or error response.
func (r response) errType(t *testing.T) string {
	t.Helper()
	e, _ := r.json(t)["error"].(map[string]any)
	s, _ := e["type"].(string)
	return s
}

// do sends a request and checks the response against the OpenAPI document.
func (s *server) do(method, path, token string, body any) response {
	s.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, s.app.URL()+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	r := response{status: resp.StatusCode, header: resp.Header, body: b}
	s.spec.check(s.t, method, path, r)
	return r
}

func (s *server) execute(token string, body any) response {
	s.t.Helper()
	return s.do(http.MethodPost, "/v1/execute", token, body)
}

// auditLines reads the audit log.
func (s *server) auditLines() []map[string]any {
	s.t.Helper()
	f, err := os.Open(s.cfg.Audit.File)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		s.t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			s.t.Fatalf("audit line is not JSON: %v", err)
		}
		out = append(out, m)
	}
	return out
}

// writePolicyDir writes extension policy modules and returns the dir.
func writePolicyDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// probe is DESIGN §4's probe, verbatim.
func probe(tenant string) string {
	return `{"execution_id":"probe","tenant_id":"` + tenant + `","source":"async def run(args, context):\n    return {\"ok\": True}\n","entrypoint":"run"}`
}

// stretchedLimits asks for the platform's default time limits (5 s wall
// and CPU) stretched by testenv.TimeScale, within the demo tenant's 30 s
// cap: a test of something else whose trivial run must not time out on an
// emulated host (the cgroup v2 VM).
func stretchedLimits() map[string]any {
	ms := min(5000*int64(testenv.TimeScale()), 30000)
	return map[string]any{"timeout_ms": ms, "cpu_ms": ms}
}
