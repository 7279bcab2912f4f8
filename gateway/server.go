package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/contrib/instrumentation/github.com/gin-gonic/gin/otelgin"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/decode"
	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/execution/async"
	"github.com/execgate/execgate/mcpserver"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/telemetry"
	"github.com/execgate/execgate/tenancy"
)

// TracerName names the gateway's tracer (child spans of the edge span).
const TracerName = "github.com/execgate/execgate/gateway"

// The small interfaces the gateway needs from the domain packages (STYLE:
// declared where used, only the methods used). app wires the real ones.

// Authenticator verifies bearer tokens (*auth.Verifier).
type Authenticator interface {
	Verify(ctx context.Context, raw string) (auth.Claims, error)
}

// Decider, Runner and Auditor are the execute flow's (package execution):
// the gateway hands them to it, and asks the policy (GET /v1/tools,
// POST /v1/prepare) and the sandbox (the readiness probe) itself too.
type (
	Decider = execution.Decider
	Runner  = execution.Runner
	Auditor = execution.Auditor
)

// Quotas admits runs and serves the admin quota API (quota.MemoryLimiter,
// quota.RedisLimiter).
type Quotas interface {
	Admit(ctx context.Context, req quota.AdmitRequest) (*quota.Admission, error)
	Override(ctx context.Context, tenant string) (quota.Limits, bool, error)
	SetOverride(ctx context.Context, tenant string, l quota.Limits) error
	ClearOverride(ctx context.Context, tenant string) error
	Effective(ctx context.Context, tenant string, configured quota.Limits) (quota.Limits, error)
	Usage(ctx context.Context, tenant string, configured quota.Limits) (quota.Usage, error)
}

// Metrics are the Prometheus hooks of the gateway and the execute flow it
// hands them to (*telemetry.Metrics).
type Metrics interface {
	execution.Metrics
}

// Check is one readiness check besides the sandbox's (which the gateway
// runs itself through the Runner). Run returns nil when healthy. An
// Optional check is listed in /readyz but its failure does not make the
// gateway unready: it marks a degraded capability (e.g. network mode
// proxy) that the other runs do not need.
type Check struct {
	Name string
	Run  func(ctx context.Context) error
	// Info, when set instead of Run, also says what it found (shown as
	// the check's detail).
	Info     func(ctx context.Context) (string, error)
	Optional bool
}

// Deps are the components a Server uses. Auth, Tenants, Policy, Quota,
// Runner and Audit are required.
type Deps struct {
	Auth    Authenticator
	Tenants *tenancy.Registry
	Policy  Decider
	Quota   Quotas
	Runner  Runner
	Audit   Auditor
	// Environments resolves and installs requirements. Nil: requests with
	// requirements are 503 SandboxUnavailable.
	Environments Environments
	// Warmer keeps jails warm for prepared environments (POST /v1/prepare
	// "warm"). Nil: prepare warms nothing and answers "warm": 0.
	Warmer Warmer
	// Runtimes lists the runtimes for GET /v1/runtimes. Nil: it lists none.
	Runtimes RuntimeLister
	// Metrics may be nil (no metrics); MetricsHandler serves /metrics
	// (nil: 404).
	Metrics        Metrics
	MetricsHandler http.Handler
	// Idempotency remembers run responses per (tenant, execution_id). Nil:
	// an in-memory store.
	Idempotency execution.IdempotencyStore
	// AuditSearch serves GET /v1/admin/audit. Nil: that route answers 404.
	AuditSearch AuditSearcher
	// Traces serves GET /v1/admin/traces/{trace_id} (the spans kept in
	// memory when no OTLP endpoint is set). Nil: that route answers 404.
	Traces Traces
	// Ready are the readiness checks besides the sandbox probe (rootfs,
	// policy, quota backend).
	Ready []Check
	// Logger gets one line per execute request. Nil: slog.Default().
	Logger *slog.Logger
	// TracerProvider for the edge and child spans. Nil: the global one.
	TracerProvider trace.TracerProvider
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// Tools serves code mode (tool servers, the governed bridge, GET
	// /v1/tools). Nil: runs get no host tools.
	Tools ToolHub
	// ToolServers stores the tool servers added over the admin API (the
	// quota backend). Nil: PUT/DELETE .../tools/servers/{name} answer 404.
	ToolServers ToolServerStore
	// Async keeps the async executions (POST /v1/executions), shared by
	// the replicas (the quota backend). Nil: in this process.
	Async async.Store
	// Callbacks decides and Webhooks sends the callback_url of async
	// executions. Either nil: callback_url is refused (400).
	Callbacks CallbackDecider
	Webhooks  WebhookSender
}

// Server is the HTTP API. Create it with New; Handler serves it. It is safe
// for concurrent use; its run queue and caches live as long as it does.
type Server struct {
	cfg    Config
	d      Deps
	caps   decode.Caps
	engine *gin.Engine
	flow   *execution.Flow   // the execute flow behind /v1/execute and /mcp
	mcp    *mcpserver.Server // POST /mcp, on flow
	runs   *async.Runs       // the async executions, on flow
	ready  *readiness
	// refusals rate-limits refused requests per subject (refusals.go).
	refusals *refusalLimiter
	tracer   trace.Tracer
	log      *slog.Logger
	now      func() time.Time
	// resultReaders and liveReaders cap each tenant's readers of stored
	// results and of unfinished runs' events (readers.go).
	resultReaders, liveReaders *tenantSlots
}

// New validates cfg (after defaults) and builds the router.
func New(cfg Config, d Deps) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if _, err := OpenAPI(); err != nil {
		return nil, err
	}
	var missing []string
	for name, ok := range map[string]bool{
		"Auth": d.Auth != nil, "Tenants": d.Tenants != nil, "Policy": d.Policy != nil,
		"Quota": d.Quota != nil, "Runner": d.Runner != nil, "Audit": d.Audit != nil,
	} {
		if !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("gateway: missing dependencies: %s", strings.Join(missing, ", "))
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.TracerProvider == nil {
		d.TracerProvider = otel.GetTracerProvider()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	s := &Server{
		cfg:    cfg,
		d:      d,
		caps:   cfg.caps(),
		tracer: d.TracerProvider.Tracer(TracerName),
		log:    d.Logger,
		now:    d.Now,
	}
	s.ready = newReadiness(s, time.Duration(cfg.ReadyCacheSeconds)*time.Second)
	s.refusals = newRefusalLimiter(cfg.RefusalsPerMinute, cfg.RefusalsBurst, d.Now)
	store := s.asyncStore()
	fd := execution.Deps{
		Tenants: d.Tenants, Policy: d.Policy, Quota: d.Quota, Runner: d.Runner, Audit: d.Audit,
		Environments: d.Environments, Tools: d.Tools, Idempotency: d.Idempotency, Metrics: d.Metrics,
		Succeeded: s.ready.succeeded, Logger: d.Logger, TracerProvider: d.TracerProvider, Now: d.Now,
		Artifacts: store, // every run's, sync and async: kept where the results are
	}
	var err error
	if s.flow, err = execution.New(cfg.flowConfig(), fd); err != nil {
		return nil, err
	}
	s.newRuns(store)
	s.mcp = mcpserver.New(s.caps, mcpserver.Deps{
		Flow: s.flow, Tenants: d.Tenants, Logger: d.Logger,
		ExecuteGrants:  accessRow(http.MethodPost, "/v1/execute").Grants,
		ValidateGrants: accessRow(http.MethodPost, "/v1/validate").Grants,
	})
	s.resultReaders = newTenantSlots(cfg.TenantMaxResultReaders, "tenant_max_result_readers")
	s.liveReaders = newTenantSlots(cfg.TenantMaxLiveReaders, "tenant_max_live_readers")
	s.engine = s.routes()
	return s, nil
}

// Handler is the HTTP handler of the whole API.
func (s *Server) Handler() http.Handler { return s.engine }

// Route is one registered route (method and Gin path, e.g. /v1/admin/tenants/:id/quota).
type Route struct{ Method, Path string }

// Routes lists the registered routes (the OpenAPI test checks each is
// documented).
func (s *Server) Routes() []Route {
	var out []Route
	for _, r := range s.engine.Routes() {
		out = append(out, Route{Method: r.Method, Path: r.Path})
	}
	return out
}

// Drain waits until no run is queued or running, or ctx ends. Shutdown
// calls it after the listener stopped accepting.
func (s *Server) Drain(ctx context.Context) error {
	if err := s.runs.Drain(ctx); err != nil {
		return err
	}
	if err := s.flow.Drain(ctx); err != nil {
		return err
	}
	if s.d.Webhooks != nil {
		return s.d.Webhooks.Drain(ctx)
	}
	return nil
}

// FlushSettlements makes one last attempt at the quota settlements still
// being retried (the backend was down when their runs ended) and waits for
// them until ctx ends. Stop calls it before closing the quota backend; an
// error says how many runs' CPU could not be charged.
func (s *Server) FlushSettlements(ctx context.Context) error { return s.flow.FlushSettlements(ctx) }

func init() { gin.SetMode(gin.ReleaseMode) }

// gin context keys.
const (
	keyEnvelope    = "execgate.envelope"     // bool: render errors as an Envelope (execute)
	keyExecutionID = "execgate.execution_id" // string: the response's execution id
	keyTenantID    = "execgate.tenant_id"    // string: the caller's tenant once known
)

func (s *Server) routes() *gin.Engine {
	e := gin.New()
	e.HandleMethodNotAllowed = true
	e.ContextWithFallback = true
	e.Use(gin.CustomRecoveryWithWriter(nil, func(c *gin.Context, rec any) {
		s.log.ErrorContext(c.Request.Context(), "panic in handler", "panic", fmt.Sprint(rec), "path", c.FullPath())
		s.fail(c, &apiError{Status: http.StatusInternalServerError, Type: TypeInternal, Message: "internal error"})
	}))
	e.Use(otelgin.Middleware("execgate",
		otelgin.WithTracerProvider(s.d.TracerProvider),
		otelgin.WithPropagators(telemetry.Propagator()),
		otelgin.WithSpanNameFormatter(func(c *gin.Context) string {
			if p := c.FullPath(); p != "" {
				return c.Request.Method + " " + p
			}
			return c.Request.Method
		}),
	))
	e.NoRoute(func(c *gin.Context) {
		if serveConsole(c) { // the web console at /ui/ (console.go): static files, not API routes
			return
		}
		s.fail(c, &apiError{Status: http.StatusNotFound, Type: TypeNotFound, Message: "no such route: " + c.Request.URL.Path})
	})
	e.NoMethod(func(c *gin.Context) {
		s.fail(c, &apiError{Status: http.StatusMethodNotAllowed, Type: TypeMethodNotAllowed, Message: c.Request.Method + " is not allowed on " + c.Request.URL.Path})
	})

	e.GET("/healthz", s.handleHealthz)
	e.GET("/readyz", s.handleReadyz)
	e.GET("/openapi.json", s.handleOpenAPI)
	e.GET("/metrics", s.handleMetrics)

	// The authenticated routes are exactly the access table's (access.go),
	// each behind its check.
	handlers := map[Route]gin.HandlerFunc{
		{http.MethodPost, "/v1/execute"}:                                 s.handleExecute,
		{http.MethodPost, "/v1/validate"}:                                s.handleValidate,
		{http.MethodPost, "/v1/prepare"}:                                 s.handlePrepare,
		{http.MethodGet, "/v1/runtimes"}:                                 s.handleRuntimes,
		{http.MethodGet, "/v1/admin/tenants"}:                            s.handleListTenants,
		{http.MethodGet, "/v1/admin/tenants/:id/quota"}:                  s.handleGetQuota,
		{http.MethodPut, "/v1/admin/tenants/:id/quota"}:                  s.handlePutQuota,
		{http.MethodDelete, "/v1/admin/tenants/:id/quota"}:               s.handleDeleteQuota,
		{http.MethodGet, "/v1/admin/tenants/:id/usage"}:                  s.handleUsage,
		{http.MethodPost, "/v1/admin/policy/evaluate"}:                   s.handleEvaluate,
		{http.MethodGet, "/v1/tools"}:                                    s.handleTools,
		{http.MethodGet, "/v1/admin/tenants/:id/tools"}:                  s.handleTenantTools,
		{http.MethodPut, "/v1/admin/tenants/:id/tools/servers/:name"}:    s.handlePutToolServer,
		{http.MethodDelete, "/v1/admin/tenants/:id/tools/servers/:name"}: s.handleDeleteToolServer,
		{http.MethodGet, "/v1/admin/audit"}:                              s.handleAudit,
		{http.MethodGet, "/v1/admin/traces/:trace_id"}:                   s.handleTraces,
		{http.MethodPost, "/mcp"}:                                        s.handleMCP,
		{http.MethodPost, "/v1/executions"}:                              s.handleSubmitExecution,
		{http.MethodGet, "/v1/executions/:id"}:                           s.handleGetExecution,
		{http.MethodDelete, "/v1/executions/:id"}:                        s.handleCancelExecution,
		{http.MethodGet, "/v1/executions/:id/events"}:                    s.handleExecutionEvents,
		{http.MethodGet, "/v1/executions/:id/artifacts/:name"}:           s.handleArtifact,
	}
	for _, a := range accessTable {
		r := Route{a.Method, a.Path}
		h, ok := handlers[r]
		if !ok {
			panic("gateway: access table row without a handler: " + a.Method + " " + a.Path)
		}
		delete(handlers, r)
		chain := []gin.HandlerFunc{s.authenticate, s.guard(a), h}
		if r.Path == "/v1/execute" || r == (Route{http.MethodPost, "/v1/executions"}) {
			chain = append([]gin.HandlerFunc{s.envelopeMode}, chain...)
		}
		e.Handle(a.Method, a.Path, chain...)
	}
	for r := range handlers {
		panic("gateway: route without an access table row: " + r.Method + " " + r.Path)
	}
	return e
}

// handleMCP is POST /mcp: the MCP server (package mcpserver) behind the
// edge. Its access row was checked as for any route; the body is read
// under the execute body cap plus the JSON-RPC framing.
func (s *Server) handleMCP(c *gin.Context) {
	p, _ := tenancy.PrincipalFrom(c.Request.Context())
	if _, err := s.authorizeTenant(c, p, ""); err != nil {
		s.fail(c, err)
		return
	}
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, s.caps.Body+mcpserver.FramingBytes)
	s.mcp.ServeHTTP(c.Writer, c.Request)
}

// envelopeMode marks the execute route: errors render as an Envelope and
// the execution headers are set on every response, even a 401.
func (s *Server) envelopeMode(c *gin.Context) {
	c.Set(keyEnvelope, true)
	c.Set(keyExecutionID, execution.NewID())
	c.Next()
}

// authenticate verifies the bearer token and puts the Principal in the
// request context.
func (s *Server) authenticate(c *gin.Context) {
	ctx, span := s.tracer.Start(c.Request.Context(), telemetry.StageAuth)
	start := time.Now()
	p, err := s.principal(ctx, c.GetHeader("Authorization"))
	if s.d.Metrics != nil {
		s.d.Metrics.Stage(telemetry.StageAuth, time.Since(start))
	}
	if err == nil {
		// The request's spans are the token's tenant's: the edge span and
		// this one by attribute, the ones started later by their context.
		tenant := attribute.String(telemetry.AttrTenantID, p.TenantID)
		span.SetAttributes(tenant)
		trace.SpanFromContext(c.Request.Context()).SetAttributes(tenant)
	}
	span.End()
	if err != nil {
		addr := s.addressKey(c.Request)
		if retry, _, _ := s.refusals.limited(addr, false); retry > 0 {
			s.fail(c, refusalsExceeded(retry))
			c.Abort()
			return
		}
		s.refusals.refused(addr)
		c.Header("WWW-Authenticate", `Bearer realm="execgate", error="invalid_token"`)
		s.fail(c, err)
		c.Abort()
		return
	}
	c.Set(keyTenantID, p.TenantID)
	if err := markAuthenticated(c.Request.Context(), p.TenantID, p.Subject); err != nil {
		c.Header("Connection", "close")
		s.fail(c, &apiError{Status: http.StatusTooManyRequests, Type: TypeQuotaExceeded, Message: err.Error(), RetryAfter: time.Second, Err: err})
		c.Abort()
		return
	}
	c.Request = c.Request.WithContext(telemetry.WithTenant(tenancy.WithPrincipal(c.Request.Context(), p), p.TenantID))
	s.limitRefusals(c, p) // runs the rest of the chain
}

func (s *Server) principal(ctx context.Context, header string) (tenancy.Principal, error) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if header == "" {
		return tenancy.Principal{}, &auth.Error{Reason: "missing bearer token"}
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return tenancy.Principal{}, &auth.Error{Reason: "the Authorization header is not \"Bearer <token>\""}
	}
	claims, err := s.d.Auth.Verify(ctx, strings.TrimSpace(token))
	if err != nil {
		return tenancy.Principal{}, err
	}
	p, err := tenancy.PrincipalFromClaims(claims.Subject, claims.TenantID, claims.Roles)
	if err != nil {
		return tenancy.Principal{}, &auth.Error{Reason: err.Error()}
	}
	return p, nil
}

// fail renders err (through toAPIError) in the route's shape.
func (s *Server) fail(c *gin.Context, err error) {
	ae := toAPIError(err)
	if !ae.Expected() {
		s.log.ErrorContext(c.Request.Context(), "request failed", "path", c.FullPath(), "error_type", ae.Type, "err", ae.Error())
	}
	if ae.RetryAfter > 0 {
		c.Header("Retry-After", execution.RetryAfterSeconds(ae.RetryAfter))
	}
	if c.GetBool(keyEnvelope) {
		env := s.errorEnvelope(c, ae)
		s.writeEnvelope(c, ae.Status, env)
		return
	}
	writeJSON(c, ae.Status, ErrorResponse{Status: "error", Error: ae.Body()})
}

// errorEnvelope is the envelope of a request refused before (or instead
// of) a run.
func (s *Server) errorEnvelope(c *gin.Context, ae *apiError) *Envelope {
	return execution.RefusalEnvelope(c.Request.Context(), c.GetString(keyExecutionID), c.GetString(keyTenantID), ae)
}

// writeEnvelope sets the execution headers and writes env.
func (s *Server) writeEnvelope(c *gin.Context, status int, env *Envelope) {
	c.Header("X-Execution-Id", env.ExecutionID)
	c.Header("X-Execution-Status", env.ExecutionStatus())
	writeJSON(c, status, env)
}

func (s *Server) handleHealthz(c *gin.Context) {
	writeJSON(c, http.StatusOK, gin.H{"status": "ok"})
}

func (s *Server) handleMetrics(c *gin.Context) {
	if s.d.MetricsHandler == nil {
		s.fail(c, &apiError{Status: http.StatusNotFound, Type: TypeNotFound, Message: "metrics are not enabled"})
		return
	}
	s.d.MetricsHandler.ServeHTTP(c.Writer, c.Request)
}

// writeJSON writes v as the JSON response body.
func writeJSON(c *gin.Context, status int, v any) {
	b, err := execution.EncodeJSON(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"status":"error","error":{"type":"Internal","message":"encoding the response failed"}}`)
	}
	c.Data(status, "application/json; charset=utf-8", b)
}

// readBody reads at most limit bytes; over it is a 413.
func readBody(r *http.Request, w http.ResponseWriter, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		// Declared too large: refused before a byte of it is read (the
		// connection is closed after the answer: its body is not drained).
		w.Header().Set("Connection", "close")
		return nil, &apiError{Status: http.StatusRequestEntityTooLarge, Type: TypePayloadTooLarge,
			Message: fmt.Sprintf("body: %d bytes declared, over the %d-byte cap", r.ContentLength, limit)}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return nil, &apiError{Status: http.StatusRequestEntityTooLarge, Type: TypePayloadTooLarge,
				Message: fmt.Sprintf("body: over the %d-byte cap", limit)}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// The connection is closed after this answer (edge.go).
			return nil, badRequest("body", "did not arrive within server.read_body_timeout_seconds")
		}
		return nil, badRequest("body", "could not be read: %v", err)
	}
	return body, nil
}
