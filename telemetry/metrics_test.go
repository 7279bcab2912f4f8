package telemetry_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/telemetry"
)

// scrape GETs the handler and parses the body with the Prometheus text parser.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// value returns the counter/gauge value (or histogram count) of the series
// of family name with exactly the given labels.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	fam, ok := fams[name]
	if !ok {
		t.Fatalf("no metric family %s", name)
	}
	for _, m := range fam.GetMetric() {
		if !sameLabels(m.GetLabel(), labels) {
			continue
		}
		switch fam.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue()
		case dto.MetricType_HISTOGRAM:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	t.Fatalf("%s has no series %v", name, labels)
	return 0
}

func sameLabels(got []*dto.LabelPair, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for _, lp := range got {
		if want[lp.GetName()] != lp.GetValue() {
			return false
		}
	}
	return true
}

func TestMetricsAreScrapedAndParsed(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := telemetry.NewMetrics(reg, 10)
	m.Execution("demo", "ok", "")
	m.Execution("demo", "ok", "")
	m.Execution("demo", "error", "Timeout")
	m.Execution("acme", "error", "PolicyDenied")
	for _, s := range telemetry.Stages {
		m.Stage(s, 3*time.Millisecond)
	}
	m.Stage("made-up", time.Second)
	m.PolicyEval(400 * time.Microsecond)
	m.QuotaRefusal("demo", "rate")
	m.QuotaEvent("demo", quota.KindConcurrency, "fail_closed")
	m.QuotaEvent("acme", quota.KindConcurrency, "fail_closed")
	m.SandboxCrash()
	m.SyscallDenied("unshare")
	m.SyscallDenied("socket")
	m.SyscallDenied("socket")
	m.SyscallDenied("")
	m.SyscallDenied("syscall 999 (arch c000003e) {\"x\"}")
	m.EgressDenied("acme")
	m.SetQueue(3, 2)
	m.SetPool("python-none", 4)

	fams := scrape(t, m.Handler())
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"execgate_executions_total", map[string]string{"tenant": "demo", "status": "ok", "type": "none"}, 2},
		{"execgate_executions_total", map[string]string{"tenant": "demo", "status": "error", "type": "Timeout"}, 1},
		{"execgate_executions_total", map[string]string{"tenant": "acme", "status": "error", "type": "PolicyDenied"}, 1},
		{"execgate_stage_duration_seconds", map[string]string{"stage": "policy"}, 1},
		{"execgate_stage_duration_seconds", map[string]string{"stage": "total"}, 1},
		{"execgate_stage_duration_seconds", map[string]string{"stage": "other"}, 1},
		{"execgate_policy_eval_duration_seconds", map[string]string{}, 1},
		{"execgate_quota_refusals_total", map[string]string{"tenant": "demo", "kind": "rate"}, 1},
		{"execgate_quota_backend_events_total", map[string]string{"kind": "concurrency", "outcome": "fail_closed"}, 2},
		{"execgate_sandbox_crashes_total", map[string]string{}, 1},
		{"execgate_syscall_denied_total", map[string]string{"syscall": "unshare"}, 1},
		{"execgate_syscall_denied_total", map[string]string{"syscall": "socket"}, 2},
		{"execgate_syscall_denied_total", map[string]string{"syscall": "unknown"}, 2},
		{"execgate_egress_denials_total", map[string]string{"tenant": "acme"}, 1},
		{"execgate_queue_waiting", map[string]string{}, 3},
		{"execgate_runs_in_flight", map[string]string{}, 2},
		{"execgate_warm_pool_idle", map[string]string{"profile": "python-none"}, 4},
	}
	for _, c := range checks {
		t.Run(fmt.Sprintf("%s%v", c.name, c.labels), func(t *testing.T) {
			if got := value(t, fams, c.name, c.labels); got != c.want {
				t.Errorf("= %v, want %v", got, c.want)
			}
		})
	}
	if n := len(fams["execgate_stage_duration_seconds"].GetMetric()); n != len(telemetry.Stages)+1 {
		t.Errorf("%d stage series, want %d (the stages plus other)", n, len(telemetry.Stages)+1)
	}
	h := fams["execgate_stage_duration_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSampleSum() <= 0 || len(h.GetBucket()) == 0 {
		t.Errorf("stage histogram has no sum or buckets: %v", h)
	}
}

func TestTenantLabelCardinalityIsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	const limit, tenants, each = 5, 40, 3
	m := telemetry.NewMetrics(reg, limit)
	var wg sync.WaitGroup
	for i := range tenants {
		wg.Go(func() {
			for range each {
				m.Execution(fmt.Sprintf("t%02d", i), "ok", "")
				m.QuotaRefusal(fmt.Sprintf("t%02d", i), "rate")
			}
		})
	}
	wg.Wait()
	m.Execution("", "error", "Unauthenticated")

	fams := scrape(t, m.Handler())
	for _, name := range []string{"execgate_executions_total", "execgate_quota_refusals_total"} {
		t.Run(name, func(t *testing.T) {
			named, other, total := 0, 0.0, 0.0
			for _, s := range fams[name].GetMetric() {
				var tenant string
				for _, lp := range s.GetLabel() {
					if lp.GetName() == "tenant" {
						tenant = lp.GetValue()
					}
				}
				v := s.GetCounter().GetValue()
				switch tenant {
				case telemetry.OtherTenant:
					other += v
				case telemetry.NoTenant:
					continue
				default:
					named++
					if v != each {
						t.Errorf("tenant %s counted %v, want %d", tenant, v, each)
					}
				}
				total += v
			}
			if named != limit {
				t.Errorf("%d tenants have their own label, want %d", named, limit)
			}
			if want := float64((tenants - limit) * each); other != want {
				t.Errorf("other = %v, want %v", other, want)
			}
			if total != tenants*each {
				t.Errorf("total %v, want %d: nothing may be lost to the bound", total, tenants*each)
			}
		})
	}
	if got := value(t, fams, "execgate_executions_total", map[string]string{"tenant": "none", "status": "error", "type": "Unauthenticated"}); got != 1 {
		t.Errorf("requests without a tenant = %v, want 1 under %q", got, telemetry.NoTenant)
	}
}

func TestNilMetricsAreANoOp(t *testing.T) {
	var m *telemetry.Metrics
	m.Execution("demo", "ok", "")
	m.Stage("run", time.Second)
	m.PolicyEval(time.Second)
	m.QuotaRefusal("demo", "rate")
	m.QuotaEvent("demo", quota.KindRate, "fail_open")
	m.SandboxCrash()
	m.EgressDenied("demo")
	m.SetQueue(1, 1)
	m.SetPool("p", 1)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("nil metrics handler: %d", rec.Code)
	}
}

func TestNewMetricsWithoutRegistryServesGoAndProcessMetrics(t *testing.T) {
	m := telemetry.NewMetrics(nil, 0)
	m.SandboxCrash()
	fams := scrape(t, m.Handler())
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "execgate_sandbox_crashes_total"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("missing %s", name)
		}
	}
}
