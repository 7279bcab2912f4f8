package gateway

import (
	"bytes"
	"container/list"
	"context"
	"hash/maphash"
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
//  2. Connection caps (connTracker): every connection counts in one group,
//     the unauthenticated ones from accept until one of its requests
//     presents a valid token (authenticate calls markAuthenticated), then
//     its subject's (tenant_id and sub; a keep-alive connection that
//     authenticates as another subject moves). Three bounds:
//     - max_unauthenticated_conns: a new connection at the cap evicts the
//     oldest unauthenticated one (preferring those not inside a handler)
//     instead of being refused, so a flood of idle or slow connections
//     cannot lock tenants out: a tenant's connection leaves the count
//     milliseconds after it is accepted, while junk has to be re-opened
//     again and again.
//     - max_conns_per_subject (issue #23 item 7): a subject's connection
//     beyond it closes that subject's oldest idle connection; when all are
//     inside a handler the newcomer's request is 429 QuotaExceeded and its
//     connection closed. One subject's keep-alive pool costs it, not others.
//     - RLIMIT_NOFILE less conn_fd_reserve: a connection accepted with only
//     the reserve left closes the oldest idle connection of the largest
//     group (the unauthenticated one competing like a subject's), else it
//     is closed itself. A tenant with many subjects cannot take the
//     process's last descriptors: the next tenant's connection and
//     /readyz's are accepted at once, never queued behind EMFILE.
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
	t := newConnTracker(cfg, fdLimit(), s.log, s.now)
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

// errSubjectConns refuses a request whose subject already holds
// max_conns_per_subject connections, all of them inside a handler.
type errSubjectConns struct{ max int }

func (e *errSubjectConns) Error() string {
	return "this subject holds " + strconv.Itoa(e.max) + " connections, all busy (server.max_conns_per_subject); reuse them or close some"
}

// markAuthenticated moves the request's connection from the
// unauthenticated count to its subject's (tenant and sub), closing that
// subject's oldest idle connections beyond max_conns_per_subject. It
// returns an *errSubjectConns when the subject is at its cap with every
// connection busy: the request is then refused and its connection closed.
// A no-op for requests not served by HTTPServer.
func markAuthenticated(ctx context.Context, tenant, subject string) error {
	if ec, ok := ctx.Value(edgeConnKey{}).(*edgeConn); ok {
		return ec.t.prove(ec, ec.t.subjectKey(tenant, subject))
	}
	return nil
}

// connGroup is the connections of one subject, or the unauthenticated
// ones, oldest first.
type connGroup struct {
	key   uint64 // subjectKey; 0 for the unauthenticated group
	conns list.List
}

// connTracker keeps every accepted connection in one group: the
// unauthenticated ones (until a request presents a valid token) or its
// subject's. It bounds three things, closing connections to stay inside
// them (see the comment at the top of this file):
//
//   - maxUnauth unauthenticated connections (the oldest go, idle first);
//   - maxSubject connections per subject (the subject's oldest idle ones
//     go; when all are busy the newcomer's request is refused);
//   - maxTotal connections in all (RLIMIT_NOFILE less a reserve of fds for
//     everything else: jails, files, Redis, MCP, and the next tenant's or
//     the probe's connection): a connection accepted at it closes the
//     oldest idle connection of the largest group, so the heaviest subject
//     pays and another tenant and /readyz still get in. 0: no total bound.
type connTracker struct {
	maxUnauth  int
	maxSubject int
	maxTotal   int
	maxHeader  int
	log        *slog.Logger
	now        func() time.Time
	seed       maphash.Seed

	mu       sync.Mutex // guards unproven, subjects, total, every edgeConn's group/elem/busy/gone, evicted, lastLog
	unproven connGroup
	subjects map[uint64]*connGroup // non-empty groups only
	total    int                   // connections accepted and not yet closed
	evicted  [evictReasons]int64   // evictions since the last log line, per reason
	lastLog  time.Time
}

// Why a connection was closed (connTracker.evicted).
const (
	evictUnauth = iota
	evictSubject
	evictTotal
	evictRefused // accepted at maxTotal with nothing idle to close: the newcomer goes
	evictReasons
)

func newConnTracker(cfg Config, fdLimit int, log *slog.Logger, now func() time.Time) *connTracker {
	t := &connTracker{maxUnauth: cfg.MaxUnauthenticatedConns, maxSubject: cfg.MaxConnsPerSubject,
		maxTotal: cfg.maxConns(fdLimit), maxHeader: cfg.MaxHeaderBytes, log: log, now: now,
		seed: maphash.MakeSeed(), subjects: map[uint64]*connGroup{}}
	t.unproven.conns.Init()
	return t
}

// subjectKey identifies a subject in fixed space, whatever the length of
// the token's claims (never 0, the unauthenticated group's key).
func (t *connTracker) subjectKey(tenant, subject string) uint64 {
	var h maphash.Hash
	h.SetSeed(t.seed)
	h.WriteString(tenant)
	h.WriteByte(0)
	h.WriteString(subject)
	return h.Sum64() | 1
}

// evictLogEvery bounds the eviction log to one line per interval.
const evictLogEvery = 10 * time.Second

// join puts c at the back of g. Called with mu held.
func (t *connTracker) join(c *edgeConn, g *connGroup) {
	c.group, c.elem = g, g.conns.PushBack(c)
	if g.key != 0 && g.conns.Len() == 1 {
		t.subjects[g.key] = g
	}
}

// leave takes c out of its group. Called with mu held.
func (t *connTracker) leave(c *edgeConn) {
	if c.group == nil {
		return
	}
	g := c.group
	g.conns.Remove(c.elem)
	c.group, c.elem = nil, nil
	if g.key != 0 && g.conns.Len() == 0 {
		delete(t.subjects, g.key)
	}
}

// oldest is g's oldest connection not inside a handler (nil: none), other
// than skip; with anyBusy, else its oldest connection at all.
func oldest(g *connGroup, skip *edgeConn, anyBusy bool) *edgeConn {
	var first *edgeConn
	for e := g.conns.Front(); e != nil; e = e.Next() {
		c := e.Value.(*edgeConn)
		if c == skip {
			continue
		}
		if !c.busy {
			return c
		}
		if first == nil {
			first = c
		}
	}
	if anyBusy {
		return first
	}
	return nil
}

// evict takes victim out of the count for reason; the caller closes it
// after unlocking. Called with mu held.
func (t *connTracker) evict(victim *edgeConn, reason int) {
	t.leave(victim)
	victim.gone = true
	t.total--
	t.evicted[reason]++
}

// admit counts c (just accepted) as unauthenticated: the oldest
// unauthenticated connection goes when that count is at its cap, and the
// largest group's oldest idle connection when the total is. It returns
// false when c itself had to go (the total at its cap with every
// connection busy); c is then already closed.
func (t *connTracker) admit(c *edgeConn) bool {
	var victims []*edgeConn
	t.mu.Lock()
	t.total++
	if t.unproven.conns.Len() >= t.maxUnauth {
		// Prefer a connection waiting for (or trickling) a header or idle
		// between requests; else the oldest one inside a handler.
		v := oldest(&t.unproven, nil, true)
		t.evict(v, evictUnauth)
		victims = append(victims, v)
	}
	t.join(c, &t.unproven)
	for t.maxTotal > 0 && t.total > t.maxTotal {
		v := t.heaviestIdle(c)
		if v == nil {
			t.evict(c, evictRefused)
			victims = append(victims, c)
			break
		}
		t.evict(v, evictTotal)
		victims = append(victims, v)
	}
	t.mu.Unlock()
	t.closeAll(victims)
	return !c.gone
}

// heaviestIdle is the oldest idle connection, other than skip, of the
// largest group that has one (the unauthenticated group competes like a
// subject's). Called with mu held, at the total cap only.
func (t *connTracker) heaviestIdle(skip *edgeConn) *edgeConn {
	var best *edgeConn
	bestLen := 0
	consider := func(g *connGroup) {
		if n := g.conns.Len(); n > bestLen {
			if v := oldest(g, skip, false); v != nil {
				best, bestLen = v, n
			}
		}
	}
	consider(&t.unproven)
	for _, g := range t.subjects {
		consider(g)
	}
	return best
}

// prove moves c into the group of subject key (it presented a valid
// token), closing that subject's oldest idle connection when it is over
// maxSubject; see markAuthenticated.
func (t *connTracker) prove(c *edgeConn, key uint64) error {
	var victim *edgeConn
	t.mu.Lock()
	if c.gone || (c.group != nil && c.group.key == key) {
		t.mu.Unlock()
		return nil // closed meanwhile, or a keep-alive request of the same subject
	}
	g := t.subjects[key]
	if g == nil {
		g = &connGroup{key: key}
		g.conns.Init()
	}
	if g.conns.Len() >= t.maxSubject {
		victim = oldest(g, c, false)
		if victim == nil {
			t.evicted[evictSubject]++
			t.mu.Unlock()
			t.logEvictions()
			return &errSubjectConns{max: t.maxSubject}
		}
		t.evict(victim, evictSubject)
	}
	t.leave(c)
	t.join(c, g)
	t.mu.Unlock()
	if victim != nil {
		t.closeAll([]*edgeConn{victim})
	}
	return nil
}

// forget takes c out of the count (closed or hijacked). Idempotent.
func (t *connTracker) forget(c *edgeConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !c.gone {
		t.leave(c)
		c.gone = true
		t.total--
	}
}

// closeAll closes the evicted connections (outside mu) and logs.
func (t *connTracker) closeAll(victims []*edgeConn) {
	for _, v := range victims {
		_ = v.Conn.Close()
	}
	if len(victims) > 0 {
		t.logEvictions()
	}
}

// logEvictions writes at most one line per evictLogEvery with the counts
// since the previous one.
func (t *connTracker) logEvictions() {
	t.mu.Lock()
	if t.now().Sub(t.lastLog) < evictLogEvery {
		t.mu.Unlock()
		return
	}
	n := t.evicted
	t.evicted, t.lastLog = [evictReasons]int64{}, t.now()
	total := t.total
	t.mu.Unlock()
	t.log.Warn("connection caps reached; closed the oldest idle connections",
		"closed_unauthenticated", n[evictUnauth], "max_unauthenticated_conns", t.maxUnauth,
		"closed_or_refused_per_subject", n[evictSubject], "max_conns_per_subject", t.maxSubject,
		"closed_for_the_fd_reserve", n[evictTotal], "refused_for_the_fd_reserve", n[evictRefused],
		"max_conns", t.maxTotal, "conns", total)
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
		t.forget(c)
	default:
		t.mu.Lock()
		c.busy = st == http.StateActive
		t.mu.Unlock()
	}
}

// counts are the unauthenticated, per-subject (largest) and total
// connection counts (tests).
func (t *connTracker) counts() (unauthenticated, largestSubject, total int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, g := range t.subjects {
		largestSubject = max(largestSubject, g.conns.Len())
	}
	return t.unproven.conns.Len(), largestSubject, t.total
}

// edgeListener wraps accepted connections in edgeConn and admits them.
type edgeListener struct {
	net.Listener
	t *connTracker
}

func (l *edgeListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ec := &edgeConn{Conn: c, t: l.t}
		if l.t.admit(ec) {
			return ec, nil
		}
	}
}

// edgeConn is one accepted connection.
type edgeConn struct {
	net.Conn
	t     *connTracker
	group *connGroup    // guarded by t.mu; nil once gone
	elem  *list.Element // in group.conns; guarded by t.mu
	busy  bool          // a request is in a handler; guarded by t.mu
	gone  bool          // out of the count (closed, evicted); guarded by t.mu
}

func (c *edgeConn) Close() error {
	c.t.forget(c)
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
