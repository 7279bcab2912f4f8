package gateway

import (
	"context"
	"hash/maphash"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/execgate/execgate/audit"
	"github.com/execgate/execgate/execution"
	"github.com/execgate/execgate/tenancy"
)

// Refused requests are rate limited (issue #23 item 10). A refusal (any
// 4xx: a bad request, a policy denial, a quota refusal, a missing
// resource) costs no quota, yet each authenticated execute refusal leaves
// an fsynced audit record: one tenant refusing itself thousands of times a
// second filled the audit log. Each subject (tenant_id and sub) has a
// token bucket of refusals (server.refusals_per_minute, refusals_burst):
// every refused request takes a token once answered, and while the bucket
// is empty the subject's requests are answered 429 QuotaExceeded with
// Retry-After right after authentication, before decoding, policy or
// quota, and without an audit record of their own. One record per subject
// and refusalRecordEvery stands for them, its refusals_dropped counting
// the limited requests since the previous one; a run that is admitted is
// never among them (it was not refused) and always has its record.
//
// Requests whose token does not verify are keyed by the client's address
// instead (RemoteAddr: behind a proxy, the proxy's). Their bucket is
// consulted only after the token failed to verify, so a valid token from
// the same address is never refused for someone else's junk: an
// exhausted address gets 429 where it would have got 401.

// refusalRecordEvery is how often one limited subject leaves an audit
// record.
const refusalRecordEvery = 10 * time.Second

// refusalKeysMax bounds the buckets held; beyond it refilled ones are
// dropped, and if none is, new keys share one overflow bucket.
const refusalKeysMax = 16384

// KindRefusals is the audit quota kind of a request refused by the
// refusal limiter.
const KindRefusals = "refusals"

// refusalBucket is one key's refusals.
type refusalBucket struct {
	tokens float64
	last   time.Time
	// dropped counts the limited requests not yet counted in a record;
	// recorded is when the last such record was written.
	dropped  int64
	recorded time.Time
}

// refusalLimiter holds the buckets. Disabled when perSecond <= 0.
type refusalLimiter struct {
	perSecond float64
	burst     float64
	now       func() time.Time
	seed      maphash.Seed

	mu      sync.Mutex // guards buckets
	buckets map[uint64]*refusalBucket
}

func newRefusalLimiter(perMinute, burst int, now func() time.Time) *refusalLimiter {
	return &refusalLimiter{perSecond: float64(perMinute) / 60, burst: float64(burst), now: now,
		seed: maphash.MakeSeed(), buckets: map[uint64]*refusalBucket{}}
}

func (l *refusalLimiter) key(parts ...string) uint64 {
	var h maphash.Hash
	h.SetSeed(l.seed)
	for _, p := range parts {
		h.WriteString(p)
		h.WriteByte(0)
	}
	return h.Sum64() | 1 // 0 is the overflow bucket
}

// bucket is key's bucket, refilled to now. Called with mu held.
func (l *refusalLimiter) bucket(key uint64, now time.Time) *refusalBucket {
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= refusalKeysMax {
			for k, o := range l.buckets {
				if k != 0 && o.dropped == 0 && o.tokens+now.Sub(o.last).Seconds()*l.perSecond >= l.burst {
					delete(l.buckets, k)
				}
			}
		}
		if len(l.buckets) >= refusalKeysMax {
			key = 0
			if b = l.buckets[0]; b != nil {
				return l.refill(b, now)
			}
		}
		b = &refusalBucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	}
	return l.refill(b, now)
}

func (l *refusalLimiter) refill(b *refusalBucket, now time.Time) *refusalBucket {
	if d := now.Sub(b.last).Seconds(); d > 0 {
		b.tokens = math.Min(l.burst, b.tokens+d*l.perSecond)
	}
	b.last = now
	return b
}

// limited reports whether key has no refusal left, and then how long
// until it has one, and whether this limited request should be recorded
// (with dropped: the limited requests since the last record, others);
// audited is false for keys whose requests leave no record.
func (l *refusalLimiter) limited(key uint64, audited bool) (retry time.Duration, record bool, dropped int64) {
	if l.perSecond <= 0 {
		return 0, false, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucket(key, now)
	if b.tokens >= 1 {
		return 0, false, 0
	}
	retry = time.Duration((1 - b.tokens) / l.perSecond * float64(time.Second))
	if !audited {
		return retry, false, 0
	}
	if now.Sub(b.recorded) >= refusalRecordEvery {
		dropped, b.dropped, b.recorded = b.dropped, 0, now
		return retry, true, dropped
	}
	b.dropped++
	return retry, false, 0
}

// refused takes one token from key (a request of it was refused).
func (l *refusalLimiter) refused(key uint64) {
	if l.perSecond <= 0 {
		return
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucket(key, now)
	b.tokens = math.Max(b.tokens-1, -l.burst) // a burst of concurrent refusals waits at most twice the burst
}

// pending takes key's limited requests not yet counted in a record (its
// bucket has tokens again: the episode ended).
func (l *refusalLimiter) pending(key uint64) int64 {
	if l.perSecond <= 0 {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil || b.dropped == 0 {
		return 0
	}
	n := b.dropped
	b.dropped, b.recorded = 0, l.now()
	return n
}

// isRefusal reports whether status refuses the request (counted by the
// refusal limiter).
func isRefusal(status int) bool { return status >= 400 && status < 500 }

// limitRefusals answers 429 when the caller's subject has no refusal
// left, and otherwise charges it for a refused answer. It runs right after
// authentication, before the route's own checks.
func (s *Server) limitRefusals(c *gin.Context, p tenancy.Principal) {
	key := s.refusals.key(p.TenantID, p.Subject)
	if retry, record, dropped := s.refusals.limited(key, true); retry > 0 {
		if record {
			s.recordRefusals(c, p, retry, dropped)
		}
		s.fail(c, refusalsExceeded(retry))
		c.Abort()
		return
	}
	if n := s.refusals.pending(key); n > 0 {
		s.recordRefusals(c, p, 0, n-1)
	}
	c.Next()
	if isRefusal(c.Writer.Status()) {
		s.refusals.refused(key)
	}
}

// refusalsExceeded is the answer to a request of an exhausted key.
func refusalsExceeded(retry time.Duration) *apiError {
	return &apiError{Status: http.StatusTooManyRequests, Type: TypeQuotaExceeded, RetryAfter: retry,
		Message: "too many refused requests (server.refusals_per_minute); retry after " + strconv.FormatInt(int64(math.Ceil(retry.Seconds())), 10) + "s"}
}

// addressKey is the refusal key of an unauthenticated request: the
// client's address without its port.
func (s *Server) addressKey(r *http.Request) uint64 {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return s.refusals.key("", host)
}

// recordRefusals writes the audit record that stands for a subject's
// limited requests: this one (refused, when retry > 0) plus dropped
// others answered without a record. A failed write is logged: the
// request it belongs to was refused anyway.
func (s *Server) recordRefusals(c *gin.Context, p tenancy.Principal, retry time.Duration, dropped int64) {
	id := c.GetString(keyExecutionID)
	if id == "" {
		id = execution.NewID()
	}
	r := audit.Record{ExecutionID: id, TenantID: p.TenantID, Subject: p.Subject, Roles: p.Roles,
		Quota:           audit.Quota{Outcome: audit.QuotaExceeded, Kind: KindRefusals, RetryAfterMS: retry.Milliseconds()},
		Outcome:         audit.Outcome{HTTPStatus: http.StatusTooManyRequests, Status: "error", ErrorType: TypeQuotaExceeded},
		RefusalsDropped: dropped}
	if retry == 0 { // the episode's last count, written when the subject is served again
		r.ExecutionID = execution.NewID()
	}
	if err := s.d.Audit.Record(context.WithoutCancel(c.Request.Context()), r); err != nil {
		s.log.ErrorContext(c.Request.Context(), "audit write failed", "tenant_id", p.TenantID, "err", err)
	}
}
