package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/execgate/execgate/sandbox"
)

// Bounds on what a tool can make the proxy read before it decides. The
// server refuses a request whose line and headers exceed maxHeaderBytes
// (net/http answers 431 after reading at most that plus 4 KiB); the handler
// refuses a request target over maxRequestURIBytes (414). Either way the
// attempt is recorded, with its host clipped (sandbox.ClipEgressString).
const (
	maxHeaderBytes     = 16 << 10
	maxRequestURIBytes = 8 << 10
)

// Resolver looks up a host's addresses. *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options are the proxy's collaborators; zero values use the real network.
type Options struct {
	// Resolver looks names up. Default net.DefaultResolver.
	Resolver Resolver
	// Control, when set, runs in the dialer's Control hook after the proxy's
	// own address check passed, just before connect; an error refuses the
	// dial. Tests use it to record what would be connected to and to refuse
	// anything but loopback.
	Control func(network, address string, c syscall.RawConn) error
	// Dial, when set, replaces the dialer (and so its Control hook) for
	// tests that cannot open sockets; the address it is handed was checked
	// first. Prefer Control.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// ConnectTimeout bounds resolving plus connecting. Default 10s.
	ConnectTimeout time.Duration
}

// Proxy is the platform-wide egress proxy. Each run gets its own Session with
// its own allow-list and attempt log; Proxy itself is stateless and safe for
// concurrent use.
type Proxy struct {
	ips      ipPolicy
	upstream *url.URL
	resolver Resolver
	// dial connects to a checked destination address: a net.Dialer whose
	// Control hook refuses, on the socket address itself, every address
	// ips denies (so no spelling, resolver answer or redirect reaches one).
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// dialUpstream connects to the platform's upstream proxy, which may
	// well live in a private range; it is never given a tool's destination.
	dialUpstream func(ctx context.Context, network, addr string) (net.Conn, error)
	control      func(network, address string, c syscall.RawConn) error // Options.Control
	timeout      time.Duration
}

var (
	_ sandbox.EgressProxy   = (*Proxy)(nil)
	_ sandbox.EgressSession = (*Session)(nil)
)

// New validates cfg and returns a Proxy.
func New(cfg Config, opts Options) (*Proxy, error) {
	ips, err := newIPPolicy(cfg.AllowCIDRs)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ips: ips, resolver: opts.Resolver, dial: opts.Dial, dialUpstream: opts.Dial, control: opts.Control, timeout: opts.ConnectTimeout}
	if cfg.UpstreamProxy != "" {
		u, err := url.Parse(cfg.UpstreamProxy)
		if err != nil || u.Host == "" || u.Scheme != "http" {
			return nil, fmt.Errorf("egress.upstream_proxy %q: want http://host:port", cfg.UpstreamProxy)
		}
		p.upstream = u
	}
	if p.resolver == nil {
		p.resolver = net.DefaultResolver
	}
	if p.timeout == 0 {
		p.timeout = 10 * time.Second
	}
	if p.dial == nil {
		d := &net.Dialer{Timeout: p.timeout, Control: p.controlDial}
		p.dial = d.DialContext
	}
	if p.dialUpstream == nil {
		d := &net.Dialer{Timeout: p.timeout}
		p.dialUpstream = d.DialContext
	}
	return p, nil
}

// addrDeniedError is the dialer's Control hook refusing a socket address.
type addrDeniedError struct{ reason string }

func (e *addrDeniedError) Error() string { return "egress: " + e.reason }

// controlDial is the dialer's Control hook: it runs on the socket about to
// connect, with the address the kernel will be given, and refuses every
// address the policy denies. This is the decision that counts; the checks
// before it only give earlier, clearer reasons.
func (p *Proxy) controlDial(network, address string, c syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &addrDeniedError{reason: "dial address does not parse"}
	}
	if reason := p.ips.check(ap.Addr()); reason != "" {
		return &addrDeniedError{reason: reason}
	}
	if p.control != nil {
		return p.control(network, address, c)
	}
	return nil
}

// Start serves a new session on a unix socket at socketPath (created 0666 so
// the jail's unprivileged user can connect; the directory holding it is the
// run's private dir) with the given allow-list. An allow-list entry that
// does not parse is an error wrapping sandbox.ErrInvalidEgressAllow.
func (p *Proxy) Start(socketPath string, allow []string) (sandbox.EgressSession, error) {
	rules, err := ParseRules(allow)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", sandbox.ErrInvalidEgressAllow, err)
	}
	_ = os.Remove(socketPath)
	ln, err := net.Listen("unix", socketPath)
	if err != nil {
		return nil, fmt.Errorf("listening on egress socket: %w", err)
	}
	if err := os.Chmod(socketPath, 0o666); err != nil {
		ln.Close()
		return nil, fmt.Errorf("opening egress socket to the jail user: %w", err)
	}
	return p.Serve(ln, rules), nil
}

// Serve runs a session on ln until Close.
func (p *Proxy) Serve(ln net.Listener, rules []Rule) *Session {
	ctx, cancel := context.WithCancel(context.Background())
	s := &Session{p: p, rules: rules, ln: ln, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}, reqs: map[net.Conn]*connRequests{}}
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnContext:       func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) },
		ConnState:         s.connState,
	}
	go s.srv.Serve(ln) //nolint:errcheck // returns on Close
	return s
}

// Session is one run's view of the proxy.
type Session struct {
	p      *Proxy
	rules  []Rule
	ln     net.Listener
	srv    *http.Server
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex // guards attempts, dropped, conns, reqs
	attempts []sandbox.EgressAttempt
	dropped  int
	conns    map[net.Conn]struct{}
	reqs     map[net.Conn]*connRequests // client connections being served
}

// connRequests counts, for one client connection, the requests net/http
// began reading and the ones that reached the handler; the difference are
// requests the server refused before parsing them (too large, malformed).
type connRequests struct{ begun, handled int }

// connKey is the context key under which ConnContext stores the client conn.
type connKey struct{}

// Attempts returns the first sandbox.MaxEgressAttempts connection attempts,
// allowed or denied, each bounded (sandbox.EgressAttempt.Bounded).
func (s *Session) Attempts() []sandbox.EgressAttempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sandbox.EgressAttempt(nil), s.attempts...)
}

// Dropped returns how many attempts were made beyond those Attempts keeps.
func (s *Session) Dropped() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// Close stops the listener and cuts every relayed connection.
// It waits (up to closeDrain) for net/http to finish with the client
// connections it was serving, so requests it refused before parsing are in
// Attempts when Close returns.
func (s *Session) Close() error {
	s.cancel()
	err := s.srv.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	deadline := time.Now().Add(closeDrain)
	for {
		s.mu.Lock()
		n := len(s.reqs)
		s.mu.Unlock()
		if n == 0 || time.Now().After(deadline) {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// closeDrain bounds how long Close waits for the server's connections to
// end; net/http lingers up to 500 ms on a connection it refused.
const closeDrain = time.Second

func (s *Session) record(a sandbox.EgressAttempt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.attempts) >= sandbox.MaxEgressAttempts {
		s.dropped++
		return
	}
	s.attempts = append(s.attempts, a.Bounded())
}

// connState records, as a denied attempt without a host, every request
// net/http began reading on a client connection but refused before the
// handler saw it (request line and headers over maxHeaderBytes, malformed,
// or cut off), so such attempts are not missing from the run's record.
func (s *Session) connState(c net.Conn, st http.ConnState) {
	s.mu.Lock()
	refused := 0
	switch st {
	case http.StateNew:
		s.reqs[c] = &connRequests{}
	case http.StateActive:
		if cr := s.reqs[c]; cr != nil {
			cr.begun++
		}
	case http.StateClosed, http.StateHijacked:
		if cr := s.reqs[c]; cr != nil && st == http.StateClosed {
			refused = cr.begun - cr.handled
		}
		delete(s.reqs, c)
	}
	s.mu.Unlock()
	for range refused {
		s.record(sandbox.EgressAttempt{Reason: fmt.Sprintf("request refused before parsing: malformed, cut off, or request line and headers over %d bytes", maxHeaderBytes)})
	}
}

// handled marks that a request on r's client connection reached the handler.
func (s *Session) handled(r *http.Request) {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	s.mu.Lock()
	if cr := s.reqs[c]; cr != nil {
		cr.handled++
	}
	s.mu.Unlock()
}

func (s *Session) track(c net.Conn) func() {
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}
}

// ServeHTTP handles CONNECT (any TCP, used for HTTPS) and absolute-URI plain
// HTTP requests. Everything else is refused.
func (s *Session) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.handled(r)
	switch {
	case len(r.RequestURI) > maxRequestURIBytes:
		s.record(sandbox.EgressAttempt{Host: r.URL.Host, Reason: fmt.Sprintf("request target over %d bytes", maxRequestURIBytes)})
		http.Error(w, "execgate egress: request target too long", http.StatusRequestURITooLong)
	case r.Method == http.MethodConnect:
		s.handleConnect(w, r)
	case r.URL.IsAbs() && r.URL.Scheme == "http":
		s.handleHTTP(w, r)
	default:
		http.Error(w, "execgate egress proxy: only CONNECT and absolute http:// requests", http.StatusBadRequest)
	}
}

// rawAuthority is the authority of an absolute-form request target exactly
// as the client wrote it: net/url has already undone percent escapes in
// r.URL.Host and moved userinfo out of it, and the proxy decides on what was
// sent, refusing both.
func rawAuthority(requestURI string) string {
	i := strings.Index(requestURI, "://")
	if i < 0 {
		return ""
	}
	rest := requestURI[i+3:]
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// openUpstream checks and dials authority ("host[:port]", defPort when it
// names none) for request r, answering the client itself when that fails
// (400 for a malformed host, 403 for a refusal). Every outcome is recorded.
// The caller must call release.
func (s *Session) openUpstream(w http.ResponseWriter, r *http.Request, authority string, defPort int) (up net.Conn, release func(), ok bool) {
	a := sandbox.EgressAttempt{Host: authority}
	hostStr, port, err := splitAuthority(authority, defPort)
	var host Host
	if err == nil {
		a.Host, a.Port = hostStr, port
		host, err = ParseHost(hostStr)
	}
	if err != nil {
		a.Reason = err.Error()
		s.record(a)
		http.Error(w, "execgate egress: "+a.Reason, http.StatusBadRequest)
		return nil, nil, false
	}
	a.Host = host.String()
	up, err = s.dialChecked(r.Context(), host, port, a)
	if err != nil {
		http.Error(w, "execgate egress: "+sandbox.ClipEgressString(err.Error()), http.StatusForbidden)
		return nil, nil, false
	}
	return up, s.track(up), true
}

func (s *Session) handleConnect(w http.ResponseWriter, r *http.Request) {
	up, release, ok := s.openUpstream(w, r, r.RequestURI, 443)
	if !ok {
		return
	}
	defer release()
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "hijacking not supported", http.StatusInternalServerError)
		return
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	releaseClient := s.track(client)
	defer releaseClient()
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		return
	}
	splice(client, buf.Reader, up)
}

func (s *Session) handleHTTP(w http.ResponseWriter, r *http.Request) {
	up, release, ok := s.openUpstream(w, r, rawAuthority(r.RequestURI), 80)
	if !ok {
		return
	}
	defer release()
	out := r.Clone(r.Context())
	out.RequestURI = ""
	for _, h := range []string{"Proxy-Connection", "Proxy-Authorization", "Connection", "Keep-Alive", "Te", "Trailer", "Upgrade"} {
		out.Header.Del(h)
	}
	out.Close = true
	if s.p.upstream == nil {
		out.URL = &url.URL{Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
		if out.URL.Path == "" {
			out.URL.Path = "/"
		}
	}
	if err := out.Write(up); err != nil {
		http.Error(w, "execgate egress: writing request: "+err.Error(), http.StatusBadGateway)
		return
	}
	resp, err := http.ReadResponse(bufio.NewReader(up), out)
	if err != nil {
		http.Error(w, "execgate egress: reading response: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body) //nolint:errcheck // the client going away ends the copy
}

// errDenied marks a refusal by policy (as opposed to a network failure).
var errDenied = errors.New("denied")

// dialChecked applies the allow-list to host, resolves a name, checks every
// address and dials the first one itself (never the name again), through a
// dialer whose Control hook checks the socket address once more, so neither
// DNS rebinding nor any spelling reaches a denied range. a carries what is
// known of the attempt; the outcome is recorded.
func (s *Session) dialChecked(ctx context.Context, host Host, port int, a sandbox.EgressAttempt) (net.Conn, error) {
	deny := func(reason string) (net.Conn, error) {
		a.Reason = reason
		s.record(a)
		return nil, fmt.Errorf("%w: %s", errDenied, reason)
	}
	if !Match(s.rules, host, port) {
		return deny("not in this run's egress allow-list")
	}
	ctx, cancel := context.WithTimeout(ctx, s.p.timeout)
	defer cancel()
	addrs, err := s.p.addrs(ctx, host)
	if err != nil {
		return deny("resolving the name failed")
	}
	for _, ip := range addrs {
		if reason := s.p.ips.check(ip); reason != "" {
			a.IP = ip.String()
			return deny(reason)
		}
	}
	target := netip.AddrPortFrom(addrs[0], uint16(port))
	a.IP = target.Addr().String()
	var conn net.Conn
	if s.p.upstream != nil {
		conn, err = s.connectUpstream(ctx, target.String())
	} else {
		conn, err = s.p.dial(ctx, "tcp", target.String())
	}
	if err != nil {
		var d *addrDeniedError
		if errors.As(err, &d) {
			return deny(d.reason)
		}
		a.Reason = "dial failed: " + err.Error()
		s.record(a)
		return nil, fmt.Errorf("connecting to %s: %w", target, err)
	}
	a.Allowed = true
	s.record(a)
	return conn, nil
}

// connectUpstream opens a CONNECT tunnel through the configured upstream
// proxy to hostport, the checked address (not the name, so the upstream
// cannot resolve it to somewhere else).
func (s *Session) connectUpstream(ctx context.Context, hostport string) (net.Conn, error) {
	c, err := s.p.dialUpstream(ctx, "tcp", s.p.upstream.Host)
	if err != nil {
		return nil, err
	}
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: hostport}, Host: hostport, Header: http.Header{}}
	if err := req.Write(c); err != nil {
		c.Close()
		return nil, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		c.Close()
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, fmt.Errorf("upstream proxy answered %s", resp.Status)
	}
	return c, nil
}

// splice copies both ways until either side closes.
func splice(client net.Conn, clientBuf io.Reader, up net.Conn) {
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, clientBuf); closeWrite(up); done <- struct{}{} }()  //nolint:errcheck
	go func() { io.Copy(client, up); closeWrite(client); done <- struct{}{} }() //nolint:errcheck
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite() //nolint:errcheck
	}
}
