package async

import (
	"context"
	"fmt"
	"log/slog"
	"net/http" // status codes only
	"sync"
	"time"

	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/telemetry"
)

// Flow runs one execute call (*execution.Flow). Runs depends on nothing
// else of it: the run step may happen in this process or on an executor.
type Flow interface {
	Run(ctx context.Context, call execution.Call) *execution.Outcome
}

// Config configures Runs.
type Config struct {
	// CancelPoll is how often a running execution's owner looks in the
	// store for a cancel requested through another replica. Zero: never
	// (one process: a cancel reaches the run directly).
	CancelPoll time.Duration
}

// Runs submits executions to the flow in the background and records them
// in a Store. It is safe for concurrent use; Drain waits for the runs it
// started.
type Runs struct {
	flow  Flow
	store Store
	cfg   Config
	log   *slog.Logger

	mu      sync.Mutex // guards local and streams
	local   map[Key]context.CancelCauseFunc
	streams map[Key]*Stream // the live output of the runs of this process
	wg      sync.WaitGroup
}

// NewRuns returns Runs on flow recording in store. log nil: slog.Default().
func NewRuns(flow Flow, store Store, cfg Config, log *slog.Logger) *Runs {
	if log == nil {
		log = slog.Default()
	}
	return &Runs{flow: flow, store: store, cfg: cfg, log: log, local: map[Key]context.CancelCauseFunc{}, streams: map[Key]*Stream{}}
}

// Store is the store Runs records in.
func (r *Runs) Store() Store { return r.store }

// Submit records k queued and runs call in the background with a context
// that keeps ctx's values (principal, trace) but not its cancellation;
// done, if set, is called in the run's goroutine with the record of the
// finished execution once it is stored. The error is the store's
// (ErrExists, *TooManyError, unavailable): then nothing was submitted.
func (r *Runs) Submit(ctx context.Context, k Key, call execution.Call, done func(context.Context, Record)) error {
	if err := r.store.Create(ctx, k); err != nil {
		return err
	}
	rctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	st := NewStream(DefaultStreamBytes)
	r.mu.Lock()
	r.local[k] = cancel
	r.streams[k] = st
	r.mu.Unlock()
	call.ID = k.ExecutionID
	call.Output = st.Output
	call.Started = func() {
		cancelled, err := r.store.Start(rctx, k)
		if err != nil {
			r.log.WarnContext(rctx, "async store: marking running", telemetry.KeyExecutionID, k.ExecutionID, "err", err)
		}
		if cancelled {
			cancel(sandbox.ErrCancelledByCaller)
		}
	}
	r.wg.Add(1)
	go r.run(rctx, cancel, k, call, st, done)
	return nil
}

// Watch returns the live output of k when this process runs it (false:
// it is not running here, or has ended; read the store).
func (r *Runs) Watch(k Key) (*Stream, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, ok := r.streams[k]
	return st, ok
}

func (r *Runs) run(ctx context.Context, cancel context.CancelCauseFunc, k Key, call execution.Call, st *Stream, done func(context.Context, Record)) {
	defer r.wg.Done()
	defer cancel(nil)
	defer r.recoverRun(ctx, k, st)
	stopPoll := r.pollCancel(ctx, cancel, k)
	out := r.flow.Run(ctx, call)
	stopPoll()
	defer out.Release()
	bg := context.WithoutCancel(ctx)
	if err := r.store.Finish(bg, k, out.Status, out.Body.Bytes()); err != nil {
		r.log.ErrorContext(bg, "async store: the result of a run could not be stored", telemetry.KeyExecutionID, k.ExecutionID,
			telemetry.KeyTenantID, k.TenantID, "err", err)
	}
	// Stored first: a reader that finds no stream finds the result.
	st.End(out.Body.Bytes())
	r.mu.Lock()
	delete(r.local, k)
	delete(r.streams, k)
	r.mu.Unlock()
	if done != nil {
		rec, ok, err := r.store.Get(bg, k)
		if !ok || err != nil || rec.Expired { // tell what is known
			rec = Record{Key: k, State: StateDone, HTTPStatus: out.Status, Envelope: out.Body.Bytes(), FinishedAt: time.Now()}
		}
		done(bg, rec)
	}
}

// recoverRun turns a panic of the flow (a bug) into an Internal result
// instead of ending the process, as the HTTP edge does for a sync run.
func (r *Runs) recoverRun(ctx context.Context, k Key, st *Stream) {
	rec := recover()
	if rec == nil {
		return
	}
	bg := context.WithoutCancel(ctx)
	r.log.ErrorContext(bg, "panic in an async run", telemetry.KeyExecutionID, k.ExecutionID, telemetry.KeyTenantID, k.TenantID, "panic", fmt.Sprint(rec))
	e := &execution.Error{Status: http.StatusInternalServerError, Type: execution.TypeInternal, Message: "internal error"}
	body, err := execution.EncodeJSON(execution.RefusalEnvelope(bg, k.ExecutionID, k.TenantID, e))
	if err != nil {
		body = []byte(`{"status":"error"}`)
	}
	if err := r.store.Finish(bg, k, e.Status, body); err != nil {
		r.log.ErrorContext(bg, "async store: the result of a run could not be stored", telemetry.KeyExecutionID, k.ExecutionID, "err", err)
	}
	st.End(body)
	r.mu.Lock()
	delete(r.local, k)
	delete(r.streams, k)
	r.mu.Unlock()
}

// pollCancel looks for a cancel requested through another replica until
// the returned stop is called.
func (r *Runs) pollCancel(ctx context.Context, cancel context.CancelCauseFunc, k Key) (stop func()) {
	if r.cfg.CancelPoll <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(r.cfg.CancelPoll)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if yes, err := r.store.CancelRequested(ctx, k); err == nil && yes {
					cancel(sandbox.ErrCancelledByCaller)
					return
				}
			}
		}
	}()
	return func() { close(done) }
}

// Cancel requests k's cancellation: a queued execution ends Cancelled
// without running, a running one is stopped (its envelope says Cancelled).
// It returns the record as it was before; false when there is none.
func (r *Runs) Cancel(ctx context.Context, k Key) (Record, bool, error) {
	rec, ok, err := r.store.RequestCancel(ctx, k)
	if err != nil || !ok || rec.State == StateDone {
		return rec, ok, err
	}
	r.mu.Lock()
	cancel := r.local[k]
	r.mu.Unlock()
	if cancel != nil {
		cancel(sandbox.ErrCancelledByCaller)
	}
	return rec, true, nil
}

// Drain waits until the runs this Runs started have finished, or ctx ends.
func (r *Runs) Drain(ctx context.Context) error {
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
