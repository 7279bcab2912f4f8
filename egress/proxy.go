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
	"strconv"
	"sync"
	"time"

	"github.com/execgate/execgate/sandbox"
)

// maxAttempts caps the attempts kept per run; later ones are counted only.
const maxAttempts = 1000

// Resolver looks up a host's addresses. *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options are the proxy's collaborators; zero values use the real network.
type Options struct {
	Resolver       Resolver                                                          // default net.DefaultResolver
	Dial           func(ctx context.Context, network, addr string) (net.Conn, error) // default a net.Dialer
	ConnectTimeout time.Duration                                                     // default 10s
}

// Proxy is the platform-wide egress proxy. Each run gets its own Session with
// its own allow-list and attempt log; Proxy itself is stateless and safe for
// concurrent use.
type Proxy struct {
	ips      ipPolicy
	upstream *url.URL
	resolver Resolver
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	timeout  time.Duration
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
	p := &Proxy{ips: ips, resolver: opts.Resolver, dial: opts.Dial, timeout: opts.ConnectTimeout}
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
		d := &net.Dialer{Timeout: p.timeout}
		p.dial = d.DialContext
	}
	return p, nil
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
	s := &Session{p: p, rules: rules, ln: ln, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
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

	mu       sync.Mutex // guards attempts, dropped, conns
	attempts []sandbox.EgressAttempt
	dropped  int
	conns    map[net.Conn]struct{}
}

// Attempts returns every connection attempt so far, allowed or denied.
func (s *Session) Attempts() []sandbox.EgressAttempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sandbox.EgressAttempt(nil), s.attempts...)
}

// Close stops the listener and cuts every relayed connection.
func (s *Session) Close() error {
	s.cancel()
	err := s.srv.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	return err
}

func (s *Session) record(a sandbox.EgressAttempt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.attempts) >= maxAttempts {
		s.dropped++
		return
	}
	s.attempts = append(s.attempts, a)
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
	switch {
	case r.Method == http.MethodConnect:
		s.handleConnect(w, r)
	case r.URL.IsAbs() && r.URL.Scheme == "http":
		s.handleHTTP(w, r)
	default:
		http.Error(w, "execgate egress proxy: only CONNECT and absolute http:// requests", http.StatusBadRequest)
	}
}

// openUpstream checks and dials hostport (defPort when it names none) for
// request r, answering the client itself when that fails (400 for a bad
// address, 403 for a refusal). The caller must call release.
func (s *Session) openUpstream(w http.ResponseWriter, r *http.Request, hostport string, defPort int) (up net.Conn, release func(), ok bool) {
	host, port, err := splitHostPort(hostport, defPort)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil, nil, false
	}
	up, err = s.dialChecked(r.Context(), host, port)
	if err != nil {
		http.Error(w, "execgate egress: "+err.Error(), http.StatusForbidden)
		return nil, nil, false
	}
	return up, s.track(up), true
}

func (s *Session) handleConnect(w http.ResponseWriter, r *http.Request) {
	up, release, ok := s.openUpstream(w, r, r.Host, 443)
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
	up, release, ok := s.openUpstream(w, r, r.URL.Host, 80)
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

// dialChecked applies the allow-list, resolves the name, checks every address
// and dials the checked address itself (never the name again), so DNS
// rebinding between check and dial is impossible. Every attempt is recorded.
func (s *Session) dialChecked(ctx context.Context, host string, port int) (net.Conn, error) {
	a := sandbox.EgressAttempt{Host: host, Port: port}
	deny := func(reason string) (net.Conn, error) {
		a.Reason = reason
		s.record(a)
		return nil, fmt.Errorf("%w: %s", errDenied, reason)
	}
	if !Match(s.rules, host, port) {
		return deny(fmt.Sprintf("%s:%d is not in this run's egress allow-list", host, port))
	}
	ctx, cancel := context.WithTimeout(ctx, s.p.timeout)
	defer cancel()
	var addrs []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else {
		addrs, err = s.p.resolver.LookupNetIP(ctx, "ip", host)
		if err != nil || len(addrs) == 0 {
			return deny(fmt.Sprintf("resolving %s failed", host))
		}
	}
	for _, ip := range addrs {
		if reason := s.p.ips.check(ip); reason != "" {
			a.IP = ip.Unmap().String()
			return deny(reason)
		}
	}
	ip := addrs[0].Unmap()
	a.IP = ip.String()
	target := net.JoinHostPort(ip.String(), strconv.Itoa(port))
	var conn net.Conn
	var err error
	if s.p.upstream != nil {
		conn, err = s.connectUpstream(ctx, net.JoinHostPort(host, strconv.Itoa(port)))
	} else {
		conn, err = s.p.dial(ctx, "tcp", target)
	}
	if err != nil {
		a.Reason = "dial failed: " + err.Error()
		s.record(a)
		return nil, fmt.Errorf("connecting to %s: %w", target, err)
	}
	a.Allowed = true
	s.record(a)
	return conn, nil
}

// connectUpstream opens a CONNECT tunnel through the configured upstream proxy.
func (s *Session) connectUpstream(ctx context.Context, hostport string) (net.Conn, error) {
	c, err := s.p.dial(ctx, "tcp", s.p.upstream.Host)
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

func splitHostPort(hp string, defPort int) (string, int, error) {
	host, portStr, err := net.SplitHostPort(hp)
	if err != nil {
		return hp, defPort, nil //nolint:nilerr // no port given
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", hp)
	}
	return host, port, nil
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
