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
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/dispatch"
	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/gateway"
	"github.com/execgate/execgate/runtimes"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/telemetry"
)

// The split roles (issue #15): a gateway's runner is a dispatch.Dispatcher
// (nothing runs in its process); an executor is a dispatch.Executor over
// the real sandbox, with no auth, policy or tenants, serving only /healthz
// and /metrics.

// newDispatchRedis is the client dispatch uses. Its pool covers one
// blocking wait per run in flight (slots) plus the short commands.
func newDispatchRedis(cfg *config.Config, slots int) (*redis.Client, error) {
	o, err := redis.ParseURL(cfg.Dispatch.RedisURL)
	if err != nil {
		return nil, errors.New("dispatch.redis_url: not a valid URL (want redis://[user:password@]host:port[/db])")
	}
	if o.PoolSize == 0 {
		o.PoolSize = 2*slots + 16
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = 2 * time.Second
	}
	return redis.NewClient(o), nil
}

// newDispatcher wires the gateway role's runner, its readiness check
// (which executors are alive; none: not ready) and its package
// environments (resolved here for the executors' Python, installed by
// them).
func (a *App) newDispatcher(ctx context.Context, metrics *telemetry.Metrics) (*dispatch.Dispatcher, *dispatch.Environments, gateway.Check, error) {
	cfg := a.cfg
	key, err := dispatch.LoadKey(cfg.Dispatch.SpecKeyFile)
	if err != nil {
		return nil, nil, gateway.Check{}, err
	}
	rdb, err := newDispatchRedis(cfg, cfg.Server.WithDefaults().MaxConcurrentRuns)
	if err != nil {
		return nil, nil, gateway.Check{}, err
	}
	a.onStop("dispatch redis", func(context.Context) error { return rdb.Close() })
	d, err := dispatch.NewDispatcher(rdb, cfg.Dispatch, key, dispatch.Options{KeyPrefix: cfg.Dispatch.KeyPrefix, Logger: a.log})
	if err != nil {
		return nil, nil, gateway.Check{}, err
	}
	var obs environments.Observer
	if metrics != nil {
		obs = metrics
	}
	return d, dispatch.NewEnvironments(d, cfg.Sandbox, obs), gateway.Check{Name: "executors", Info: d.Ready}, nil
}

// announced describes the runtimes of set for the executor's heartbeat:
// what each is, whether it can run, and the Python version and platform
// its package environments resolve for (empty: it cannot install
// packages).
func announced(set *runtimes.Set) []runtimes.Info {
	list, _ := set.Runtimes(context.Background())
	for i := range list {
		list[i].Platform = ""
		if envs, err := set.Environments(sandbox.LanguagePython, list[i].Name); err == nil {
			list[i].PythonVersion, list[i].Platform = envs.Target()
		}
	}
	return list
}

// gatewayEnvironments give the flow the environments of each runtime the
// executors serve (npm packages are resolved on the gateway whatever the
// runtime; a JavaScript or TypeScript run names none).
type gatewayEnvironments struct{ e *dispatch.Environments }

func (g gatewayEnvironments) For(_, runtime string) (execution.RuntimeEnvironments, error) {
	return g.e.For(runtime), nil
}

// Executor is a wired executor (server.role executor). Create it with
// NewExecutor, then Start; Stop drains its runs.
type Executor struct {
	app      *App // the cleanup stack and the sandbox constructor
	exec     *dispatch.Executor
	httpSrv  *http.Server
	ln       net.Listener
	serveErr chan error
}

// NewExecutor builds an executor: the sandbox (rootfs ensured first), the
// egress proxy and the dispatch client. A host that cannot jail is an
// error: an executor without a sandbox has nothing to offer.
func NewExecutor(ctx context.Context, opts Options) (_ *Executor, err error) {
	cfg := opts.Config
	if cfg == nil {
		return nil, errors.New("app: Options.Config is nil")
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	progress := opts.Progress
	if progress == nil {
		progress = io.Writer(os.Stderr)
	}
	_, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a := &App{cfg: cfg, log: log, bgCancel: cancel}
	defer func() {
		if err != nil {
			_ = a.closeAll(context.Background())
		}
	}()
	key, err := dispatch.LoadKey(cfg.Dispatch.SpecKeyFile)
	if err != nil {
		return nil, err
	}
	runner := opts.Runner
	var served []runtimes.Info // announced: gateways route runs and resolve packages by them
	if runner == nil {
		sb, err := NewSandbox(ctx, SandboxOptions{
			Sandbox:        cfg.Sandbox,
			Egress:         &cfg.Egress,
			EgressResolver: opts.EgressResolver,
			EnsureRootfs:   true,
			Progress:       progress,
			Logger:         log,
		})
		if sb != nil {
			a.onStop("sandbox", func(context.Context) error { return sb.Close() })
		}
		if err != nil {
			return nil, err
		}
		// A job carries its environment's lock: the runtime's cache
		// installs it on the way in (runtimes.Set.Run), and the runner
		// binds it.
		runner = sb.Runtimes
		served = announced(sb.Runtimes)
	}
	slots := cfg.Server.WithDefaults().MaxConcurrentRuns
	rdb, err := newDispatchRedis(cfg, slots)
	if err != nil {
		return nil, err
	}
	a.onStop("dispatch redis", func(context.Context) error { return rdb.Close() })
	ex, err := dispatch.NewExecutor(rdb, cfg.Dispatch, key, runner, dispatch.ExecutorOptions{
		Options:  dispatch.Options{KeyPrefix: cfg.Dispatch.KeyPrefix, Logger: log},
		Slots:    slots,
		Runtimes: served,
	})
	if err != nil {
		return nil, err
	}
	return &Executor{app: a, exec: ex}, nil
}

// ID is the executor's id in heartbeats and logs.
func (e *Executor) ID() string { return e.exec.ID() }

// Start announces the executor, starts taking runs and serves /healthz
// and /metrics on cfg.Listen.
func (e *Executor) Start(ctx context.Context) error {
	if err := e.exec.Start(ctx); err != nil {
		return err
	}
	e.app.onStop("executor", func(ctx context.Context) error {
		grace := time.Duration(e.app.cfg.Server.WithDefaults().ShutdownGraceSeconds) * time.Second
		gctx, cancel := context.WithTimeout(ctx, grace)
		defer cancel()
		return e.exec.Stop(gctx)
	})
	reg := prometheus.NewRegistry()
	for name, f := range map[string]func() float64{
		"execgate_executor_runs_total":    func() float64 { r, _, _ := e.exec.Stats(); return float64(r) },
		"execgate_executor_refused_total": func() float64 { _, r, _ := e.exec.Stats(); return float64(r) },
		"execgate_executor_skipped_total": func() float64 { _, _, s := e.exec.Stats(); return float64(s) },
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: "dispatch: " + name}, f))
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"ok":true,"role":"executor","executor":%q}`+"\n", e.exec.ID())
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", e.app.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", e.app.cfg.Listen, err)
	}
	e.ln = ln
	e.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	e.serveErr = serve(e.httpSrv, ln)
	return nil
}

// URL is the executor's /healthz and /metrics address (after Start).
func (e *Executor) URL() string {
	if e.ln == nil {
		return ""
	}
	return "http://" + e.ln.Addr().String()
}

// Done receives the HTTP server's exit error.
func (e *Executor) Done() <-chan error { return e.serveErr }

// Stop stops taking runs, drains the runs in flight for
// server.shutdown_grace_seconds, and releases everything.
func (e *Executor) Stop(ctx context.Context) error {
	var errs []error
	if e.httpSrv != nil {
		errs = append(errs, e.httpSrv.Close())
	}
	errs = append(errs, e.app.closeAll(ctx))
	return errors.Join(errs...)
}
