package gateway

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"
)

// pipeConn returns one end of an in-memory connection and whether the
// other end has seen it closed.
func pipeConn(t *testing.T) (net.Conn, func() bool) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	return a, func() bool {
		_ = b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, err := b.Read(make([]byte, 1))
		return err == io.EOF
	}
}

// trackerConns makes connections admitted by a tracker.
type trackerConns struct {
	t  *testing.T
	tr *connTracker
}

func newTracker(t *testing.T, cfg Config, fdLimit int) *trackerConns {
	tr := newConnTracker(cfg.WithDefaults(), fdLimit, slog.New(slog.DiscardHandler), time.Now)
	return &trackerConns{t: t, tr: tr}
}

// conn admits a new connection; closed reports whether the tracker closed it.
func (tc *trackerConns) conn() (c *edgeConn, closed func() bool) {
	p, closed := pipeConn(tc.t)
	c = &edgeConn{Conn: p, t: tc.tr}
	tc.tr.admit(c)
	return c, closed
}

func TestTheConnectionCapEvictsTheOldestIdleUnauthenticatedConnection(t *testing.T) {
	tc := newTracker(t, Config{MaxUnauthenticatedConns: 2}, 0)
	tr := tc.tr
	busy, busyClosed := tc.conn()
	tr.state(busy, http.StateActive)
	_, idleClosed := tc.conn()
	tenant, tenantClosed := tc.conn() // over the cap: the idle one goes, not the busy one
	if !idleClosed() || busyClosed() || tenantClosed() {
		t.Fatalf("closed: idle %v, busy %v, new %v; want only the idle one", idleClosed(), busyClosed(), tenantClosed())
	}
	if err := tr.prove(tenant, tr.subjectKey("acme", "alice")); err != nil { // authenticated: out of the count
		t.Fatal(err)
	}
	if n, _, _ := tr.counts(); n != 1 {
		t.Fatalf("%d unauthenticated, want 1 (the busy one)", n)
	}
	b4, c4 := tc.conn()
	tr.state(b4, http.StateActive)
	_, c5 := tc.conn() // over the cap with nothing idle: the oldest busy one goes
	if !busyClosed() || c4() || c5() || tenantClosed() {
		t.Fatal("want the busy one evicted once nothing else is older")
	}
	tr.state(b4, http.StateClosed)
	if n, _, _ := tr.counts(); n != 1 {
		t.Fatalf("%d unauthenticated after a close, want 1", n)
	}
}

// Issue #23 item 7: a subject's connections beyond max_conns_per_subject
// close its own oldest idle ones, never another subject's; with all of
// them busy the newcomer is refused.
func TestASubjectOverItsConnectionCapLosesItsOwnOldestIdleConnection(t *testing.T) {
	tc := newTracker(t, Config{MaxConnsPerSubject: 2}, 0)
	tr := tc.tr
	alice, bob := tr.subjectKey("acme", "alice"), tr.subjectKey("acme", "bob")
	prove := func(c *edgeConn, key uint64) error {
		t.Helper()
		return tr.prove(c, key)
	}
	b1, b1Closed := tc.conn()
	if err := prove(b1, bob); err != nil {
		t.Fatal(err)
	}
	a1, a1Closed := tc.conn()
	a2, a2Closed := tc.conn()
	a3, a3Closed := tc.conn()
	for _, c := range []*edgeConn{a1, a2} {
		if err := prove(c, alice); err != nil {
			t.Fatal(err)
		}
	}
	tr.state(a1, http.StateIdle)
	tr.state(a2, http.StateActive)
	tr.state(a3, http.StateActive)
	if err := prove(a3, alice); err != nil { // a3 is alice's third: her oldest idle one (a1) goes
		t.Fatal(err)
	}
	if !a1Closed() || a2Closed() || a3Closed() || b1Closed() {
		t.Fatalf("closed: a1 %v a2 %v a3 %v b1 %v; want a1 only", a1Closed(), a2Closed(), a3Closed(), b1Closed())
	}
	if err := prove(a3, alice); err != nil { // the same subject again on a kept-alive connection
		t.Fatalf("a keep-alive request of the same subject: %v", err)
	}
	a4, _ := tc.conn()
	tr.state(a4, http.StateActive)
	var capErr *errSubjectConns
	if err := prove(a4, alice); !errors.As(err, &capErr) { // both of alice's are busy: refused
		t.Fatalf("a fourth connection with every one busy: %v, want errSubjectConns", err)
	}
	if a2Closed() || a3Closed() || b1Closed() {
		t.Fatal("a refused connection closed someone else's")
	}
	if _, largest, total := tr.counts(); largest != 2 || total != 4 {
		t.Fatalf("largest subject %d, total %d; want 2 and 4 (a2, a3, b1 and the refused a4 until it closes)", largest, total)
	}
}

// Issue #23 item 7: at RLIMIT_NOFILE less the reserve, a new connection
// closes the oldest idle connection of the subject holding the most, so
// another tenant's (or the probe's) connection is accepted at once.
func TestAtTheFDReserveTheHeaviestSubjectPays(t *testing.T) {
	cfg := Config{ConnFDReserve: 96} // fd limit 100: 4 connections in all
	tc := newTracker(t, cfg, 100)
	tr := tc.tr
	if tr.maxTotal != 4 {
		t.Fatalf("max total %d, want 4", tr.maxTotal)
	}
	heavy := tr.subjectKey("flood", "x")
	var heavyClosed []func() bool
	for range 3 {
		c, closed := tc.conn()
		if err := tr.prove(c, heavy); err != nil {
			t.Fatal(err)
		}
		tr.state(c, http.StateIdle)
		heavyClosed = append(heavyClosed, closed)
	}
	light, lightClosed := tc.conn()
	if err := tr.prove(light, tr.subjectKey("acme", "alice")); err != nil {
		t.Fatal(err)
	}
	tr.state(light, http.StateIdle)
	probe, probeClosed := tc.conn() // the fifth: the heaviest subject's oldest idle one goes
	if !heavyClosed[0]() || heavyClosed[1]() || lightClosed() || probeClosed() {
		t.Fatalf("closed: heavy %v %v, light %v, probe %v; want the heavy subject's oldest only",
			heavyClosed[0](), heavyClosed[1](), lightClosed(), probeClosed())
	}
	if _, _, total := tr.counts(); total != 4 {
		t.Fatalf("total %d, want 4", total)
	}
	// Every connection busy: the newcomer itself is closed, nobody else.
	tr.state(probe, http.StateActive)
	tr.state(light, http.StateActive)
	for e := tr.subjects[heavy].conns.Front(); e != nil; e = e.Next() {
		tr.state(e.Value.(*edgeConn), http.StateActive)
	}
	c, closed := tc.conn()
	if !c.gone || !closed() || heavyClosed[1]() || heavyClosed[2]() || lightClosed() || probeClosed() {
		t.Fatal("with every connection busy, want only the newcomer closed")
	}
}

func TestMaxConnsLeavesTheReserve(t *testing.T) {
	for _, tt := range []struct {
		name           string
		reserve, limit int
		want           int
	}{
		{"unknown limit: no bound", 0, 0, 0},
		{"default: a fifth", 0, 20000, 16000},
		{"default: at least 256", 0, 1024, 768},
		{"default: at most half", 0, 300, 150},
		{"configured", 1000, 20000, 19000},
		{"configured over the limit: one", 5000, 1024, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := (Config{ConnFDReserve: tt.reserve}).maxConns(tt.limit); got != tt.want {
				t.Fatalf("maxConns(%d) with reserve %d = %d, want %d", tt.limit, tt.reserve, got, tt.want)
			}
		})
	}
}

func TestCannedErrorMatchesOnlyNetHTTPsOwnAnswers(t *testing.T) {
	const h = goErrorHeaders
	tests := []struct {
		name string
		raw  string
		code int
		text string
		ok   bool
	}{
		{"431", "HTTP/1.1 431 Request Header Fields Too Large" + h + "431 Request Header Fields Too Large", 431, "", true},
		{"400 with a reason", "HTTP/1.1 400 Bad Request: malformed Host header" + h + "400 Bad Request: malformed Host header", 400, "malformed Host header", true},
		{"400", "HTTP/1.1 400 Bad Request" + h + "400 Bad Request", 400, "", true},
		{"501 passes through", "HTTP/1.1 501 Not Implemented" + h + "Unsupported transfer encoding", 0, "", false},
		{"a handler's response", "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nDate: x\r\nContent-Length: 2\r\n\r\n{}", 0, "", false},
		{"a body chunk", `{"status":"error"}`, 0, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, text, ok := cannedError([]byte(tt.raw))
			if code != tt.code || text != tt.text || ok != tt.ok {
				t.Fatalf("got %d %q %v, want %d %q %v", code, text, ok, tt.code, tt.text, tt.ok)
			}
		})
	}
}
