package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/execgate/execgate/app"
	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/tenancy"
)

// TenantID is the tenant every measurement runs as (see Tenant).
const TenantID = "bench"

// Tenant is the demo tenant with quota high enough that admission always
// says yes, so a load measures the gateway rather than refusals.
func Tenant() tenancy.Tenant {
	t := config.DemoTenant()
	t.ID = TenantID
	t.Quota = quota.Limits{RatePerMinute: 10_000_000, Burst: 1_000_000, Concurrency: 1_000_000, DailyCPUSeconds: 1_000_000_000}
	t.Policy["isolation"] = []any{"jail", "process"} // the process rows
	return t
}

// OverheadOptions configure MeasureOverhead.
type OverheadOptions struct {
	// Config to start from. Nil: the embedded default in a temporary state
	// dir. Either way the gateway listens on a free loopback port, writes
	// its audit log to a temporary file and has the bench Tenant.
	Config *config.Config
	// Concurrency is the number of client connections sending at once.
	// Default 1.
	Concurrency int
	// Requests is the number of measured requests. Default 1000.
	Requests int
	// Warmup requests are sent first and not measured. Default 50.
	Warmup int
}

// MeasureOverhead is the gateway's own cost per request (HTTP, auth,
// validation, policy, quota, audit): it starts a gateway with
// app.NoopRunner and sends POST /v1/execute to it with Load. It is what
// `go test -bench GatewayOverhead ./bench` and `execgate bench` report as
// gateway overhead.
func MeasureOverhead(ctx context.Context, opts OverheadOptions) (*LoadResult, error) {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 1
	}
	if opts.Requests <= 0 {
		opts.Requests = 1000
	}
	if opts.Warmup <= 0 {
		opts.Warmup = 50
	}
	cfg := opts.Config
	if cfg == nil {
		dir, err := os.MkdirTemp("", "execgate-overhead-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		if cfg, err = config.Load("", []string{"EXECGATE_STATE_DIR=" + dir}); err != nil {
			return nil, err
		}
	}
	c := *cfg
	c.Server.MaxConcurrentRuns = max(c.Server.MaxConcurrentRuns, opts.Concurrency)
	tg, err := startTarget(ctx, &c, 0, nil, app.Options{Runner: app.NoopRunner{}})
	if err != nil {
		return nil, err
	}
	defer func() { _ = tg.stop(context.WithoutCancel(ctx)) }()
	return Load(ctx, LoadOptions{URL: tg.url, Token: tg.token, Body: probeBody("", ""), Concurrency: opts.Concurrency, Requests: opts.Requests, Warmup: opts.Warmup})
}

// target is an in-process gateway under load.
type target struct {
	app   *app.App
	url   string // POST /v1/execute
	token string // bearer token of the bench tenant
	dir   string // temporary dir holding the audit log
}

// startTarget starts cfg's gateway on a free loopback port with the bench
// tenant, warm jails per profile, and its audit log in a temporary dir (so
// it never contends with a running gateway's lock). opts.Config, Logger
// and Progress (when nil) are set here.
// startTarget starts a gateway of cfg with warm jails per profile, serving
// runtimes (nil: cfg's) to the bench Tenant, which may use them all.
func startTarget(ctx context.Context, cfg *config.Config, warm int, runtimes []string, opts app.Options) (_ *target, err error) {
	dir, err := os.MkdirTemp("", "execgate-bench-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	c := *cfg
	c.Listen = "127.0.0.1:0"
	tenant := Tenant()
	if len(runtimes) > 0 {
		c.Sandbox.Runtimes = runtimes
		rts := make([]any, len(runtimes))
		for i, rt := range runtimes {
			rts[i] = rt
		}
		tenant.Policy["runtimes"] = rts
	}
	c.Tenants = append(slices.Clone(c.Tenants), tenant)
	c.Sandbox.WarmPool = warm
	c.Audit.File = filepath.Join(dir, "audit.jsonl")
	opts.Config = &c
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	a, err := app.New(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := a.Start(); err != nil {
		_ = a.Stop(ctx)
		return nil, err
	}
	tg := &target{app: a, url: a.URL() + "/v1/execute", dir: dir}
	s, err := a.Signer()
	if err != nil {
		_ = tg.stop(ctx)
		return nil, fmt.Errorf("bench needs the dev HS256 key: %w", err)
	}
	if tg.token, err = s.Mint(auth.Claims{Subject: "bench", TenantID: TenantID, Roles: []string{tenancy.RoleExecutor}}, time.Hour); err != nil {
		_ = tg.stop(ctx)
		return nil, err
	}
	return tg, nil
}

// stop stops the gateway and removes its audit log.
func (t *target) stop(ctx context.Context) error {
	err := t.app.Stop(ctx)
	os.RemoveAll(t.dir)
	return err
}
