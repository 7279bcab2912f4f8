package quota

import "time"

// gcraResult is one GCRA decision.
type gcraResult struct {
	allowed    bool
	tat        time.Time     // the new theoretical arrival time (unchanged if refused)
	remaining  int           // requests that could still be admitted now
	retryAfter time.Duration // refused: when the request would be admitted
	resetAfter time.Duration // until the bucket is full again
}

// gcra is the generic cell rate algorithm as redis_rate implements it
// (emission interval T = 1m/rate, burst offset τ = T·burst, admit when
// max(tat, now) + cost·T − τ ≤ now), in integer nanoseconds. The Redis
// backend runs the same arithmetic in Lua; cost 0 peeks.
func gcra(tat, now time.Time, ratePerMinute, burst, cost int) gcraResult {
	ei := time.Minute / time.Duration(ratePerMinute)
	if tat.Before(now) {
		tat = now
	}
	newTAT := tat.Add(ei * time.Duration(cost))
	allowAt := newTAT.Add(-ei * time.Duration(burst))
	diff := now.Sub(allowAt)
	if diff < 0 {
		return gcraResult{tat: tat, retryAfter: -diff, resetAfter: tat.Sub(now)}
	}
	return gcraResult{
		allowed:    true,
		tat:        newTAT,
		remaining:  int(diff / ei),
		resetAfter: newTAT.Sub(now),
	}
}

const dayMS = 24 * 60 * 60 * 1000

// utcDay numbers UTC days since the epoch; budgets reset when it changes.
func utcDay(t time.Time) int64 {
	ms := t.UnixMilli()
	d := ms / dayMS
	if ms < 0 && ms%dayMS != 0 {
		d--
	}
	return d
}

// dayReset is the instant day ends (the next UTC midnight).
func dayReset(day int64) time.Time { return time.UnixMilli((day + 1) * dayMS).UTC() }

// concurrencyRetryHint is the Retry-After for a full concurrency slot set:
// runs end whenever they end, so a short hint, or sooner if the oldest
// lease is about to expire.
const concurrencyRetryHint = time.Second

// maxKind returns the refusal with the longest wait.
func maxKind(cur *ExceededError, kind Kind, retry time.Duration) *ExceededError {
	if retry < time.Millisecond {
		retry = time.Millisecond
	}
	if cur == nil || retry > cur.RetryAfter {
		return &ExceededError{Kind: kind, RetryAfter: retry}
	}
	return cur
}
