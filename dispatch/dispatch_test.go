package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/runtimes"
	"github.com/execgate/execgate/sandbox"
)

// In-process tests of the mechanism against a real redis-server, with a
// hand-written runner standing in for nsjail (the process test,
// split_e2e_test.go, runs the real one).

var testKey = []byte(strings.Repeat("s", 32))

// countingRunner records every spec it runs; fn (optional) answers it.
type countingRunner struct {
	mu   sync.Mutex // guards runs
	runs []sandbox.Spec
	fn   func(ctx context.Context, spec sandbox.Spec) sandbox.Result
}

func (r *countingRunner) Run(ctx context.Context, spec sandbox.Spec) (sandbox.Result, error) {
	r.mu.Lock()
	r.runs = append(r.runs, spec)
	r.mu.Unlock()
	if r.fn != nil {
		return r.fn(ctx, spec), nil
	}
	return sandbox.Result{Status: sandbox.StatusOK, Result: json.RawMessage(`{"ok":true}`)}, nil
}

func (r *countingRunner) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.runs)
}

func testCfg() Config {
	return Config{HeartbeatMS: 100, QueueTimeoutMS: 5000, ExecutorID: "ex-test"}
}

func newRedis(t *testing.T) *redis.Client {
	t.Helper()
	srv := testenv.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 32})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func startExecutor(t *testing.T, rdb *redis.Client, cfg Config, run Runner) *Executor {
	t.Helper()
	ex, err := NewExecutor(rdb, cfg, testKey, run, ExecutorOptions{Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := ex.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ex.Stop(context.Background()) })
	return ex
}

// startPair starts an executor running run and a dispatcher that sees it.
func startPair(t *testing.T, rdb *redis.Client, run Runner) *Dispatcher {
	t.Helper()
	startExecutor(t, rdb, testCfg(), run)
	d, err := NewDispatcher(rdb, testCfg(), testKey, Options{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the executor's heartbeat", func() bool {
		f, _ := d.Executors(context.Background())
		return len(f) == 1
	})
	return d
}

func testJob(runID string) Job {
	now := time.Now()
	return Job{V: WireVersion, RunID: runID, Gateway: "test", IssuedMS: now.UnixMilli(), ExpiresMS: now.Add(time.Minute).UnixMilli(),
		Spec: WireSpec{ExecutionID: "x-" + runID, TenantID: "t", Source: "src", Limits: sandbox.Limits{TimeoutMS: 1000, CPUMS: 1000, MemoryMB: 64, Pids: 8, OutputBytes: 4096, TmpMB: 4}.Or(limits.Default)}}
}

// pushAndStrand queues a genuine job and reads it as a consumer that dies
// before starting it: the entry is pending on "ghost".
func pushAndStrand(t *testing.T, rdb *redis.Client, job Job) {
	t.Helper()
	ctx := context.Background()
	k := newKeys("execgate")
	b, _ := json.Marshal(job)
	if err := rdb.XGroupCreateMkStream(ctx, k.runsFor(limits.DefaultRuntime), group, "0").Err(); err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		t.Fatal(err)
	}
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.runsFor(limits.DefaultRuntime), Values: []string{"job", signer{testKey}.seal(domainJob, b)}}).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "ghost", Streams: []string{k.runsFor(limits.DefaultRuntime), ">"}, Count: 1}).Result()
	if err != nil || len(got) != 1 || len(got[0].Messages) != 1 {
		t.Fatalf("stranding the entry: %v %v", got, err)
	}
}

// confirmAsGateway plays the gateway of a job pushed by hand: it waits for
// the executor's start request and confirms it.
func confirmAsGateway(t testing.TB, rdb redis.UniversalClient, key []byte, runID string) {
	t.Helper()
	ctx := context.Background()
	k := newKeys("execgate")
	sig := signer{key}.forRun(runID)
	kv, err := rdb.BLPop(ctx, 20*time.Second, k.start(runID)).Result()
	if err != nil {
		t.Fatalf("no start request for run %s: %v", runID, err)
	}
	var f startFrame
	if err := openFrame(sig, domainStart, kv[1], maxStartFrame, &f); err != nil || f.RunID != runID {
		t.Fatalf("start request %q: %v", kv[1], err)
	}
	v, err := sealFrame(sig, domainConfirm, confirmFrame{frameHead: f.frameHead, OK: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.RPush(ctx, k.confirm(runID, f.Executor), v).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestExecutorClaimsAnEntryADeadConsumerReadButNeverStarted(t *testing.T) {
	rdb := newRedis(t)
	job := testJob(newRunID())
	pushAndStrand(t, rdb, job)
	run := &countingRunner{}
	startExecutor(t, rdb, testCfg(), run)
	confirmAsGateway(t, rdb, testKey, job.RunID)

	kv, err := rdb.BLPop(context.Background(), 10*time.Second, newKeys("execgate").reply(job.RunID)).Result()
	if err != nil {
		t.Fatalf("no reply for the stranded entry: %v", err)
	}
	if !strings.Contains(kv[1], `"executor":"ex-test"`) || run.count() != 1 {
		t.Fatalf("reply %s after %d runs", kv[1], run.count())
	}
}

func TestExecutorNeverRunsAnEntryAlreadyStarted(t *testing.T) {
	rdb := newRedis(t)
	ctx := context.Background()
	k := newKeys("execgate")
	job := testJob(newRunID())
	// The run was started by an executor that died after SET NX and
	// before acknowledging the entry.
	if err := rdb.Set(ctx, k.started(job.RunID), "ghost", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	pushAndStrand(t, rdb, job)
	run := &countingRunner{}
	ex := startExecutor(t, rdb, testCfg(), run)

	waitFor(t, 10*time.Second, "the entry to be claimed and dropped", func() bool {
		_, _, skipped := ex.Stats()
		return skipped == 1
	})
	if run.count() != 0 {
		t.Fatalf("the started run ran again (%d runs)", run.count())
	}
	if p, err := rdb.XPending(ctx, k.runsFor(limits.DefaultRuntime), group).Result(); err != nil || p.Count != 0 {
		t.Fatalf("pending after the skip: %+v %v", p, err)
	}
}

func TestDispatcherNeverLetsAnExpiredRunStart(t *testing.T) {
	rdb := newRedis(t)
	ctx := context.Background()
	k := newKeys("execgate")
	cfg := testCfg()
	cfg.QueueTimeoutMS = 300
	// An executor that announces itself (serving the default runtime) but
	// never reads.
	a, _ := json.Marshal(Announcement{ID: "mute", Slots: 1, Wire: WireVersion,
		Runtimes: []runtimes.Info{{Name: limits.DefaultRuntime, Available: true}}})
	rdb.Set(ctx, k.executor("mute"), a, time.Minute)
	rdb.ZAdd(ctx, k.executors(), redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: "mute"})

	d, err := NewDispatcher(rdb, cfg, testKey, Options{})
	if err != nil {
		t.Fatal(err)
	}
	spec := testJob("").Spec.spec()
	_, err = d.Run(ctx, spec)
	var ue *sandbox.UnavailableError
	if !errors.As(err, &ue) || ue.Reason != "no executor" {
		t.Fatalf("Run = %v, want no executor", err)
	}
	// An executor that comes late finds the entry and drops it.
	run := &countingRunner{}
	cfg.ExecutorID = "late"
	cfg.QueueTimeoutMS = 5000
	ex := startExecutor(t, rdb, cfg, run)
	waitFor(t, 10*time.Second, "the expired entry to be dropped", func() bool {
		_, refused, skipped := ex.Stats()
		return refused+skipped == 1
	})
	if run.count() != 0 {
		t.Fatal("an expired run ran")
	}
}

// recordingBridge is the gateway's side of a run's tools in the test.
type recordingBridge struct {
	calls atomic.Int64
}

func (b *recordingBridge) Search(context.Context, string, int) ([]sandbox.ToolInfo, error) {
	return []sandbox.ToolInfo{{Name: "crm.lookup"}}, nil
}

func (b *recordingBridge) Describe(_ context.Context, name string) (sandbox.ToolInfo, error) {
	return sandbox.ToolInfo{}, &sandbox.ToolError{Type: sandbox.ErrToolDenied, Message: name + " is not granted"}
}

func (b *recordingBridge) Call(_ context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	b.calls.Add(1)
	return json.RawMessage(`{"tool":"` + name + `","args":` + string(args) + `}`), nil
}

func (b *recordingBridge) ToolCalls() []sandbox.ToolCall {
	return []sandbox.ToolCall{{Tool: "crm.lookup", Outcome: "ok", MS: 1}}
}

func TestBridgeCallsOfADispatchedRunAreServedByTheGateway(t *testing.T) {
	rdb := newRedis(t)
	run := &countingRunner{fn: func(ctx context.Context, spec sandbox.Spec) sandbox.Result {
		if spec.Bridge == nil {
			return sandbox.Result{Status: sandbox.StatusError, Error: &sandbox.ErrorInfo{Type: "ToolError", Message: "no bridge"}}
		}
		out, err := spec.Bridge.Call(ctx, "crm.lookup", json.RawMessage(`{"id":7}`))
		if err != nil {
			return sandbox.Result{Status: sandbox.StatusError, Error: &sandbox.ErrorInfo{Type: "ToolError", Message: err.Error()}}
		}
		_, derr := spec.Bridge.Describe(ctx, "secret.tool")
		var te *sandbox.ToolError
		if !errors.As(derr, &te) || te.Type != sandbox.ErrToolDenied {
			return sandbox.Result{Status: sandbox.StatusError, Error: &sandbox.ErrorInfo{Type: "ToolError", Message: "describe: " + derr.Error()}}
		}
		return sandbox.Result{Status: sandbox.StatusOK, Result: out,
			ToolCalls: []sandbox.ToolCall{{Tool: "forged", Outcome: "ok"}}} // the executor's word does not count
	}}
	d := startPair(t, rdb, run)
	b := &recordingBridge{}
	spec := testJob("").Spec.spec()
	spec.Bridge = b
	res, err := d.Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != sandbox.StatusOK || string(res.Result) != `{"tool":"crm.lookup","args":{"id":7}}` || b.calls.Load() != 1 {
		t.Fatalf("result %s %+v after %d gateway-side calls", res.Result, res.Error, b.calls.Load())
	}
	if len(res.ToolCalls) != 1 || res.ToolCalls[0].Tool != "crm.lookup" {
		t.Fatalf("tool calls %+v, want the gateway's record", res.ToolCalls)
	}
}

func TestAStartedRunIsKilledWhenItsCallerGoesAway(t *testing.T) {
	rdb := newRedis(t)
	started := make(chan struct{})
	killed := make(chan struct{})
	run := &countingRunner{fn: func(ctx context.Context, spec sandbox.Spec) sandbox.Result {
		close(started)
		select {
		case <-ctx.Done():
			close(killed)
		case <-time.After(30 * time.Second):
		}
		return sandbox.Result{Status: sandbox.StatusError, Error: &sandbox.ErrorInfo{Type: sandbox.ErrTimeout}, Usage: sandbox.Usage{CPUMS: 7}}
	}}
	d := startPair(t, rdb, run)
	ctx, cancel := context.WithCancel(context.Background())
	type out struct {
		res sandbox.Result
		err error
	}
	done := make(chan out, 1)
	go func() { res, err := d.Run(ctx, testJob("").Spec.spec()); done <- out{res, err} }()
	<-started
	cancel()
	select {
	case <-killed:
	case <-time.After(5 * time.Second):
		t.Fatal("the run kept running after its caller went away")
	}
	// The answer is Cancelled, with the usage the executor reported (the
	// runner above says 7 ms of CPU), not a sandbox error that would leave
	// the run uncharged.
	got := <-done
	if got.err != nil || got.res.ErrorType() != sandbox.ErrCancelled || got.res.Usage.CPUMS != 7 {
		t.Fatalf("Run = %+v, %v; want Cancelled with the executor's usage (7 ms)", got.res, got.err)
	}
}

// BenchmarkDispatchRoundTrip measures what the split adds to a run: the
// gateway's XADD, the executor's read, verify, SET NX, XACK/XDEL and
// signed reply, and the gateway's BLPOP, against a real redis-server on
// loopback, with a runner that answers at once.
//
//	go test -run '^$' -bench BenchmarkDispatchRoundTrip -benchtime 2000x ./dispatch/
func BenchmarkDispatchRoundTrip(b *testing.B) {
	srv := testenv.Redis(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64})
	b.Cleanup(func() { rdb.Close() })
	cfg := testCfg()
	quiet := Options{Logger: slog.New(slog.DiscardHandler)}
	ex, err := NewExecutor(rdb, cfg, testKey, &countingRunner{}, ExecutorOptions{Options: quiet, Slots: 8})
	if err != nil {
		b.Fatal(err)
	}
	if err := ex.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ex.Stop(context.Background()) })
	d, err := NewDispatcher(rdb, cfg, testKey, quiet)
	if err != nil {
		b.Fatal(err)
	}
	spec := testJob("").Spec.spec()
	spec.Source = strings.Repeat("x", 200)
	for _, c := range []int{1, 8} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			b.SetParallelism(c)
			lat := make(chan time.Duration, b.N)
			b.ResetTimer()
			var wg sync.WaitGroup
			next := make(chan struct{})
			for w := 0; w < c; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range next {
						t0 := time.Now()
						if _, err := d.Run(context.Background(), spec); err != nil {
							b.Error(err)
						}
						lat <- time.Since(t0)
					}
				}()
			}
			t0 := time.Now()
			for i := 0; i < b.N; i++ {
				next <- struct{}{}
			}
			close(next)
			wg.Wait()
			elapsed := time.Since(t0)
			close(lat)
			all := make([]time.Duration, 0, b.N)
			for l := range lat {
				all = append(all, l)
			}
			slices.Sort(all)
			b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "runs/s")
		})
	}
}

func TestTheExecutorsSpanJoinsTheGatewaysTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTracerProvider(prevTP); otel.SetTextMapPropagator(prevProp) })

	rdb := newRedis(t)
	d := startPair(t, rdb, &countingRunner{})
	ctx, parent := tp.Tracer("test").Start(context.Background(), "execgate.run")
	if _, err := d.Run(ctx, testJob("").Spec.spec()); err != nil {
		t.Fatal(err)
	}
	parent.End()
	waitFor(t, 5*time.Second, "the executor's span", func() bool {
		for _, s := range rec.Ended() {
			if s.Name() == "execgate.executor.run" {
				return true
			}
		}
		return false
	})
	for _, s := range rec.Ended() {
		if s.Name() == "execgate.executor.run" && (s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID()) {
			t.Fatalf("executor span parent %v trace %v, want %v in %v", s.Parent().SpanID(), s.SpanContext().TraceID(), parent.SpanContext().SpanID(), parent.SpanContext().TraceID())
		}
	}
}
