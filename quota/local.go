package quota

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// localRates is the per-process rate fallback used while Redis is down
// (RateFailMode "local"). Each replica applies the tenant's full rate, so N
// replicas admit up to N× the rate during an outage.
type localRates struct {
	mu sync.Mutex // guards m
	m  map[string]*localRate
}

type localRate struct {
	lim    *rate.Limiter
	limits Limits
}

// reset forgets tenant's local rate state (an override changed its limits).
func (lr *localRates) reset(tenant string) {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	delete(lr.m, tenant)
}

// allow takes one token for tenant under l, or says how long to wait.
func (lr *localRates) allow(tenant string, l Limits, now time.Time) (bool, time.Duration) {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	perSec := rate.Limit(float64(l.RatePerMinute) / 60)
	e := lr.m[tenant]
	switch {
	case e == nil:
		e = &localRate{lim: rate.NewLimiter(perSec, l.Burst), limits: l}
		lr.m[tenant] = e
	case e.limits != l:
		e.lim.SetLimitAt(now, perSec)
		e.lim.SetBurstAt(now, l.Burst)
		e.limits = l
	}
	res := e.lim.ReserveN(now, 1)
	if !res.OK() {
		return false, time.Minute / time.Duration(max(l.RatePerMinute, 1))
	}
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return false, d
	}
	return true, 0
}
