package gateway

import (
	"bytes"
	"container/list"
	"context"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/execgate/execgate/execution"
)

// The request edge: what a client must do, and how fast, before any
// handler work is spent on it (issue #10 class 5). Three mechanisms:
//
//  1. Timeouts (http.Server): the header within read_header_timeout, the
//     body within read_body_timeout of the header (a read deadline that
//     ends with the body, so a long run is never cut by it), the whole
//     exchange within write_timeout, idle keep-alive within idle_timeout.
//     A request whose handler did not read its body to the end (refused
//     before reading: 401, 404, 413…) gets at most unreadBodyGrace more to
//     deliver the rest, which Go's server discards, or the connection is
//     closed: an unauthenticated client cannot hold a connection open by
//     trickling a body.
//  2. A cap on unauthenticated connections (max_unauthenticated_conns): a
//     connection counts from accept until one of its requests presents a
//     valid token (authenticate calls markAuthenticated). At the cap, a new
//     connection evicts the oldest unauthenticated one (preferring those
//     not inside a handler) instead of being refused, so a flood of idle or
//     slow connections cannot lock tenants out: a tenant's connection
//     leaves the count milliseconds after it is accepted, while junk has to
//     be re-opened again and again.
//  3. Go's own canned answers to unreadable requests (oversize header →
//     431, malformed request → 400), which net/http writes to the
//     connection itself before any handler, are rewritten by the connection
//     wrapper into the JSON error shape: {"status":"error","error":{"type",
//     "message"}} (no route was matched, so not the execute envelope).

// unreadBodyGrace is how long a request whose handler left the body unread
// may take to deliver the rest (so keep-alive survives a refused request
// with a body already in flight) before the connection is closed.
const unreadBodyGrace = time.Second

// HTTPServer returns the http.Server for s and the listener to serve it on
// (ln wrapped for the connection cap and the canned-error rewrite):
//
//	srv, l := s.HTTPServer(ln, errorLog)
//	go srv.Serve(l)
func (s *Server) HTTPServer(ln net.Listener, errorLog *log.Logger) (*http.Server, net.Listener) {
	cfg := s.cfg
	t := &connTracker{max: cfg.MaxUnauthenticatedConns, maxHeader: cfg.MaxHeaderBytes, log: s.log, now: s.now}
	t.unproven.Init()
	srv := &http.Server{
		Handler:           bodyDeadline(s.engine, time.Duration(cfg.ReadBodyTimeoutSeconds)*time.Second),
		ReadHeaderTimeout: time.Duration(cfg.ReadHeaderTimeoutSeconds) * time.Second,
		WriteTimeout:      time.Duration(cfg.WriteTimeoutSeconds) * time.Second,
		IdleTimeout:       time.Duration(cfg.IdleTimeoutSeconds) * time.Second,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ErrorLog:          errorLog,
		ConnState:         t.state,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if ec, ok := c.(*edgeConn); ok {
				return context.WithValue(ctx, edgeConnKey{}, ec)
			}
			return ctx
		},
	}
	return srv, &edgeListener{Listener: ln, t: t}
}

// bodyDeadline bounds reading a request body to timeout from the start of
// the handler (the end of the header), and shortens the deadline to
// unreadBodyGrace when the handler returns without reading the body to
// the end. Once a body is read to EOF, net/http clears the read deadline
// itself (it starts watching the connection for the client going away),
// so a run that lasts longer than timeout is not cut by it.
func bodyDeadline(h http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		deadline := time.Now().Add(timeout)
		if rc.SetReadDeadline(deadline) != nil {
			h.ServeHTTP(w, r) // not a connection we can set deadlines on (tests)
			return
		}
		b := &eofBody{ReadCloser: r.Body}
		r.Body = b
		h.ServeHTTP(w, r)
		if !b.eof.Load() {
			if grace := time.Now().Add(unreadBodyGrace); grace.Before(deadline) {
				_ = rc.SetReadDeadline(grace)
			}
		}
	})
}

// eofBody records whether the body was read to its end.
type eofBody struct {
	io.ReadCloser
	eof atomic.Bool
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

// edgeConnKey is the request-context key of the request's *edgeConn.
type edgeConnKey struct{}

// markAuthenticated takes the request's connection out of the
// unauthenticated count (a no-op for requests not served by HTTPServer).
func markAuthenticated(ctx context.Context) {
	if ec, ok := ctx.Value(edgeConnKey{}).(*edgeConn); ok {
		ec.t.prove(ec)
	}
}

// connTracker counts the connections that have not authenticated yet and
// evicts the oldest beyond max.
type connTracker struct {
	max       int
	maxHeader int
	log       *slog.Logger
	now       func() time.Time

	mu       sync.Mutex // guards unproven, every edgeConn's elem and busy, evicted, lastLog
	unproven list.List  // of *edgeConn, oldest first
	evicted  int64      // evictions since the last log line
	lastLog  time.Time
}

// evictLogEvery bounds the eviction log to one line per interval.
const evictLogEvery = 10 * time.Second

// admit counts c as unauthenticated, evicting the oldest unauthenticated
// connection when the count is at the cap.
func (t *connTracker) admit(c *edgeConn) {
	var victim *edgeConn
	t.mu.Lock()
	if t.unproven.Len() >= t.max {
		// Prefer a connection waiting for (or trickling) a header or idle
		// between requests; else the oldest one inside a handler.
		e := t.unproven.Front()
		for x := e; x != nil; x = x.Next() {
			if !x.Value.(*edgeConn).busy {
				e = x
				break
			}
		}
		victim = t.unproven.Remove(e).(*edgeConn)
		victim.elem = nil
		t.evicted++
	}
	c.elem = t.unproven.PushBack(c)
	var logN int64
	if victim != nil && t.now().Sub(t.lastLog) >= evictLogEvery {
		logN, t.evicted, t.lastLog = t.evicted, 0, t.now()
	}
	t.mu.Unlock()
	if victim != nil {
		_ = victim.Conn.Close()
	}
	if logN > 0 {
		t.log.Warn("unauthenticated connection cap reached; closed the oldest unauthenticated connections",
			"closed", logN, "max_unauthenticated_conns", t.max)
	}
}

// prove takes c out of the count (it presented a valid token).
func (t *connTracker) prove(c *edgeConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.elem != nil {
		t.unproven.Remove(c.elem)
		c.elem = nil
	}
}

// state follows http.Server.ConnState: busy while a request is in a
// handler; out of the count once closed or hijacked.
func (t *connTracker) state(nc net.Conn, st http.ConnState) {
	c, ok := nc.(*edgeConn)
	if !ok {
		return
	}
	switch st {
	case http.StateClosed, http.StateHijacked:
		t.prove(c)
	default:
		t.mu.Lock()
		c.busy = st == http.StateActive
		t.mu.Unlock()
	}
}

// unauthenticated is the current count (tests).
func (t *connTracker) unauthenticated() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.unproven.Len()
}

// edgeListener wraps accepted connections in edgeConn and admits them.
type edgeListener struct {
	net.Listener
	t *connTracker
}

func (l *edgeListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	ec := &edgeConn{Conn: c, t: l.t}
	l.t.admit(ec)
	return ec, nil
}

// edgeConn is one accepted connection.
type edgeConn struct {
	net.Conn
	t    *connTracker
	elem *list.Element // in t.unproven while unauthenticated; guarded by t.mu
	busy bool          // a request is in a handler; guarded by t.mu
}

func (c *edgeConn) Close() error {
	c.t.prove(c)
	return c.Conn.Close()
}

// Write rewrites net/http's canned plain-text answers to unreadable
// requests (see cannedError) into the JSON error shape.
func (c *edgeConn) Write(p []byte) (int, error) {
	if code, text, ok := cannedError(p); ok {
		if b, ok := c.t.jsonCanned(code, text); ok {
			if _, err := c.Conn.Write(b); err != nil {
				return 0, err
			}
			return len(p), nil
		}
	}
	return c.Conn.Write(p)
}

// goErrorHeaders is what net/http's conn.serve writes between the status
// line and the body of the answers it gives itself, before any handler,
// to a request it cannot read: "HTTP/1.1 <status>" + goErrorHeaders +
// "<status>", written in one Write on the raw connection. Responses from
// handlers always carry Date and Content-Length and sort Connection
// before Content-Type, so they never take this exact shape.
const goErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// cannedError recognises one of those answers: 431 (header over
// MaxHeaderBytes) or 400 (malformed request; text is Go's reason, e.g.
// "malformed Host header"). Others (501 unsupported transfer encoding, 505)
// pass through unchanged.
func cannedError(p []byte) (code int, text string, ok bool) {
	rest, found := bytes.CutPrefix(p, []byte("HTTP/1.1 "))
	if !found {
		return 0, "", false
	}
	// The status line is short; only then compare the rest, so a handler's
	// response costs a scan of its status line only.
	end := bytes.IndexByte(rest[:min(len(rest), 128)], '\r')
	if end < 4 || !bytes.HasPrefix(rest[end:], []byte(goErrorHeaders)) {
		return 0, "", false
	}
	status, body := rest[:end], rest[end+len(goErrorHeaders):]
	if !bytes.Equal(status, body) {
		return 0, "", false
	}
	code, err := strconv.Atoi(string(status[:3]))
	if err != nil || (code != http.StatusBadRequest && code != http.StatusRequestHeaderFieldsTooLarge) {
		return 0, "", false
	}
	text = strings.TrimPrefix(string(status[3:]), " "+http.StatusText(code))
	return code, strings.TrimPrefix(text, ": "), true
}

// jsonCanned renders the JSON answer for a canned error.
func (t *connTracker) jsonCanned(code int, text string) ([]byte, bool) {
	var e ErrorBody
	if code == http.StatusRequestHeaderFieldsTooLarge {
		e = ErrorBody{Type: TypePayloadTooLarge, Message: "request header: over the " + strconv.Itoa(t.maxHeader) + "-byte cap (server.max_header_bytes)"}
	} else {
		if text == "" {
			text = "malformed HTTP request"
		}
		e = ErrorBody{Type: TypeBadRequest, Message: "request: " + text}
	}
	body, err := execution.EncodeJSON(ErrorResponse{Status: "error", Error: e})
	if err != nil {
		return nil, false
	}
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 " + strconv.Itoa(code) + " " + http.StatusText(code) + "\r\n")
	b.WriteString("Connection: close\r\nContent-Type: application/json; charset=utf-8\r\n")
	b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")
	b.Write(body)
	return b.Bytes(), true
}
