package toolbridge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/toolbridge/toolconfig"
)

// CallDecider decides one tool call (policy.Engine).
type CallDecider interface {
	DecideToolCall(ctx context.Context, in policy.ToolCallInput) (policy.ToolCallDecision, error)
}

// Options are the Hub's collaborators.
type Options struct {
	// Policy decides every call. Required.
	Policy CallDecider
	// Metrics counts calls; nil: none.
	Metrics *Metrics
	// Logger; nil: slog.Default().
	Logger *slog.Logger
	// TracerProvider for the call spans; nil: the global one.
	TracerProvider trace.TracerProvider
	// Getenv reads the gateway's environment for env secrets; nil: os.Getenv.
	Getenv func(string) string
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Hub holds every tenant's tool servers. It is safe for concurrent use;
// Close ends the pooled sessions.
type Hub struct {
	opts    Options
	log     *slog.Logger
	tracer  trace.Tracer
	now     func() time.Time
	tenants map[string]*tenantTools
}

// tenantTools is one tenant's servers (in config order) and limits.
type tenantTools struct {
	servers    []*server
	byName     map[string]*server
	limits     toolconfig.Limits
	recordArgs bool
}

// NewHub validates the tenants' tool configs and resolves their secrets
// (a missing secret file or variable is an error naming the tenant and
// server; the value is never shown). No server is contacted yet.
func NewHub(tenants map[string]toolconfig.Config, opts Options) (*Hub, error) {
	if opts.Policy == nil {
		return nil, errors.New("toolbridge: Options.Policy is nil")
	}
	h := &Hub{opts: opts, log: opts.Logger, now: opts.Now, tenants: map[string]*tenantTools{}}
	if h.log == nil {
		h.log = slog.Default()
	}
	h.log = h.log.With("component", "toolbridge")
	if h.now == nil {
		h.now = time.Now
	}
	tp := opts.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	h.tracer = tp.Tracer("github.com/execgate/execgate/toolbridge")
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	ids := make([]string, 0, len(tenants))
	for id := range tenants {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var errs []error
	for _, id := range ids {
		cfg := tenants[id]
		if err := cfg.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("tenant %s: tools.%w", id, err))
			continue
		}
		tt := &tenantTools{byName: map[string]*server{}, limits: cfg.Limits.WithDefaults(), recordArgs: cfg.RecordArgs}
		for _, sc := range cfg.Servers {
			s, err := newServer(sc, getenv, h.log.With("tenant_id", id), h.now)
			if err != nil {
				errs = append(errs, fmt.Errorf("tenant %s: tools.%w", id, err))
				continue
			}
			tt.servers = append(tt.servers, s)
			tt.byName[s.cfg.Name] = s
		}
		h.tenants[id] = tt
	}
	if err := errors.Join(errs...); err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

// Close ends every pooled session.
func (h *Hub) Close() {
	for _, tt := range h.tenants {
		for _, s := range tt.servers {
			s.close()
		}
	}
}

// HasTools reports whether tenant has tool servers configured.
func (h *Hub) HasTools(tenant string) bool {
	tt := h.tenants[tenant]
	return tt != nil && len(tt.servers) > 0
}

// Tool is a granted tool as GET /v1/tools lists it.
type Tool struct {
	Name        string `json:"name"` // "<server>.<tool>"
	Server      string `json:"server"`
	Description string `json:"description"`
	// InputSchema is the tool's JSON Schema (null when the server gave
	// none that could be kept).
	InputSchema any `json:"input_schema"`
}

// ServerProblem is a server whose tools could not be listed.
type ServerProblem struct {
	Server string `json:"server"`
	Error  string `json:"error"`
}

// Granted lists the tools of tenant that match one of the granted
// patterns, server by server in config order; servers that cannot be
// reached are reported, not fatal.
func (h *Hub) Granted(ctx context.Context, tenant string, granted []string) ([]Tool, []ServerProblem) {
	tt := h.tenants[tenant]
	if tt == nil {
		return nil, nil
	}
	var out []Tool
	var problems []ServerProblem
	for _, s := range tt.servers {
		if !serverMayMatch(granted, s.cfg.Name) {
			continue
		}
		l, err := s.tools(ctx)
		if err != nil {
			problems = append(problems, ServerProblem{Server: s.cfg.Name, Error: "unavailable"})
			continue
		}
		for _, t := range l.tools {
			full := s.cfg.Name + "." + t.Name
			if !grantedTool(granted, full) {
				continue
			}
			var schema any
			if len(t.Schema) > 0 {
				schema, _ = jsonschema.UnmarshalJSON(bytes.NewReader(t.Schema))
			}
			out = append(out, Tool{Name: full, Server: s.cfg.Name, Description: t.Description, InputSchema: schema})
		}
	}
	return out, problems
}

// grantedTool reports whether full ("<server>.<tool>") matches a pattern.
func grantedTool(granted []string, full string) bool {
	for _, g := range granted {
		if g == full || matchGlob(g, full) {
			return true
		}
	}
	return false
}

// serverMayMatch reports whether some pattern can match a tool of server
// (its first segment matches the server's name).
func serverMayMatch(granted []string, server string) bool {
	for _, g := range granted {
		first, _, _ := cutSegment(g)
		if matchGlob(first, server) {
			return true
		}
	}
	return false
}

func cutSegment(g string) (string, string, bool) {
	for i := 0; i < len(g); i++ {
		if g[i] == '.' {
			return g[:i], g[i+1:], true
		}
	}
	return g, "", false
}

// ServerStatus describes one configured tool server for the admin API:
// never a header value or where it comes from.
type ServerStatus struct {
	Name string `json:"name"`
	// URL is a streamable HTTP server's endpoint; Command a stdio server's
	// program (its arguments are not shown).
	URL            string   `json:"url,omitempty"`
	Command        string   `json:"command,omitempty"`
	Allow          []string `json:"allow"`
	TimeoutMS      int64    `json:"timeout_ms"`
	MaxResultBytes int64    `json:"max_result_bytes"`
	ToolsTTLMS     int64    `json:"tools_ttl_ms"`
	// Headers are the names of the headers sent, Env of a stdio server's
	// variables (values are secret).
	Headers []string `json:"headers"`
	Env     []string `json:"env,omitempty"`
	// Connected says whether a pooled session is open; Tools is the
	// cached tool count (null when no list is cached).
	Connected bool `json:"connected"`
	Tools     *int `json:"tools"`
}

// Status describes tenant's tool servers (config order) and run limits.
func (h *Hub) Status(tenant string) ([]ServerStatus, toolconfig.Limits, bool) {
	tt := h.tenants[tenant]
	if tt == nil {
		return []ServerStatus{}, toolconfig.DefaultLimits, false
	}
	out := make([]ServerStatus, 0, len(tt.servers))
	for _, s := range tt.servers {
		st := ServerStatus{Name: s.cfg.Name, URL: s.cfg.URL, Command: first(s.cfg.Command), Allow: s.cfg.Allow, TimeoutMS: s.cfg.TimeoutMS,
			MaxResultBytes: s.cfg.MaxResultBytes, ToolsTTLMS: s.cfg.ToolsTTLMS, Headers: []string{}}
		for name := range s.cfg.Headers {
			st.Headers = append(st.Headers, name)
		}
		for name := range s.cfg.Env {
			st.Env = append(st.Env, name)
		}
		sort.Strings(st.Env)
		sort.Strings(st.Headers)
		s.mu.Lock()
		st.Connected = s.sess != nil
		if s.list != nil {
			n := len(s.list.tools)
			st.Tools = &n
		}
		s.mu.Unlock()
		out = append(out, st)
	}
	return out, tt.limits, tt.recordArgs
}

func first(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	return argv[0]
}
