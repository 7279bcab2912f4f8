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
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/runtimes"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/secrets"
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

	refused atomic.Int64 // frames refused (Refused)
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

// Runtimes are the runtimes the live executors serve (GET /v1/runtimes
// in the gateway role): each as the first executor announcing it describes
// it, available when one serves it, sorted by name.
func (d *Dispatcher) Runtimes(ctx context.Context) ([]runtimes.Info, error) {
	fleet, err := d.Executors(ctx)
	if err != nil {
		return nil, noExecutor("the dispatch Redis is unreachable", err)
	}
	by := map[string]runtimes.Info{}
	for _, a := range fleet {
		for _, rt := range a.Runtimes {
			if cur, ok := by[rt.Name]; !ok || (!cur.Available && rt.Available) {
				if rt.Packages == nil {
					rt.Packages = []runtimes.Package{}
				}
				by[rt.Name] = rt
			}
		}
	}
	out := make([]runtimes.Info, 0, len(by))
	for _, rt := range by {
		out = append(out, rt)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// servedBy reports whether an executor of fleet serves target.
func servedBy(fleet []Announcement, target string) bool {
	for _, a := range fleet {
		if a.serves(target) {
			return true
		}
	}
	return false
}

// fleetTargets are the targets fleet serves, sorted ("none" when it
// serves none).
func fleetTargets(fleet []Announcement) []string {
	seen := map[string]bool{}
	var out []string
	for _, a := range fleet {
		for _, t := range a.targets() {
			if !seen[t] {
				seen[t] = true
				out = append(out, t)
			}
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		return []string{"none"}
	}
	return out
}

func noExecutor(hint string, err error) *sandbox.UnavailableError {
	return &sandbox.UnavailableError{Reason: "no executor", Hint: hint, Err: err}
}

// Run dispatches spec and waits for its result. The error is a
// *sandbox.UnavailableError when nothing ran (no executor, none started
// it in time, the executor's sandbox refused it), a *quota.ExceededError
// (kind max_queued) when the tenant's queue is full (nothing queued), or a
// *sandbox.OutcomeUnknownError when an executor started it and its answer
// was lost (the dispatch Redis lost data): it may have run.
func (d *Dispatcher) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	fleet, err := d.Executors(ctx)
	if err != nil {
		return sandbox.Result{}, noExecutor("the dispatch Redis is unreachable", err)
	}
	if len(fleet) == 0 {
		return sandbox.Result{}, noExecutor("start executors (execgate serve --role executor) against the same dispatch.redis_url", nil)
	}
	tgt := target(spec)
	if !servedBy(fleet, tgt) {
		return sandbox.Result{}, &sandbox.UnavailableError{
			Reason: fmt.Sprintf("no executor serves runtime %q (the live executors serve %s)", tgt, strings.Join(fleetTargets(fleet), ", ")),
			Hint:   "start an executor whose sandbox.runtimes lists it",
		}
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
		Stream: d.k.runsFor(tgt), MaxLen: d.cfg.MaxStreamLength, Approx: true,
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

// watch is a gateway's view of one dispatched run while it waits for it.
// The gateway alone decides which executor runs it: an executor runs
// nothing before the gateway has confirmed its start request, and the
// gateway confirms one executor per run, remembering which in memory —
// not in Redis, whose data may be lost (a restart without persistence, a
// failover to a lagging replica) — so "nothing was run" is said only when
// this gateway never confirmed a start, and never will (it stops
// listening when it answers).
type watch struct {
	runID       string
	sig         signer // the run's (frames.go)
	executor    string // the executor confirmed ("": none yet)
	confirmedAt time.Time
	leaseGone   time.Time // when the executor's lease on the run was first seen missing (zero: seen)
	bridgeSeq   seqWindow
	outputSeq   uint64
	refused     int // frames of the run refused
	// secrets are the run's secret values, sealed for the executor
	// confirmed in its confirm frame (secrets.go).
	secrets []secrets.Value
}

// maxRefusalsRecorded bounds the refusals of one run logged and recorded
// (all are counted).
const maxRefusalsRecorded = 16

// maxStartFrame bounds a start frame on the wire.
const maxStartFrame = 1024

// await waits for job's reply, confirming its start and serving its tool
// calls and output meanwhile, and decides ExecutorLost, OutcomeUnknown and
// expiry (see the package doc).
func (d *Dispatcher) await(ctx context.Context, job Job, spec sandbox.Spec) (sandbox.Result, error) {
	runID := job.RunID
	w := &watch{runID: runID, sig: d.sig.forRun(runID), secrets: spec.Secrets}
	listen := []string{d.k.reply(runID), d.k.start(runID)}
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
	for {
		if ctx.Err() != nil {
			return d.cancelled(ctx, w, job, spec)
		}
		kv, err := d.rdb.BLPop(ctx, max(poll, time.Second), listen...).Result() // go-redis rounds up to 1 s
		switch {
		case err == nil && kv[0] == d.k.start(runID):
			d.confirm(ctx, w, kv[1])
			continue
		case err == nil && kv[0] == d.k.bridge(runID):
			req, err := w.openBridgeRequest(kv[1])
			if err != nil {
				d.refuseFrame(w, "bridge", err)
				continue
			}
			select {
			case bsem <- struct{}{}:
			case <-ctx.Done():
				continue
			}
			bridges.Add(1)
			go func() {
				defer func() { <-bsem; bridges.Done() }()
				d.serveBridge(bctx, spec.Bridge, w.sig, req)
			}()
			continue
		case err == nil && kv[0] == d.k.output(runID):
			d.deliverOutput(w, spec.Output, kv[1])
			continue
		case err == nil:
			if res, err, ok := d.reply(w, job, spec, kv[1]); ok {
				if job.Output {
					d.drainOutput(ctx, w, spec.Output)
				}
				return res, err
			}
			continue
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
		if w.executor == "" {
			// No start confirmed, none will be once this returns: proof,
			// whatever Redis kept, that the run never ran.
			if d.now().After(expires) {
				d.withdraw(job, startedExpired)
				return sandbox.Result{}, noExecutor("no executor started the run within dispatch.queue_timeout_ms; it was not run", nil)
			}
			continue
		}
		if res, err, done := d.held(ctx, w, job, spec); done {
			return res, err
		}
	}
}

// confirm answers one start request: the first executor that asks is
// confirmed, any other is told no (gateway side).
func (d *Dispatcher) confirm(ctx context.Context, w *watch, raw string) {
	var f startFrame
	err := openFrame(w.sig, domainStart, raw, maxStartFrame, &f)
	if err == nil && f.RunID != w.runID {
		err = errors.New("frame of another run")
	}
	if err == nil {
		err = validID(f.Executor)
	}
	if err != nil {
		d.refuseFrame(w, "start", err)
		return
	}
	ok := w.executor == "" || w.executor == f.Executor
	var sealed *sealedSecrets
	if ok && len(w.secrets) > 0 {
		// The values go to this executor alone, sealed to its key.
		if sealed, err = sealSecrets(w.secrets, f.SecretsKey, w.runID, f.Executor); err != nil {
			d.refuseFrame(w, "start", fmt.Errorf("a run with secrets: %w", err))
			ok = false
		}
	}
	switch {
	case ok && w.executor == "":
		w.executor, w.confirmedAt = f.Executor, d.now()
		d.log.Debug("dispatch: start confirmed", "run_id", w.runID, "executor", f.Executor)
	case !ok && w.executor != f.Executor && w.executor != "":
		d.log.Warn("dispatch: a second executor asked to start a run; refused", "run_id", w.runID, "executor", f.Executor, "confirmed", w.executor)
	}
	v, err := sealFrame(w.sig, domainConfirm, confirmFrame{frameHead: frameHead{RunID: w.runID, Executor: f.Executor}, OK: ok, Secrets: sealed})
	if err != nil {
		return
	}
	if err := push(ctx, d.rdb, d.k.confirm(w.runID, f.Executor), v, bridgeKeyTTL); err != nil {
		// The executor gives up without it and says so (a reply of
		// nothing run); until then the run counts as started.
		d.log.Warn("dispatch: confirming a start", "run_id", w.runID, "executor", f.Executor, "err", err)
	}
}

// held looks at a confirmed run that has not answered within a beat: is
// its executor still holding it (its lease on the run, renewed every
// beat)? done when the run has an answer: its late reply, ExecutorLost (the
// executor is gone, or the run took too long), or OutcomeUnknown (the
// executor lives but no longer holds the run, and its reply never came:
// Redis lost it).
func (d *Dispatcher) held(ctx context.Context, w *watch, job Job, spec sandbox.Spec) (sandbox.Result, error, bool) {
	n, err := d.rdb.Exists(ctx, d.k.running(w.runID)).Result()
	if err != nil {
		return sandbox.Result{}, nil, false // Redis is down: look again later
	}
	now := d.now()
	ran := now.Sub(w.confirmedAt)
	over := ran > time.Duration(spec.Limits.TimeoutMS)*time.Millisecond+runBudgetSlack
	if !over {
		if n > 0 {
			w.leaseGone = time.Time{}
			return sandbox.Result{}, nil, false
		}
		// Missing once proves little (Redis may have just lost it; the
		// executor writes it again within a beat): missing for as long as
		// an executor lives without a beat does.
		if w.leaseGone.IsZero() {
			w.leaseGone = now
		}
		if now.Sub(w.leaseGone) < d.cfg.deadAfter() {
			return sandbox.Result{}, nil, false
		}
	}
	// A reply may have landed just before.
	if v, err := d.rdb.LPop(ctx, d.k.reply(w.runID)).Result(); err == nil {
		if res, err, ok := d.reply(w, job, spec, v); ok {
			return res, err, true
		}
	}
	alive, err := d.rdb.Exists(ctx, d.k.executor(w.executor)).Result()
	if err != nil {
		return sandbox.Result{}, nil, false
	}
	// Whatever it still runs is stopped (the executor looks once a beat).
	_ = d.rdb.Set(ctx, d.k.cancel(w.runID), "1", replyTTL).Err()
	if alive == 0 || over {
		d.log.Error("dispatch: executor lost during the run", "run_id", w.runID, "execution_id", spec.ExecutionID,
			"tenant_id", spec.TenantID, "executor", w.executor, "heartbeat_alive", alive != 0)
		return lostResult(spec, w.executor, ran), nil, true
	}
	d.log.Error("dispatch: outcome unknown: the run's executor lives but no longer holds the run, and its reply never came (the dispatch Redis lost data?)",
		"run_id", w.runID, "execution_id", spec.ExecutionID, "tenant_id", spec.TenantID, "executor", w.executor)
	return sandbox.Result{}, &sandbox.OutcomeUnknownError{Executor: w.executor,
		Reason: "executor " + clip(w.executor, maxIDBytes) + " started the run, but its answer was lost (the dispatch Redis lost its data?); the run may have run, and is not run again"}, true
}

// withdraw leaves a marker so no executor takes the job, and gives up its
// place in its tenant's queue. A courtesy: the run is never run whatever
// Redis keeps, as no start of it is confirmed any more.
func (d *Dispatcher) withdraw(job Job, marker string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	pipe := d.rdb.TxPipeline()
	pipe.SetNX(ctx, d.k.started(job.RunID), marker, d.markerTTL(job.Spec.Limits))
	pipe.Set(ctx, d.k.cancel(job.RunID), "1", replyTTL) // an executor waiting for a confirmation stops
	pipe.ZRem(ctx, d.k.queued(job.Spec.TenantID), job.RunID)
	_, _ = pipe.Exec(ctx)
}

// refuseFrame records a value of a run's lists that is not the run's
// (gateway side): counted, and the first few logged and added to the
// refused stream.
func (d *Dispatcher) refuseFrame(w *watch, frame string, err error) {
	d.refused.Add(1)
	w.refused++
	if w.refused > maxRefusalsRecorded {
		return
	}
	recordRefusal(context.Background(), d.rdb, d.k, d.log, w.runID, "gateway", d.id, frame, err)
}

// Refused is how many frames (start requests, tool calls, output chunks,
// replies) this gateway refused: forged, altered, replayed or not from
// the executor it confirmed.
func (d *Dispatcher) Refused() int64 { return d.refused.Load() }

// reply decodes a reply value. ok is false when it is refused (forged,
// altered, for another run, or not from the executor confirmed): the
// gateway waits on for the genuine one.
func (d *Dispatcher) reply(w *watch, job Job, spec sandbox.Spec, v string) (sandbox.Result, error, bool) {
	var r Reply
	var err error
	if int64(len(v)) > 2*maxReplyBytes(spec.Limits) {
		err = errFrameTooLarge
	} else {
		var payload []byte
		if payload, err = d.sig.open(domainReply, v); err == nil {
			err = json.Unmarshal(payload, &r)
		}
	}
	switch {
	case err != nil:
	case r.RunID != job.RunID || r.V != WireVersion:
		err = errors.New("reply for another run")
	case w.executor == "" || r.Executor != w.executor:
		err = errors.New("reply from an executor whose start was not confirmed")
	}
	if err != nil {
		d.refuseFrame(w, "reply", err)
		return sandbox.Result{}, nil, false
	}
	if r.Unavailable != nil {
		return sandbox.Result{}, &sandbox.UnavailableError{Reason: r.Unavailable.Reason + " (executor " + r.Executor + ")", Hint: r.Unavailable.Hint, Log: r.Unavailable.Log}, true
	}
	if r.Result == nil {
		return lostResult(spec, r.Executor, 0), nil, true
	}
	res := *r.Result
	res.DeniedSyscall = r.DeniedSyscall
	// The calls are the gateway's own record, never the executor's word.
	res.ToolCalls = nil
	if rec, ok := spec.Bridge.(sandbox.ToolCallRecorder); ok && job.Bridge {
		res.ToolCalls = rec.ToolCalls()
	}
	return res, nil, true
}

// cancelled ends a run whose caller went away or cancelled it
// (Cancelled; Timeout when the caller's deadline passed). A run whose
// start this gateway never confirmed never runs: nothing was used. A
// started one is killed on its executor within a beat, and its reply —
// with the usage the kernel measured — is awaited a little and answered;
// the executor's word on the outcome is kept only for its usage. Without a
// reply the whole cpu_ms reservation is charged, as for a lost executor: a
// tenant cannot make a run free by cancelling it.
func (d *Dispatcher) cancelled(ctx context.Context, w *watch, job Job, spec sandbox.Spec) (sandbox.Result, error) {
	typ := sandbox.ErrCancelled
	if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		typ = sandbox.ErrTimeout
	}
	if w.executor == "" {
		d.withdraw(job, startedAbandoned)
		return errorResult(typ, "the run was cancelled before any executor started it; it was not run"), nil
	}
	wait := 3*d.cfg.heartbeat() + 2*time.Second
	bg, cancel := context.WithTimeout(context.Background(), wait+time.Second)
	defer cancel()
	_ = d.rdb.Set(bg, d.k.cancel(job.RunID), "1", replyTTL).Err()
	res := lostResult(spec, "", 0)
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); {
		kv, err := d.rdb.BLPop(bg, max(time.Until(deadline), time.Second), d.k.reply(job.RunID)).Result()
		if err != nil {
			break
		}
		got, gerr, ok := d.reply(w, job, spec, kv[1])
		if !ok {
			continue
		}
		if job.Output {
			d.drainOutput(bg, w, spec.Output)
		}
		if gerr == nil && got.Error != nil && got.Error.Type != ErrExecutorLost {
			res = got
		}
		break
	}
	res.Status, res.Result = sandbox.StatusError, json.RawMessage("null")
	res.Error = &sandbox.ErrorInfo{Type: typ, Message: "the run was cancelled by its caller and stopped on its executor"}
	return res, nil
}

// markerTTL keeps a started marker past any executor's look at the job.
func (d *Dispatcher) markerTTL(l sandbox.Limits) time.Duration {
	return markerTTL(d.cfg, l)
}

func markerTTL(cfg Config, l sandbox.Limits) time.Duration {
	return time.Duration(cfg.QueueTimeoutMS)*time.Millisecond + time.Duration(l.TimeoutMS)*time.Millisecond + runBudgetSlack
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
