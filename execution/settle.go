package execution

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/telemetry"
)

// Settlement retries: a run that happened is charged even when the quota
// backend was down as it ended.
//
// Settle charges a run's measured CPU to its tenant's daily budget and ends
// its lease. When Redis is unreachable at that moment the run's answer
// stands, but without a retry its CPU would never reach the budget (the
// reservation simply expires with the lease), so a tenant could exceed its
// budget by whatever ran during a Redis blip. The settler keeps trying in the
// background with backoff; the quota backend makes a settlement idempotent
// per execution id (finish.lua remembers it), so a retry never charges twice.
const (
	settleRetryFirst = 250 * time.Millisecond
	settleRetryMax   = 30 * time.Second
	// settleRetryFor bounds the retries of one settlement; after it the
	// charge is given up (logged), as the budget's day may be over.
	settleRetryFor = 30 * time.Minute
)

// settler runs the background retries of failed settlements.
type settler struct {
	log       *slog.Logger
	pending   atomic.Int64 // settlements being retried
	abandoned atomic.Int64 // given up at Flush
	wg        sync.WaitGroup
	flush     chan struct{} // closed by Flush: one last attempt each, then stop
	once      sync.Once
}

func newSettler(log *slog.Logger) *settler {
	return &settler{log: log, flush: make(chan struct{})}
}

// settle charges cpuMS to adm; if the backend is down it logs, retries in
// the background and returns the first attempt's error (for the span).
func (st *settler) settle(ctx context.Context, adm *quota.Admission, cpuMS int64) error {
	err := adm.Settle(context.WithoutCancel(ctx), cpuMS)
	if err == nil {
		return nil
	}
	st.log.ErrorContext(ctx, "quota settle failed; retrying in the background",
		telemetry.KeyExecutionID, adm.ExecutionID, telemetry.KeyTenantID, adm.TenantID, "cpu_ms", cpuMS, "err", err)
	st.pending.Add(1)
	st.wg.Go(func() {
		defer st.pending.Add(-1)
		st.retry(adm, cpuMS)
	})
	return err
}

func (st *settler) retry(adm *quota.Admission, cpuMS int64) {
	start := time.Now()
	wait := settleRetryFirst
	for attempt := 2; ; attempt++ {
		last := false
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-st.flush:
			t.Stop()
			last = true
		}
		err := adm.Settle(context.Background(), cpuMS)
		if err == nil {
			st.log.Info("quota settled after a retry", telemetry.KeyExecutionID, adm.ExecutionID,
				telemetry.KeyTenantID, adm.TenantID, "cpu_ms", cpuMS, "attempts", attempt, "after", time.Since(start).Round(time.Millisecond))
			return
		}
		if last {
			st.abandoned.Add(1)
		}
		if last || time.Since(start) >= settleRetryFor {
			st.log.Error("quota settle given up: this run's CPU is not charged to the budget", telemetry.KeyExecutionID, adm.ExecutionID,
				telemetry.KeyTenantID, adm.TenantID, "cpu_ms", cpuMS, "attempts", attempt, "err", err)
			return
		}
		wait = min(2*wait, settleRetryMax)
	}
}

// Flush makes one last attempt at every pending settlement now and waits for
// them, or until ctx ends. It reports how many runs' CPU was not charged:
// those whose last attempt failed and those still pending when ctx ended.
func (st *settler) Flush(ctx context.Context) int64 {
	st.once.Do(func() { close(st.flush) })
	done := make(chan struct{})
	go func() { st.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return st.pending.Load() + st.abandoned.Load()
}
