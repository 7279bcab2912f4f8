package dispatch

import (
	"context"
	"crypto/rand"
	_ "embed" // enqueue.lua
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/sandbox"
)

//go:embed lua/enqueue.lua
var enqueueSrc string

var enqueueScript = redis.NewScript(enqueueSrc)

// queueRetryAfter is the Retry-After of a run refused by max_queued: the
// queue drains as executors take runs.
const queueRetryAfter = time.Second

// runBudgetSlack is how long past its timeout_ms a started run may take
// to answer (package install, jail start, kill grace, the reply's trip)
// before the gateway stops waiting and calls its executor lost.
const runBudgetSlack = 150 * time.Second

// Dispatcher is a gateway's Runner: it hands decided runs to the executor
// fleet and waits for their results. Nothing runs in the gateway. Create
// it with NewDispatcher; safe for concurrent use.
type Dispatcher struct {
	rdb redis.UniversalClient
	k   keys
	sig signer
	cfg Config
	id  string
	log *slog.Logger
	now func() time.Time
}

// Options are the optional parts of a Dispatcher or an Executor.
type Options struct {
	// KeyPrefix (default "execgate").
	KeyPrefix string
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.KeyPrefix == "" {
		o.KeyPrefix = "execgate"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// NewDispatcher returns a gateway's dispatcher over rdb, signing with key.
func NewDispatcher(rdb redis.UniversalClient, cfg Config, key []byte, opts Options) (*Dispatcher, error) {
	cfg = cfg.WithDefaults()
	if len(key) < minKeyBytes {
		return nil, fmt.Errorf("dispatch: the spec key has %d bytes, want at least %d", len(key), minKeyBytes)
	}
	opts = opts.withDefaults()
	return &Dispatcher{rdb: rdb, k: newKeys(opts.KeyPrefix), sig: signer{key}, cfg: cfg,
		id: "gw-" + newRunID()[:12], log: opts.Logger, now: opts.Now}, nil
}

// Executors are the live executors this gateway can dispatch to.
func (d *Dispatcher) Executors(ctx context.Context) ([]Announcement, error) {
	fleet, err := live(ctx, d.rdb, d.k, d.now())
	return usable(fleet), err
}

// Ready is the gateway's readiness check: an error unless executors with
// capacity are alive; else which they are.
func (d *Dispatcher) Ready(ctx context.Context) (string, error) {
	fleet, err := d.Executors(ctx)
	if err != nil {
		return "", err
	}
	if len(fleet) == 0 {
		return "", errors.New("no executor: none with capacity has a live heartbeat")
	}
	return describe(fleet), nil
}

func noExecutor(hint string, err error) *sandbox.UnavailableError {
	return &sandbox.UnavailableError{Reason: "no executor", Hint: hint, Err: err}
}

// Run dispatches spec and waits for its result. The error is a
// *sandbox.UnavailableError when nothing ran (no executor, none started
// it in time, the executor's sandbox refused it), a *quota.ExceededError
// (kind max_queued) when the tenant's queue is full (nothing queued), or
// ctx's when the caller went away (the run is then never started, or its
// result dropped).
func (d *Dispatcher) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	fleet, err := d.Executors(ctx)
	if err != nil {
		return sandbox.Result{}, noExecutor("the dispatch Redis is unreachable", err)
	}
	if len(fleet) == 0 {
		return sandbox.Result{}, noExecutor("start executors (execgate serve --role executor) against the same dispatch.redis_url", nil)
	}
	now := d.now()
	job := Job{
		V: WireVersion, RunID: newRunID(), Gateway: d.id,
		IssuedMS: now.UnixMilli(), ExpiresMS: now.Add(time.Duration(d.cfg.QueueTimeoutMS) * time.Millisecond).UnixMilli(),
		Spec: wireSpec(spec), Bridge: spec.Bridge != nil && spec.Mode != "test", Output: spec.Output != nil,
		Trace: map[string]string{},
	}
	otel.GetTextMapPropagator().Inject(ctx, propagation.MapCarrier(job.Trace))
	payload, err := json.Marshal(job)
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("encoding the job: %w", err)
	}
	if len(payload) > maxJobBytes {
		return errorResult(sandbox.ErrInvalidInput, fmt.Sprintf("the run is too large to dispatch (%d bytes, at most %d)", len(payload), maxJobBytes)), nil
	}
	if err := d.enqueue(ctx, job); err != nil {
		return sandbox.Result{}, err
	}
	if err := d.rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: d.k.runs(), MaxLen: d.cfg.MaxStreamLength, Approx: true,
		Values: []string{"job", d.sig.seal(domainJob, payload)},
	}).Err(); err != nil {
		d.dequeue(job)
		return sandbox.Result{}, noExecutor("the dispatch Redis is unreachable", fmt.Errorf("queueing the run: %w", err))
	}
	return d.await(ctx, job, spec)
}

// enqueue takes the job's place in its tenant's queue when the run's
// admission bounds it (max_queued), or refuses it.
func (d *Dispatcher) enqueue(ctx context.Context, job Job) error {
	adm, ok := quota.FromContext(ctx)
	if !ok || adm.Limits.MaxQueued <= 0 {
		return nil
	}
	n, err := enqueueScript.Run(ctx, d.rdb, []string{d.k.queued(job.Spec.TenantID)},
		job.RunID, d.cfg.QueueTimeoutMS, adm.Limits.MaxQueued).Int()
	if err != nil {
		return noExecutor("the dispatch Redis is unreachable", fmt.Errorf("queueing the run: %w", err))
	}
	if n == 0 {
		return &quota.ExceededError{Kind: quota.KindQueued, RetryAfter: queueRetryAfter, Limit: adm.Limits.MaxQueued}
	}
	return nil
}

// dequeue gives up the job's place in its tenant's queue (it will never
// start). Executors remove the runs they take themselves.
func (d *Dispatcher) dequeue(job Job) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = d.rdb.ZRem(ctx, d.k.queued(job.Spec.TenantID), job.RunID).Err()
}

// await waits for job's reply, serving its tool calls meanwhile, and
// decides ExecutorLost and expiry (see the package doc).
func (d *Dispatcher) await(ctx context.Context, job Job, spec sandbox.Spec) (sandbox.Result, error) {
	runID := job.RunID
	listen := []string{d.k.reply(runID)}
	var bridges sync.WaitGroup
	var bsem chan struct{}
	if job.Bridge {
		listen = append(listen, d.k.bridge(runID))
		bsem = make(chan struct{}, maxBridgeInflight)
	}
	if job.Output {
		listen = append(listen, d.k.output(runID))
	}
	bctx, cancelBridges := context.WithCancel(context.WithoutCancel(ctx))
	defer func() { cancelBridges(); bridges.Wait() }()

	poll := d.cfg.heartbeat()
	expires := time.UnixMilli(job.ExpiresMS)
	var executor string
	var startedAt time.Time
	for {
		if ctx.Err() != nil {
			return d.cancelled(ctx, job, spec)
		}
		kv, err := d.rdb.BLPop(ctx, max(poll, time.Second), listen...).Result() // go-redis rounds up to 1 s
		switch {
		case err == nil && kv[0] == d.k.bridge(runID):
			select {
			case bsem <- struct{}{}:
			case <-ctx.Done():
				continue
			}
			bridges.Add(1)
			go func(req string) {
				defer func() { <-bsem; bridges.Done() }()
				d.serveBridge(bctx, spec.Bridge, runID, req)
			}(kv[1])
			continue
		case err == nil && kv[0] == d.k.output(runID):
			deliverOutput(spec.Output, kv[1])
			continue
		case err == nil:
			if job.Output {
				d.drainOutput(ctx, spec.Output, d.k.output(runID))
			}
			return d.reply(job, spec, kv[1])
		case errors.Is(err, redis.Nil):
		case ctx.Err() != nil:
			continue // answered as cancelled above
		default:
			d.log.Warn("dispatch: waiting for a reply", "run_id", runID, "err", err)
			select { // Redis is down: look again a beat later
			case <-time.After(poll):
			case <-ctx.Done():
			}
		}
		// No reply within a beat: who holds the run?
		if executor == "" {
			who, err := d.rdb.Get(ctx, d.k.started(runID)).Result()
			switch {
			case errors.Is(err, redis.Nil):
				if d.now().After(expires) {
					ok, err := d.rdb.SetNX(ctx, d.k.started(runID), startedExpired, d.markerTTL(spec)).Result()
					if err == nil && ok {
						d.dequeue(job)
						return sandbox.Result{}, noExecutor("no executor started the run within dispatch.queue_timeout_ms; it was not run", nil)
					}
				}
				continue
			case err != nil:
				continue
			case strings.HasPrefix(who, "gateway:"): // our own marker: it never ran
				return sandbox.Result{}, noExecutor("no executor started the run within dispatch.queue_timeout_ms; it was not run", nil)
			}
			executor, startedAt = who, d.now()
		}
		alive, err := d.rdb.Exists(ctx, d.k.executor(executor)).Result()
		if err != nil {
			continue
		}
		if alive == 0 || d.now().Sub(startedAt) > time.Duration(spec.Limits.TimeoutMS)*time.Millisecond+runBudgetSlack {
			// A reply may have landed just before the executor went.
			if v, err := d.rdb.LPop(ctx, d.k.reply(runID)).Result(); err == nil {
				return d.reply(job, spec, v)
			}
			d.log.Error("dispatch: executor lost during the run", "run_id", runID, "execution_id", spec.ExecutionID,
				"tenant_id", spec.TenantID, "executor", executor, "heartbeat_alive", alive != 0)
			return lostResult(spec, executor, d.now().Sub(startedAt)), nil
		}
	}
}

// reply decodes a reply value. A reply that does not verify is a lost run:
// something ran, but what it answered cannot be trusted.
func (d *Dispatcher) reply(job Job, spec sandbox.Spec, v string) (sandbox.Result, error) {
	if int64(len(v)) > 2*maxReplyBytes(spec.Limits) {
		return lostResult(spec, "", 0), nil
	}
	payload, err := d.sig.open(domainReply, v)
	var r Reply
	if err == nil {
		err = json.Unmarshal(payload, &r)
	}
	if err == nil && (r.RunID != job.RunID || r.V != WireVersion) {
		err = errors.New("reply for another run")
	}
	if err != nil {
		d.log.Error("dispatch: refusing a reply", "run_id", job.RunID, "err", err)
		return lostResult(spec, "", 0), nil
	}
	if r.Unavailable != nil {
		return sandbox.Result{}, &sandbox.UnavailableError{Reason: r.Unavailable.Reason + " (executor " + r.Executor + ")", Hint: r.Unavailable.Hint, Log: r.Unavailable.Log}
	}
	if r.Result == nil {
		return lostResult(spec, r.Executor, 0), nil
	}
	res := *r.Result
	res.DeniedSyscall = r.DeniedSyscall
	// The calls are the gateway's own record, never the executor's word.
	res.ToolCalls = nil
	if rec, ok := spec.Bridge.(sandbox.ToolCallRecorder); ok && job.Bridge {
		res.ToolCalls = rec.ToolCalls()
	}
	return res, nil
}

// cancelled ends a run whose caller went away or cancelled it
// (Cancelled; Timeout when the caller's deadline passed). A run no executor
// started never will: its marker says abandoned, and nothing was used. A
// started one is killed on its executor within a beat, and its reply —
// with the usage the kernel measured — is awaited a little and answered;
// the executor's word on the outcome is kept only for its usage. Without a
// reply the whole cpu_ms reservation is charged, as for a lost executor: a
// tenant cannot make a run free by cancelling it.
func (d *Dispatcher) cancelled(ctx context.Context, job Job, spec sandbox.Spec) (sandbox.Result, error) {
	typ := sandbox.ErrCancelled
	if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		typ = sandbox.ErrTimeout
	}
	wait := 3*d.cfg.heartbeat() + 2*time.Second
	bg, cancel := context.WithTimeout(context.Background(), wait+time.Second)
	defer cancel()
	pipe := d.rdb.TxPipeline()
	nx := pipe.SetNX(bg, d.k.started(job.RunID), startedAbandoned, time.Hour)
	pipe.Set(bg, d.k.cancel(job.RunID), "1", replyTTL)
	pipe.ZRem(bg, d.k.queued(job.Spec.TenantID), job.RunID) // its max_queued place
	_, _ = pipe.Exec(bg)
	if ok, err := nx.Result(); err == nil && ok {
		return errorResult(typ, "the run was cancelled before any executor started it; it was not run"), nil
	}
	var res sandbox.Result
	kv, err := d.rdb.BLPop(bg, wait, d.k.reply(job.RunID)).Result()
	if err == nil {
		if job.Output {
			d.drainOutput(bg, spec.Output, d.k.output(job.RunID))
		}
		res, err = d.reply(job, spec, kv[1])
	}
	if err != nil || res.Error == nil || res.Error.Type == ErrExecutorLost {
		res = lostResult(spec, "", 0)
	}
	res.Status, res.Result = sandbox.StatusError, json.RawMessage("null")
	res.Error = &sandbox.ErrorInfo{Type: typ, Message: "the run was cancelled by its caller and stopped on its executor"}
	return res, nil
}

// markerTTL keeps a started marker past any executor's look at the job.
func (d *Dispatcher) markerTTL(spec sandbox.Spec) time.Duration {
	return time.Duration(d.cfg.QueueTimeoutMS)*time.Millisecond + time.Duration(spec.Limits.TimeoutMS)*time.Millisecond + runBudgetSlack
}

// ErrExecutorLost is the outcome type of a run whose executor died (or
// stopped answering) while it ran: it is never run again.
const ErrExecutorLost = sandbox.ErrExecutorLost

// lostResult is the outcome of a run whose executor was lost. Its CPU is
// unknown, so the whole reservation (cpu_ms) is charged.
func lostResult(spec sandbox.Spec, executor string, ran time.Duration) sandbox.Result {
	msg := "the executor running this run was lost before it answered; the run is not run again"
	if executor != "" {
		msg = "executor " + clip(executor, maxIDBytes) + " was lost while running this run (its heartbeat expired); the run is not run again"
	}
	r := errorResult(ErrExecutorLost, msg)
	r.Usage = sandbox.Usage{WallMS: ran.Milliseconds(), CPUMS: spec.Limits.CPUMS}
	return r
}

func errorResult(typ, msg string) sandbox.Result {
	return sandbox.Result{Status: sandbox.StatusError, Result: json.RawMessage("null"), Error: &sandbox.ErrorInfo{Type: typ, Message: msg}}
}

// newRunID is 128 random bits, hex.
func newRunID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return hex.EncodeToString(b[:])
}
