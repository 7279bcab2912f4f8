package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/execgate/execgate/app"
	"github.com/execgate/execgate/audit"
	"github.com/execgate/execgate/audit/audittest"
	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/sandbox"
)

// The end-to-end tests of audit and telemetry run the real gateway: real
// JWT auth, real OPA policies, memory quotas, the real nsjail sandbox, the
// real audit file. Helpers here are prefixed obs so they cannot clash with
// other test files of package app_test.

// Tools the load sends.
const (
	obsOKSource      = "async def run(args, context):\n    return {\"ok\": True}\n"
	obsRaiseSource   = "def run(args, context):\n    raise ValueError('bad input ' + str(args))\n"
	obsSleepSource   = "import time\n\ndef run(args, context):\n    time.sleep(30)\n"
	obsFastTenant    = "fast" // generous quota
	obsTinyTenant    = "tiny" // one request per minute: the rest are 429
	obsDevKeyName    = "dev.key"
	obsConfigName    = "execgate.yaml"
	obsAuditFileName = "audit.jsonl"
)

// obsGateway is an execgate configuration on disk (config file, dev key,
// state dir) and the means to call a gateway started from it.
type obsGateway struct {
	dir        string
	configPath string
	auditFile  string
	cfg        *config.Config
	signer     *auth.Signer
}

// newObsGateway writes a config for the real sandbox (skipping where the
// host cannot jail) with tenants fast and tiny, listening on listen.
func newObsGateway(t *testing.T, listen string) *obsGateway {
	t.Helper()
	sb := testenv.SandboxConfig(t) // skips without root or nsjail
	dir := t.TempDir()
	g := &obsGateway{dir: dir, configPath: filepath.Join(dir, obsConfigName), auditFile: filepath.Join(dir, obsAuditFileName)}
	if _, err := auth.EnsureDevKey(filepath.Join(dir, obsDevKeyName)); err != nil {
		t.Fatal(err)
	}
	yaml := e2eGatewayYAML(listen, dir, filepath.Join(dir, obsDevKeyName), sb) + fmt.Sprintf(`server:
  max_concurrent_runs: 4
  max_queue: 256
  shutdown_grace_seconds: 5
audit:
  file: %q
telemetry:
  max_tenant_labels: 10
tenants:
  - id: %s
    plan: standard
    quota: { rate_per_minute: 600000, burst: 10000, concurrency: 16, daily_cpu_seconds: 1000000 }
    policy:
      network: [none]
      max_limits: { timeout_ms: 30000, memory_mb: 512 }
  - id: %s
    plan: free
    quota: { rate_per_minute: 1, burst: 1, concurrency: 1, daily_cpu_seconds: 3600 }
    policy:
      network: [none]
`, g.auditFile, obsFastTenant, obsTinyTenant)
	if err := os.WriteFile(g.configPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(g.configPath, nil)
	if err != nil {
		t.Fatalf("loading the test config: %v", err)
	}
	g.cfg = cfg
	g.signer, err = auth.NewSigner(cfg.Auth, nil)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// e2eGatewayYAML is the head of a config file for an `execgate serve`
// subprocess on the real sandbox: listen address, state dir, dev key and the
// sandbox section; callers append their own server, quota, audit and
// tenants sections.
func e2eGatewayYAML(listen, stateDir, devKey string, sb sandbox.Config) string {
	return fmt.Sprintf(`listen: %q
state_dir: %q
auth:
  hs256_secret_file: %q
sandbox:
  nsjail_path: %q
  rootfs_dir: %q
  runtimes_dir: %q
  runtimes: [%s]
  work_dir: %q
`, listen, stateDir, devKey, sb.NsjailPath, sb.RootfsDir, sb.RuntimesDir, strings.Join(sb.Runtimes, ", "), filepath.Join(stateDir, "runs"))
}

// token mints a token for tenant with roles (default executor).
func (g *obsGateway) token(t *testing.T, tenant string, roles ...string) string {
	t.Helper()
	if len(roles) == 0 {
		roles = []string{"executor"}
	}
	tok, err := g.signer.Mint(auth.Claims{Subject: "e2e-" + tenant, TenantID: tenant, Roles: roles}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// start runs the gateway in-process; it is stopped on cleanup.
func (g *obsGateway) start(t *testing.T, opts app.Options) *app.App {
	t.Helper()
	opts.Config = g.cfg
	a, err := app.New(context.Background(), opts)
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	if err := a.SandboxErr(); err != nil {
		_ = a.Stop(context.Background())
		t.Fatalf("the sandbox must work on this host (root, nsjail present): %v", err)
	}
	if err := a.Start(); err != nil {
		t.Fatalf("app.Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := a.Stop(ctx); err != nil {
			t.Errorf("app.Stop: %v", err)
		}
	})
	return a
}

// obsInstallTracerProvider installs an SDK tracer provider (processors
// optional) as the global one for the test, as telemetry.Setup does in serve,
// and restores the previous one after. The gateway takes the global provider
// when it is created, so call this before start.
func obsInstallTracerProvider(t *testing.T, procs ...sdktrace.SpanProcessor) {
	t.Helper()
	var opts []sdktrace.TracerProviderOption
	for _, p := range procs {
		opts = append(opts, sdktrace.WithSpanProcessor(p))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() {
		otel.SetTracerProvider(prev)
		_ = tp.Shutdown(context.Background())
	})
}

// obsResponse is one answered execute request.
type obsResponse struct {
	HTTPStatus  int
	ExecutionID string // X-Execution-Id
	Env         execution.Envelope
	Header      http.Header
}

// obsExecute POSTs body (a JSON value, or raw bytes) to /v1/execute.
func obsExecute(ctx context.Context, client *http.Client, baseURL, token string, body any, header http.Header) (obsResponse, error) {
	var raw []byte
	switch b := body.(type) {
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			return obsResponse{}, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+"/v1/execute", bytes.NewReader(raw))
	if err != nil {
		return obsResponse{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return obsResponse{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return obsResponse{}, err
	}
	r := obsResponse{HTTPStatus: resp.StatusCode, ExecutionID: resp.Header.Get("X-Execution-Id"), Header: resp.Header}
	if err := json.Unmarshal(data, &r.Env); err != nil {
		return obsResponse{}, fmt.Errorf("decoding %d response %q: %w", resp.StatusCode, data, err)
	}
	return r, nil
}

// obsKind is one kind of request in the mixed load.
type obsKind struct {
	name      string
	tenant    string // "" = no token (401, must leave no record)
	body      func(id string) any
	status    int    // expected HTTP status
	errType   string // expected error.type ("" for ok)
	mayBeOK   bool   // the tiny tenant's burst admits a run
	authentic bool
}

func obsKinds() []obsKind {
	req := func(src string, extra map[string]any) func(id string) any {
		return func(id string) any {
			m := map[string]any{"execution_id": id, "source": src, "entrypoint": "run", "args": map[string]any{"n": id}}
			for k, v := range extra {
				m[k] = v
			}
			return m
		}
	}
	return []obsKind{
		{name: "ok", tenant: obsFastTenant, body: req(obsOKSource, nil), status: 200, authentic: true},
		{name: "tool error", tenant: obsFastTenant, body: req(obsRaiseSource, nil), status: 200, errType: "ToolError", authentic: true},
		{name: "timeout", tenant: obsFastTenant, body: req(obsSleepSource, map[string]any{"limits": map[string]any{"timeout_ms": 300}}), status: 200, errType: "Timeout", authentic: true},
		{name: "policy denied", tenant: obsFastTenant, body: req(obsOKSource, map[string]any{"network_access": "host"}), status: 403, errType: "PolicyDenied", authentic: true},
		{name: "quota exceeded", tenant: obsTinyTenant, body: req(obsOKSource, nil), status: 429, errType: "QuotaExceeded", mayBeOK: true, authentic: true},
		{name: "bad request", tenant: obsFastTenant, body: func(string) any { return []byte(`{"source": 42`) }, status: 400, errType: "BadRequest", authentic: true},
		{name: "unauthenticated", body: req(obsOKSource, nil), status: 401, errType: "Unauthenticated"},
	}
}

// obsSent is one request of the load and what came back.
type obsSent struct {
	kind obsKind
	id   string // the execution_id sent ("" when the body has none)
	resp obsResponse
	err  error
}

// obsLoad sends plan (kind indexes) with workers concurrent clients until
// stop is closed or plan is done, with execution ids prefix-<n>-<kind>; received responses are returned, requests
// that got no response carry err.
func obsLoad(baseURL, prefix string, kinds []obsKind, plan []int, workers int, tokens map[string]string, stop <-chan struct{}, onResponse func()) []obsSent {
	client := &http.Client{Timeout: 60 * time.Second}
	jobs := make(chan int)
	out := make([]obsSent, len(plan))
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				k := kinds[plan[i]]
				id := fmt.Sprintf("%s-%04d-%s", prefix, i, strings.ReplaceAll(k.name, " ", "-"))
				resp, err := obsExecute(context.Background(), client, baseURL, tokens[k.tenant], k.body(id), nil)
				out[i] = obsSent{kind: k, id: id, resp: resp, err: err}
				if err == nil && onResponse != nil {
					onResponse()
				}
			}
		})
	}
	for i := range plan {
		select {
		case jobs <- i:
		case <-stop:
			close(jobs)
			wg.Wait()
			return out[:i]
		}
	}
	close(jobs)
	wg.Wait()
	return out
}

// obsPlan is a shuffled list of kind indexes with counts per kind name.
func obsPlan(kinds []obsKind, counts map[string]int, seed uint64) []int {
	var plan []int
	for i, k := range kinds {
		for range counts[k.name] {
			plan = append(plan, i)
		}
	}
	r := rand.New(rand.NewPCG(seed, seed))
	r.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	return plan
}

// obsCheckRecords asserts that every received authenticated response has
// exactly one record saying what the caller was told, and that no record
// exists for an unauthenticated request. It returns the records by id.
func obsCheckRecords(t *testing.T, lines []audittest.Line, sent []obsSent, wantExact bool) map[string]audit.Record {
	t.Helper()
	byID := map[string][]audit.Record{}
	for _, ln := range lines {
		byID[ln.Record.ExecutionID] = append(byID[ln.Record.ExecutionID], ln.Record)
	}
	authenticated := 0
	for _, s := range sent {
		if s.err != nil {
			continue // no response: nothing to hold the record against
		}
		id := s.resp.ExecutionID
		if id == "" {
			t.Errorf("%s: response without X-Execution-Id", s.kind.name)
			continue
		}
		recs := byID[id]
		if !s.kind.authentic {
			if len(recs) != 0 {
				t.Errorf("%s %s: an unauthenticated request left %d audit records", s.kind.name, id, len(recs))
			}
			continue
		}
		authenticated++
		if len(recs) != 1 {
			t.Errorf("%s %s (HTTP %d): %d audit records, want exactly 1", s.kind.name, id, s.resp.HTTPStatus, len(recs))
			continue
		}
		r := recs[0]
		errType := ""
		if s.resp.Env.Error != nil {
			errType = s.resp.Env.Error.Type
		}
		if r.Outcome.HTTPStatus != s.resp.HTTPStatus || r.Outcome.Status != string(s.resp.Env.Status) || r.Outcome.ErrorType != errType {
			t.Errorf("%s %s: record outcome %+v, but the caller got HTTP %d %s %s", s.kind.name, id, r.Outcome, s.resp.HTTPStatus, s.resp.Env.Status, errType)
		}
		if r.TenantID != s.kind.tenant || r.Subject != "e2e-"+s.kind.tenant {
			t.Errorf("%s %s: record tenant %q subject %q", s.kind.name, id, r.TenantID, r.Subject)
		}
		if r.TraceID == "" || r.TraceID != s.resp.Env.TraceID {
			t.Errorf("%s %s: record trace_id %q, envelope trace_id %q", s.kind.name, id, r.TraceID, s.resp.Env.TraceID)
		}
		obsCheckRecordShape(t, s, r)
	}
	if wantExact {
		if len(lines) != authenticated {
			t.Errorf("%d audit records for %d authenticated requests", len(lines), authenticated)
		}
	}
	out := map[string]audit.Record{}
	for id, recs := range byID {
		out[id] = recs[0]
	}
	return out
}

// obsCheckRecordShape checks what each kind's record must hold.
func obsCheckRecordShape(t *testing.T, s obsSent, r audit.Record) {
	t.Helper()
	id := s.resp.ExecutionID
	switch obsErrType(s.resp.Env) {
	case "":
		if r.Decision == nil || !r.Decision.Allow || r.Quota.Outcome != audit.QuotaAdmitted || r.Usage.WallMS <= 0 {
			t.Errorf("%s: ok run record %+v: want an allow decision, quota admitted and measured usage", id, r)
		}
	case "ToolError", "Timeout":
		if r.Decision == nil || r.Quota.Outcome != audit.QuotaAdmitted || r.Usage.WallMS <= 0 {
			t.Errorf("%s: run record %+v: want a decision, quota admitted and usage", id, r)
		}
		if s.resp.Env.Error.Type == "Timeout" && r.Usage.WallMS < 300 {
			t.Errorf("%s: Timeout record wall_ms %d < the 300 ms limit", id, r.Usage.WallMS)
		}
	case "PolicyDenied":
		if r.Decision == nil || r.Decision.Allow || len(r.Decision.Reasons) == 0 || r.Quota.Outcome != audit.QuotaSkipped {
			t.Errorf("%s: policy denial record %+v: want allow=false with reasons, quota skipped", id, r.Decision)
		}
	case "QuotaExceeded":
		if r.Quota.Outcome != audit.QuotaExceeded || r.Quota.Kind == "" || r.Quota.RetryAfterMS <= 0 || r.Decision == nil {
			t.Errorf("%s: quota record %+v: want exceeded with kind and retry_after_ms", id, r.Quota)
		}
	case "BadRequest":
		if r.Decision != nil || r.Quota.Outcome != audit.QuotaSkipped {
			t.Errorf("%s: bad request record: decision %v quota %v, want none and skipped", id, r.Decision, r.Quota)
		}
	}
	if strings.Contains(r.Source, "def run") {
		t.Errorf("%s: the source was recorded though the policy did not ask for it", id)
	}
}

func TestAuditRecordsEveryAuthenticatedRequestUnderMixedLoad(t *testing.T) {
	g := newObsGateway(t, "127.0.0.1:0")
	obsInstallTracerProvider(t) // as serve's telemetry.Setup does: trace ids in envelopes and records
	a := g.start(t, app.Options{Logger: obsDiscardLogger()})
	kinds := obsKinds()
	// 500 requests: 480 authenticated, 20 without a token.
	plan := obsPlan(kinds, map[string]int{
		"ok": 110, "tool error": 50, "timeout": 16, "policy denied": 150,
		"quota exceeded": 140, "bad request": 14, "unauthenticated": 20,
	}, 1)
	tokens := map[string]string{obsFastTenant: g.token(t, obsFastTenant), obsTinyTenant: g.token(t, obsTinyTenant)}

	start := time.Now()
	sent := obsLoad(a.URL(), "mixed", kinds, plan, 8, tokens, nil, nil)
	t.Logf("%d requests in %s", len(sent), time.Since(start).Round(time.Millisecond))

	tinyOK := 0
	for _, s := range sent {
		if s.err != nil {
			t.Fatalf("%s %s: %v", s.kind.name, s.id, s.err)
		}
		got := obsErrType(s.resp.Env)
		if s.kind.mayBeOK && s.resp.HTTPStatus == 200 && got == "" {
			tinyOK++
			continue
		}
		if s.resp.HTTPStatus != s.kind.status || got != s.kind.errType {
			t.Errorf("%s %s: HTTP %d %q, want %d %q (%+v)", s.kind.name, s.id, s.resp.HTTPStatus, got, s.kind.status, s.kind.errType, s.resp.Env.Error)
		}
	}
	if tinyOK > 2 {
		t.Errorf("tenant tiny (1/min, burst 1) ran %d times", tinyOK)
	}

	lines := audittest.ReadFile(t, g.auditFile) // every line validates against the schema
	obsCheckRecords(t, lines, sent, true)
	if want := 480; len(lines) != want {
		t.Errorf("%d audit records, want %d (one per authenticated request)", len(lines), want)
	}
}

// TestAuditSurvivesTheGatewayBeingKilledMidLoad runs the real binary, kills
// it with SIGKILL while requests are in flight, restarts it on the same audit
// file, and checks that every response a client received has its record.
func TestAuditSurvivesTheGatewayBeingKilledMidLoad(t *testing.T) {
	listen := obsFreeAddr(t)
	g := newObsGateway(t, listen)
	bin := testenv.BuildExecgate(t)
	base := "http://" + listen
	kinds := obsKinds()
	tokens := map[string]string{obsFastTenant: g.token(t, obsFastTenant), obsTinyTenant: g.token(t, obsTinyTenant)}

	proc := obsServe(t, bin, g.configPath, base)
	plan := obsPlan(kinds, map[string]int{"ok": 150, "tool error": 50, "policy denied": 100, "quota exceeded": 100}, 2)
	stop := make(chan struct{})
	var mu sync.Mutex // guards received, killed
	received, killed := 0, false
	var sent []obsSent
	done := make(chan struct{})
	go func() {
		defer close(done)
		sent = obsLoad(base, "before-kill", kinds, plan, 6, tokens, stop, func() {
			mu.Lock()
			defer mu.Unlock()
			received++
			if received == 60 && !killed {
				killed = true
				_ = proc.Process.Signal(syscall.SIGKILL) // mid-load: other requests are in flight
				close(stop)
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		t.Fatal("load did not finish within 90s")
	}
	_ = proc.Wait()
	mu.Lock()
	if !killed {
		mu.Unlock()
		t.Fatalf("the load finished before the kill (%d responses)", received)
	}
	mu.Unlock()
	failed := 0
	for _, s := range sent {
		if s.err != nil {
			failed++
		}
	}
	t.Logf("before the kill: %d responses received, %d requests cut off", len(sent)-failed, failed)
	if failed == 0 {
		t.Log("no request was in flight at the kill (the check still holds for every received response)")
	}

	// Restart on the same audit file: the lock died with the process and a
	// torn last line (if any) is dropped.
	proc2 := obsServe(t, bin, g.configPath, base)
	after := obsLoad(base, "after-restart", kinds, obsPlan(kinds, map[string]int{"ok": 5, "policy denied": 5}, 3), 2, tokens, nil, nil)
	for _, s := range after {
		if s.err != nil {
			t.Fatalf("after restart: %v", s.err)
		}
	}
	if err := proc2.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := proc2.Wait(); err != nil {
		t.Errorf("the restarted gateway did not exit cleanly on SIGTERM: %v", err)
	}

	lines := audittest.ReadFile(t, g.auditFile) // every line validates, torn tail included
	obsCheckRecords(t, lines, append(sent, after...), false)
	t.Logf("%d audit records in total", len(lines))
}

// obsServe starts `execgate serve --config cfg` and waits for /healthz.
func obsServe(t *testing.T, bin, cfg, base string) *exec.Cmd {
	t.Helper()
	cmd, _ := obsServeLogged(t, bin, cfg, base)
	return cmd
}

// obsServeLogged is obsServe that also returns the gateway's output as it
// is written (its log lines).
func obsServeLogged(t *testing.T, bin, cfg, base string) (*exec.Cmd, *testenv.SyncBuffer) {
	t.Helper()
	return obsStart(t, exec.Command(bin, "serve", "--config", cfg), base)
}

// obsStart starts cmd (a gateway serving base) and waits for /healthz.
func obsStart(t *testing.T, cmd *exec.Cmd, base string) (*exec.Cmd, *testenv.SyncBuffer) {
	t.Helper()
	logs := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("gateway output:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return cmd, logs
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway did not answer /healthz within 60s: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// obsFreeAddr returns a loopback address with a port free right now.
func obsFreeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// obsErrType is the envelope's error.type, "" when ok.
func obsErrType(env execution.Envelope) string {
	if env.Error == nil {
		return ""
	}
	return env.Error.Type
}

// obsDiscardLogger keeps the gateway's per-run lines out of the test output.
func obsDiscardLogger() *slog.Logger { return slog.New(slog.NewJSONHandler(io.Discard, nil)) }
