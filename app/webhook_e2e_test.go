package app_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/toolbridge/toolconfig"
	"github.com/execgate/execgate/webhook"
)

// mapResolver answers the names it knows with their address.
type mapResolver map[string]netip.Addr

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := m[host]; ok {
		return []netip.Addr{a}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// hookReceiver records the deliveries it gets and answers them from a
// script of statuses (then 200).
type hookReceiver struct {
	mu       sync.Mutex // guards got and statuses
	got      []hookDelivery
	statuses []int
}

type hookDelivery struct {
	header http.Header
	body   []byte
	url    string
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	h.got = append(h.got, hookDelivery{header: r.Header.Clone(), body: b, url: r.URL.String()})
	status := http.StatusOK
	if len(h.statuses) > 0 {
		status, h.statuses = h.statuses[0], h.statuses[1:]
	}
	h.mu.Unlock()
	w.WriteHeader(status)
}

func (h *hookReceiver) deliveries() []hookDelivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hookDelivery(nil), h.got...)
}

func newSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// verifyWithStandardWebhooks checks d's signature for secret with the
// reference library (PyPI standardwebhooks, in the tools venv).
func verifyWithStandardWebhooks(t *testing.T, secret string, d hookDelivery) error {
	t.Helper()
	root := testenv.RepoRoot(t)
	py := filepath.Join(root, ".tools", "venv", "bin", "python")
	if err := exec.Command(py, "-c", "import standardwebhooks").Run(); err != nil {
		testenv.SkipUnlessCI(t, "standardwebhooks is not installed in the tools venv (scripts/setup.sh --test): %v", err)
	}
	headers := map[string]string{}
	for k := range d.header {
		headers[strings.ToLower(k)] = d.header.Get(k)
	}
	in, _ := json.Marshal(map[string]any{"secret": secret, "body": string(d.body), "headers": headers})
	cmd := exec.Command(py, filepath.Join(root, "app", "testdata", "verify_webhook.py"))
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	if strings.TrimSpace(string(out)) != "execution.completed" {
		return fmt.Errorf("verified payload type %q", out)
	}
	return nil
}

// Issue #15 §5: an async execution's callback goes only to a host the
// tenant's policy grants, through the egress address rules, signed per
// Standard Webhooks with every tenant secret (rotation), retried with
// backoff, every attempt audited; a denied host refuses the submission.
func TestWebhooksAreSignedRetriedAuditedAndOnlyToGrantedHosts(t *testing.T) {
	recv := &hookReceiver{statuses: []int{http.StatusServiceUnavailable}}
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port

	oldSecret, newSecret := newSecret(t), newSecret(t)
	t.Setenv("EXECGATE_TEST_WHSEC_OLD", oldSecret)
	secretFile := filepath.Join(t.TempDir(), "whsec-new")
	if err := os.WriteFile(secretFile, []byte(newSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	res := mapResolver{"hooks.test": netip.MustParseAddr("127.0.0.1"), "meta.hooks.test": netip.MustParseAddr("169.254.169.254")}
	s := start(t, setup{egressResolver: res, mutate: func(c *config.Config) {
		c.Egress.AllowCIDRs = []string{"127.0.0.1/32"}
		c.Server.WebhookBackoffMS = 20
		c.Server.WebhookMaxAttempts = 3
		for i := range c.Tenants {
			if c.Tenants[i].ID == "demo" {
				c.Tenants[i].Policy["callbacks"] = []any{"hooks.test", "*.hooks.test"}
				c.Tenants[i].Webhooks = webhook.Config{Secrets: []toolconfig.Secret{{Env: "EXECGATE_TEST_WHSEC_OLD"}, {File: secretFile}}}
			}
		}
	}})
	demo := s.token("demo")
	src := "def run(args, context):\n    return {'ok': True}\n"
	body := func(id, url string) string {
		return fmt.Sprintf(`{"execution_id":%q,"source":%q,"callback_url":%q}`, id, src, url)
	}

	// A host the policy does not grant: refused at submit, audited, not run.
	denied := s.do(http.MethodPost, "/v1/executions", demo, body("to-evil", "http://evil.test/hook"))
	if denied.status != http.StatusForbidden || denied.errType(t) != "PolicyDenied" || !strings.Contains(string(denied.body), "callback host evil.test:80 is not in the tenant's callbacks allow-list") {
		t.Fatalf("a denied callback host: %d %s", denied.status, denied.body)
	}
	if recs := s.auditOf("to-evil"); len(recs) != 1 || recs[0]["outcome"].(map[string]any)["error_type"] != "PolicyDenied" {
		t.Fatalf("audit of the denied submission = %v", recs)
	}
	if r := s.do(http.MethodGet, "/v1/executions/to-evil", demo, nil); r.status != http.StatusNotFound {
		t.Fatalf("the refused submission exists: %d %s", r.status, r.body)
	}
	if bad := s.do(http.MethodPost, "/v1/executions", demo, body("bad-url", "ftp://hooks.test/x")); bad.status != http.StatusBadRequest {
		t.Fatalf("an ftp callback: %d %s", bad.status, bad.body)
	}
	if other := s.do(http.MethodPost, "/v1/executions", s.token("acme"), body("acme-1", fmt.Sprintf("http://hooks.test:%d/hook", port))); other.status != http.StatusForbidden {
		t.Fatalf("a tenant without callbacks: %d %s", other.status, other.body)
	}

	// A granted host: delivered, the first attempt answered 503, the second 200.
	url := fmt.Sprintf("http://hooks.test:%d/hook?token=receiver-secret", port)
	if r := s.do(http.MethodPost, "/v1/executions", demo, body("hooked", url)); r.status != http.StatusAccepted {
		t.Fatalf("submit with a callback: %d %s", r.status, r.body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(recv.deliveries()) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // polling the receiver
	}
	got := recv.deliveries()
	if len(got) != 2 {
		t.Fatalf("%d deliveries, want 2 (a 503, then a 200)", len(got))
	}
	if got[0].header.Get("webhook-id") == "" || got[0].header.Get("webhook-id") != got[1].header.Get("webhook-id") {
		t.Fatalf("webhook-id across attempts: %q, %q", got[0].header.Get("webhook-id"), got[1].header.Get("webhook-id"))
	}
	for i, d := range got {
		if sigs := strings.Fields(d.header.Get("webhook-signature")); len(sigs) != 2 {
			t.Fatalf("attempt %d: %d signatures, want one per secret: %q", i+1, len(sigs), d.header.Get("webhook-signature"))
		}
		for _, secret := range []string{oldSecret, newSecret} {
			if err := verifyWithStandardWebhooks(t, secret, d); err != nil {
				t.Fatalf("attempt %d does not verify with a tenant secret: %v", i+1, err)
			}
		}
		if err := verifyWithStandardWebhooks(t, "whsec_"+base64.StdEncoding.EncodeToString([]byte("not the tenant's secret!!")), d); err == nil {
			t.Fatal("a delivery verifies with a secret that is not the tenant's")
		}
		tampered := d
		tampered.body = bytes.Replace(d.body, []byte(`"ok":true`), []byte(`"ok":false`), 1)
		if bytes.Equal(tampered.body, d.body) || verifyWithStandardWebhooks(t, newSecret, tampered) == nil {
			t.Fatal("an altered body still verifies")
		}
	}
	var payload struct {
		Type string `json:"type"`
		Data struct {
			ExecutionID string         `json:"execution_id"`
			Status      string         `json:"status"`
			Envelope    map[string]any `json:"envelope"`
		} `json:"data"`
	}
	if err := json.Unmarshal(got[1].body, &payload); err != nil || payload.Type != "execution.completed" || payload.Data.ExecutionID != "hooked" ||
		payload.Data.Status != "done" || payload.Data.Envelope["status"] != "ok" {
		t.Fatalf("payload = %s (%v)", got[1].body, err)
	}
	var hooks []map[string]any
	for _, r := range s.auditOf("hooked") {
		if w, ok := r["webhook"].(map[string]any); ok {
			hooks = append(hooks, w)
		}
	}
	if len(hooks) != 2 || hooks[0]["status"] != 503.0 || hooks[0]["delivered"] != false || hooks[0]["final"] != false ||
		hooks[1]["status"] != 200.0 || hooks[1]["delivered"] != true || hooks[1]["final"] != true || hooks[1]["attempt"] != 2.0 {
		t.Fatalf("audited attempts = %v", hooks)
	}
	if u := hooks[0]["url"].(string); strings.Contains(u, "receiver-secret") || !strings.HasPrefix(u, "http://hooks.test:") {
		t.Fatalf("audited url = %q", u)
	}

	// Granted by policy but resolving to a link-local address the platform
	// did not open: never connected, one final audited attempt.
	before := len(recv.deliveries())
	if r := s.do(http.MethodPost, "/v1/executions", demo, body("to-meta", fmt.Sprintf("http://meta.hooks.test:%d/hook", port))); r.status != http.StatusAccepted {
		t.Fatalf("submit to meta: %d %s", r.status, r.body)
	}
	for time.Now().Before(deadline) {
		var hooks []map[string]any
		for _, r := range s.auditOf("to-meta") {
			if w, ok := r["webhook"].(map[string]any); ok {
				hooks = append(hooks, w)
			}
		}
		if len(hooks) > 0 {
			if len(hooks) != 1 || hooks[0]["final"] != true || hooks[0]["delivered"] != false || !strings.Contains(fmt.Sprint(hooks[0]["error"]), "address denied") {
				t.Fatalf("the link-local callback's attempts = %v", hooks)
			}
			if len(recv.deliveries()) != before {
				t.Fatal("the receiver got a delivery meant for a link-local address")
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no audited attempt for the link-local callback")
}

// Issue #23 (mapped addresses): a dual-stack lookup of a name that
// /etc/hosts maps to 127.0.0.1 answers ::ffff:127.0.0.1. The address
// check judges that as 127.0.0.1, so the callback is delivered when
// egress.allow_cidrs opens 127.0.0.1/32, and a name answering the mapped
// form of a loopback address allow_cidrs did not open is still refused,
// never connected.
func TestWebhookToANameAnsweringIPv4MappedLoopbackFollowsAllowCIDRs(t *testing.T) {
	recv := &hookReceiver{}
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	t.Setenv("EXECGATE_TEST_WHSEC_MAPPED", newSecret(t))
	res := mapResolver{"mapped.hooks.test": netip.MustParseAddr("::ffff:127.0.0.1"), "other.hooks.test": netip.MustParseAddr("::ffff:127.0.0.2")}
	s := start(t, setup{noop: true, egressResolver: res, mutate: func(c *config.Config) {
		c.Egress.AllowCIDRs = []string{"127.0.0.1/32"}
		c.Server.WebhookBackoffMS = 20
		c.Server.WebhookMaxAttempts = 2
		for i := range c.Tenants {
			if c.Tenants[i].ID == "demo" {
				c.Tenants[i].Policy["callbacks"] = []any{"*.hooks.test"}
				c.Tenants[i].Webhooks = webhook.Config{Secrets: []toolconfig.Secret{{Env: "EXECGATE_TEST_WHSEC_MAPPED"}}}
			}
		}
	}})
	demo := s.token("demo")
	src := "def run(args, context):\n    return {'ok': True}\n"
	finalAttempt := func(id string) map[string]any {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			for _, r := range s.auditOf(id) {
				if w, ok := r["webhook"].(map[string]any); ok && w["final"] == true {
					return w
				}
			}
			time.Sleep(20 * time.Millisecond) // polling the audit file
		}
		t.Fatalf("no final audited attempt for %s", id)
		return nil
	}
	for _, tc := range []struct {
		id, host  string
		delivered bool
	}{
		{"mapped-open", "mapped.hooks.test", true},
		{"mapped-closed", "other.hooks.test", false},
	} {
		body := fmt.Sprintf(`{"execution_id":%q,"source":%q,"callback_url":"http://%s:%d/hook"}`, tc.id, src, tc.host, port)
		if r := s.do(http.MethodPost, "/v1/executions", demo, body); r.status != http.StatusAccepted {
			t.Fatalf("%s: submit: %d %s", tc.id, r.status, r.body)
		}
		w := finalAttempt(tc.id)
		if w["delivered"] != tc.delivered {
			t.Fatalf("%s (%s answers the IPv4-mapped form): final attempt %v, want delivered=%t", tc.id, tc.host, w, tc.delivered)
		}
		if !tc.delivered && !strings.Contains(fmt.Sprint(w["error"]), "address denied") {
			t.Fatalf("%s: refused for another reason: %v", tc.id, w)
		}
	}
	if got := recv.deliveries(); len(got) != 1 || !strings.Contains(string(got[0].body), `"mapped-open"`) {
		t.Fatalf("the receiver got %d deliveries, want exactly the one to the opened address", len(got))
	}
}
