package policy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
)

// Options configure an Engine.
type Options struct {
	// Defaults holds the default policies (policies.FS): every .rego file
	// except _test.rego is compiled. Required.
	Defaults fs.FS
	// Dirs are extra policy directories layered on the defaults (modules
	// only; _test.rego files are for `execgate policy test`).
	Dirs []string
	// Bundle, when set, loads extension modules from an OPA bundle server.
	Bundle *BundleConfig
	// Logger receives reload and bundle events. Default: slog.Default().
	Logger *slog.Logger
	// Now is the clock for LoadedAt and for time.now_ns in policies.
	// Default: time.Now.
	Now func() time.Time
	// DecisionCache is the most decisions remembered per policy set (see
	// memo.go): 0 means DefaultDecisionCache, a negative number turns the
	// memo off.
	DecisionCache int
}

// Engine evaluates the decision query against the current prepared policy
// set. It is safe for concurrent use: Decide reads an atomically swapped
// pointer and never blocks on a reload.
//
// Lifecycle: New compiles (and fetches the bundle, if configured) or fails;
// Reload, Watch and ReloadOnSignal recompile, swapping only a policy set
// that compiled, so a broken edit keeps the previous one serving and shows
// in Status().LastError and the log.
type Engine struct {
	opts     Options
	log      *slog.Logger
	now      func() time.Time
	defaults []source
	bundle   *bundleLoader // nil without Options.Bundle

	current atomic.Pointer[served]

	// reloadMu serialises rebuilds (read, compile, swap).
	reloadMu sync.Mutex

	// errMu guards compileErr and bundleErr.
	errMu      sync.Mutex
	compileErr string
	bundleErr  string
}

// served is one swapped-in policy set.
type served struct {
	*compiled
	loadedAt  time.Time
	bundleRev string
}

var tracer = otel.Tracer("github.com/execgate/execgate/policy")

// New parses the defaults, fetches the bundle (if configured), compiles and
// prepares the decision query. It fails if any of these fail: at start-up
// there is no previous policy set to fall back to.
func New(ctx context.Context, opts Options) (*Engine, error) {
	if opts.Defaults == nil {
		return nil, errors.New("policy: Options.Defaults is nil (pass policies.FS)")
	}
	e := &Engine{opts: opts, log: opts.Logger, now: opts.Now}
	if e.log == nil {
		e.log = slog.Default()
	}
	if e.now == nil {
		e.now = time.Now
	}
	defaults, err := readFS(opts.Defaults, "policies/", false)
	if err != nil {
		return nil, fmt.Errorf("reading default policies: %w", err)
	}
	if len(defaults) == 0 {
		return nil, errors.New("reading default policies: no .rego modules found")
	}
	e.defaults = defaults
	if opts.Bundle != nil {
		if e.bundle, err = newBundleLoader(*opts.Bundle); err != nil {
			return nil, err
		}
		if opts.Bundle.VerificationKey == "" {
			e.log.Warn("policy bundle signatures are not verified; set policy.bundle.verification_key", "url", opts.Bundle.URL)
		}
		if _, err := e.bundle.fetch(ctx); err != nil {
			return nil, fmt.Errorf("loading policy bundle %s: %w", opts.Bundle.URL, err)
		}
	}
	if err := e.rebuild(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// Decide evaluates the policy for in. The returned Decision always carries a
// fresh ID and the policy revision, also when err is not nil, so a failed
// decision can be audited. err is ErrUndefined when the policy produced no
// decision and an *EvalError when evaluation failed or the decision is
// malformed; both mean PolicyError (500), never an allow.
func (e *Engine) Decide(ctx context.Context, in Input) (Decision, error) {
	s := e.current.Load()
	d := Decision{ID: newID(), PolicyRevision: s.revision}
	ctx, span := tracer.Start(ctx, "policy.decide")
	defer span.End()
	span.SetAttributes(
		attribute.String("execgate.decision.id", d.ID),
		attribute.String("execgate.policy.revision", s.revision),
		attribute.String("execgate.tenant.id", in.Tenant.ID),
	)
	out, remembered, err := e.decide(ctx, s, in)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "policy error")
		return d, err
	}
	out.ID, out.PolicyRevision = d.ID, d.PolicyRevision
	span.SetAttributes(
		attribute.Bool("execgate.decision.allow", out.Allow),
		attribute.Bool("execgate.decision.remembered", remembered),
	)
	return out, nil
}

// decide answers from the memo when it can and evaluates otherwise,
// remembering a successful evaluation.
func (e *Engine) decide(ctx context.Context, s *served, in Input) (d Decision, remembered bool, err error) {
	m := s.memo
	if m == nil {
		d, err = e.eval(ctx, s, in)
		return d, false, err
	}
	buf := keyBufs.Get().(*[]byte)
	b, ok := m.plan.appendKey((*buf)[:0], in)
	key := memoKey(sha256.Sum256(b))
	*buf = b
	keyBufs.Put(buf)
	if ok {
		if d, hit := m.get(key); hit {
			return d, true, nil
		}
	}
	if d, err = e.eval(ctx, s, in); err == nil && ok {
		m.put(key, d)
	}
	return d, false, err
}

func (e *Engine) eval(ctx context.Context, s *served, in Input) (Decision, error) {
	sd, err := s.seedFor(ctx, in.Tenant)
	if err != nil {
		return Decision{}, &EvalError{Err: fmt.Errorf("converting input: %w", err)}
	}
	// Cancellation without OPA's per-evaluation goroutine: ctx's done
	// signal cancels the evaluation through an AfterFunc (free when ctx
	// cannot be cancelled).
	cancel := topdown.NewCancel()
	stop := context.AfterFunc(ctx, cancel.Cancel)
	defer stop()
	// The evaluation's own cache is reused across evaluations (emptied
	// after each): OPA holds it only while Eval runs.
	vc := seedCaches.Get().(*seedCache)
	vc.seed = sd.cache
	defer func() {
		vc.seed, vc.depth = nil, 0
		vc.live.reset()
		seedCaches.Put(vc)
	}()
	rs, err := s.query.Eval(ctx,
		rego.EvalParsedInput(in.valueWith(sd.tenant)),
		rego.EvalTime(e.now()),
		rego.EvalExternalCancel(cancel),
		rego.EvalMetrics(metrics.NoOp()), // nobody reads per-evaluation metrics
		rego.EvalVirtualCache(vc),
		// Keep the result as OPA's value: decodeDecisionValue reads it
		// without a conversion to Go maps.
		rego.EvalGenerateJSON(func(t *ast.Term, _ *rego.EvalContext) (any, error) { return t, nil }),
	)
	if err != nil {
		return Decision{}, &EvalError{Err: err}
	}
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		return Decision{}, ErrUndefined
	}
	if len(rs) > 1 {
		return Decision{}, &EvalError{Err: fmt.Errorf("%w: %d results for %s", ErrMalformed, len(rs), DecisionQuery)}
	}
	t, ok := rs[0].Expressions[0].Value.(*ast.Term)
	if !ok {
		return Decision{}, &EvalError{Err: fmt.Errorf("%w: result is %T", ErrMalformed, rs[0].Expressions[0].Value)}
	}
	out, err := decodeDecisionValue(t.Value)
	if err != nil {
		return Decision{}, &EvalError{Err: err}
	}
	return out, nil
}

// seedFor returns the seed of tenant t, evaluating it on first use. A
// tenant whose data cannot be keyed gets a fresh, empty seed each time.
func (s *served) seedFor(ctx context.Context, t TenantInput) (*seed, error) {
	buf := keyBufs.Get().(*[]byte)
	defer keyBufs.Put(buf)
	key, ok := appendTenantKey((*buf)[:0], t)
	*buf = key
	if ok {
		if sd := s.seeds.get(string(key)); sd != nil {
			return sd, nil
		}
	}
	tenant, err := t.term()
	if err != nil {
		return nil, err
	}
	if !ok {
		return &seed{tenant: tenant, cache: newRefCache(0)}, nil
	}
	sd, complete := s.seedQ.newSeed(ctx, tenant)
	// A seed cut short by cancellation is used once but not kept; one
	// whose rules fail is kept (empty): the decision fails the same way.
	if complete || ctx.Err() == nil {
		s.seeds.put(string(key), sd)
	}
	return sd, nil
}

var keyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

var seedCaches = sync.Pool{New: func() any { return &seedCache{live: newRefCache(32)} }}

// Reload fetches the bundle (if configured) and recompiles the defaults,
// the directories and the latest verified bundle. On error the previous
// policy set keeps serving; the error is returned, logged and kept in
// Status().LastError until a reload succeeds.
func (e *Engine) Reload(ctx context.Context) error {
	var errs []error
	if e.bundle != nil {
		if _, err := e.fetchBundle(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := e.rebuild(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Status reports the policy set being served and the last reload error.
func (e *Engine) Status() Status {
	s := e.current.Load()
	e.errMu.Lock()
	var errs []string
	for _, m := range []string{e.compileErr, e.bundleErr} {
		if m != "" {
			errs = append(errs, m)
		}
	}
	e.errMu.Unlock()
	return Status{
		Revision:  s.revision,
		LoadedAt:  s.loadedAt,
		LastError: strings.Join(errs, "; "),
		Modules:   append([]string(nil), s.modules...),
		Bundle:    s.bundleRev,
	}
}

// rebuild reads the directories, takes the latest verified bundle, compiles
// and swaps. It records (and logs) the outcome.
func (e *Engine) rebuild(ctx context.Context) error {
	e.reloadMu.Lock()
	defer e.reloadMu.Unlock()
	c, bundleRev, err := e.build(ctx)
	e.errMu.Lock()
	if err != nil {
		e.compileErr = "reloading policies: " + err.Error()
	} else {
		e.compileErr = ""
	}
	e.errMu.Unlock()
	if err != nil {
		if prev := e.current.Load(); prev != nil {
			e.log.Error("policy reload failed; previous policies keep serving",
				"error", err.Error(), "revision", prev.revision)
		}
		return fmt.Errorf("reloading policies: %w", err)
	}
	prev := e.current.Swap(&served{compiled: c, loadedAt: e.now(), bundleRev: bundleRev})
	if prev == nil || prev.revision != c.revision {
		e.log.Info("policies loaded", "revision", c.revision, "modules", len(c.modules), "bundle", bundleRev)
		if c.memoPlan.uncacheable != "" {
			e.log.Info("policy decisions are evaluated every time: "+c.memoPlan.uncacheable, "revision", c.revision)
		} else if c.memo != nil {
			e.log.Debug("policy decisions are remembered", "revision", c.revision, "key", c.memoPlan.names)
		}
	}
	return nil
}

func (e *Engine) build(ctx context.Context) (*compiled, string, error) {
	extras, err := readDirs(e.opts.Dirs, false)
	if err != nil {
		return nil, "", err
	}
	var data map[string]any
	var tag, rev string
	if e.bundle != nil {
		if b := e.bundle.current(); b != nil {
			mods, err := bundleSources(b)
			if err != nil {
				return nil, "", err
			}
			extras = append(extras, mods...)
			data = b.Data
			rev = b.Manifest.Revision
			tag = "bundle:" + rev
		}
	}
	memoSize := e.opts.DecisionCache
	if memoSize == 0 {
		memoSize = DefaultDecisionCache
	}
	c, err := compile(ctx, e.defaults, extras, data, tag, memoSize)
	return c, rev, err
}

// fetchBundle downloads the bundle if it changed (ETag) and verifies it,
// recording the outcome in Status. changed reports a new verified bundle.
func (e *Engine) fetchBundle(ctx context.Context) (changed bool, err error) {
	changed, err = e.bundle.fetch(ctx)
	e.errMu.Lock()
	if err != nil {
		e.bundleErr = fmt.Sprintf("policy bundle %s: %v", e.bundle.cfg.URL, err)
	} else {
		e.bundleErr = ""
	}
	e.errMu.Unlock()
	if err != nil {
		e.log.Error("policy bundle download refused; previous policies keep serving",
			"url", e.bundle.cfg.URL, "error", err.Error())
		return false, fmt.Errorf("policy bundle %s: %w", e.bundle.cfg.URL, err)
	}
	return changed, nil
}

// newID returns a random UUID (version 4) for a decision.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	const hexdig = "0123456789abcdef"
	out := make([]byte, 0, 36)
	for i, x := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, hexdig[x>>4], hexdig[x&0x0f])
	}
	return string(out)
}
