package dispatch

import (
	"context"
	"crypto/ecdh"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/runtimes"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/secrets"
)

// Runner runs one spec in the executor's sandbox (*sandbox.Runner).
type Runner interface {
	Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error)
}

// ExecutorOptions configure an Executor.
type ExecutorOptions struct {
	Options
	// Slots is how many runs it runs at once (>= 1).
	Slots int
	// Version is the build's version, announced.
	Version string
	// Runtimes are the runtimes it serves, announced (the gateways route
	// runs and resolve requirements by them); it reads the run streams of
	// the available ones, and Deno's when one carries Deno. Default: the
	// default Python runtime, available, without Deno or a platform.
	Runtimes []runtimes.Info
}

// TracerName names the executor's tracer.
const TracerName = "github.com/execgate/execgate/dispatch"

// replyTTL keeps an unread reply (the gateway is gone) this long.
const replyTTL = 5 * time.Minute

// Executor reads decided runs from the stream and runs them in its
// sandbox, at most once each (see the package doc). Create it with
// NewExecutor, then Start; Stop stops reading, lets the runs in flight
// finish and withdraws its heartbeat.
type Executor struct {
	rdb   redis.UniversalClient
	k     keys
	sig   signer
	cfg   Config
	id    string
	run   Runner
	opts  ExecutorOptions
	log   *slog.Logger
	now   func() time.Time
	slots chan struct{}
	busy  atomic.Int64

	// Counters for /metrics and tests.
	ran, refused, skipped atomic.Int64

	mu   sync.Mutex          // guards held
	held map[string]struct{} // run ids it runs: their leases are renewed every beat

	startedMS int64
	stop      context.CancelFunc // ends the read and heartbeat loops
	loops     sync.WaitGroup     // the read and heartbeat loops
	runs      sync.WaitGroup     // runs in flight
	runCtx    context.Context    // the runs' context; cancelled when Stop's grace ends
	killRuns  context.CancelFunc
}

// NewExecutor returns an executor running jobs with run.
func NewExecutor(rdb redis.UniversalClient, cfg Config, key []byte, run Runner, opts ExecutorOptions) (*Executor, error) {
	cfg = cfg.WithDefaults()
	if len(key) < minKeyBytes {
		return nil, fmt.Errorf("dispatch: the spec key has %d bytes, want at least %d", len(key), minKeyBytes)
	}
	if opts.Slots < 1 {
		return nil, errors.New("dispatch: an executor needs at least one slot")
	}
	if len(opts.Runtimes) == 0 {
		opts.Runtimes = []runtimes.Info{{Name: limits.DefaultRuntime, Available: true, Packages: []runtimes.Package{}}}
	}
	if len(targetsOf(opts.Runtimes)) == 0 {
		return nil, errors.New("dispatch: an executor needs an available runtime")
	}
	opts.Options = opts.Options.withDefaults()
	id := cfg.ExecutorID
	if id == "" {
		host, _ := os.Hostname()
		id = fmt.Sprintf("%s-%d-%s", strings.NewReplacer(" ", "_", "{", "_", "}", "_").Replace(clip(host, 64)), os.Getpid(), newRunID()[:6])
	}
	if err := validID(id); err != nil {
		return nil, fmt.Errorf("dispatch.executor_id: %w", err)
	}
	return &Executor{rdb: rdb, k: newKeys(opts.KeyPrefix), sig: signer{key}, cfg: cfg, id: id, run: run, opts: opts,
		log: opts.Logger.With("executor", id), now: opts.Now, slots: make(chan struct{}, opts.Slots),
		held: map[string]struct{}{}}, nil
}

// ID is the executor's id.
func (e *Executor) ID() string { return e.id }

// Stats are the executor's counters: runs run, entries refused (forged,
// altered, expired, malformed), entries skipped (started elsewhere).
func (e *Executor) Stats() (ran, refused, skipped int64) {
	return e.ran.Load(), e.refused.Load(), e.skipped.Load()
}

// Start creates the consumer group if needed, announces the executor and
// starts reading.
func (e *Executor) Start(ctx context.Context) error {
	if err := e.ensureGroup(ctx); err != nil {
		return err
	}
	e.startedMS = e.now().UnixMilli()
	if err := e.beat(ctx); err != nil {
		return fmt.Errorf("announcing the executor: %w", err)
	}
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	e.stop = stop
	e.runCtx, e.killRuns = context.WithCancel(context.WithoutCancel(ctx))
	e.loops.Add(2)
	go func() { defer e.loops.Done(); e.heartbeat(bg) }()
	go func() { defer e.loops.Done(); e.read(bg) }()
	e.log.Info("dispatch: executor started", "slots", e.opts.Slots, "serves", targetsOf(e.opts.Runtimes))
	return nil
}

// Stop stops taking runs, waits for the runs in flight until ctx ends
// (then kills them), and withdraws the heartbeat.
func (e *Executor) Stop(ctx context.Context) error {
	if e.stop == nil {
		return nil
	}
	e.stop()
	e.loops.Wait()
	done := make(chan struct{})
	go func() { e.runs.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		e.killRuns()
		<-done
		err = fmt.Errorf("draining runs: %w", ctx.Err())
	}
	e.killRuns()
	wctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	pipe := e.rdb.TxPipeline()
	pipe.ZRem(wctx, e.k.executors(), e.id)
	pipe.Del(wctx, e.k.executor(e.id))
	_, _ = pipe.Exec(wctx)
	return err
}

// streams are the run streams the executor reads: one per target it serves.
func (e *Executor) streams() []string {
	var out []string
	for _, t := range targetsOf(e.opts.Runtimes) {
		out = append(out, e.k.runsFor(t))
	}
	return out
}

func (e *Executor) ensureGroup(ctx context.Context) error {
	for _, stream := range e.streams() {
		err := e.rdb.XGroupCreateMkStream(ctx, stream, group, "0").Err()
		if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") { // Redis' error code, across a process boundary
			return fmt.Errorf("creating the executors' consumer group on %s: %w", stream, err)
		}
	}
	return nil
}

// languages are what the executor's runtimes run.
func (e *Executor) languages() []string {
	langs := []string{sandbox.LanguagePython}
	for _, t := range targetsOf(e.opts.Runtimes) {
		if t == denoTarget {
			langs = append(langs, sandbox.LanguageJavaScript, sandbox.LanguageTypeScript)
		}
	}
	return langs
}

// beat renews the executor's heartbeat.
func (e *Executor) beat(ctx context.Context) error {
	now := e.now()
	a := Announcement{
		ID: e.id, Slots: e.opts.Slots, Busy: int(e.busy.Load()), Languages: e.languages(), Profiles: []string{"jail"},
		HarnessProtocol: jaillayout.ProtocolVersion, Wire: WireVersion, Version: e.opts.Version,
		Runtimes:  e.opts.Runtimes,
		StartedMS: e.startedMS, BeatMS: now.UnixMilli(),
	}
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	dead := e.cfg.deadAfter()
	pipe := e.rdb.TxPipeline()
	pipe.Set(ctx, e.k.executor(e.id), b, dead)
	pipe.ZAdd(ctx, e.k.executors(), redis.Z{Score: float64(now.Add(dead).UnixMilli()), Member: e.id})
	pipe.ZRemRangeByScore(ctx, e.k.executors(), "-inf", fmt.Sprint(now.UnixMilli()-1))
	e.mu.Lock()
	for runID := range e.held { // at most Slots
		pipe.Set(ctx, e.k.running(runID), e.id, dead)
	}
	e.mu.Unlock()
	_, err = pipe.Exec(ctx)
	return err
}

// hold starts (or, with on false, ends) the executor's lease on a run it
// runs: the gateway that owns the run takes a lease missing for 3 beats
// as the run no longer held (see Dispatcher.held).
func (e *Executor) hold(ctx context.Context, runID string, on bool) {
	e.mu.Lock()
	if on {
		e.held[runID] = struct{}{}
	} else {
		delete(e.held, runID)
	}
	e.mu.Unlock()
	if on {
		_ = e.rdb.Set(ctx, e.k.running(runID), e.id, e.cfg.deadAfter()).Err() // else the next beat writes it
	}
}

func (e *Executor) heartbeat(ctx context.Context) {
	t := time.NewTicker(e.cfg.heartbeat())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := e.beat(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("dispatch: heartbeat failed", "err", err)
		}
	}
}

// entry is a stream entry and the stream it was read from.
type entry struct {
	stream string
	msg    redis.XMessage
}

// read takes one entry per free slot: first entries another executor read
// but never started (XAUTOCLAIM, at most once a beat, on each stream),
// then new ones from every stream it reads. One read may return an entry
// per stream: each waits for a slot of its own before it runs.
func (e *Executor) read(ctx context.Context) {
	var lastClaim time.Time
	streams := e.streams()
	for {
		select {
		case e.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		var got []entry
		var err error
		if e.now().Sub(lastClaim) >= e.cfg.heartbeat() {
			lastClaim = e.now()
			for _, stream := range streams {
				msgs, _, cerr := e.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
					Stream: stream, Group: group, Consumer: e.id, MinIdle: e.cfg.deadAfter(), Start: "0-0", Count: 1,
				}).Result()
				if cerr != nil && ctx.Err() == nil && !errors.Is(cerr, redis.Nil) {
					e.log.Warn("dispatch: claiming abandoned entries", "stream", stream, "err", cerr)
				}
				if len(msgs) > 0 {
					got = append(got, entry{stream, msgs[0]})
					break // one per slot
				}
			}
		}
		if len(got) == 0 {
			args := make([]string, 0, 2*len(streams))
			args = append(args, streams...)
			for range streams {
				args = append(args, ">")
			}
			var res []redis.XStream
			res, err = e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group: group, Consumer: e.id, Streams: args, Count: 1, Block: e.cfg.heartbeat(),
			}).Result()
			for _, s := range res {
				for _, m := range s.Messages {
					got = append(got, entry{s.Stream, m})
				}
			}
		}
		if len(got) == 0 {
			<-e.slots
			if err != nil && !errors.Is(err, redis.Nil) && ctx.Err() == nil {
				if strings.HasPrefix(err.Error(), "NOGROUP") { // a stream was deleted: make it again
					_ = e.ensureGroup(ctx)
					continue
				}
				e.log.Warn("dispatch: reading the run streams", "err", err)
				select { // Redis is down: try again a beat later
				case <-time.After(e.cfg.heartbeat()):
				case <-ctx.Done():
				}
			}
			continue
		}
		for i, en := range got {
			if i > 0 {
				// Read, so this executor's: it runs once a slot is free
				// (or, stopping, leaves it pending for another to claim).
				select {
				case e.slots <- struct{}{}:
				case <-ctx.Done():
					return
				}
			}
			e.runs.Add(1)
			e.busy.Add(1)
			go func(en entry) {
				defer func() { e.busy.Add(-1); <-e.slots; e.runs.Done() }()
				e.handle(en)
			}(en)
		}
	}
}

// handle verifies one entry, takes it (SET NX) and runs it.
func (e *Executor) handle(en entry) {
	ctx := e.runCtx
	m := en.msg
	job, why := e.verify(m)
	if why == "" && e.k.runsFor(target(job.Spec.spec())) != en.stream {
		why = "the job is not for this stream's runtime"
	}
	if why != "" {
		e.refuse(ctx, en.stream, m.ID, job.RunID, why)
		return
	}
	// Taken or not, the run leaves its tenant's queue (max_queued).
	take := e.rdb.Pipeline()
	nx := take.SetNX(ctx, e.k.started(job.RunID), e.id, e.markerTTL(job))
	take.ZRem(ctx, e.k.queued(job.Spec.TenantID), job.RunID) // the job is signed: the tenant id is the gateway's
	_, _ = take.Exec(ctx)
	ok, err := nx.Result()
	if err != nil {
		// Not taken: left pending, another executor (or this one) claims
		// it after 3 beats.
		e.log.Warn("dispatch: marking a run started", "run_id", job.RunID, "err", err)
		return
	}
	e.done(ctx, en.stream, m.ID)
	if !ok {
		e.skipped.Add(1)
		e.log.Info("dispatch: run already taken; not run", "run_id", job.RunID, "stream_id", m.ID)
		return
	}
	rsig := e.sig.forRun(job.RunID)
	// A run with secrets gets their values sealed to a key of its own
	// (secrets.go); the private key lives in this call only.
	var secretKey *ecdh.PrivateKey
	if len(job.Spec.Secrets) > 0 {
		if secretKey, err = secretKeyPair(); err != nil {
			// Never started: the gateway answers the run unavailable
			// once it expires.
			e.skipped.Add(1)
			e.log.Error("dispatch: making a key for a run's secrets; not run", "run_id", job.RunID, "err", err)
			return
		}
	}
	answer, sealed := e.confirmStart(ctx, job, rsig, secretKey)
	switch answer {
	case startRefused:
		e.skipped.Add(1)
		return
	case startUnconfirmed:
		e.skipped.Add(1)
		e.sendReply(ctx, job, Reply{V: WireVersion, RunID: job.RunID, Executor: e.id, Unavailable: &Unavailable{
			Reason: "the run's gateway did not confirm its start in time; it was not run"}})
		return
	}
	spec := job.Spec.spec()
	if secretKey != nil {
		if spec.Secrets, err = openSecrets(sealed, secretKey, job.Spec.Secrets, job.RunID, e.id); err != nil {
			e.log.Warn("dispatch: a run's secrets", "run_id", job.RunID, "err", err)
			e.sendReply(ctx, job, Reply{V: WireVersion, RunID: job.RunID, Executor: e.id, Unavailable: &Unavailable{
				Reason: errSecretsNotIntact.Error() + "; it was not run"}})
			return
		}
		secretKey = nil
	}
	// Nothing of a secret reaches Redis: the live output and the reply
	// are masked here (the sandbox masks them too; the gateway again).
	masker := secrets.NewMasker(spec.Secrets)
	e.hold(ctx, job.RunID, true)
	e.log.Info("dispatch: run started", "run_id", job.RunID, "execution_id", job.Spec.ExecutionID, "tenant_id", job.Spec.TenantID)
	head := frameHead{RunID: job.RunID, Executor: e.id}
	if job.Bridge {
		spec.Bridge = &remoteBridge{rdb: e.rdb, k: e.k, sig: rsig, runID: job.RunID, executor: e.id, log: e.log}
	}
	var out *remoteOutput
	var live *secrets.Stream
	if job.Output {
		out = newRemoteOutput(e.rdb, e.k.output(job.RunID), rsig, head)
		spec.Output = out.write
		if live = masker.Stream(out.write); live != nil {
			spec.Output = live.Write
		}
	}
	start := e.now()
	tctx, span := e.span(ctx, job)
	defer span.End()
	rctx, stopWatch := context.WithCancel(tctx)
	watched := make(chan struct{})
	go func() { defer close(watched); e.watchCancel(rctx, stopWatch, job.RunID) }()
	res, err := e.run.Run(rctx, spec)
	stopWatch()
	<-watched
	if live != nil {
		live.Flush()
	}
	sandbox.MaskResult(&res, masker)
	if out != nil {
		// Every chunk is on the list before the reply is.
		if n := out.close(); n > 0 {
			e.log.Warn("dispatch: live output chunks dropped (the envelope has the whole capped output)", "run_id", job.RunID, "chunks", n)
		}
	}
	r := Reply{V: WireVersion, RunID: job.RunID, Executor: e.id}
	if err != nil {
		var ue *sandbox.UnavailableError
		if !errors.As(err, &ue) {
			ue = &sandbox.UnavailableError{Reason: "the executor's sandbox failed", Err: err}
		}
		r.Unavailable = &Unavailable{Reason: ue.Error(), Hint: ue.Hint, Log: ue.Log}
	} else {
		r.Result, r.DeniedSyscall = &res, res.DeniedSyscall
		r.Result.ToolCalls = nil // the gateway's record is the one that counts
	}
	span.SetAttributes(attribute.String("execgate.status", string(res.Status)), attribute.String("execgate.error_type", res.ErrorType()))
	e.ran.Add(1)
	e.log.Info("dispatch: ran", "run_id", job.RunID, "execution_id", job.Spec.ExecutionID, "tenant_id", job.Spec.TenantID,
		"status", res.Status, "error_type", res.ErrorType(), "ms", e.now().Sub(start).Milliseconds(), "unavailable", err != nil)
	e.hold(ctx, job.RunID, false)
	e.sendReply(ctx, job, r)
}

// sendReply pushes the signed reply on the run's reply list and ends the
// executor's lease on the run, in one transaction.
func (e *Executor) sendReply(ctx context.Context, job Job, r Reply) {
	b, err := json.Marshal(r)
	if err != nil {
		e.log.Error("dispatch: encoding a reply", "run_id", job.RunID, "err", err)
		return
	}
	key := e.k.reply(job.RunID)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	pipe := e.rdb.TxPipeline()
	pipe.RPush(wctx, key, e.sig.seal(domainReply, b))
	pipe.Expire(wctx, key, replyTTL)
	pipe.Del(wctx, e.k.running(job.RunID))
	if _, err := pipe.Exec(wctx); err != nil {
		e.log.Error("dispatch: sending a reply", "run_id", job.RunID, "err", err)
	}
}

type startAnswer int

const (
	startConfirmed   startAnswer = iota
	startRefused                 // the gateway said no, or gave up on the run
	startUnconfirmed             // no answer in time
)

// startWait is how long an executor waits for the gateway to confirm a
// start before it gives the run up (not run).
func (c Config) startWait() time.Duration { return max(10*time.Second, c.deadAfter()) }

// confirmStart asks the run's gateway whether this executor may run it
// and waits for its signed answer: the gateway confirms one executor per
// run and remembers which, so whatever the dispatch Redis loses, a run is
// never run twice and never run unknown to its gateway.
//
// For a run with secrets, key is this executor's key for them: its public
// half goes in the start frame, and a confirmation carries the values
// sealed to it.
func (e *Executor) confirmStart(ctx context.Context, job Job, sig signer, key *ecdh.PrivateKey) (startAnswer, *sealedSecrets) {
	head := frameHead{RunID: job.RunID, Executor: e.id}
	start := startFrame{frameHead: head}
	if key != nil {
		start.SecretsKey = key.PublicKey().Bytes()
	}
	f, err := sealFrame(sig, domainStart, start)
	if err != nil {
		return startUnconfirmed, nil
	}
	if err := push(ctx, e.rdb, e.k.start(job.RunID), f, bridgeKeyTTL); err != nil {
		e.log.Warn("dispatch: asking the gateway to confirm a start", "run_id", job.RunID, "err", err)
	}
	deadline := e.now().Add(e.cfg.startWait())
	ck := e.k.confirm(job.RunID, e.id)
	for {
		kv, err := e.rdb.BLPop(ctx, time.Second, ck).Result()
		switch {
		case err == nil:
			var c confirmFrame
			err := openFrame(sig, domainConfirm, kv[1], maxConfirmFrame, &c)
			if err == nil {
				err = c.check(job.RunID, e.id)
			}
			if err == nil && c.OK {
				return startConfirmed, c.Secrets
			}
			if err == nil {
				e.log.Info("dispatch: the gateway confirmed another executor (or refused this one); not run", "run_id", job.RunID)
				return startRefused, nil
			}
			recordRefusal(ctx, e.rdb, e.k, e.log, job.RunID, "executor", e.id, "confirm", err)
		case errors.Is(err, redis.Nil):
		case ctx.Err() != nil:
			return startRefused, nil
		default:
			select { // Redis is down: look again a beat later
			case <-time.After(e.cfg.heartbeat()):
			case <-ctx.Done():
			}
		}
		if n, err := e.rdb.Exists(ctx, e.k.cancel(job.RunID)).Result(); err == nil && n > 0 {
			e.log.Info("dispatch: the gateway gave the run up before confirming it; not run", "run_id", job.RunID)
			return startRefused, nil
		}
		if e.now().After(deadline) {
			e.log.Warn("dispatch: the gateway did not confirm the start in time; not run", "run_id", job.RunID)
			return startUnconfirmed, nil
		}
	}
}

// verify checks an entry; why is the refusal ("" when it may run).
func (e *Executor) verify(m redis.XMessage) (Job, string) {
	var job Job
	sealed, _ := m.Values["job"].(string)
	switch {
	case sealed == "":
		return job, "no job field"
	case len(sealed) > maxJobBytes+2*64+1:
		return job, "job too large"
	}
	payload, err := e.sig.open(domainJob, sealed)
	if err != nil {
		return job, "signature does not verify: " + err.Error()
	}
	if err := json.Unmarshal(payload, &job); err != nil {
		return job, "malformed job"
	}
	if job.V != WireVersion {
		return job, fmt.Sprintf("wire version %d, want %d", job.V, WireVersion)
	}
	if err := validID(job.RunID); err != nil {
		job.RunID = ""
		return job, "run id: " + err.Error()
	}
	if e.now().UnixMilli() > job.ExpiresMS {
		return job, "expired"
	}
	return job, ""
}

// recordRefusal logs a frame of a run refused by who (an executor or a
// gateway, id) and adds it to the refused stream.
func recordRefusal(ctx context.Context, rdb redis.UniversalClient, k keys, log *slog.Logger, runID, who, id, frame string, err error) {
	why := clip(err.Error(), maxReasonBytes)
	log.Warn("dispatch: refused a frame", "run_id", runID, "frame", frame, "reason", why)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: k.refused(), MaxLen: maxRefusedLength, Approx: true,
		Values: []string{"run_id", runID, who, id, "frame", frame, "reason", why, "at_ms", fmt.Sprint(time.Now().UnixMilli())},
	}).Err()
}

// refuse drops an entry that must not run, and records why.
func (e *Executor) refuse(ctx context.Context, stream, streamID, runID, why string) {
	e.refused.Add(1)
	why = clip(why, maxReasonBytes)
	e.log.Warn("dispatch: refused a job", "stream", stream, "stream_id", streamID, "run_id", runID, "reason", why)
	e.done(ctx, stream, streamID)
	_ = e.rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: e.k.refused(), MaxLen: maxRefusedLength, Approx: true,
		Values: []string{"stream_id", streamID, "run_id", runID, "executor", e.id, "reason", why, "at_ms", fmt.Sprint(e.now().UnixMilli())},
	}).Err()
}

// done acknowledges and deletes an entry (the stream holds only the queue).
func (e *Executor) done(ctx context.Context, stream, id string) {
	pipe := e.rdb.TxPipeline()
	pipe.XAck(ctx, stream, group, id)
	pipe.XDel(ctx, stream, id)
	if _, err := pipe.Exec(ctx); err != nil {
		e.log.Warn("dispatch: acknowledging an entry", "stream_id", id, "err", err)
	}
}

// span starts the run's span as a child of the gateway's (the job's
// trace context, bounded).
func (e *Executor) span(ctx context.Context, job Job) (context.Context, trace.Span) {
	carrier := propagation.MapCarrier{}
	for _, h := range []string{"traceparent", "tracestate"} {
		if v := job.Trace[h]; v != "" && len(v) <= maxTraceBytes {
			carrier[h] = v
		}
	}
	ctx = otel.GetTextMapPropagator().Extract(ctx, carrier)
	return otel.Tracer(TracerName).Start(ctx, "execgate.executor.run", trace.WithAttributes(
		attribute.String("execgate.execution_id", clip(job.Spec.ExecutionID, maxIDBytes)),
		attribute.String("execgate.tenant_id", clip(job.Spec.TenantID, maxIDBytes)),
		attribute.String("execgate.executor", e.id)))
}

// watchCancel kills the run (cancels ctx) once its gateway gave up on it;
// it looks once a beat until ctx ends.
func (e *Executor) watchCancel(ctx context.Context, kill context.CancelFunc, runID string) {
	t := time.NewTicker(e.cfg.heartbeat())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := e.rdb.Exists(ctx, e.k.cancel(runID)).Result(); err == nil && n > 0 {
			e.log.Info("dispatch: run cancelled by its gateway", "run_id", runID)
			kill()
			return
		}
	}
}

func (e *Executor) markerTTL(job Job) time.Duration { return markerTTL(e.cfg, job.Spec.Limits) }
