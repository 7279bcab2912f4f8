package toolbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/toolbridge/toolconfig"
)

// Bounds on what a tool server's tool list may hold (per server).
const (
	maxServerTools   = 1000
	maxToolNameLen   = 128
	maxDescription   = 8 << 10
	maxSchemaBytes   = 64 << 10
	maxServerMessage = 4 << 10 // a server's error text shown to the tool
	// envelopeSlack is what a JSON-RPC response adds around a result.
	envelopeSlack = 64 << 10
)

// connectBackoff is how long a server that could not be connected to is
// not tried again: calls meanwhile fail at once (ToolUnavailable), so a
// run cannot make the gateway hammer a server that is down.
const connectBackoff = 500 * time.Millisecond

var errBackoff = errors.New("tool server recently unreachable")

// errServerGone: the server was removed or changed while a run held it.
var errServerGone = errors.New("tool server removed or changed")

// tool is one tool of a server, as cached.
type tool struct {
	Name        string
	Description string
	Schema      json.RawMessage // the input schema, bounded; "" when none was usable

	once     sync.Once // compiles validator
	validate *jsonschema.Schema
	compErr  error
}

// toolList is a server's cached tool list.
type toolList struct {
	tools   []*tool
	byName  map[string]*tool
	fetched time.Time
	gen     int64 // server.listGen when the fetch started
}

// server is one configured MCP tool server: a pooled client session,
// reconnected on demand, and its cached tool list.
type server struct {
	cfg     toolconfig.Server
	source  string      // SourceConfig or SourceAPI
	doc     string      // an API server's stored document
	headers http.Header // resolved secrets; never logged
	env     []string    // a command server's resolved environment; never logged
	log     *slog.Logger
	now     func() time.Time
	client  *mcp.Client
	http    *http.Client

	mu      sync.Mutex         // guards sess, stop, list, connErr, retryAt, closed
	sess    *mcp.ClientSession // nil until connected, or after a failure
	stop    func()             // stops a command server's process (nil for HTTP)
	list    *toolList          // nil until fetched, or after list_changed
	connErr error              // the last connection failure (for the log)
	retryAt time.Time          // no new connection attempt before (after a failure)
	closed  bool               // removed or replaced (or the Hub closed): no new session

	// tooLarge is set when a command server's message went over the cap.
	tooLarge atomic.Bool

	// listGen counts tools/list_changed notifications: a cached list of an
	// older generation is stale.
	listGen atomic.Int64
}

// newServer resolves cfg's secrets and builds its client. getenv reads the
// gateway's environment.
func newServer(cfg toolconfig.Server, getenv func(string) string, log *slog.Logger, now func() time.Time) (*server, error) {
	cfg = cfg.WithDefaults()
	h := http.Header{}
	for name, sec := range cfg.Headers {
		v, err := resolve(sec, getenv)
		if err != nil {
			return nil, fmt.Errorf("server %s: header %s: %w", cfg.Name, name, err)
		}
		h.Set(name, v)
	}
	var env []string
	for name, sec := range cfg.Env {
		v, err := resolve(sec, getenv)
		if err != nil {
			return nil, fmt.Errorf("server %s: env %s: %w", cfg.Name, name, err)
		}
		env = append(env, name+"="+v)
	}
	s := &server{cfg: cfg, headers: h, env: env, log: log.With("tool_server", cfg.Name), now: now}
	s.http = &http.Client{Transport: &limitedTransport{
		base:    http.DefaultTransport,
		headers: h,
		max:     cfg.MaxResultBytes + envelopeSlack,
	}}
	s.client = mcp.NewClient(&mcp.Implementation{Name: "execgate", Version: "1"}, &mcp.ClientOptions{
		// Called from the session's reader: never block here.
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { s.listGen.Add(1) },
	})
	return s, nil
}

// resolve reads a secret header (or command environment) value: the one
// reader of references (toolconfig.Secret.Read), and no line breaks.
func resolve(sec toolconfig.Secret, getenv func(string) string) (string, error) {
	v, err := sec.Read(getenv, maxHeaderSecretBytes)
	if err != nil {
		return "", err
	}
	if strings.ContainsAny(v, "\r\n") {
		return "", errors.New("the secret holds a line break")
	}
	return v, nil
}

// maxHeaderSecretBytes bounds a header's secret value.
const maxHeaderSecretBytes = 64 << 10

func (s *server) timeout() time.Duration { return time.Duration(s.cfg.TimeoutMS) * time.Millisecond }

// session returns the pooled session, connecting when there is none.
func (s *server) session(ctx context.Context) (*mcp.ClientSession, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess != nil {
		return s.sess, nil
	}
	if s.closed {
		return nil, errServerGone
	}
	if now := s.now(); now.Before(s.retryAt) {
		return nil, fmt.Errorf("%w (last: %v)", errBackoff, s.connErr)
	}
	defer func() {
		if s.sess == nil {
			s.retryAt = s.now().Add(connectBackoff)
		}
	}()
	cctx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()
	var t mcp.Transport
	var stop func()
	if len(s.cfg.Command) > 0 {
		var err error
		if t, stop, err = s.startStdio(); err != nil {
			s.connErr = err
			return nil, err
		}
	} else {
		t = &mcp.StreamableClientTransport{
			Endpoint:     s.cfg.URL,
			HTTPClient:   s.http,
			MaxRetries:   -1, // a failed session is dropped and reconnected on the next call
			MaxEventSize: int(s.cfg.MaxResultBytes + envelopeSlack),
		}
	}
	sess, err := s.client.Connect(cctx, t, nil)
	if err != nil {
		if stop != nil {
			go stop()
		}
		s.connErr = err
		return nil, err
	}
	s.sess, s.stop = sess, stop
	return sess, nil
}

// drop forgets sess (after a transport failure), so the next call reconnects.
func (s *server) drop(sess *mcp.ClientSession) {
	var stop func()
	s.mu.Lock()
	if s.sess == sess {
		s.sess, s.list = nil, nil
		stop, s.stop = s.stop, nil
	}
	s.mu.Unlock()
	// Close waits for requests still in flight on the session; the call
	// that gave up on it must not.
	go func() {
		_ = sess.Close()
		if stop != nil {
			stop()
		}
	}()
}

// close ends the pooled session.
func (s *server) close() {
	s.mu.Lock()
	s.closed = true
	sess, stop := s.sess, s.stop
	s.sess, s.stop = nil, nil
	s.mu.Unlock()
	if sess != nil {
		_ = sess.Close()
	}
	if stop != nil {
		stop()
	}
}

// tools returns the server's tool list (allow globs applied), from the
// cache while it is fresh.
func (s *server) tools(ctx context.Context) (*toolList, error) {
	s.mu.Lock()
	if l := s.list; l != nil && l.gen == s.listGen.Load() && s.now().Sub(l.fetched) < time.Duration(s.cfg.ToolsTTLMS)*time.Millisecond {
		s.mu.Unlock()
		return l, nil
	}
	s.mu.Unlock()
	sess, err := s.session(ctx)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()
	l := &toolList{byName: map[string]*tool{}, fetched: s.now(), gen: s.listGen.Load()}
	for t, err := range sess.Tools(lctx, nil) {
		if err != nil {
			if !isProtocolError(err) {
				s.drop(sess)
			}
			return nil, err
		}
		if len(l.tools) >= maxServerTools {
			s.log.Warn("tool server lists more tools than are kept", "kept", maxServerTools)
			break
		}
		if t == nil || len(t.Name) > maxToolNameLen || !utf8.ValidString(t.Name) || strings.Contains(t.Name, "/") || !allowed(s.cfg.Allow, t.Name) {
			continue
		}
		if _, dup := l.byName[t.Name]; dup {
			continue
		}
		tt := &tool{Name: t.Name, Description: clip(t.Description, maxDescription)}
		if b, err := json.Marshal(t.InputSchema); err == nil && len(b) <= maxSchemaBytes && string(b) != "null" {
			tt.Schema = b
		}
		l.tools = append(l.tools, tt)
		l.byName[t.Name] = tt
	}
	s.mu.Lock()
	if s.sess == sess {
		s.list = l
	}
	s.mu.Unlock()
	return l, nil
}

func allowed(globs []string, name string) bool {
	for _, g := range globs {
		if matchGlob(g, name) {
			return true
		}
	}
	return false
}

// callOutcome is what one call to the server came to.
type callOutcome struct {
	result json.RawMessage
	err    *sandbox.ToolError // nil: ok
	// received is about how many bytes of result the gateway took in and
	// decoded (up to the cap when the result was over it): what the run
	// is charged for (charge.go).
	received int
}

// call calls the tool; ctx bounds it (the per-call timeout is applied
// here). Every failure is a typed *sandbox.ToolError whose message holds nothing of
// the gateway's configuration (no URL, no header).
func (s *server) call(ctx context.Context, name string, args json.RawMessage) callOutcome {
	cctx, cancel := context.WithTimeout(ctx, s.timeout())
	defer cancel()
	sess, err := s.session(cctx)
	if err != nil {
		return s.unreachable(cctx, ctx, err)
	}
	budget := &responseBudget{}
	res, err := sess.CallTool(withBudget(cctx, budget), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		if budget.exceeded.Load() || s.tooLarge.Swap(false) {
			s.drop(sess)
			return callOutcome{received: int(s.cfg.MaxResultBytes), err: &sandbox.ToolError{Type: sandbox.ErrToolFailed, Message: fmt.Sprintf("the result is over the server's max_result_bytes (%d)", s.cfg.MaxResultBytes)}}
		}
		return s.failure(cctx, ctx, sess, err)
	}
	if res.IsError {
		return callOutcome{err: &sandbox.ToolError{Type: sandbox.ErrToolFailed, Message: clip(contentText(res.Content), maxServerMessage)}}
	}
	var out any = res.StructuredContent
	if out == nil {
		out = contentValue(res.Content)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return callOutcome{err: &sandbox.ToolError{Type: sandbox.ErrToolFailed, Message: "the result could not be encoded as JSON"}}
	}
	if int64(len(b)) > s.cfg.MaxResultBytes {
		return callOutcome{received: len(b), err: &sandbox.ToolError{Type: sandbox.ErrToolFailed, Message: fmt.Sprintf("the result is %d bytes, over the server's max_result_bytes (%d)", len(b), s.cfg.MaxResultBytes)}}
	}
	return callOutcome{result: b, received: len(b)}
}

// failure types an error of a call: a deadline is ToolTimeout, a JSON-RPC
// error from the server ToolFailed (with its message), anything else
// ToolUnavailable (and the session is dropped).
func (s *server) failure(cctx, outer context.Context, sess *mcp.ClientSession, err error) callOutcome {
	var wire *jsonrpc.Error
	switch {
	case errors.As(err, &wire):
		return callOutcome{err: &sandbox.ToolError{Type: sandbox.ErrToolFailed, Message: clip(wire.Message, maxServerMessage)}}
	case cctx.Err() != nil:
		if outer.Err() != nil {
			return callOutcome{err: &sandbox.ToolError{Type: sandbox.ErrToolTimeout, Message: "the run's deadline was reached during the call"}}
		}
		if sess != nil {
			// The session may still hold the abandoned request; start afresh.
			s.drop(sess)
		}
		return callOutcome{err: &sandbox.ToolError{Type: sandbox.ErrToolTimeout, Message: fmt.Sprintf("no answer within the server's timeout (%d ms)", s.cfg.TimeoutMS)}}
	}
	if sess != nil {
		s.drop(sess)
	}
	s.log.Warn("tool server unavailable", "error", redact(err.Error(), s.headers))
	return callOutcome{err: &sandbox.ToolError{Type: sandbox.ErrToolUnavailable, Message: fmt.Sprintf("tool server %s is unavailable", s.cfg.Name)}}
}

// unreachable types a failure to connect or to list the tools: a deadline
// is ToolTimeout, anything else (whatever the SDK wraps it in)
// ToolUnavailable.
func (s *server) unreachable(cctx, outer context.Context, err error) callOutcome {
	switch {
	case outer.Err() != nil:
		return callOutcome{err: &sandbox.ToolError{Type: sandbox.ErrToolTimeout, Message: "the run's deadline was reached during the call"}}
	case cctx.Err() != nil:
		return callOutcome{err: &sandbox.ToolError{Type: sandbox.ErrToolTimeout, Message: fmt.Sprintf("tool server %s did not answer within its timeout (%d ms)", s.cfg.Name, s.cfg.TimeoutMS)}}
	}
	if !errors.Is(err, errBackoff) {
		s.log.Warn("tool server unavailable", "error", redact(err.Error(), s.headers))
	}
	return callOutcome{err: &sandbox.ToolError{Type: sandbox.ErrToolUnavailable, Message: fmt.Sprintf("tool server %s is unavailable", s.cfg.Name)}}
}

func isProtocolError(err error) bool {
	var wire *jsonrpc.Error
	return errors.As(err, &wire)
}

// contentValue turns unstructured content into a value: one text item is
// its text (parsed when it is JSON), otherwise the items as JSON.
func contentValue(content []mcp.Content) any {
	if len(content) == 1 {
		if t, ok := content[0].(*mcp.TextContent); ok {
			var v any
			if json.Unmarshal([]byte(t.Text), &v) == nil {
				return v
			}
			return t.Text
		}
	}
	out := make([]any, 0, len(content))
	for _, c := range content {
		out = append(out, c)
	}
	return out
}

func contentText(content []mcp.Content) string {
	var b strings.Builder
	for _, c := range content {
		if t, ok := c.(*mcp.TextContent); ok {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(t.Text)
		}
		if b.Len() > maxServerMessage {
			break
		}
	}
	if b.Len() == 0 {
		return "the tool reported an error"
	}
	return b.String()
}

// redact removes header values from s (an error text that might echo a
// request).
func redact(s string, h http.Header) string {
	for _, vs := range h {
		for _, v := range vs {
			if v != "" {
				s = strings.ReplaceAll(s, v, "[redacted]")
			}
		}
	}
	return clip(s, maxServerMessage)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// limitedTransport adds the server's headers to every request and bounds
// the body of every POST response (the answers to calls): past max bytes
// the read fails and the call's budget (from the request's context) is
// marked exceeded. The standalone SSE stream (GET) is bounded per event by
// the transport's MaxEventSize instead.
type limitedTransport struct {
	base    http.RoundTripper
	headers http.Header
	max     int64
}

func (t *limitedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, vs := range t.headers {
		req.Header[k] = vs
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil || req.Method != http.MethodPost {
		return resp, err
	}
	resp.Body = &limitedBody{rc: resp.Body, left: t.max, budget: budgetFrom(req.Context())}
	return resp, nil
}

var errResultTooLarge = errors.New("tool server response over the result cap")

type limitedBody struct {
	rc     io.ReadCloser
	left   int64
	budget *responseBudget
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		if b.budget != nil {
			b.budget.exceeded.Store(true)
		}
		return 0, errResultTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }

// responseBudget is marked when a call's response hit the cap.
type responseBudget struct{ exceeded atomic.Bool }

type budgetKey struct{}

func withBudget(ctx context.Context, b *responseBudget) context.Context {
	return context.WithValue(ctx, budgetKey{}, b)
}

func budgetFrom(ctx context.Context) *responseBudget {
	b, _ := ctx.Value(budgetKey{}).(*responseBudget)
	return b
}
