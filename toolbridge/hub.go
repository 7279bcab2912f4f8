package toolbridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
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

// ServerStore holds the tool servers an admin added over the API, per
// tenant (quota.ToolServerStore: the quota backend, shared by replicas).
type ServerStore interface {
	ToolServers(ctx context.Context, tenant string) (map[string][]byte, error)
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
	// Servers holds the API-added servers; nil: config servers only.
	Servers ServerStore
	// APIScope bounds the secret references of API-added servers (zero:
	// the defaults).
	APIScope toolconfig.APIScope
	// ServersTTL is how long a tenant's API servers are used before the
	// store is asked again (on the next run, listing or status). Default
	// DefaultServersTTL.
	ServersTTL time.Duration
}

// DefaultServersTTL is how stale a replica's view of the API servers may
// get: a change made on another replica applies within it.
const DefaultServersTTL = time.Second

// storeTimeout bounds one read of the server store.
const storeTimeout = 2 * time.Second

// Sources of a server (ServerStatus.Source).
const (
	SourceConfig = "config"
	SourceAPI    = "api"
)

// Hub holds every tenant's tool servers. It is safe for concurrent use;
// Close ends the pooled sessions.
type Hub struct {
	opts   Options
	log    *slog.Logger
	tracer trace.Tracer
	now    func() time.Time
	getenv func(string) string
	// tenants is fixed by NewHub (the configured tenants); each tenant's
	// servers change as the API servers do.
	tenants map[string]*tenantState
}

// tenantState is one tenant's config and its current servers.
type tenantState struct {
	id      string
	config  toolconfig.Config
	refresh sync.Mutex   // one store read and rebuild at a time
	checked atomic.Int64 // when the store was last read, unix ns
	cur     atomic.Pointer[tenantTools]
}

// tenantTools is one tenant's servers (config order, then API servers by
// name) and limits: an immutable snapshot; a run keeps the one it started
// with.
type tenantTools struct {
	servers    []*server
	byName     map[string]*server
	limits     toolconfig.Limits
	recordArgs bool
	// api are the store's documents this snapshot was built from.
	api map[string]string
	// failed are API servers that could not be built here (a secret file
	// or variable missing on this replica), for Status.
	failed []failedServer
}

type failedServer struct {
	cfg toolconfig.Server
	err string // never a secret value
}

// NewHub validates the tenants' tool configs and resolves their secrets
// (a missing secret file or variable is an error naming the tenant and
// server; the value is never shown). No server is contacted yet.
func NewHub(tenants map[string]toolconfig.Config, opts Options) (*Hub, error) {
	if opts.Policy == nil {
		return nil, errors.New("toolbridge: Options.Policy is nil")
	}
	h := &Hub{opts: opts, log: opts.Logger, now: opts.Now, getenv: opts.Getenv, tenants: map[string]*tenantState{}}
	if h.log == nil {
		h.log = slog.Default()
	}
	h.log = h.log.With("component", "toolbridge")
	if h.now == nil {
		h.now = time.Now
	}
	h.opts.APIScope = h.opts.APIScope.WithDefaults()
	if h.opts.ServersTTL <= 0 {
		h.opts.ServersTTL = DefaultServersTTL
	}
	tp := opts.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	h.tracer = tp.Tracer("github.com/execgate/execgate/toolbridge")
	if h.getenv == nil {
		h.getenv = os.Getenv
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
		ts := &tenantState{id: id, config: cfg}
		tt := &tenantTools{byName: map[string]*server{}, limits: cfg.Limits.WithDefaults(), recordArgs: cfg.RecordArgs, api: map[string]string{}}
		for _, sc := range cfg.Servers {
			s, err := newServer(sc, h.getenv, h.log.With("tenant_id", id), h.now)
			if err != nil {
				errs = append(errs, fmt.Errorf("tenant %s: tools.%w", id, err))
				continue
			}
			s.source = SourceConfig
			tt.servers = append(tt.servers, s)
			tt.byName[s.cfg.Name] = s
		}
		ts.cur.Store(tt)
		h.tenants[id] = ts
	}
	if err := errors.Join(errs...); err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

// Close ends every pooled session.
func (h *Hub) Close() {
	for _, ts := range h.tenants {
		for _, s := range ts.cur.Load().servers {
			s.close()
		}
	}
}

// current returns tenant's servers (nil for a tenant the Hub does not
// know), reading the store when the last read is older than ServersTTL (or
// always, with force). When the store cannot answer the last servers stay.
func (h *Hub) current(ctx context.Context, tenant string, force bool) *tenantTools {
	ts := h.tenants[tenant]
	if ts == nil {
		return nil
	}
	if h.opts.Servers == nil || (!force && h.fresh(ts)) {
		return ts.cur.Load()
	}
	ts.refresh.Lock()
	defer ts.refresh.Unlock()
	if !force && h.fresh(ts) { // another caller refreshed meanwhile
		return ts.cur.Load()
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	docs, err := h.opts.Servers.ToolServers(cctx, tenant)
	cancel()
	ts.checked.Store(h.now().UnixNano())
	cur := ts.cur.Load()
	if err != nil {
		h.log.WarnContext(ctx, "reading the API tool servers failed; keeping the last ones", "tenant_id", tenant, "err", err)
		return cur
	}
	if len(cur.failed) == 0 && sameDocs(cur.api, docs) {
		return cur
	}
	next := h.build(ts, docs, cur)
	ts.cur.Store(next)
	for _, s := range cur.servers {
		if next.byName[s.cfg.Name] != s {
			s.close() // removed or replaced: its session ends; a run still holding it gets ToolUnavailable
		}
	}
	return next
}

func (h *Hub) fresh(ts *tenantState) bool {
	return h.now().UnixNano()-ts.checked.Load() < int64(h.opts.ServersTTL)
}

func sameDocs(have map[string]string, docs map[string][]byte) bool {
	if len(have) != len(docs) {
		return false
	}
	for k, v := range docs {
		if hv, ok := have[k]; !ok || hv != string(v) {
			return false
		}
	}
	return true
}

// build makes the snapshot for docs: config servers in config order, an
// API server of the same name in a config server's place, then the other
// API servers by name. Unchanged servers of prev are kept (with their
// sessions).
func (h *Hub) build(ts *tenantState, docs map[string][]byte, prev *tenantTools) *tenantTools {
	log := h.log.With("tenant_id", ts.id)
	tt := &tenantTools{byName: map[string]*server{}, limits: prev.limits, recordArgs: prev.recordArgs, api: make(map[string]string, len(docs))}
	for k, v := range docs {
		tt.api[k] = string(v)
	}
	add := func(s *server) {
		tt.servers = append(tt.servers, s)
		tt.byName[s.cfg.Name] = s
	}
	apiServer := func(name string, doc []byte) {
		if p := prev.byName[name]; p != nil && p.source == SourceAPI && p.doc == string(doc) {
			add(p)
			return
		}
		cfg, err := ParseAPIServer(doc)
		if err == nil && cfg.Name != name {
			err = fmt.Errorf("the stored server is named %q", cfg.Name)
		}
		if err == nil {
			err = h.opts.APIScope.Check(cfg) // this replica's scope
		}
		var s *server
		if err == nil {
			s, err = newServer(cfg, h.getenv, log, h.now)
		}
		if err != nil {
			log.Error("an API tool server cannot be used on this gateway", "tool_server", name, "err", err)
			tt.failed = append(tt.failed, failedServer{cfg: cfg.WithDefaults(), err: err.Error()})
			return
		}
		s.source, s.doc = SourceAPI, string(doc)
		add(s)
	}
	inConfig := map[string]bool{}
	for _, sc := range ts.config.Servers {
		inConfig[sc.Name] = true
		if doc, ok := docs[sc.Name]; ok {
			apiServer(sc.Name, doc)
			continue
		}
		if p := prev.byName[sc.Name]; p != nil && p.source == SourceConfig {
			add(p)
			continue
		}
		s, err := newServer(sc, h.getenv, log, h.now)
		if err != nil {
			log.Error("a config tool server cannot be rebuilt", "tool_server", sc.Name, "err", err)
			tt.failed = append(tt.failed, failedServer{cfg: sc.WithDefaults(), err: err.Error()})
			continue
		}
		s.source = SourceConfig
		add(s)
	}
	names := make([]string, 0, len(docs))
	for name := range docs {
		if !inConfig[name] {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		apiServer(name, docs[name])
	}
	log.Info("tool servers changed", "servers", len(tt.servers), "api_servers", len(docs), "unusable", len(tt.failed))
	return tt
}

// ParseAPIServer decodes a stored API server (as the gateway wrote it) and
// checks it with ValidateAPI.
func ParseAPIServer(doc []byte) (toolconfig.Server, error) {
	var cfg toolconfig.Server
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return cfg, fmt.Errorf("decoding the stored server: %w", err)
	}
	return cfg, cfg.ValidateAPI()
}

// Refresh reads tenant's API servers from the store now (the admin API
// calls it after a change, so this replica applies it at once).
func (h *Hub) Refresh(ctx context.Context, tenant string) {
	h.current(ctx, tenant, true)
}

// CheckServer checks an API server's secret references against the
// gateway's APIScope and resolves them, as a run would: an error names the
// field ("headers.<name>…") and why, never the value.
func (h *Hub) CheckServer(cfg toolconfig.Server) error {
	if err := h.opts.APIScope.Check(cfg); err != nil {
		return err
	}
	for name, sec := range cfg.Headers {
		if _, err := resolve(sec, h.getenv); err != nil {
			return fmt.Errorf("headers.%s: %w", name, err)
		}
	}
	return nil
}

// HasTools reports whether tenant has tool servers configured.
func (h *Hub) HasTools(tenant string) bool {
	tt := h.current(context.Background(), tenant, false)
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
	tt := h.current(ctx, tenant, false)
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
	// Source is where the server comes from: "config" (the config file)
	// or "api" (PUT /v1/admin/tenants/{id}/tools/servers/{name}; it
	// replaces a config server of the same name until deleted).
	Source string `json:"source"`
	// Problem says why an API server cannot be used on this gateway (a
	// secret file or variable missing here); empty when usable.
	Problem string `json:"problem,omitempty"`
}

// Status describes tenant's tool servers (config order, then API servers)
// and run limits.
func (h *Hub) Status(ctx context.Context, tenant string) ([]ServerStatus, toolconfig.Limits, bool) {
	tt := h.current(ctx, tenant, false)
	if tt == nil {
		return []ServerStatus{}, toolconfig.DefaultLimits, false
	}
	out := make([]ServerStatus, 0, len(tt.servers))
	for _, s := range tt.servers {
		st := describe(s.cfg)
		st.Source = s.source
		s.mu.Lock()
		st.Connected = s.sess != nil
		if s.list != nil {
			n := len(s.list.tools)
			st.Tools = &n
		}
		s.mu.Unlock()
		out = append(out, st)
	}
	for _, f := range tt.failed {
		st := describe(f.cfg)
		st.Source, st.Problem = SourceAPI, f.err
		out = append(out, st)
	}
	return out, tt.limits, tt.recordArgs
}

// describe is what Status shows of a server's config: header and variable
// names, never values or where they come from.
func describe(c toolconfig.Server) ServerStatus {
	st := ServerStatus{Name: c.Name, URL: c.URL, Command: first(c.Command), Allow: c.Allow, TimeoutMS: c.TimeoutMS,
		MaxResultBytes: c.MaxResultBytes, ToolsTTLMS: c.ToolsTTLMS, Headers: []string{}}
	if st.Allow == nil {
		st.Allow = []string{}
	}
	for name := range c.Headers {
		st.Headers = append(st.Headers, name)
	}
	for name := range c.Env {
		st.Env = append(st.Env, name)
	}
	sort.Strings(st.Env)
	sort.Strings(st.Headers)
	return st
}

func first(argv []string) string {
	if len(argv) == 0 {
		return ""
	}
	return argv[0]
}
