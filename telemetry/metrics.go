package telemetry

import (
	"net/http"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/execgate/execgate/quota"
)

// Label values used when the real value is not a label of its own.
const (
	// OtherTenant counts every tenant beyond the first MaxTenantLabels.
	OtherTenant = "other"
	// NoTenant is the tenant label when none is known (before auth).
	NoTenant = "none"
	// NoErrorType is the type label of ok executions.
	NoErrorType = "none"
	// OtherStage is the stage label of names not in Stages.
	OtherStage = "other"
)

// stageBuckets span a warm policy decision (sub-millisecond) to a long run.
var stageBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// Metrics are execgate's Prometheus metrics. All methods are safe for
// concurrent use and do nothing on a nil *Metrics, so components can take
// one optionally.
//
// How to add a metric:
//  1. Add the field and create/register it in NewMetrics (name execgate_…,
//     a help text saying what is counted).
//  2. Add a method that records it; route tenant labels through m.tenant.
//  3. Assert it in the expfmt scrape test.
type Metrics struct {
	gatherer prometheus.Gatherer
	tenants  *tenantLabels

	executions     *prometheus.CounterVec
	stages         *prometheus.HistogramVec
	policyEval     prometheus.Histogram
	quotaRefusals  *prometheus.CounterVec
	quotaEvents    *prometheus.CounterVec
	sandboxCrashes prometheus.Counter
	syscallDenials *prometheus.CounterVec
	egressDenials  *prometheus.CounterVec
	queueWaiting   prometheus.Gauge
	inFlight       prometheus.Gauge
	poolIdle       *prometheus.GaugeVec
	envEvents      *prometheus.CounterVec
	envBuild       *prometheus.HistogramVec
}

// NewMetrics creates and registers the metrics on reg. A nil reg gets a new
// registry with the Go and process collectors. maxTenants bounds the tenant
// label (0: DefaultMaxTenantLabels): the first maxTenants distinct tenants
// get their own value, later ones count as OtherTenant. Registering twice on
// one registry panics (a wiring mistake).
func NewMetrics(reg prometheus.Registerer, maxTenants int) *Metrics {
	if reg == nil {
		r := prometheus.NewRegistry()
		r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		reg = r
	}
	if maxTenants <= 0 {
		maxTenants = DefaultMaxTenantLabels
	}
	g, ok := reg.(prometheus.Gatherer)
	if !ok {
		g = prometheus.DefaultGatherer
	}
	m := &Metrics{
		gatherer: g,
		tenants:  &tenantLabels{max: maxTenants, seen: map[string]struct{}{}},
		executions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "execgate_executions_total",
			Help: "Authenticated execute requests by tenant, envelope status (ok|error) and error type (none when ok), including refusals.",
		}, []string{"tenant", "status", "type"}),
		stages: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "execgate_stage_duration_seconds",
			Help:    "Time spent per request stage: auth, decode, policy, quota, deps, spawn, run, settle, audit, total.",
			Buckets: stageBuckets,
		}, []string{"stage"}),
		policyEval: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "execgate_policy_eval_duration_seconds",
			Help:    "Time to evaluate the prepared policy query for one request.",
			Buckets: stageBuckets,
		}),
		quotaRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "execgate_quota_refusals_total",
			Help: "Runs refused by quota, by tenant and kind (rate, concurrency, budget, unavailable).",
		}, []string{"tenant", "kind"}),
		quotaEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "execgate_quota_backend_events_total",
			Help: "Quota backend events by dimension and outcome (fail_closed, fail_open, lease_lost).",
		}, []string{"kind", "outcome"}),
		sandboxCrashes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "execgate_sandbox_crashes_total",
			Help: "Jails that died without a result envelope (SandboxCrashed).",
		}),
		syscallDenials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "execgate_syscall_denied_total",
			Help: "Runs killed for an escape-class system call (SyscallDenied), by syscall (\"unknown\" when the kernel's audit record was out of reach).",
		}, []string{"syscall"}),
		egressDenials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "execgate_egress_denials_total",
			Help: "Connection attempts refused by the egress proxy, by tenant.",
		}, []string{"tenant"}),
		queueWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "execgate_queue_waiting",
			Help: "Admitted runs waiting for a local run slot.",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "execgate_runs_in_flight",
			Help: "Runs executing in a jail now.",
		}),
		poolIdle: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "execgate_warm_pool_idle",
			Help: "Pre-spawned jails waiting for a request, by profile.",
		}, []string{"profile"}),
	}
	m.envEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "execgate_environment_events_total",
		Help: "Package environments: resolved, resolve_cached, hit (already installed), built, build_failed, evicted; download_trimmed and download_trim_failed (the download caches emptied for the cache cap).",
	}, []string{"event"})
	m.envBuild = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "execgate_environment_duration_seconds",
		Help:    "How long resolving (uv pip compile) and building (uv pip install) an environment took.",
		Buckets: stageBuckets,
	}, []string{"step"})
	reg.MustRegister(m.executions, m.stages, m.policyEval, m.quotaRefusals, m.quotaEvents,
		m.sandboxCrashes, m.syscallDenials, m.egressDenials, m.queueWaiting, m.inFlight, m.poolIdle,
		m.envEvents, m.envBuild)
	return m
}

// Execution counts one authenticated execute request by its outcome:
// status "ok" or "error", errType the envelope's error.type ("" when ok).
func (m *Metrics) Execution(tenant, status, errType string) {
	if m == nil {
		return
	}
	if errType == "" {
		errType = NoErrorType
	}
	m.executions.WithLabelValues(m.tenants.label(tenant), status, errType).Inc()
}

// Stage observes how long one stage of a request took (see Stages; other
// names are counted as OtherStage to keep the label bounded).
func (m *Metrics) Stage(stage string, d time.Duration) {
	if m == nil {
		return
	}
	if !slices.Contains(Stages, stage) {
		stage = OtherStage
	}
	m.stages.WithLabelValues(stage).Observe(d.Seconds())
}

// PolicyEval observes one policy evaluation.
func (m *Metrics) PolicyEval(d time.Duration) {
	if m == nil {
		return
	}
	m.policyEval.Observe(d.Seconds())
}

// QuotaRefusal counts a run refused by quota (kind: rate, concurrency,
// budget or unavailable).
func (m *Metrics) QuotaRefusal(tenant, kind string) {
	if m == nil {
		return
	}
	m.quotaRefusals.WithLabelValues(m.tenants.label(tenant), kind).Inc()
}

var _ quota.Observer = (*Metrics)(nil)

// QuotaEvent counts a quota backend event and what the limiter did about it
// (quota.OutcomeFailClosed, OutcomeFailOpen, OutcomeLeaseLost); *Metrics is
// a quota.Observer. The tenant is not a label here: backend outages are not
// per tenant.
func (m *Metrics) QuotaEvent(_ string, kind quota.Kind, outcome string) {
	if m == nil {
		return
	}
	m.quotaEvents.WithLabelValues(string(kind), outcome).Inc()
}

// EnvironmentEvent counts a package-environment event (environments.Observer)
// and observes how long resolving or building took.
func (m *Metrics) EnvironmentEvent(event string, d time.Duration) {
	if m == nil {
		return
	}
	switch event {
	case "resolved", "resolve_cached", "hit", "built", "build_failed", "evicted", "download_trimmed", "download_trim_failed":
	default:
		event = "other"
	}
	m.envEvents.WithLabelValues(event).Inc()
	switch event {
	case "resolved":
		m.envBuild.WithLabelValues("resolve").Observe(d.Seconds())
	case "built", "build_failed":
		m.envBuild.WithLabelValues("build").Observe(d.Seconds())
	}
}

// SandboxCrash counts a jail that died without an envelope.
func (m *Metrics) SandboxCrash() {
	if m == nil {
		return
	}
	m.sandboxCrashes.Inc()
}

// SyscallDenied counts a run killed for an escape-class syscall. The
// runner names it from a fixed set (sandbox.Result.DeniedSyscall); anything
// that does not look like a syscall name counts as "unknown", so the label
// set stays bounded whatever the caller passes.
func (m *Metrics) SyscallDenied(syscall string) {
	if m == nil {
		return
	}
	if !syscallLabel.MatchString(syscall) {
		syscall = "unknown"
	}
	m.syscallDenials.WithLabelValues(syscall).Inc()
}

// syscallLabel: Linux syscall names are short lowercase identifiers.
var syscallLabel = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// EgressDenied counts one connection attempt refused by the egress proxy.
func (m *Metrics) EgressDenied(tenant string) {
	if m == nil {
		return
	}
	m.egressDenials.WithLabelValues(m.tenants.label(tenant)).Inc()
}

// SetQueue sets the waiting and running gauges.
func (m *Metrics) SetQueue(waiting, running int) {
	if m == nil {
		return
	}
	m.queueWaiting.Set(float64(waiting))
	m.inFlight.Set(float64(running))
}

// SetPool sets the idle warm-jail gauge of one profile.
func (m *Metrics) SetPool(profile string, idle int) {
	if m == nil {
		return
	}
	m.poolIdle.WithLabelValues(profile).Set(float64(idle))
}

// Handler serves the registry in the Prometheus text format (for /metrics).
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(m.gatherer, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// tenantLabels hands out tenant label values: the first max distinct
// tenants keep their id, the rest share OtherTenant.
type tenantLabels struct {
	max  int
	mu   sync.Mutex // guards seen
	seen map[string]struct{}
}

func (t *tenantLabels) label(tenant string) string {
	if tenant == "" {
		return NoTenant
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.seen[tenant]; ok {
		return tenant
	}
	if len(t.seen) < t.max {
		t.seen[tenant] = struct{}{}
		return tenant
	}
	return OtherTenant
}
