package execution

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/execgate/execgate/audit"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/secrets"
	"github.com/execgate/execgate/tenancy"
	"github.com/execgate/execgate/toolbridge/toolconfig"
)

// The flow's part of brokered secrets, with the domain packages faked:
// which values the runner gets, and that nothing of them comes back from
// any runner (a dispatcher's executor included) or reaches the log.

const flowSecret = "tok-9aXbYcZd-flow-secret-value"

type secretTenants struct{ t tenancy.Tenant }

func (s secretTenants) Authorize(tenancy.Principal, string, []tenancy.Grant) (tenancy.Tenant, error) {
	return s.t, nil
}

// grantAll grants every secret asked for (policies/secrets.rego has its own
// tests) and the runtime asked for (the input's: the tenant's default).
type grantAll struct{}

func (grantAll) Decide(_ context.Context, in policy.Input) (policy.Decision, error) {
	granted := in.Request.Secrets
	if in.Request.Mode == "test" {
		granted = []string{}
	}
	return policy.Decision{ID: "d1", Allow: true, NetworkAccess: "none", Limits: limits.Default, Egress: policy.Egress{Allow: []string{}}, Isolation: "jail", Runtime: in.Request.Runtime, Secrets: granted}, nil
}

// leakyRunner sends back whatever secret it gets, every way a run can:
// live output split in two, stdout, the result, a log line, an egress host.
type leakyRunner struct {
	mu    sync.Mutex
	specs []sandbox.Spec
}

func (r *leakyRunner) Run(_ context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	r.mu.Lock()
	r.specs = append(r.specs, spec)
	r.mu.Unlock()
	v := "none"
	if len(spec.Secrets) > 0 {
		v = spec.Secrets[0].Reveal()
	}
	if spec.Output != nil {
		spec.Output(sandbox.StreamStdout, []byte("live "+v[:5]))
		spec.Output(sandbox.StreamStdout, []byte(v[5:]+"\n"))
	}
	res, _ := json.Marshal(map[string]string{"leak": v})
	return sandbox.Result{Status: sandbox.StatusOK, Result: res, Stdout: "out " + v, Logs: []sandbox.LogLine{{Level: "info", Message: v}},
		Egress: []sandbox.EgressAttempt{{Host: v + ".example.com", Port: 443}}}, nil
}

type auditSink struct {
	mu      sync.Mutex
	records []audit.Record
}

func (a *auditSink) Record(_ context.Context, r audit.Record) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.records = append(a.records, r)
	return nil
}

func newSecretFlow(t *testing.T, cfg secrets.Config, env map[string]string) (*Flow, *leakyRunner, *auditSink, *bytes.Buffer) {
	t.Helper()
	runner, sink, logs := &leakyRunner{}, &auditSink{}, &bytes.Buffer{}
	f, err := New(Config{Queue: QueueLimits{Running: 2, Waiting: 4, TenantRunning: 2, TenantWaiting: 4}, OutputMemoryBytes: 1 << 30},
		Deps{
			Tenants: secretTenants{tenancy.Tenant{ID: "t1", Quota: quota.Limits{RatePerMinute: 600, Burst: 20, Concurrency: 4}, Secrets: cfg}},
			Policy:  grantAll{}, Quota: quota.NewMemory(quota.Config{}), Runner: runner, Audit: sink,
			Logger: slog.New(slog.NewJSONHandler(logs, nil)),
			Getenv: func(k string) string { return env[k] },
		})
	if err != nil {
		t.Fatal(err)
	}
	return f, runner, sink, logs
}

func secretCall(body string, out sandbox.OutputFunc) Call {
	return Call{
		Principal: tenancy.Principal{TenantID: "t1", Subject: "s", Roles: []string{"executor"}},
		ID:        NewID(),
		Body:      func() ([]byte, error) { return []byte(body), nil },
		Decode: func(b []byte) (*Request, error) {
			var r Request
			if err := json.Unmarshal(b, &r); err != nil {
				return nil, err
			}
			r.Language, r.Entrypoint, r.NetworkAccess, r.Isolation = "python", "run", "none", "jail"
			if r.Mode == "" {
				r.Mode = "run"
			}
			return &r, nil
		},
		Output: out,
	}
}

func TestFlowReadsGrantedSecretsAtUseAndMasksWhatComesBack(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "api")
	if err := os.WriteFile(file, []byte(flowSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, runner, sink, logs := newSecretFlow(t, secrets.Config{"API_KEY": {File: file}, "DB": {Env: "TOOL_SECRET_DB"}, "GONE": {File: filepath.Join(dir, "gone")}},
		map[string]string{"TOOL_SECRET_DB": "db-password-value"})

	var live bytes.Buffer
	out := f.Run(context.Background(), secretCall(`{"source":"x","secrets":["API_KEY","DB"]}`, func(_ string, p []byte) { live.Write(p) }))
	defer out.Release()
	body := string(out.Body.Bytes())
	if out.Status != 200 || len(runner.specs) != 1 {
		t.Fatalf("status %d, %d runs: %s", out.Status, len(runner.specs), body)
	}
	if got := runner.specs[0].Secrets; len(got) != 2 || got[0].Name() != "API_KEY" || got[0].Reveal() != flowSecret || got[1].Reveal() != "db-password-value" {
		t.Fatalf("the runner got %v", got)
	}
	for where, s := range map[string]string{"the envelope": body, "the live output": live.String(), "the log": logs.String()} {
		if strings.Contains(s, flowSecret[:12]) || strings.Contains(s, flowSecret[12:]) {
			t.Errorf("%s holds the secret: %s", where, s)
		}
	}
	if live.String() != "live ***\n" || !strings.Contains(body, `"stdout":"out ***"`) || !strings.Contains(body, `"result":{"leak":"***"}`) ||
		!strings.Contains(body, `"secrets":["API_KEY","DB"]`) {
		t.Errorf("live %q, envelope %s", live.String(), body)
	}
	rec := sink.records[0]
	if strings.Join(rec.Secrets, ",") != "API_KEY,DB" || rec.Egress[0].Host != "***.example.com" {
		t.Errorf("audit record: secrets %v, egress %+v", rec.Secrets, rec.Egress)
	}

	// A rotated file is read at the next run.
	if err := os.WriteFile(file, []byte("rotated-secret-value-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out = f.Run(context.Background(), secretCall(`{"source":"x","secrets":["API_KEY"]}`, nil))
	out.Release()
	if got := runner.specs[1].Secrets; len(got) != 1 || got[0].Reveal() != "rotated-secret-value-2" {
		t.Fatalf("after the rotation the runner got %v", got)
	}

	// A granted secret that cannot be read refuses the run, naming it and
	// not where it lives; the log says why.
	out = f.Run(context.Background(), secretCall(`{"source":"x","secrets":["API_KEY","GONE"]}`, nil))
	out.Release()
	body = string(out.Body.Bytes())
	if out.Status != 503 || out.Envelope.Error.Type != TypeSecretUnavailable || !strings.Contains(out.Envelope.Error.Message, `"GONE"`) || strings.Contains(body, dir) {
		t.Errorf("an unreadable secret: %d %s", out.Status, body)
	}
	if len(runner.specs) != 2 {
		t.Errorf("a run without its secret ran")
	}
	if !strings.Contains(logs.String(), filepath.Join(dir, "gone")) {
		t.Errorf("the log does not say which file is missing: %s", logs.String())
	}
}

func TestTestModeTakesSecretsFromFixtures(t *testing.T) {
	f, runner, sink, _ := newSecretFlow(t, secrets.Config{"API_KEY": {Env: "TOOL_SECRET_REAL"}}, map[string]string{"TOOL_SECRET_REAL": "the-real-one-never"})
	out := f.Run(context.Background(), secretCall(`{"source":"x","mode":"test","secrets":["API_KEY"],"fixtures":{"secrets":{"API_KEY":"stand-in-value"}}}`, nil))
	defer out.Release()
	if got := runner.specs[0].Secrets; len(got) != 1 || got[0].Reveal() != "stand-in-value" {
		t.Fatalf("test mode gave the runner %v", got)
	}
	if body := string(out.Body.Bytes()); strings.Contains(body, "stand-in-value") || strings.Contains(body, "the-real-one") {
		t.Errorf("the envelope: %s", body)
	}
	if strings.Join(sink.records[0].Secrets, ",") != "API_KEY" {
		t.Errorf("audit secrets %v", sink.records[0].Secrets)
	}
}

func TestRefusalOfAnUnreadableSecret(t *testing.T) {
	e := Refusal(&secrets.UnavailableError{Name: "API_KEY", Err: toolconfig.ErrSecretUnset})
	if e.Status != 503 || e.Type != TypeSecretUnavailable || e.Expected() || !strings.Contains(e.Message, `"API_KEY"`) {
		t.Errorf("got %d %s expected %v %q", e.Status, e.Type, e.Expected(), e.Message)
	}
}
