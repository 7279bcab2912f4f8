// Package app is the one place that wires the configuration into the real
// components (auth, tenancy, policy, quota, sandbox, audit, telemetry,
// gateway) with Start/Stop, so `execgate serve`, the tests and the benchmark
// harness all start the same server in-process.
//
//	a, err := app.New(ctx, app.Options{Config: cfg})
//	err = a.Start()          // listens on cfg.Listen (":0" for a free port)
//	... a.URL() ...
//	err = a.Stop(ctx)        // drains in-flight runs within the grace period
//
// NewSandbox is the one assembly of the sandbox (egress proxy, rootfs,
// package environments, runner): New uses it, and so does every command
// that runs jails without a server (run, smoke, diagnose, bench).
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/execgate/execgate/audit"
	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/egress"
	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/execution/async"
	"github.com/execgate/execgate/gateway"
	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/policies"
	"github.com/execgate/execgate/policy"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/rootfs"
	"github.com/execgate/execgate/runtimes"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/telemetry"
	"github.com/execgate/execgate/tenancy"
	"github.com/execgate/execgate/toolbridge"
	"github.com/execgate/execgate/toolbridge/toolconfig"
	"github.com/execgate/execgate/webhook"
)

// Options configure an App. Only Config is required.
type Options struct {
	// Config is the loaded configuration (config.Load).
	Config *config.Config
	// Runner replaces the nsjail sandbox. Nil: the real runner (built from
	// Config.Sandbox, with the rootfs ensured first). Benchmarks pass
	// NoopRunner{} to measure the gateway alone (auth, validation, policy,
	// quota, audit).
	Runner gateway.Runner
	// Logger for the gateway and components. Nil: slog.Default().
	Logger *slog.Logger
	// Progress receives rootfs build progress. Nil: os.Stderr.
	Progress io.Writer
	// Registry gets the Prometheus metrics. Nil: a fresh registry per App
	// (so several Apps can live in one test process).
	Registry *prometheus.Registry
	// HandleSIGHUP reloads the policies on SIGHUP (serve sets it).
	HandleSIGHUP bool
	// TracerProvider for the gateway's spans. Nil: the global one, which
	// telemetry.Setup installs (serve calls it); without an SDK provider
	// envelopes and audit records carry no trace id.
	TracerProvider trace.TracerProvider
	// Traces keeps the recent spans of each tenant's traces for GET
	// /v1/admin/traces/{trace_id}: a telemetry.SpanRing that is also a
	// processor of the tracer provider the spans go to (serve passes it to
	// telemetry.Setup when no OTLP endpoint is set). Nil: that route
	// answers 404.
	Traces *telemetry.SpanRing
	// EgressResolver resolves the hosts tools reach through the egress
	// proxy (network mode proxy). Nil: the system resolver. Tests map
	// made-up names to loopback servers (with egress.allow_cidrs opening
	// 127.0.0.1/32).
	EgressResolver egress.Resolver
}

// poolGaugeInterval is how often the warm-pool gauge is refreshed.
const poolGaugeInterval = 2 * time.Second

// App is a wired execgate gateway. Create it with New, then Start; Stop
// releases everything New and Start acquired, in reverse order.
type App struct {
	cfg     *config.Config
	log     *slog.Logger
	server  *gateway.Server
	policy  *policy.Engine
	limiter quota.Limiter
	runner  gateway.Runner
	// runtimes are the runtimes this process serves (nil in the gateway
	// role: the executors announce theirs); runtimeList lists them for
	// GET /v1/runtimes (the Set, or the dispatcher).
	runtimes    *runtimes.Set
	runtimeList gateway.RuntimeLister
	// runnerErr is why the real sandbox is unavailable (nil when it works):
	// the server still starts, /readyz fails and every run is a 503.
	runnerErr error

	bgCancel context.CancelFunc // ends JWKS refresh, policy watch, SIGHUP
	closers  []closer           // cleanup stack, run in reverse by Stop

	httpSrv  *http.Server
	ln       net.Listener
	serveErr chan error // the http server's exit, after Start
}

type closer struct {
	name string
	fn   func(ctx context.Context) error
}

func (a *App) onStop(name string, fn func(ctx context.Context) error) {
	a.closers = append(a.closers, closer{name, fn})
}

// New builds every component from opts.Config. A host that cannot jail
// (nsjail missing, not root, rootfs build failed) does not stop it: the
// gateway serves, answers every run with 503 SandboxUnavailable and fails
// /readyz. Anything else that fails (bad keys, policies that do not
// compile, an unreachable audit file) is an error.
func New(ctx context.Context, opts Options) (_ *App, err error) {
	cfg := opts.Config
	if cfg == nil {
		return nil, errors.New("app: Options.Config is nil")
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a := &App{cfg: cfg, log: log, bgCancel: cancel}
	defer func() {
		if err != nil {
			_ = a.closeAll(context.Background())
		}
	}()

	if f := devKeyToCreate(cfg); f != "" {
		if _, err := auth.EnsureDevKey(f); err != nil {
			return nil, fmt.Errorf("dev key: %w", err)
		}
	}
	verifier, err := auth.NewVerifier(bg, cfg.Auth, auth.Options{})
	if err != nil {
		return nil, err
	}
	tenants, err := tenancy.NewRegistry(cfg.Tenants)
	if err != nil {
		return nil, err
	}
	if err := a.startPolicy(ctx, bg, opts.HandleSIGHUP); err != nil {
		return nil, err
	}
	reg := opts.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	metrics := telemetry.NewMetrics(reg, cfg.Telemetry.MaxTenantLabels)
	idem, asyncStore, err := a.newQuota(metrics)
	if err != nil {
		return nil, err
	}
	auditLog, err := audit.New(cfg.Audit)
	if err != nil {
		return nil, err
	}
	a.onStop("audit", func(context.Context) error { return auditLog.Close() })

	envs, sandboxChecks, err := a.newRunner(ctx, bg, opts, metrics)
	if err != nil {
		return nil, err
	}
	ready := a.readyChecks(sandboxChecks)

	// The quota backend also keeps the tool servers added over the admin
	// API (both backends implement it), so every replica sees them.
	toolStore, _ := a.limiter.(quota.ToolServerStore)
	tools, err := newToolHub(cfg, a.policy, toolStore, reg, log, opts.TracerProvider)
	if err != nil {
		return nil, err
	}
	a.onStop("tool servers", func(context.Context) error { tools.Close(); return nil })

	// Callbacks of async executions go out under the egress address rules.
	hookDial, err := egress.New(cfg.Egress, egress.Options{Resolver: opts.EgressResolver})
	if err != nil {
		return nil, fmt.Errorf("egress rules for webhooks: %w", err)
	}
	hookOpts := cfg.Server.WithDefaults().WebhookOptions()
	hookOpts.Dial, hookOpts.Logger = hookDial.DialContext, log
	hooks := webhook.NewSender(hookOpts, auditLog)

	// The runner warms prepared environments when it can (the real one).
	warmer, _ := a.runner.(gateway.Warmer)
	a.server, err = gateway.New(cfg.Server, gateway.Deps{
		Auth:           verifier,
		Tenants:        tenants,
		Policy:         a.policy,
		Quota:          a.limiter,
		Runner:         a.runner,
		Audit:          auditLog,
		Environments:   envs,
		Warmer:         warmer,
		Runtimes:       a.runtimeList,
		AuditSearch:    auditLog,
		Metrics:        metrics,
		MetricsHandler: metrics.Handler(),
		Idempotency:    idem,
		Ready:          ready,
		Logger:         log,
		TracerProvider: opts.TracerProvider,
		Traces:         traces(opts.Traces),
		Tools:          tools,
		ToolServers:    toolStore,
		Async:          asyncStore,
		Callbacks:      a.policy,
		Webhooks:       hooks,
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// readyChecks are the /readyz checks: the sandbox's rootfs (when New made
// the sandbox), the policy engine, the quota backend, then the sandbox's
// optional egress check.
func (a *App) readyChecks(sandbox []gateway.Check) []gateway.Check {
	var ready []gateway.Check
	if len(sandbox) > 0 {
		ready = append(ready, sandbox[0])
	}
	ready = append(ready,
		gateway.Check{Name: "policy", Run: func(context.Context) error {
			if st := a.policy.Status(); st.LastError != "" {
				return fmt.Errorf("last policy reload failed (revision %s still serving): %s", st.Revision, st.LastError)
			}
			return nil
		}},
		gateway.Check{Name: "quota", Run: a.limiter.Ping},
	)
	if len(sandbox) > 1 {
		ready = append(ready, sandbox[1:]...)
	}
	return ready
}

// newRunner sets a.runner: in the gateway role the dispatcher to the
// executors, else opts.Runner when given (packages are still
// resolved and installed for it, through environments of the config, when
// there is a rootfs), else the real sandbox (newSandbox). It returns the
// package environments (nil: runs asking for packages are refused) and the
// sandbox's readiness checks.
func (a *App) newRunner(ctx, bg context.Context, opts Options, metrics *telemetry.Metrics) (gateway.Environments, []gateway.Check, error) {
	switch role := a.cfg.Server.WithDefaults().Role; {
	case role == gateway.RoleExecutor:
		return nil, nil, errors.New("app: server.role executor is built with NewExecutor")
	case role == gateway.RoleGateway && opts.Runner == nil:
		// Runs go to the executors (dispatch.go); this process never runs
		// code, needs no nsjail and no privileges; it resolves packages
		// for the executors, which install them.
		d, envs, check, err := a.newDispatcher(ctx, metrics)
		if err != nil {
			return nil, nil, err
		}
		a.runner, a.runtimeList = d, d
		return gatewayEnvironments{envs}, []gateway.Check{check}, nil
	}
	if opts.Runner == nil {
		return a.newSandbox(ctx, bg, opts, metrics)
	}
	a.runner = opts.Runner
	// The injected runner's packages are still resolved and installed
	// through the runtimes' environments, where their rootfs is there.
	var rts []*runtimes.Runtime
	for _, name := range a.cfg.Sandbox.WithDefaultRuntimes() {
		sc := a.cfg.Sandbox.ForRuntime(name)
		e, err := newEnvironments(sc, metrics)
		if err != nil {
			a.log.Warn("package environments are unavailable for a runtime; its runs with requirements are refused", "runtime", name, "err", err)
			rts = append(rts, &runtimes.Runtime{Name: name, Dir: sc.RootfsDir, Err: err})
			continue
		}
		m, _ := jaillayout.ReadManifest(sc.RootfsDir)
		rts = append(rts, &runtimes.Runtime{Name: name, Dir: sc.RootfsDir, Manifest: m, Envs: e, Err: errors.New("runs go to the injected runner")})
	}
	set, err := runtimes.New(rts...)
	if err != nil {
		return nil, nil, err
	}
	a.runtimes, a.runtimeList = set, set
	return setEnvironments{set}, nil, nil
}

// startPolicy loads the policies and starts what keeps them current: the
// watch of policy dirs and bundle (on by default whenever there is either;
// policy.watch: false turns both off) and, with sighup, a reload on SIGHUP.
// Both end with bg.
func (a *App) startPolicy(ctx, bg context.Context, sighup bool) error {
	cfg := a.cfg
	eng, err := policy.New(ctx, policy.Options{Defaults: policies.FS, Dirs: cfg.Policy.Dirs, Bundle: cfg.Policy.Bundle, Logger: a.log, DecisionCache: cfg.Policy.CacheOption()})
	if err != nil {
		return fmt.Errorf("loading policies: %w", err)
	}
	a.policy = eng
	if cfg.Policy.WatchEnabled() {
		go func() {
			if err := eng.Watch(bg); err != nil && bg.Err() == nil {
				a.log.Error("policy watch stopped", "err", err)
			}
		}()
	}
	if sighup {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		a.onStop("sighup", func(context.Context) error { signal.Stop(hup); return nil })
		go eng.ReloadOnSignal(bg, hup)
	}
	return nil
}

// newQuota makes the quota limiter of quota.backend and, with Redis, the
// idempotency and async-result stores sharing its client (nil with the
// memory backend: the gateway keeps them in memory).
func (a *App) newQuota(metrics *telemetry.Metrics) (execution.IdempotencyStore, async.Store, error) {
	cfg := a.cfg
	var idem execution.IdempotencyStore
	var asyncStore async.Store // nil: in the gateway's memory
	window := time.Duration(cfg.Server.WithDefaults().IdempotencyWindowSeconds) * time.Second
	switch cfg.Quota.Backend {
	case "redis":
		client, err := quota.NewRedisClient(cfg.Quota)
		if err != nil {
			return nil, nil, err
		}
		a.onStop("redis client", func(context.Context) error { return client.Close() })
		// Results and responses (tens of MiB) move through a client of
		// their own, whose reads and writes may take quota.bulk_timeout_ms.
		bulk, err := quota.NewRedisBulkClient(cfg.Quota)
		if err != nil {
			return nil, nil, err
		}
		a.onStop("redis bulk client", func(context.Context) error { return bulk.Close() })
		a.limiter = quota.NewRedis(client, cfg.Quota, quota.WithObserver(metrics))
		idem = execution.NewRedisIdempotency(client, cfg.Quota.WithDefaults().KeyPrefix, window, cfg.Server.WithDefaults().IdempotencyLimits()).WithBulk(bulk)
		asyncStore = async.NewRedisStore(client, cfg.Quota.WithDefaults().KeyPrefix, cfg.Server.WithDefaults().AsyncLimits()).WithBulk(bulk)
	default:
		a.limiter = quota.NewMemory(cfg.Quota, quota.WithObserver(metrics))
	}
	a.onStop("quota", func(context.Context) error { return a.limiter.Close() })
	return idem, asyncStore, nil
}

// newSandbox assembles the real sandbox (NewSandbox: the rootfs built on
// first use, with progress; network mode proxy optional) and sets a.runner.
// When the host cannot jail, a.runner refuses every run with the reason,
// kept in a.runnerErr. It returns the package environments (nil when there
// is no rootfs: runs asking for packages are then SandboxUnavailable) and
// the readiness checks of the sandbox: rootfs, then egress (optional).
func (a *App) newSandbox(ctx, bg context.Context, opts Options, metrics *telemetry.Metrics) (gateway.Environments, []gateway.Check, error) {
	cfg := a.cfg
	progress := opts.Progress
	if progress == nil {
		progress = os.Stderr
	}
	sb, err := NewSandbox(ctx, SandboxOptions{
		Sandbox:        cfg.Sandbox,
		Egress:         &cfg.Egress,
		EgressResolver: opts.EgressResolver,
		EgressOptional: true,
		EnsureRootfs:   true,
		Progress:       progress,
		Metrics:        metrics,
		Logger:         a.log,
	})
	if sb == nil {
		return nil, nil, err
	}
	checks := []gateway.Check{
		{Name: "rootfs", Run: func(context.Context) error {
			// Every runtime's rootfs: one missing fails the check, naming it.
			var errs []error
			for _, name := range cfg.Sandbox.WithDefaultRuntimes() {
				if _, err := rootfs.ReadManifest(cfg.Sandbox.RootfsOf(name)); err != nil {
					errs = append(errs, fmt.Errorf("runtime %s: %w", name, err))
				}
			}
			return errors.Join(errs...)
		}},
		// Optional: without the egress proxy only network mode proxy runs
		// are refused; the rest of the service is fine.
		{Name: "egress", Optional: true, Run: func(context.Context) error {
			if sb.EgressErr != nil {
				return sb.EgressErr
			}
			return egressReady(sb.Proxy, cfg.Sandbox.WorkDir)
		}},
	}
	envs := sb.Environments()
	if envs == nil {
		a.log.Warn("package environments are unavailable; runs with requirements are refused", "err", err)
	}
	if sb.Runtimes != nil {
		a.runtimes, a.runtimeList = sb.Runtimes, sb.Runtimes
	}
	if err != nil {
		ue := asUnavailable(err)
		a.log.Error("sandbox unavailable", "err", ue, "detail", ue.Detail())
		a.runner, a.runnerErr = unavailableRunner{ue}, ue
		return envs, checks, nil
	}
	a.runner = sb.Runtimes
	a.onStop("sandbox", func(context.Context) error { return sb.Close() })
	// Stopped before the runners are closed (the cleanup stack runs in
	// reverse).
	pctx, stop := context.WithCancel(bg)
	done := make(chan struct{})
	go func() { defer close(done); reportPool(pctx, sb.Runtimes, metrics) }()
	a.onStop("warm pool gauge", func(context.Context) error { stop(); <-done; return nil })
	return envs, checks, nil
}

// reportPool keeps the warm-pool gauge current until ctx ends. The pool's
// profiles are not labels of their own: "all" is the sum.
func reportPool(ctx context.Context, set *runtimes.Set, m *telemetry.Metrics) {
	t := time.NewTicker(poolGaugeInterval)
	defer t.Stop()
	for {
		m.SetPool("all", set.WarmIdle())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// egressReady checks that the egress proxy can serve a session: it starts
// one on a socket in a fresh directory under workDir (where the runner
// puts the runs' sockets) and closes it.
func egressReady(p *egress.Proxy, workDir string) error {
	if err := os.MkdirAll(workDir, 0o711); err != nil {
		return fmt.Errorf("creating sandbox.work_dir: %w", err)
	}
	dir, err := os.MkdirTemp(workDir, "readyz-egress-")
	if err != nil {
		return fmt.Errorf("creating a probe dir: %w", err)
	}
	defer os.RemoveAll(dir)
	s, err := p.Start(filepath.Join(dir, "proxy.sock"), nil)
	if err != nil {
		return fmt.Errorf("starting an egress session: %w", err)
	}
	return s.Close()
}

// unavailableRunner answers every run with the reason the sandbox could not
// be created; nothing runs (DESIGN §1: no in-process fallback, ever).
type unavailableRunner struct{ err *sandbox.UnavailableError }

func (u unavailableRunner) Run(context.Context, sandbox.Spec) (sandbox.Result, error) {
	return sandbox.Result{}, u.err
}

// NoopRunner returns ok with result {"ok": true} at once, without a jail:
// for measuring the gateway's own overhead (auth, validation, policy,
// quota, audit). Never use it to serve.
type NoopRunner struct{}

// Run implements gateway.Runner.
func (NoopRunner) Run(context.Context, sandbox.Spec) (sandbox.Result, error) {
	return sandbox.Result{Status: sandbox.StatusOK, Result: []byte(`{"ok":true}`)}, nil
}

// Handler is the gateway's HTTP handler (for httptest without a listener).
func (a *App) Handler() http.Handler { return a.server.Handler() }

// Server is the gateway.
func (a *App) Server() *gateway.Server { return a.server }

// Policy is the policy engine.
func (a *App) Policy() *policy.Engine { return a.policy }

// Quota is the quota limiter.
func (a *App) Quota() quota.Limiter { return a.limiter }

// SandboxErr is why the sandbox is unavailable, or nil.
func (a *App) SandboxErr() error { return a.runnerErr }

// Signer mints dev tokens with the configured HS256 key (auth.ErrNoSigningKey
// without one).
func (a *App) Signer() (*auth.Signer, error) { return auth.NewSigner(a.cfg.Auth, nil) }

// Start listens on the configured address and serves in the background.
func (a *App) Start() error {
	if a.httpSrv != nil {
		return errors.New("app: already started")
	}
	ln, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", a.cfg.Listen, err)
	}
	a.ln = ln
	// Timeouts, header cap and the unauthenticated-connection cap are the
	// gateway's (server.* config, gateway/edge.go).
	srv, edgeLn := a.server.HTTPServer(ln, slog.NewLogLogger(a.log.Handler(), slog.LevelWarn))
	a.httpSrv = srv
	a.serveErr = serve(srv, edgeLn)
	return nil
}

// serve runs srv on ln in the background; the channel gets how serving
// ended (nil after Shutdown).
func serve(srv *http.Server, ln net.Listener) chan error {
	done := make(chan error, 1)
	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		done <- err
	}()
	return done
}

// Addr is the listening address (after Start), e.g. 127.0.0.1:43127.
func (a *App) Addr() string {
	if a.ln == nil {
		return ""
	}
	return a.ln.Addr().String()
}

// URL is http://Addr.
func (a *App) URL() string { return "http://" + a.Addr() }

// Done receives the HTTP server's exit error (nil on a clean Stop).
func (a *App) Done() <-chan error { return a.serveErr }

// Stop stops accepting, lets in-flight requests (and their runs) finish for
// up to server.shutdown_grace_seconds (or until ctx ends), then cancels
// what is left and releases every component.
func (a *App) Stop(ctx context.Context) error {
	var errs []error
	if a.httpSrv != nil {
		grace := time.Duration(a.cfg.Server.WithDefaults().ShutdownGraceSeconds) * time.Second
		gctx, cancel := context.WithTimeout(ctx, grace)
		err := a.httpSrv.Shutdown(gctx)
		cancel()
		if err != nil {
			// Grace over: cancel the remaining requests (their runs are
			// killed) and give them a moment to write their audit records.
			errs = append(errs, fmt.Errorf("graceful shutdown: %w", err))
			_ = a.httpSrv.Close()
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := a.server.Drain(dctx); err != nil {
				errs = append(errs, err)
			}
			cancel()
		}
		if err := <-a.serveErr; err != nil {
			errs = append(errs, err)
		}
		a.serveErr <- nil // keep Done readable
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if err := a.server.FlushSettlements(fctx); err != nil {
			a.log.Error(err.Error())
			errs = append(errs, err)
		}
		cancel()
	}
	if err := a.closeAll(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (a *App) closeAll(ctx context.Context) error {
	a.bgCancel()
	var errs []error
	for i := len(a.closers) - 1; i >= 0; i-- {
		if err := a.closers[i].fn(ctx); err != nil {
			errs = append(errs, fmt.Errorf("closing %s: %w", a.closers[i].name, err))
		}
	}
	a.closers = nil
	return errors.Join(errs...)
}

// newToolHub builds the tenants' tool servers for code mode (no server is
// contacted before a run or GET /v1/tools needs it).
func newToolHub(cfg *config.Config, eng *policy.Engine, store quota.ToolServerStore, reg prometheus.Registerer, log *slog.Logger, tp trace.TracerProvider) (*toolbridge.Hub, error) {
	byTenant := make(map[string]toolconfig.Config, len(cfg.Tenants))
	for _, t := range cfg.Tenants {
		byTenant[t.ID] = t.Tools
	}
	hub, err := toolbridge.NewHub(byTenant, toolbridge.Options{
		Policy:         eng,
		Metrics:        toolbridge.NewMetrics(reg),
		Logger:         log,
		TracerProvider: tp,
		Servers:        store,
		APIScope:       cfg.ToolsAPI,
	})
	if err != nil {
		return nil, fmt.Errorf("tool servers: %w", err)
	}
	return hub, nil
}

// traces is ring as the gateway's Traces (a nil ring: none, not a non-nil
// interface holding nil).
func traces(ring *telemetry.SpanRing) gateway.Traces {
	if ring == nil {
		return nil
	}
	return ring
}

// devKeyToCreate is the HS256 dev key file execgate creates at start when
// it is missing: the embedded default's, and a config file's that names
// the state dir's own dev.key (deploy/compose's config does, on a fresh
// volume); "" for any other key file, which the operator provides.
func devKeyToCreate(cfg *config.Config) string {
	f := cfg.Auth.HS256SecretFile
	if f == "" || !(cfg.Embedded || filepath.Clean(f) == filepath.Join(cfg.StateDir, "dev.key")) {
		return ""
	}
	return f
}
