package dispatch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/sandbox"
)

// admitted returns ctx carrying a real admission of tenant under lim, as
// the flow passes it to its runner.
func admitted(t *testing.T, ctx context.Context, l quota.Limiter, tenant, id string, lim quota.Limits) context.Context {
	t.Helper()
	a, err := l.Admit(ctx, quota.AdmitRequest{TenantID: tenant, ExecutionID: id, Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Release(context.Background()) })
	return quota.NewContext(ctx, a)
}

func TestMaxQueuedBoundsATenantsWaitingRunsAcrossGateways(t *testing.T) {
	rdb := newRedis(t)
	ctx := context.Background()
	k := newKeys("execgate")
	// One executor with one slot, held by a run that waits for release.
	release := make(chan struct{})
	run := &countingRunner{fn: func(ctx context.Context, spec sandbox.Spec) sandbox.Result {
		if spec.TenantID == "busy" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return sandbox.Result{Status: sandbox.StatusOK}
	}}
	ex, err := NewExecutor(rdb, testCfg(), testKey, run, ExecutorOptions{Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := ex.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ex.Stop(context.Background()) })
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before Stop, which waits for the busy run
	// Two gateways share the bound (it lives in Redis).
	var gws [2]*Dispatcher
	for i := range gws {
		if gws[i], err = NewDispatcher(rdb, testCfg(), testKey, Options{}); err != nil {
			t.Fatal(err)
		}
	}
	lim := quota.NewMemory(quota.Config{})
	bounded := quota.Limits{MaxQueued: 2}

	type answer struct {
		tenant string
		res    sandbox.Result
		err    error
	}
	answers := make(chan answer, 8)
	dispatch := func(gw *Dispatcher, rctx context.Context, tenant string) {
		spec := testJob("").Spec.spec()
		spec.TenantID = tenant
		res, err := gw.Run(rctx, spec)
		answers <- answer{tenant, res, err}
	}
	go dispatch(gws[0], admitted(t, ctx, lim, "busy", "b1", quota.Limits{}), "busy")
	waitFor(t, 10*time.Second, "the busy run to hold the only slot", func() bool { return run.count() == 1 })

	queued := func(tenant string) int64 { return rdb.ZCard(ctx, k.queued(tenant)).Val() }
	go dispatch(gws[0], admitted(t, ctx, lim, "acme", "a1", bounded), "acme")
	cctx, cancelA2 := context.WithCancel(admitted(t, ctx, lim, "acme", "a2", bounded))
	defer cancelA2()
	go dispatch(gws[1], cctx, "acme")
	waitFor(t, 10*time.Second, "acme's two runs to be queued", func() bool { return queued("acme") == 2 })

	// The third waits for nobody: 429 max_queued, nothing queued, on either gateway.
	for i, gw := range gws {
		// A refusal is immediate; a run queued by mistake would wait for the slot.
		tctx, cancel := context.WithTimeout(admitted(t, ctx, lim, "acme", fmt.Sprint("a3-", i), bounded), 5*time.Second)
		defer cancel()
		_, err := gw.Run(tctx, func() sandbox.Spec {
			s := testJob("").Spec.spec()
			s.TenantID = "acme"
			return s
		}())
		var ex *quota.ExceededError
		if !errors.As(err, &ex) || ex.Kind != quota.KindQueued || ex.Limit != 2 {
			t.Fatalf("gateway %d: third queued run = %v, want ExceededError max_queued (limit 2)", i, err)
		}
	}
	if n, _ := rdb.XLen(ctx, k.runsFor(limits.DefaultRuntime)).Result(); n != 2 || queued("acme") != 2 {
		t.Fatalf("stream holds %d entries and acme's queue %d, want 2 and 2: the refused run was queued", n, queued("acme"))
	}
	// Another tenant with the same bound still queues.
	go dispatch(gws[1], admitted(t, ctx, lim, "other", "o1", bounded), "other")
	waitFor(t, 10*time.Second, "the other tenant's run to be queued", func() bool { return queued("other") == 1 })

	// A caller that goes away gives its place back at once.
	cancelA2()
	waitFor(t, 10*time.Second, "the abandoned run to leave acme's queue", func() bool { return queued("acme") == 1 })
	go dispatch(gws[0], admitted(t, ctx, lim, "acme", "a4", bounded), "acme")
	waitFor(t, 10*time.Second, "acme to queue again", func() bool { return queued("acme") == 2 })

	// Free the slot: every queued run starts (leaving its queue) and ends.
	free()
	want := map[string]int{"busy": 1, "acme": 2, "other": 1}
	got := map[string]int{}
	for range 5 {
		select {
		case a := <-answers:
			switch {
			case a.err != nil:
				t.Fatalf("%s: %v", a.tenant, a.err)
			case a.res.ErrorType() == sandbox.ErrCancelled && a.tenant == "acme":
				// the run whose caller went away
			default:
				got[a.tenant]++
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("runs did not finish; answered %v", got)
		}
	}
	for tenant, n := range want {
		if got[tenant] != n {
			t.Fatalf("answers %v, want %v", got, want)
		}
	}
	if queued("acme") != 0 || queued("other") != 0 {
		t.Fatalf("queues hold %d and %d after every run started", queued("acme"), queued("other"))
	}
	if run.count() != 4 {
		t.Fatalf("the executor ran %d runs, want 4 (the abandoned one never)", run.count())
	}
}

func TestAnUnboundedTenantLeavesNoQueueKey(t *testing.T) {
	rdb := newRedis(t)
	ctx := context.Background()
	startExecutor(t, rdb, testCfg(), &countingRunner{})
	d, err := NewDispatcher(rdb, testCfg(), testKey, Options{})
	if err != nil {
		t.Fatal(err)
	}
	spec := testJob("").Spec.spec()
	if _, err := d.Run(admitted(t, ctx, quota.NewMemory(quota.Config{}), "t", "e1", quota.Limits{}), spec); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Run(ctx, spec); err != nil { // no admission at all (role all never gets here)
		t.Fatal(err)
	}
	keys, _ := rdb.Keys(ctx, "*queued*").Result()
	if len(keys) != 0 || strings.Contains(fmt.Sprint(keys), "queued") {
		t.Fatalf("queue keys %v written for an unbounded tenant", keys)
	}
}

func TestARunThatExpiredInTheQueueGivesItsPlaceBack(t *testing.T) {
	rdb := newRedis(t)
	ctx := context.Background()
	k := newKeys("execgate")
	announce(t, rdb, "mute", limits.DefaultRuntime, "", "") // alive, never reads
	cfg := testCfg()
	cfg.QueueTimeoutMS = 300
	d, err := NewDispatcher(rdb, cfg, testKey, Options{})
	if err != nil {
		t.Fatal(err)
	}
	lim := quota.NewMemory(quota.Config{})
	one := quota.Limits{MaxQueued: 1}
	for i := range 2 { // the second is not refused: the first gave its place back
		_, err := d.Run(admitted(t, ctx, lim, "t", fmt.Sprint("e", i), one), testJob("").Spec.spec())
		var ue *sandbox.UnavailableError
		if !errors.As(err, &ue) || ue.Reason != "no executor" {
			t.Fatalf("run %d = %v, want 503 no executor (expired in the queue)", i, err)
		}
		if n := rdb.ZCard(ctx, k.queued("t")).Val(); n != 0 {
			t.Fatalf("run %d: %d places still held after it expired", i, n)
		}
	}
}
