package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/bundle"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/gateway"
	"github.com/execgate/execgate/policy"
)

// scrape reads /metrics.
func (s *server) scrape() map[string]*dto.MetricFamily {
	s.t.Helper()
	r := s.do(http.MethodGet, "/metrics", "", nil)
	if r.status != http.StatusOK {
		s.t.Fatalf("/metrics: %d", r.status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(r.body))
	if err != nil {
		s.t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// logLines decodes the envelope's logs.
func logLines(t *testing.T, r response) []map[string]string {
	t.Helper()
	var env struct {
		Logs []map[string]string `json:"logs"`
	}
	if err := json.Unmarshal(r.body, &env); err != nil {
		t.Fatal(err)
	}
	if env.Logs == nil {
		t.Fatalf("envelope has no logs array: %s", r.body)
	}
	return env.Logs
}

func TestToolLogsLandInTheEnvelope(t *testing.T) {
	s := start(t, setup{realSandbox: true})
	tok := s.token("demo")
	tests := []struct {
		name   string
		source string
		status string
		want   string // logs as level:message, comma-joined
	}{
		{"context.log lines in order with their levels", "def run(args, context):\n    context.log('hello')\n    context.log('careful', level='warning')\n    return 1\n", "ok", "info:hello,warning:careful"},
		{"the execgate_runtime logger", "import execgate_runtime\n\ndef run(args, context):\n    execgate_runtime.log('from the module', level='debug')\n    return 1\n", "ok", "debug:from the module"},
		{"lines logged before a tool error are kept", "def run(args, context):\n    context.log('about to fail')\n    raise ValueError('x')\n", "error", "info:about to fail"},
		{"no logging is an empty array", "def run(args, context):\n    return 1\n", "ok", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.execute(tok, map[string]any{"source": tt.source})
			if r.status != http.StatusOK || r.json(t)["status"] != tt.status {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			var got []string
			for _, l := range logLines(t, r) {
				got = append(got, l["level"]+":"+l["message"])
			}
			if strings.Join(got, ",") != tt.want {
				t.Errorf("logs %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("a refusal has an empty logs array", func(t *testing.T) {
		r := s.execute("", map[string]any{"source": "def run(a, c):\n    return 1\n"})
		if r.status != http.StatusUnauthorized {
			t.Fatalf("status %d", r.status)
		}
		if l := logLines(t, r); len(l) != 0 {
			t.Errorf("logs %v", l)
		}
	})
}

// loopbackResolver maps every name in hosts to 127.0.0.1 and knows no
// other; it counts the lookups per name.
type loopbackResolver struct {
	hosts map[string]bool
	mu    sync.Mutex // guards asked
	asked map[string]int
}

func (r *loopbackResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.asked == nil {
		r.asked = map[string]int{}
	}
	r.asked[host]++
	if !r.hosts[host] {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

// proxyServer is a gateway with a real sandbox whose egress proxy resolves
// api.test and denied.test (only) to the host's loopback, which
// egress.allow_cidrs opens, and a tenant "net" that may use network proxy
// to allowed; mod changes the config further.
func proxyServer(t *testing.T, allowed string, mod func(*config.Config)) (*server, *loopbackResolver) {
	t.Helper()
	res := &loopbackResolver{hosts: map[string]bool{"api.test": true, "denied.test": true}}
	s := start(t, setup{realSandbox: true, egressResolver: res, mutate: func(c *config.Config) {
		c.Egress.AllowCIDRs = []string{"127.0.0.1/32"}
		nt := config.DemoTenant()
		nt.ID = "net"
		nt.Policy["network"] = []any{"none", "proxy"}
		nt.Policy["egress_allow"] = []any{allowed}
		c.Tenants = append(c.Tenants, nt)
		if mod != nil {
			mod(c)
		}
	}})
	return s, res
}

func TestProxyModeReachesOnlyTheAllowList(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from the host, you asked for %s", r.Host)
	}))
	t.Cleanup(backend.Close)
	port := backend.Listener.Addr().(*net.TCPAddr).Port
	allowed := fmt.Sprintf("api.test:%d", port)
	s, res := proxyServer(t, allowed, nil)
	if err := s.app.SandboxErr(); err != nil {
		t.Fatalf("sandbox: %v", err)
	}

	const tool = `import urllib.request, urllib.error

def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()
    except urllib.error.HTTPError as e:
        return "refused %d" % e.code
    except Exception as e:
        return "failed %s" % type(e).__name__

def run(args, context):
    return {"allowed": fetch(args["allowed"]), "denied": fetch(args["denied"])}
`
	r := s.execute(s.token("net"), map[string]any{
		"execution_id":   "egress-1",
		"source":         tool,
		"network_access": "proxy",
		"egress":         map[string]any{"allow": []string{allowed}},
		"args": map[string]string{
			"allowed": "http://" + allowed + "/data",
			"denied":  fmt.Sprintf("http://denied.test:%d/data", port),
		},
	})
	env := r.json(t)
	if r.status != http.StatusOK || env["status"] != "ok" {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	dec, _ := env["decision"].(map[string]any)
	if dec["network_access"] != "proxy" {
		t.Fatalf("decision %v", dec)
	}
	result, _ := env["result"].(map[string]any)
	if got, want := result["allowed"], "hello from the host, you asked for "+allowed; got != want {
		t.Errorf("allowed fetch = %v, want %q", got, want)
	}
	if got, _ := result["denied"].(string); strings.HasPrefix(got, "hello") || got == "" {
		t.Errorf("denied fetch = %q: the host outside the allow-list was reached", got)
	}

	var rec map[string]any
	for _, l := range s.auditLines() {
		if l["execution_id"] == "egress-1" {
			rec = l
		}
	}
	if rec == nil {
		t.Fatal("no audit record for egress-1")
	}
	attempts, _ := rec["egress"].([]any)
	var sawAllowed, sawDenied bool
	for _, a := range attempts {
		m, _ := a.(map[string]any)
		switch {
		case m["host"] == "api.test" && m["port"] == float64(port) && m["allowed"] == true && m["ip"] == "127.0.0.1":
			sawAllowed = true
		case m["host"] == "denied.test" && m["allowed"] == false && m["reason"] != "":
			sawDenied = true
		}
	}
	if !sawAllowed || !sawDenied {
		t.Errorf("audit egress = %v, want the allowed api.test attempt and the denied denied.test one", attempts)
	}
	res.mu.Lock()
	if res.asked["denied.test"] != 0 {
		t.Errorf("denied.test was resolved %d times; a host off the allow-list must be refused before DNS", res.asked["denied.test"])
	}
	res.mu.Unlock()
	if v, _ := obsMetric(s.scrape(), "execgate_egress_denials_total", map[string]string{"tenant": "net"}); v != 1 {
		t.Errorf("execgate_egress_denials_total{tenant=net} = %v, want 1", v)
	}

	rz := s.do(http.MethodGet, "/readyz", "", nil)
	if !strings.Contains(string(rz.body), `"name":"egress","ok":true`) {
		t.Errorf("readyz lacks a passing egress check: %s", rz.body)
	}
}

func TestWarmPoolGaugeFollowsTheRunner(t *testing.T) {
	s := start(t, setup{realSandbox: true, mutate: func(c *config.Config) { c.Sandbox.WarmPool = 1 }})
	// The pool fills for a profile once it has been used.
	if r := s.execute(s.token("demo"), probe("demo")); r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	waitFor(t, "execgate_warm_pool_idle{profile=all} to reach 1", 30*time.Second, func() bool {
		v, _ := obsMetric(s.scrape(), "execgate_warm_pool_idle", map[string]string{"profile": "all"})
		return v == 1
	})
}

func TestPolicyBundleIsPolledWithoutPolicyDirs(t *testing.T) {
	var (
		mu   sync.Mutex // guards body
		body []byte
	)
	serve := func(revision string) {
		b := bundle.Bundle{
			Manifest: bundle.Manifest{Revision: revision},
			Data:     map[string]any{},
			Modules: []bundle.ModuleFile{{URL: "/ext/team.rego", Path: "/ext/team.rego",
				Raw: []byte("package execgate.main\n\ndeny contains \"bundle " + revision + "\" if input.tenant.id == \"acme\"\n")}},
		}
		var buf bytes.Buffer
		if err := bundle.NewWriter(&buf).Write(b); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		body = buf.Bytes()
		mu.Unlock()
	}
	serve("r1")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		b := body
		mu.Unlock()
		w.Header().Set("Content-Type", "application/gzip")
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)

	s := start(t, setup{noop: true, mutate: func(c *config.Config) {
		c.Policy.Bundle = &policy.BundleConfig{URL: srv.URL + "/bundles/execgate.tar.gz", PollSeconds: 1}
	}})
	reasons := func() string {
		r := s.execute(s.token("acme"), probe("acme"))
		var env struct {
			Error *struct {
				Reasons []string `json:"reasons"`
			} `json:"error"`
		}
		if err := json.Unmarshal(r.body, &env); err != nil || env.Error == nil {
			t.Fatalf("want a denial, got %d: %s (%v)", r.status, r.body, err)
		}
		return strings.Join(env.Error.Reasons, ",")
	}
	if got := reasons(); got != "bundle r1" {
		t.Fatalf("reasons %q, want bundle r1", got)
	}
	serve("r2")
	waitFor(t, "the gateway to serve bundle r2", 15*time.Second, func() bool { return s.app.Policy().Status().Bundle == "r2" })
	if got := reasons(); got != "bundle r2" {
		t.Fatalf("reasons %q after the poll, want bundle r2", got)
	}
}

func TestAJailsDirTheJailCannotReachRefusesOnlyProxyRuns(t *testing.T) {
	s := start(t, setup{realSandbox: true, mutate: func(c *config.Config) {
		// The work dir may be private (the jail reaches its jails dir
		// through the view), but a jails dir the user made private keeps
		// the jail from every egress socket below it.
		if err := os.Mkdir(filepath.Join(c.Sandbox.WorkDir, "jails"), 0o700); err != nil {
			t.Fatal(err)
		}
		nt := config.DemoTenant()
		nt.ID = "net"
		nt.Policy["network"] = []any{"none", "proxy"}
		c.Tenants = append(c.Tenants, nt)
	}})
	tok := s.token("net")
	if r := s.execute(tok, probe("net")); r.status != http.StatusOK || r.json(t)["status"] != "ok" {
		t.Fatalf("network none run: %d %s", r.status, r.body)
	}
	r := s.execute(tok, map[string]any{"source": "def run(a, c):\n    return 1\n", "network_access": "proxy"})
	if r.status != http.StatusServiceUnavailable || r.errType(t) != "SandboxUnavailable" {
		t.Fatalf("proxy run: %d %s, want 503 SandboxUnavailable", r.status, r.body)
	}
	rz := s.do(http.MethodGet, "/readyz", "", nil)
	var ready gateway.ReadyResponse
	if err := json.Unmarshal(rz.body, &ready); err != nil {
		t.Fatal(err)
	}
	if rz.status != http.StatusOK || !ready.Ready {
		t.Fatalf("readyz %d: %s; a degraded proxy mode must not make the gateway unready", rz.status, rz.body)
	}
	var eg *gateway.CheckResult
	for i := range ready.Checks {
		if ready.Checks[i].Name == "egress" {
			eg = &ready.Checks[i]
		}
	}
	if eg == nil || eg.OK || !eg.Optional || !strings.Contains(eg.Error, "chmod o+x") {
		t.Fatalf("egress check %+v, want an optional failure with the chmod hint", eg)
	}
}

// Containment 36: an escape-class syscall reaches the security team: the
// envelope says SyscallDenied naming the call, and so do the audit record
// and execgate_syscall_denied_total.
func TestAnEscapeSyscallIsInTheEnvelopeTheAuditRecordAndTheMetric(t *testing.T) {
	s := start(t, setup{realSandbox: true})
	if err := s.app.SandboxErr(); err != nil {
		t.Fatalf("sandbox: %v", err)
	}
	const tool = `import ctypes

def run(args, context):
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(ctypes.c_long(272), ctypes.c_long(0x10000000))  # unshare(CLONE_NEWUSER)
`
	r := s.execute(s.token("demo"), map[string]any{"execution_id": "escape-1", "source": tool})
	env := r.json(t)
	e, _ := env["error"].(map[string]any)
	if r.status != http.StatusOK || env["status"] != "error" || e["type"] != "SyscallDenied" {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if msg, _ := e["message"].(string); !strings.Contains(msg, "unshare") {
		t.Errorf("message %q does not name unshare", msg)
	}
	if got := r.header.Get("X-Execution-Status"); got != "error:SyscallDenied" {
		t.Errorf("X-Execution-Status = %q", got)
	}
	var rec map[string]any
	for _, l := range s.auditLines() {
		if l["execution_id"] == "escape-1" {
			rec = l
		}
	}
	if rec == nil {
		t.Fatal("no audit record for escape-1")
	}
	if o, _ := rec["outcome"].(map[string]any); o["error_type"] != "SyscallDenied" || o["syscall"] != "unshare" {
		t.Errorf("audit outcome = %v, want SyscallDenied naming unshare", rec["outcome"])
	}
	if v, _ := obsMetric(s.scrape(), "execgate_syscall_denied_total", map[string]string{"syscall": "unshare"}); v != 1 {
		t.Errorf("execgate_syscall_denied_total{syscall=unshare} = %v, want 1", v)
	}
}
