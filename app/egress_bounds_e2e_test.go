package app_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"testing"

	"github.com/execgate/execgate/audit"
	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/sandbox"
)

// Issue #10 class 3, end to end: a jailed tool in network mode proxy makes
// 1000 CONNECT attempts through the real relay and proxy, 40 of them with a
// 500 KB host. The envelope and the audit record keep
// sandbox.MaxEgressAttempts attempts with clipped hosts and count the rest,
// and the audit line stays under audit.MaxRecordBytes (it used to grow by
// twice each host: 40 MB for this run).
func TestProxyModeBoundsTheEgressAToolCanRecord(t *testing.T) {
	s := start(t, setup{realSandbox: true, egressResolver: &loopbackResolver{}, mutate: func(c *config.Config) {
		nt := config.DemoTenant()
		nt.ID = "net"
		nt.Policy["network"] = []any{"none", "proxy"}
		nt.Policy["egress_allow"] = []any{"api.test:443"}
		c.Tenants = append(c.Tenants, nt)
	}})
	if err := s.app.SandboxErr(); err != nil {
		t.Fatalf("sandbox: %v", err)
	}
	const tool = `import socket, threading

def attempt(host):
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    except OSError as e:
        return "connect " + type(e).__name__
    try:
        s.sendall(b"CONNECT " + host + b":443 HTTP/1.1\r\n\r\n")
        return s.recv(12).decode("latin-1")
    except OSError as e:
        return type(e).__name__
    finally:
        s.close()

def run(args, context):
    huge = b"a" * (500 << 10) + b".example.com"
    outcomes = {}
    lock = threading.Lock()
    def note(r):
        with lock:
            outcomes[r] = outcomes.get(r, 0) + 1
    def worker():
        for _ in range(5):
            note(attempt(huge))
    # net/http lingers on each connection it refuses: 8 at a time.
    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(960):
        note(attempt(b"evil%d.example.com" % i))
    return outcomes
`
	r := s.execute(s.token("net"), map[string]any{
		"execution_id":   "egress-flood",
		"source":         tool,
		"network_access": "proxy",
		"egress":         map[string]any{"allow": []string{"api.test:443"}},
		"limits":         map[string]any{"timeout_ms": 30000, "cpu_ms": 30000},
	})
	var env struct {
		Status        string                  `json:"status"`
		Result        map[string]int          `json:"result"`
		Egress        []sandbox.EgressAttempt `json:"egress"`
		EgressDropped int                     `json:"egress_dropped"`
	}
	if err := json.Unmarshal(r.body, &env); err != nil || r.status != http.StatusOK || env.Status != "ok" {
		t.Fatalf("status %d (%v): %.2000s", r.status, err, r.body)
	}
	total := 0
	for _, n := range env.Result {
		total += n
	}
	if total != 1000 {
		t.Fatalf("the tool made %d attempts, want 1000: %v", total, env.Result)
	}
	// Every attempt reached the proxy and was recorded or counted.
	checkBounded := func(where string, attempts []sandbox.EgressAttempt, dropped int) {
		t.Helper()
		if len(attempts) != sandbox.MaxEgressAttempts || len(attempts)+dropped != 1000 {
			t.Errorf("%s: %d attempts kept and %d dropped, want %d kept of 1000", where, len(attempts), dropped, sandbox.MaxEgressAttempts)
		}
		for _, a := range attempts {
			if a.Allowed || len(a.Host) > sandbox.MaxEgressFieldBytes || len(a.Reason) > sandbox.MaxEgressFieldBytes {
				t.Fatalf("%s: attempt not denied or not bounded: host %d bytes, reason %.300q", where, len(a.Host), a.Reason)
			}
		}
	}
	checkBounded("envelope", env.Egress, env.EgressDropped)

	raw, err := os.ReadFile(s.cfg.Audit.File)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var rec audit.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("audit line: %v", err)
		}
		if rec.ExecutionID != "egress-flood" {
			continue
		}
		found = true
		if n := len(sc.Bytes()); n > audit.MaxRecordBytes {
			t.Errorf("the audit record is %d bytes, over %d", n, audit.MaxRecordBytes)
		}
		checkBounded("audit record", rec.Egress, rec.EgressDropped)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the audit file: %v", err)
	}
	if !found {
		t.Fatal("no audit record for egress-flood")
	}
}
