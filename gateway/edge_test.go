package gateway

import (
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

func TestTheConnectionCapEvictsTheOldestIdleUnauthenticatedConnection(t *testing.T) {
	tr := &connTracker{max: 2, log: slog.New(slog.DiscardHandler), now: time.Now}
	tr.unproven.Init()
	l := &edgeListener{t: tr}
	conn := func() (*edgeConn, func() bool) {
		c, closed := pipeConn(t)
		ec := &edgeConn{Conn: c, t: tr}
		l.t.admit(ec)
		return ec, closed
	}
	busy, busyClosed := conn()
	tr.state(busy, http.StateActive)
	_, idleClosed := conn()
	tenant, tenantClosed := conn() // over the cap: the idle one goes, not the busy one
	if !idleClosed() || busyClosed() || tenantClosed() {
		t.Fatalf("closed: idle %v, busy %v, new %v; want only the idle one", idleClosed(), busyClosed(), tenantClosed())
	}
	tr.prove(tenant) // authenticated: out of the count
	if n := tr.unauthenticated(); n != 1 {
		t.Fatalf("%d unauthenticated, want 1 (the busy one)", n)
	}
	b4, c4 := conn()
	tr.state(b4, http.StateActive)
	_, c5 := conn() // over the cap with nothing idle: the oldest busy one goes
	if !busyClosed() || c4() || c5() || tenantClosed() {
		t.Fatal("want the busy one evicted once nothing else is older")
	}
	tr.state(b4, http.StateClosed)
	if n := tr.unauthenticated(); n != 1 {
		t.Fatalf("%d unauthenticated after a close, want 1", n)
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
