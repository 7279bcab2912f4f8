package app_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/tenancy"
)

// The request edge (issue #10 class 5) through the real listener: slow
// bodies, the unauthenticated-connection cap, Go's own header errors, and
// bodies that nest too deep or are not UTF-8. The gateway-only server
// (NoopRunner, counted) is enough: none of these may reach a run.

// dial opens a raw TCP connection to the gateway.
func (s *server) dial(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", s.app.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// trickle writes data one byte per interval in the background until it is
// all written or a write fails (the server closed the connection).
func trickle(c net.Conn, data []byte, every time.Duration) {
	go func() {
		for _, b := range data {
			if _, err := c.Write([]byte{b}); err != nil {
				return
			}
			time.Sleep(every) // the attack's pace, not synchronisation
		}
	}()
}

// readUntilClosed reads c until the server ends the connection (EOF or
// reset) or max passes. It returns what was read, when the connection
// ended (measured from start) and whether it did.
func readUntilClosed(c net.Conn, start time.Time, max time.Duration) (got []byte, after time.Duration, closed bool) {
	_ = c.SetReadDeadline(start.Add(max))
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			return got, time.Since(start), !errors.Is(err, os.ErrDeadlineExceeded)
		}
	}
}

// stillOpen reports whether c is open: a short read times out instead of
// ending.
func stillOpen(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// parseResponse parses one HTTP response out of raw bytes (nil if there is
// none: the connection may have been reset before it was read).
func parseResponse(t *testing.T, raw []byte) (*http.Response, map[string]any) {
	t.Helper()
	if len(raw) == 0 {
		return nil, nil
	}
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(raw))), nil)
	if err != nil {
		t.Fatalf("not an HTTP response: %v\n%q", err, raw)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%d response body is not JSON: %v\n%s", resp.StatusCode, err, b)
	}
	return resp, m
}

func errorOf(m map[string]any) (typ, msg string) {
	e, _ := m["error"].(map[string]any)
	typ, _ = e["type"].(string)
	msg, _ = e["message"].(string)
	return typ, msg
}

func TestSlowBodiesAreCutAtTheReadBodyTimeout(t *testing.T) {
	const timeout = 2 * time.Second
	s := start(t, setup{noop: true, mutate: func(c *config.Config) {
		c.Server.ReadBodyTimeoutSeconds = int(timeout / time.Second)
	}})
	body := []byte(`{"source":"def run(args, context):\n    return 1\n","args":{"pad":"` + strings.Repeat("x", 100) + `"}}`)
	request := func(token string) []byte {
		h := "POST /v1/execute HTTP/1.1\r\nHost: execgate\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n"
		if token != "" {
			h += "Authorization: Bearer " + token + "\r\n"
		}
		return []byte(h + "\r\n")
	}

	t.Run("an authenticated body sent a byte a second is cut at the timeout", func(t *testing.T) {
		c := s.dial(t)
		if _, err := c.Write(request(s.token("demo"))); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		trickle(c, body, time.Second)
		got, after, closed := readUntilClosed(c, start, timeout+6*time.Second)
		if !closed {
			t.Fatalf("the connection is still open %s after the header (read_body_timeout %s); read %q", after, timeout, got)
		}
		if after < timeout-500*time.Millisecond || after > timeout+3*time.Second {
			t.Fatalf("the connection ended %s after the header, want about %s", after, timeout)
		}
		if resp, m := parseResponse(t, got); resp != nil {
			typ, msg := errorOf(m)
			if resp.StatusCode != http.StatusBadRequest || typ != "BadRequest" || !strings.Contains(msg, "read_body_timeout_seconds") {
				t.Fatalf("got %d %s %q, want 400 BadRequest naming read_body_timeout_seconds", resp.StatusCode, typ, msg)
			}
		}
	})

	t.Run("an unauthenticated body sent a byte a second gets its 401 and the connection closes", func(t *testing.T) {
		c := s.dial(t)
		if _, err := c.Write(request("")); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		trickle(c, body, time.Second)
		got, after, closed := readUntilClosed(c, start, timeout+6*time.Second)
		if !closed || after > timeout+time.Second {
			t.Fatalf("the connection ended=%v after %s, want closed within about 1 s (read %q)", closed, after, got)
		}
		resp, m := parseResponse(t, got)
		if resp == nil {
			t.Fatal("no response before the connection closed")
		}
		if typ, _ := errorOf(m); resp.StatusCode != http.StatusUnauthorized || typ != "Unauthenticated" {
			t.Fatalf("got %d %s, want 401 Unauthenticated", resp.StatusCode, typ)
		}
	})

	if n := s.runs.Load(); n != 0 {
		t.Fatalf("%d runs from slow bodies", n)
	}
	// The same server still runs a request sent at normal speed.
	if r := s.execute(s.token("demo"), string(body)); r.status != http.StatusOK {
		t.Fatalf("a normal request: %d %s", r.status, r.body)
	}
}

func TestUnauthenticatedConnectionsAreCappedWithoutStarvingTenants(t *testing.T) {
	const max = 3
	s := start(t, setup{noop: true, mutate: func(c *config.Config) {
		c.Server.MaxUnauthenticatedConns = max
		// Long enough that only the cap can end the slow connections here.
		c.Server.ReadHeaderTimeoutSeconds = 60
	}})
	// max+1 connections trickling a header, never presenting a token.
	conns := make([]net.Conn, max+1)
	for i := range conns {
		conns[i] = s.dial(t)
		if _, err := conns[i].Write([]byte("POST /v1/execute HTTP/1.1\r\nHost: execgate\r\n")); err != nil {
			t.Fatal(err)
		}
		trickle(conns[i], []byte("X-Slow: "+strings.Repeat("a", 120)), time.Second)
	}
	// The one over the cap pushes out the oldest.
	if _, after, closed := readUntilClosed(conns[0], time.Now(), 5*time.Second); !closed {
		t.Fatalf("the oldest unauthenticated connection is still open after %s with %d connections over a cap of %d", after, max+1, max)
	}
	for i := 1; i <= max; i++ {
		if !stillOpen(conns[i]) {
			t.Fatalf("connection %d was closed too; only one is over the cap", i)
		}
	}

	// A tenant connecting now is served: its connection is admitted (the
	// next oldest slow one goes) and leaves the count once authenticated.
	if r := s.execute(s.token("demo"), probe("demo")); r.status != http.StatusOK {
		t.Fatalf("authenticated probe: %d %s", r.status, r.body)
	}
	if _, after, closed := readUntilClosed(conns[1], time.Now(), 5*time.Second); !closed {
		t.Fatalf("connection 1 still open %s after the tenant's connection took its place", after)
	}
	// The tenant's (now authenticated, kept-alive) connection is not
	// pushed out by more junk.
	more := s.dial(t)
	if _, err := more.Write([]byte("GET /healthz HTTP/1.1\r\n")); err != nil {
		t.Fatal(err)
	}
	if r := s.execute(s.token("demo"), strings.Replace(probe("demo"), `"probe"`, `"probe-2"`, 1)); r.status != http.StatusOK {
		t.Fatalf("second probe: %d %s", r.status, r.body)
	}
	if n := s.runs.Load(); n != 2 {
		t.Fatalf("%d runs, want the 2 probes", n)
	}
}

func TestGoHeaderErrorsGetTheJSONErrorShape(t *testing.T) {
	s := start(t, setup{noop: true})
	tests := []struct {
		name    string
		request string
		status  int
		typ     string
		message string
	}{
		{"a header over max_header_bytes", "POST /v1/execute HTTP/1.1\r\nHost: execgate\r\nX-Big: " + strings.Repeat("a", 80<<10) + "\r\n\r\n",
			http.StatusRequestHeaderFieldsTooLarge, "PayloadTooLarge", "request header: over the 65536-byte cap (server.max_header_bytes)"},
		{"a malformed Host header", "GET /healthz HTTP/1.1\r\nHost: a b\r\n\r\n",
			http.StatusBadRequest, "BadRequest", "request: malformed Host header"},
		{"a malformed request line", "NOT-HTTP\r\n\r\n",
			http.StatusBadRequest, "BadRequest", "request: malformed HTTP request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := s.dial(t)
			go func() { _, _ = c.Write([]byte(tt.request)) }()
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("reading the response: %v", err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status || resp.Header.Get("Content-Type") != "application/json; charset=utf-8" {
				t.Fatalf("got %d %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatalf("body is not JSON: %s", b)
			}
			if typ, msg := errorOf(m); m["status"] != "error" || typ != tt.typ || msg != tt.message {
				t.Fatalf("body = %s, want error %s %q", b, tt.typ, tt.message)
			}
		})
	}
}

func TestDeepOrInvalidUTF8BodiesAreRefusedByPathAndRunNothing(t *testing.T) {
	s := start(t, setup{noop: true})
	deepArrays := strings.Repeat("[", 1000) + strings.Repeat("]", 1000)
	deepObjects := strings.Repeat(`{"a":`, 1000) + "1" + strings.Repeat("}", 1000)
	src := `"def run(args, context):\n    return 1\n"`
	tests := []struct {
		name    string
		path    string
		token   string
		body    string
		message string // prefix of error.message
	}{
		{"args nested 1000 deep", "/v1/execute", "executor",
			`{"source":` + src + `,"args":` + deepArrays + `}`, "args" + strings.Repeat("[0]", 63) + ": nests deeper than 64 levels"},
		{"fixture variables nested 1000 deep", "/v1/execute", "executor",
			`{"source":` + src + `,"mode":"test","fixtures":{"variables":{"v":` + deepObjects + `}}}`, "fixtures.variables.v" + strings.Repeat(".a", 61) + ": nests deeper than 64 levels"},
		{"invalid UTF-8 inside args", "/v1/execute", "executor",
			"{\"source\":" + src + ",\"args\":{\"a\":{\"b\":[0,1,2,\"\xff\xfe\"]}}}", "args.a.b[3]: holds invalid UTF-8"},
		{"a lone surrogate escape inside args", "/v1/execute", "executor",
			`{"source":` + src + `,"args":{"s":"\udc80"}}`, `args.s: holds an unpaired UTF-16 surrogate escape \udc80`},
		{"invalid UTF-8 in a fixture variable's key", "/v1/execute", "executor",
			"{\"source\":" + src + ",\"mode\":\"test\",\"fixtures\":{\"variables\":{\"k\xc3\":1}}}", "fixtures.variables: a key holds invalid UTF-8"},
		{"a validate body nested 1000 deep", "/v1/validate", "executor",
			`{"source":` + src + `,"x":` + deepArrays + `}`, "x" + strings.Repeat("[0]", 63) + ": nests deeper"},
		{"a policy dry run whose request nests 1000 deep", "/v1/admin/policy/evaluate", tenancy.RoleAdmin,
			`{"tenant_id":"demo","request":{"source":` + src + `,"args":` + deepArrays + `}}`, "request.args" + strings.Repeat("[0]", 62) + ": nests deeper"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			audits := len(s.auditLines())
			r := s.do(http.MethodPost, tt.path, s.token("demo", tt.token), tt.body)
			_, msg := errorOf(r.json(t))
			if r.status != http.StatusBadRequest || r.errType(t) != "BadRequest" || !strings.HasPrefix(msg, tt.message) {
				t.Fatalf("got %d %s, want 400 BadRequest %q…", r.status, r.body, tt.message)
			}
			lines := s.auditLines()[audits:]
			if tt.path != "/v1/execute" {
				if len(lines) != 0 {
					t.Fatalf("%d audit records for %s", len(lines), tt.path)
				}
				return
			}
			// One record of the refusal: no decision, no quota, no run.
			if len(lines) != 1 {
				t.Fatalf("%d audit records, want 1", len(lines))
			}
			out, _ := lines[0]["outcome"].(map[string]any)
			q, _ := lines[0]["quota"].(map[string]any)
			if out["http_status"] != 400.0 || out["error_type"] != "BadRequest" || lines[0]["decision"] != nil || q["outcome"] != "skipped" {
				t.Fatalf("audit record = %v", lines[0])
			}
		})
	}
	if n := s.runs.Load(); n != 0 {
		t.Fatalf("%d runs reached the sandbox", n)
	}
}

// The body deadline ends with the body: a run longer than
// read_body_timeout_seconds is neither cancelled nor cut.
func TestARunLongerThanTheBodyTimeoutCompletes(t *testing.T) {
	s := start(t, setup{mutate: func(c *config.Config) { c.Server.ReadBodyTimeoutSeconds = 1 }})
	r := s.execute(s.token("demo"), `{"source":"import time\ndef run(args, context):\n    time.sleep(2.5)\n    return 'slept'\n"}`)
	if r.status != http.StatusOK || r.json(t)["result"] != "slept" {
		t.Fatalf("got %d %s", r.status, r.body)
	}
}
