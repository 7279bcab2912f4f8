package quota

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/execgate/execgate/internal/testenv"
)

func newTestClient(t *testing.T, cfg Config) redis.UniversalClient {
	t.Helper()
	c, err := NewRedisClient(cfg)
	if err != nil {
		t.Fatalf("NewRedisClient: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var prefixSeq atomic.Int64

// uniquePrefix isolates a test's keys on a shared server.
func uniquePrefix() string { return fmt.Sprintf("test%d", prefixSeq.Add(1)) }

func TestRedisBehaviour(t *testing.T) {
	srv := testenv.Redis(t)
	runSuite(t, suiteBackend{
		newLimiter: func(t *testing.T, cfg Config, opts ...Option) Limiter {
			cfg.KeyPrefix = uniquePrefix()
			return NewRedis(newTestClient(t, Config{RedisURL: srv.URL()}), cfg, opts...)
		},
		dropLeases: func(t *testing.T, l Limiter, tenant string) {
			r := l.(*RedisLimiter)
			if err := r.client.Del(context.Background(), r.keys(tenant).leases).Err(); err != nil {
				t.Fatal(err)
			}
		},
	})
}

func TestRedisReplicasShareQuota(t *testing.T) {
	srv := testenv.Redis(t)
	cfg := Config{KeyPrefix: uniquePrefix(), LeaseTTLMS: 300}
	var ls []Limiter
	for range 3 {
		ls = append(ls, NewRedis(newTestClient(t, Config{RedisURL: srv.URL()}), cfg))
	}

	t.Run("three limiters on separate clients never exceed a concurrency of 3 together", func(t *testing.T) {
		// With the default lease TTL: a 300 ms lease whose holder is
		// descheduled on a loaded host expires by design (its gateway looks
		// dead), which would count as a fourth holder here.
		long := Config{KeyPrefix: uniquePrefix()}
		var crowd []Limiter
		for range 3 {
			crowd = append(crowd, NewRedis(newTestClient(t, Config{RedisURL: srv.URL()}), long))
		}
		assertNoOverAdmission(t, crowd, 200, 3)
	})

	t.Run("a replica killed mid-run frees its lease within the lease TTL", func(t *testing.T) {
		lim := Limits{Concurrency: 1, DailyCPUSeconds: 60}
		dying := NewRedis(newTestClient(t, Config{RedisURL: srv.URL()}), cfg)
		start := time.Now()
		a := mustAdmit(t, dying, "replicas", "orphan", lim, 5000)
		a.stopHeartbeat()
		dying.client.Close() // the process is gone
		_, err := ls[0].Admit(context.Background(), AdmitRequest{TenantID: "replicas", ExecutionID: "survivor", Limits: lim, CPUReserveMS: 5000})
		mustExceed(t, err, KindConcurrency)
		waitFor(t, 2*time.Second, "the orphaned lease to expire", func() bool {
			_, err = ls[1].Admit(context.Background(), AdmitRequest{TenantID: "replicas", ExecutionID: "survivor", Limits: lim, CPUReserveMS: 5000})
			return err == nil
		})
		if took := time.Since(start); took < 250*time.Millisecond || took > time.Second {
			t.Fatalf("freed after %s, want about the 300ms TTL", took)
		}
		if u := usage(t, ls[2], "replicas", lim); u.Budget.ReservedMS != 5000 || u.Concurrency.Running != 1 {
			t.Fatalf("usage = %+v, want only the survivor's lease and reservation", u)
		}
	})

	t.Run("an override set through one replica applies on the others", func(t *testing.T) {
		lim := Limits{Concurrency: 1}
		mustAdmit(t, ls[0], "ov", "a", lim, 0)
		if err := ls[1].SetOverride(context.Background(), "ov", Limits{Concurrency: 2}); err != nil {
			t.Fatal(err)
		}
		mustAdmit(t, ls[2], "ov", "b", lim, 0)
	})
}

// clusterServer starts a one-node Redis Cluster owning every slot.
func clusterServer(t *testing.T) *testenv.RedisServer {
	t.Helper()
	srv := testenv.Redis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	ctx := context.Background()
	if err := c.ClusterAddSlotsRange(ctx, 0, 16383).Err(); err != nil {
		t.Fatalf("assigning slots: %v", err)
	}
	waitFor(t, 10*time.Second, "cluster_state:ok", func() bool {
		info, err := c.ClusterInfo(ctx).Result()
		return err == nil && strings.Contains(info, "cluster_state:ok")
	})
	return srv
}

func TestRedisClusterSafety(t *testing.T) {
	srv := clusterServer(t)
	ctx := context.Background()
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { raw.Close() })

	t.Run("every key of a tenant hashes to one slot", func(t *testing.T) {
		r := NewRedis(raw, Config{})
		for _, tenant := range []string{"acme", "a:b", "with space", "ünïcödé", "x]y"} {
			k := r.keys(tenant)
			all := []string{k.rate, k.leases, k.resv, k.budget, k.settled, k.override, k.tools}
			slots := map[int64][]string{}
			for _, key := range all {
				slot, err := raw.ClusterKeySlot(ctx, key).Result()
				if err != nil {
					t.Fatal(err)
				}
				slots[slot] = append(slots[slot], key)
			}
			if len(slots) != 1 {
				t.Fatalf("tenant %q: keys span %d slots: %v", tenant, len(slots), slots)
			}
		}
		a, _ := raw.ClusterKeySlot(ctx, r.keys("acme").leases).Result()
		b, _ := raw.ClusterKeySlot(ctx, r.keys("globex").leases).Result()
		if a == b {
			t.Log("acme and globex share a slot by chance; tags still differ")
		}
	})

	t.Run("the whole lifecycle runs on a Cluster client without CROSSSLOT", func(t *testing.T) {
		c := newTestClient(t, Config{RedisURL: srv.URL(), RedisCluster: true})
		if _, ok := c.(*redis.ClusterClient); !ok {
			t.Fatalf("client is %T, want *redis.ClusterClient", c)
		}
		// A TTL a loaded host's scheduling cannot starve: at 90 ms each
		// heartbeat had 30 ms (its interval, and its context's timeout)
		// and two late ones lose the lease (the suite's 150 ms flaked at
		// load 10 on 2 cores). The rate's emission interval (10 s) stays
		// longer than the test, so the tokens left below are exact.
		l := NewRedis(c, Config{KeyPrefix: uniquePrefix(), LeaseTTLMS: 500})
		lim := Limits{RatePerMinute: 6, Burst: 5, Concurrency: 2, DailyCPUSeconds: 10}
		if err := l.SetOverride(ctx, "acme", lim); err != nil {
			t.Fatal(err)
		}
		a := mustAdmit(t, l, "acme", "e1", Limits{}, 1000)
		// Outlive the 500 ms TTL several times: only heartbeats keep it.
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if u := usage(t, l, "acme", Limits{}); u.Concurrency.Running != 1 {
				t.Fatalf("running = %d: the heartbeat did not keep the lease on the cluster", u.Concurrency.Running)
			}
		}
		select {
		case <-a.Lost():
			t.Fatal("lease lost: heartbeat failed on the cluster")
		default:
		}
		mustSettle(t, a, 10)
		b := mustAdmit(t, l, "acme", "e2", Limits{}, 1000)
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
		u := usage(t, l, "acme", Limits{})
		if u.Budget.UsedMS != 10 || u.Rate.Remaining != 3 || u.Concurrency.Limit != 2 {
			t.Fatalf("usage = %+v", u)
		}
		if err := l.ClearOverride(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		if err := l.Ping(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRedisOutage(t *testing.T) {
	srv := testenv.Redis(t)
	ctx := context.Background()
	rec := &recorder{}
	prefix := uniquePrefix()
	local := NewRedis(newTestClient(t, Config{RedisURL: srv.URL()}), Config{KeyPrefix: prefix, RateFailMode: FailLocal, LeaseTTLMS: 300}, WithObserver(rec))
	closed := NewRedis(newTestClient(t, Config{RedisURL: srv.URL()}), Config{KeyPrefix: prefix, RateFailMode: FailClosed, LeaseTTLMS: 300})
	limited := Limits{RatePerMinute: 6000, Burst: 100, Concurrency: 2, DailyCPUSeconds: 1000}
	rateOnly := Limits{RatePerMinute: 600, Burst: 5}

	before := mustAdmit(t, local, "limited", "before-outage", limited, 100)

	// Load from both tenants through both limiters while Redis dies.
	var (
		stop       atomic.Bool
		unexpected = make(chan error, 100)
		seen       sync.Map // outcome name → true
		wg         sync.WaitGroup
		seq        atomic.Int64
	)
	load := func(l *RedisLimiter, name, tenant string, lim Limits) {
		defer wg.Done()
		for !stop.Load() {
			id := fmt.Sprint("load-", seq.Add(1))
			a, err := l.Admit(ctx, AdmitRequest{TenantID: tenant, ExecutionID: id, Limits: lim, CPUReserveMS: 1})
			var e *ExceededError
			switch {
			case err == nil:
				if a.Degraded {
					seen.Store(name+"/"+tenant+"/degraded", true)
				}
				if err := a.Settle(ctx, 1); err != nil && !errors.Is(err, ErrUnavailable) {
					unexpected <- fmt.Errorf("settle: %w", err)
				}
			case errors.Is(err, ErrUnavailable):
				seen.Store(name+"/"+tenant+"/unavailable", true)
			case errors.As(err, &e):
				seen.Store(name+"/"+tenant+"/exceeded", true)
			default:
				unexpected <- err
			}
			time.Sleep(time.Millisecond)
		}
	}
	for _, l := range []struct {
		l    *RedisLimiter
		name string
	}{{local, "local"}, {closed, "closed"}} {
		wg.Add(2)
		go load(l.l, l.name, "limited", limited)
		go load(l.l, l.name, "rateonly", rateOnly)
	}
	has := func(k string) bool { _, ok := seen.Load(k); return ok }

	srv.Kill()
	waitFor(t, 5*time.Second, "every tenant and mode to see the outage", func() bool {
		return has("local/limited/unavailable") && has("closed/limited/unavailable") &&
			has("closed/rateonly/unavailable") && has("local/rateonly/degraded") && has("local/rateonly/exceeded")
	})

	t.Run("while Redis is down, admission fails fast", func(t *testing.T) {
		start := time.Now()
		_, err := closed.Admit(ctx, AdmitRequest{TenantID: "limited", ExecutionID: "fast", Limits: limited})
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Admit = %v, want ErrUnavailable", err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("Admit took %s with Redis down", took)
		}
		if err := closed.Ping(ctx); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Ping = %v, want ErrUnavailable", err)
		}
		if _, err := closed.Usage(ctx, "limited", limited); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Usage = %v, want ErrUnavailable", err)
		}
		if err := closed.SetOverride(ctx, "limited", limited); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("SetOverride = %v, want ErrUnavailable", err)
		}
	})

	srv.Restart()
	t.Run("when Redis returns, the same limiters admit again", func(t *testing.T) {
		for _, l := range []*RedisLimiter{local, closed} {
			waitFor(t, 10*time.Second, "an admission after the restart", func() bool {
				a, err := l.Admit(ctx, AdmitRequest{TenantID: "limited", ExecutionID: "after-" + fmt.Sprint(seq.Add(1)), Limits: limited})
				if err != nil {
					return false
				}
				return !a.Degraded && a.Settle(ctx, 1) == nil
			})
		}
	})
	stop.Store(true)
	wg.Wait()
	close(unexpected)
	for err := range unexpected {
		t.Errorf("unexpected error under load: %v", err)
	}

	t.Run("a run admitted before Redis lost its state learns it lost its lease", func(t *testing.T) {
		select {
		case <-before.Lost():
		case <-time.After(3 * time.Second):
			t.Fatal("Lost not closed after Redis restarted empty")
		}
	})

	t.Run("fail-closed and fail-open events were counted and observed", func(t *testing.T) {
		s := local.Stats()
		if s.FailClosed == 0 || s.FailOpen == 0 || s.LeasesLost == 0 {
			t.Fatalf("local Stats = %+v, want fail-closed, fail-open and lease-lost events", s)
		}
		if s := closed.Stats(); s.FailClosed == 0 || s.FailOpen != 0 {
			t.Fatalf("closed Stats = %+v, want fail-closed only", s)
		}
		var kinds = map[string]bool{}
		for _, e := range rec.list() {
			kinds[e] = true
		}
		for _, want := range []string{"limited/concurrency/fail_closed", "rateonly/rate/fail_open", "limited/concurrency/lease_lost"} {
			if !kinds[want] {
				t.Errorf("observer never saw %s (saw %d events)", want, len(rec.list()))
			}
		}
	})
}

func TestRedisBudgetDayBoundary(t *testing.T) {
	srv := testenv.Redis(t)
	ctx := context.Background()
	l := NewRedis(newTestClient(t, Config{RedisURL: srv.URL()}), Config{KeyPrefix: uniquePrefix()})
	now, err := l.client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// Shift the budget day so that its midnight is 1.5 s from now.
	shift := nextUTCMidnight(now).Add(-1500 * time.Millisecond).Sub(now)
	l.dayShiftMS.Store(shift.Milliseconds())

	lim := Limits{DailyCPUSeconds: 1}
	mustSettle(t, mustAdmit(t, l, "acme", "today", lim, 1000), 1000)
	_, err = l.Admit(ctx, AdmitRequest{TenantID: "acme", ExecutionID: "tomorrow", Limits: lim, CPUReserveMS: 500})
	e := mustExceed(t, err, KindBudget)
	if e.RetryAfter < 500*time.Millisecond || e.RetryAfter > 1510*time.Millisecond {
		t.Fatalf("RetryAfter = %s, want the ~1.5s left until the (shifted) midnight", e.RetryAfter)
	}
	u := usage(t, l, "acme", lim)
	if d := u.Budget.ResetsAt.Sub(now.Add(1500 * time.Millisecond)); d < -50*time.Millisecond || d > 50*time.Millisecond {
		t.Fatalf("ResetsAt = %s, want %s", u.Budget.ResetsAt, now.Add(1500*time.Millisecond))
	}
	start := time.Now()
	waitFor(t, 5*time.Second, "the new budget day", func() bool {
		_, err = l.Admit(ctx, AdmitRequest{TenantID: "acme", ExecutionID: "tomorrow", Limits: lim, CPUReserveMS: 500})
		return err == nil
	})
	if waited := time.Since(start); waited+100*time.Millisecond < e.RetryAfter {
		t.Fatalf("admitted after %s, before the promised %s", waited, e.RetryAfter)
	}
	if u := usage(t, l, "acme", lim); u.Budget.UsedMS != 0 || u.Budget.ReservedMS != 500 {
		t.Fatalf("budget = %+v, want a fresh day with 500 reserved", u.Budget)
	}
}

func TestRedisRateMatchesRedisRate(t *testing.T) {
	srv := testenv.Redis(t)
	ctx := context.Background()
	client := newTestClient(t, Config{RedisURL: srv.URL()})
	l := NewRedis(client, Config{KeyPrefix: uniquePrefix()})
	ref := redis_rate.NewLimiter(client)
	lim := Limits{RatePerMinute: 60, Burst: 5}
	refLim := redis_rate.Limit{Rate: 60, Burst: 5, Period: time.Minute}

	t.Run("the admission script admits and refuses exactly like redis_rate", func(t *testing.T) {
		// Each request reaches redis_rate's bucket a little after ours
		// (one round trip later, by Redis TIME), so their Retry-Afters
		// differ by how much that lag changed since the first request:
		// within (-pair₀, +pairᵢ), each pair's lag being at most its
		// measured duration, and 1 ms of our rounding up. (A fixed ±20 ms
		// fails when one round trip of a loaded host takes longer.)
		var first time.Duration
		for i := range 8 {
			start := time.Now()
			a, err := l.Admit(ctx, AdmitRequest{TenantID: "conf", ExecutionID: fmt.Sprint(i), Limits: lim})
			res, refErr := ref.Allow(ctx, "reference", refLim)
			pair := time.Since(start)
			if i == 0 {
				first = pair
			}
			if refErr != nil {
				t.Fatal(refErr)
			}
			if (err == nil) != (res.Allowed == 1) {
				t.Fatalf("request %d: ours %v, redis_rate allowed=%d", i, err, res.Allowed)
			}
			if err != nil {
				e := mustExceed(t, err, KindRate)
				if d := e.RetryAfter - res.RetryAfter; d < -first-time.Millisecond || d > pair+2*time.Millisecond {
					t.Fatalf("request %d: RetryAfter %s, redis_rate %s (the pairs of calls took %s first, %s now)", i, e.RetryAfter, res.RetryAfter, first, pair)
				}
				continue
			}
			mustSettle(t, a, 0)
		}
	})

	t.Run("redis_rate reads and spends the same bucket", func(t *testing.T) {
		k := l.keys("conf2")
		mustSettle(t, mustAdmit(t, l, "conf2", "x", lim, 0), 0)
		mustSettle(t, mustAdmit(t, l, "conf2", "y", lim, 0), 0)
		peek, err := ref.AllowN(ctx, k.rateBase, refLim, 0)
		if err != nil || peek.Remaining != 3 {
			t.Fatalf("redis_rate peek = %+v, %v; want 3 remaining", peek, err)
		}
		if res, err := ref.Allow(ctx, k.rateBase, refLim); err != nil || res.Allowed != 1 {
			t.Fatalf("redis_rate Allow = %+v, %v", res, err)
		}
		if u := usage(t, l, "conf2", lim); u.Rate.Remaining != 2 {
			t.Fatalf("remaining = %d after redis_rate spent one, want 2", u.Rate.Remaining)
		}
	})
}

func TestNewRedisClient(t *testing.T) {
	srv := testenv.Redis(t)
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		cfg   Config
		check func(t *testing.T, c redis.UniversalClient)
		err   string
	}{
		{name: "a standalone URL answers", cfg: Config{RedisURL: srv.URL()}, check: func(t *testing.T, c redis.UniversalClient) {
			o := c.(*redis.Client).Options()
			if o.ReadTimeout != 500*time.Millisecond || o.DialTimeout != 500*time.Millisecond || o.MaxRetries != 1 {
				t.Fatalf("timeouts not applied: read %s dial %s retries %d", o.ReadTimeout, o.DialTimeout, o.MaxRetries)
			}
			if err := c.Ping(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "timeouts in the URL win", cfg: Config{RedisURL: srv.URL() + "?read_timeout=2s"}, check: func(t *testing.T, c redis.UniversalClient) {
			if o := c.(*redis.Client).Options(); o.ReadTimeout != 2*time.Second {
				t.Fatalf("read timeout %s", o.ReadTimeout)
			}
		}},
		{name: "the cluster flag builds a cluster client", cfg: Config{RedisURL: srv.URL(), RedisCluster: true}, check: func(t *testing.T, c redis.UniversalClient) {
			if _, ok := c.(*redis.ClusterClient); !ok {
				t.Fatalf("got %T", c)
			}
		}},
		{name: "addresses with a master name build a Sentinel client with the password file", cfg: Config{RedisAddrs: []string{"127.0.0.1:1"}, MasterName: "mymaster", RedisPasswordFile: pwFile}, check: func(t *testing.T, c redis.UniversalClient) {
			o := c.(*redis.Client).Options()
			if o.Password != "hunter2" {
				t.Fatalf("password %q, want the file's without its newline", o.Password)
			}
		}},
		{name: "several addresses build a cluster client", cfg: Config{RedisAddrs: []string{"127.0.0.1:1", "127.0.0.1:2"}}, check: func(t *testing.T, c redis.UniversalClient) {
			if _, ok := c.(*redis.ClusterClient); !ok {
				t.Fatalf("got %T", c)
			}
		}},
		{name: "a malformed URL is refused without echoing its password", cfg: Config{RedisURL: "redis://:s3cret@host:notaport/0"}, err: "quota.redis_url"},
		{name: "a wrong scheme is refused", cfg: Config{RedisURL: "http://:s3cret@127.0.0.1:6379"}, err: "scheme"},
		{name: "nothing configured is refused", cfg: Config{}, err: "quota.redis_url"},
		{name: "a missing password file is refused", cfg: Config{RedisAddrs: []string{"127.0.0.1:1"}, RedisPasswordFile: "/nonexistent/pw"}, err: "quota.redis_password_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewRedisClient(tc.cfg)
			if tc.err != "" {
				if err == nil {
					c.Close()
					t.Fatalf("want an error containing %q", tc.err)
				}
				if !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "s3cret") {
					t.Fatalf("error %q: want it to name %q and not leak the password", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			tc.check(t, c)
		})
	}
}

func TestRedisTracingOmitsStatements(t *testing.T) {
	srv := testenv.Redis(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	l := NewRedis(newTestClient(t, Config{RedisURL: srv.URL()}), Config{KeyPrefix: uniquePrefix()})
	a := mustAdmit(t, l, "acme", "exec-id-must-not-appear", Limits{Concurrency: 1}, 1234)
	mustSettle(t, a, 1)
	if err := tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) == 0 {
		t.Fatal("no Redis spans recorded: tracing is not instrumented")
	}
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			if k := string(kv.Key); k == "db.statement" || k == "db.query.text" || strings.Contains(kv.Value.String(), "exec-id-must-not-appear") {
				t.Fatalf("span %q carries %s=%q", s.Name(), k, kv.Value.String())
			}
		}
	}
}

func TestRedisServerErrorsFailClosed(t *testing.T) {
	srv := testenv.Redis(t)
	ctx := context.Background()
	l := NewRedis(newTestClient(t, Config{RedisURL: srv.URL()}), Config{KeyPrefix: uniquePrefix(), RateFailMode: FailLocal})
	// A key of the wrong type: Redis answers, but with an error. That is not
	// an outage, so even "local" mode must not fail open.
	if err := l.client.Set(ctx, l.keys("broken").leases, "not a zset", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := l.Admit(ctx, AdmitRequest{TenantID: "broken", ExecutionID: "x", Limits: Limits{RatePerMinute: 60, Burst: 1}})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Admit = %v, want ErrUnavailable carrying WRONGTYPE", err)
	}
	if s := l.Stats(); s.FailClosed != 1 || s.FailOpen != 0 {
		t.Fatalf("Stats = %+v, want one fail-closed, no fail-open", s)
	}
}

func TestRedisOverrideWrittenBeforeMaxQueuedReadsAsUnbounded(t *testing.T) {
	srv := testenv.Redis(t)
	ctx := context.Background()
	c := newTestClient(t, Config{RedisURL: srv.URL()})
	l := NewRedis(c, Config{KeyPrefix: uniquePrefix()})
	// An override as an older release wrote it: four fields, no max_queued.
	if err := c.HSet(ctx, l.keys("old").override, "rate_per_minute", 0, "burst", 0, "concurrency", 3, "daily_cpu_seconds", 0).Err(); err != nil {
		t.Fatal(err)
	}
	want := Limits{Concurrency: 3}
	if got, ok, err := l.Override(ctx, "old"); err != nil || !ok || got != want {
		t.Fatalf("Override = %+v, %v, %v; want %+v", got, ok, err, want)
	}
	configured := Limits{MaxQueued: 7}
	if a := mustAdmit(t, l, "old", "e1", configured, 0); a.Limits != want {
		t.Fatalf("admission limits = %+v, want the old override with max_queued 0 (%+v)", a.Limits, want)
	}
	// Without an override the configured max_queued is the effective one.
	if a := mustAdmit(t, l, "new", "e1", configured, 0); a.Limits != configured {
		t.Fatalf("admission limits = %+v, want %+v", a.Limits, configured)
	}
}

// A large value must arrive whole within one read's deadline: the bulk
// client's reads may take quota.bulk_timeout_ms, while the admission
// client keeps quota.timeout_ms (and both dial within timeout_ms).
func TestTheBulkClientMovesValuesTheAdmissionClientCannot(t *testing.T) {
	srv := testenv.Redis(t)
	cfg := Config{RedisURL: srv.URL(), TimeoutMS: 1}
	base, err := NewRedisClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	bulk, err := NewRedisBulkClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer bulk.Close()
	o := bulk.(*redis.Client).Options()
	if o.DialTimeout != time.Millisecond || o.ReadTimeout != DefaultBulkTimeoutMS*time.Millisecond || o.WriteTimeout != o.ReadTimeout {
		t.Fatalf("bulk client: dial %s read %s write %s, want dial timeout_ms and reads and writes bulk_timeout_ms", o.DialTimeout, o.ReadTimeout, o.WriteTimeout)
	}
	// A read_timeout or write_timeout in the URL, meant for admission,
	// is a floor for the bulk client, not its bound.
	short := Config{RedisURL: srv.URL() + "?read_timeout=100ms&write_timeout=200ms", TimeoutMS: 1}
	bulkShort, err := NewRedisBulkClient(short)
	if err != nil {
		t.Fatal(err)
	}
	defer bulkShort.Close()
	if o := bulkShort.(*redis.Client).Options(); o.ReadTimeout != DefaultBulkTimeoutMS*time.Millisecond || o.WriteTimeout != o.ReadTimeout {
		t.Fatalf("bulk client of a URL with read_timeout=100ms&write_timeout=200ms: read %s write %s, want bulk_timeout_ms", o.ReadTimeout, o.WriteTimeout)
	}
	baseShort, err := NewRedisClient(short)
	if err != nil {
		t.Fatal(err)
	}
	defer baseShort.Close()
	if o := baseShort.(*redis.Client).Options(); o.ReadTimeout != 100*time.Millisecond || o.WriteTimeout != 200*time.Millisecond {
		t.Fatalf("admission client of a URL with read_timeout=100ms&write_timeout=200ms: read %s write %s", o.ReadTimeout, o.WriteTimeout)
	}
	ctx := context.Background()
	big := strings.Repeat("x", 48<<20)
	if err := bulk.Set(ctx, "big", big, time.Minute).Err(); err != nil {
		t.Fatalf("bulk SET of 48 MiB: %v", err)
	}
	got, err := bulk.Get(ctx, "big").Result()
	if err != nil || len(got) != len(big) {
		t.Fatalf("bulk GET of 48 MiB: %d bytes, %v", len(got), err)
	}
	if _, err := base.Get(ctx, "big").Result(); err == nil {
		t.Fatal("the admission client read 48 MiB within 1 ms: this test no longer shows the bulk client's point")
	}
}
