package toolbridge

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the tool call metrics: calls and denials by tenant, server
// and outcome, and call latency by server. Label values are bounded: the
// servers come from config, the outcomes are the bridge error types, and
// a call to no configured server is labelled "-".
type Metrics struct {
	calls   *prometheus.CounterVec
	denials *prometheus.CounterVec
	latency *prometheus.HistogramVec
	lookups *prometheus.CounterVec
}

// NewMetrics registers the tool call metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "execgate_tool_calls_total", Help: "Tool calls made by runs through the bridge, by outcome (ok or the bridge error type).",
		}, []string{"tenant", "server", "outcome"}),
		denials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "execgate_tool_call_denials_total", Help: "Tool calls denied (not granted, per-call policy, or a run limit).",
		}, []string{"tenant", "server"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "execgate_tool_call_duration_seconds", Help: "Tool call latency at the gateway, by server.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}, []string{"server"}),
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "execgate_tool_lookups_total", Help: "Tool searches and describes made by runs through the bridge, by operation and outcome (ok or the bridge error type).",
		}, []string{"tenant", "op", "outcome"}),
	}
	reg.MustRegister(m.calls, m.denials, m.latency, m.lookups)
	return m
}

// observe records one call; m may be nil.
func (m *Metrics) observe(tenant, server, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	if server == "" {
		server = "-"
	}
	m.calls.WithLabelValues(tenant, server, outcome).Inc()
	if outcome == "ToolDenied" {
		m.denials.WithLabelValues(tenant, server).Inc()
	}
	m.latency.WithLabelValues(server).Observe(d.Seconds())
}

// lookup records one search or describe (op); m may be nil.
func (m *Metrics) lookup(tenant, op string, err error) {
	if m == nil {
		return
	}
	m.lookups.WithLabelValues(tenant, op, outcome(err)).Inc()
}
