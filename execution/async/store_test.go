package async_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/execgate/execgate/execution/async"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/sandbox"
)

// One behaviour suite for both stores (STYLE: quota/suite_test.go).
func stores(t *testing.T, l async.Limits) map[string]async.Store {
	t.Helper()
	srv := testenv.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return map[string]async.Store{
		"memory": async.NewMemoryStore(l, nil),
		"redis":  async.NewRedisStore(rdb, "t"+strings.ReplaceAll(t.Name(), "/", "-"), l),
	}
}

func TestAStoreBoundsEachTenantsActiveExecutions(t *testing.T) {
	ctx := context.Background()
	for name, st := range stores(t, async.Limits{MaxActive: 2}) {
		t.Run(name, func(t *testing.T) {
			a1, a2, a3 := async.Key{TenantID: "a", ExecutionID: "1"}, async.Key{TenantID: "a", ExecutionID: "2"}, async.Key{TenantID: "a", ExecutionID: "3"}
			for _, k := range []async.Key{a1, a2} {
				if err := st.Create(ctx, k); err != nil {
					t.Fatalf("Create %v: %v", k, err)
				}
			}
			var many *async.TooManyError
			if err := st.Create(ctx, a3); !errors.As(err, &many) || many.Max != 2 {
				t.Fatalf("a third active execution: %v", err)
			}
			if err := st.Create(ctx, async.Key{TenantID: "b", ExecutionID: "1"}); err != nil {
				t.Fatalf("another tenant is not bounded by a's executions: %v", err)
			}
			if err := st.Create(ctx, a1); !errors.Is(err, async.ErrExists) {
				t.Fatalf("the same id again: %v", err)
			}
			if err := st.Finish(ctx, a1, 200, []byte(`{"ok":1}`)); err != nil {
				t.Fatal(err)
			}
			if err := st.Create(ctx, a3); err != nil {
				t.Fatalf("a finished execution frees its place: %v", err)
			}
		})
	}
}

func TestAStoreWalksAnExecutionThroughItsStatesAndCancel(t *testing.T) {
	ctx := context.Background()
	for name, st := range stores(t, async.Limits{}) {
		t.Run(name, func(t *testing.T) {
			k := async.Key{TenantID: "a", ExecutionID: "x"}
			if _, ok, _ := st.Get(ctx, k); ok {
				t.Fatal("found before Create")
			}
			if _, ok, _ := st.RequestCancel(ctx, k); ok {
				t.Fatal("cancelled before Create")
			}
			if err := st.Create(ctx, k); err != nil {
				t.Fatal(err)
			}
			if r, ok, err := st.Get(ctx, k); !ok || err != nil || r.State != async.StateQueued || r.SubmittedAt.IsZero() {
				t.Fatalf("after Create: %+v %v %v", r, ok, err)
			}
			if c, err := st.Start(ctx, k); c || err != nil {
				t.Fatalf("Start: %v %v", c, err)
			}
			was, ok, err := st.RequestCancel(ctx, k)
			if !ok || err != nil || was.State != async.StateRunning || was.CancelRequested {
				t.Fatalf("RequestCancel returned %+v %v %v", was, ok, err)
			}
			if c, _ := st.CancelRequested(ctx, k); !c {
				t.Fatal("the cancel is not visible")
			}
			if err := st.Finish(ctx, k, 200, []byte(`{"status":"error"}`)); err != nil {
				t.Fatal(err)
			}
			r, _, _ := st.Get(ctx, k)
			if r.State != async.StateDone || r.HTTPStatus != 200 || string(r.Envelope) != `{"status":"error"}` || r.FinishedAt.IsZero() || r.StartedAt.IsZero() {
				t.Fatalf("done: %+v", r)
			}
			if err := st.Finish(ctx, k, 500, []byte(`other`)); err != nil || func() bool { r, _, _ := st.Get(ctx, k); return string(r.Envelope) != `{"status":"error"}` }() {
				t.Fatal("a second Finish changed the result")
			}
		})
	}
}

func TestAStoreDropsOnlyTheTenantsOwnOldestResultsBeyondItsBudget(t *testing.T) {
	ctx := context.Background()
	for name, st := range stores(t, async.Limits{TenantResultBytes: 100}) {
		t.Run(name, func(t *testing.T) {
			body := []byte(strings.Repeat("x", 40))
			other := async.Key{TenantID: "b", ExecutionID: "keep"}
			_ = st.Create(ctx, other)
			_ = st.Finish(ctx, other, 200, body)
			for _, id := range []string{"1", "2", "3"} {
				k := async.Key{TenantID: "a", ExecutionID: id}
				if err := st.Create(ctx, k); err != nil {
					t.Fatal(err)
				}
				if err := st.Finish(ctx, k, 200, body); err != nil {
					t.Fatal(err)
				}
			}
			first, ok, _ := st.Get(ctx, async.Key{TenantID: "a", ExecutionID: "1"})
			if !ok || !first.Expired || first.Envelope != nil || first.State != async.StateDone {
				t.Fatalf("a's oldest: %+v", first)
			}
			for _, k := range []async.Key{{TenantID: "a", ExecutionID: "2"}, {TenantID: "a", ExecutionID: "3"}, other} {
				if r, _, _ := st.Get(ctx, k); r.Expired || len(r.Envelope) != 40 {
					t.Fatalf("%v was dropped: %+v", k, r)
				}
			}
		})
	}
}

func TestAMemoryStoreForgetsResultsAfterTheirTTL(t *testing.T) {
	now := time.Unix(1000, 0)
	st := async.NewMemoryStore(async.Limits{ResultTTL: time.Minute}, func() time.Time { return now })
	ctx := context.Background()
	k := async.Key{TenantID: "a", ExecutionID: "x"}
	_ = st.Create(ctx, k)
	_ = st.Finish(ctx, k, 200, []byte("e"))
	now = now.Add(59 * time.Second)
	if _, ok, _ := st.Get(ctx, k); !ok {
		t.Fatal("forgotten before its TTL")
	}
	now = now.Add(2 * time.Second)
	if _, ok, _ := st.Get(ctx, k); ok {
		t.Fatal("kept after its TTL")
	}
	if err := st.Create(ctx, k); err != nil {
		t.Fatalf("the id is free after the TTL: %v", err)
	}
}

func TestAStoreKeepsAtMostMaxResultsFinishedExecutionsPerTenant(t *testing.T) {
	ctx := context.Background()
	for name, st := range stores(t, async.Limits{MaxResults: 2}) {
		t.Run(name, func(t *testing.T) {
			for _, id := range []string{"1", "2", "3"} {
				k := async.Key{TenantID: "a", ExecutionID: id}
				if err := st.Create(ctx, k); err != nil {
					t.Fatal(err)
				}
				if err := st.Finish(ctx, k, 200, []byte("env-"+id)); err != nil {
					t.Fatal(err)
				}
			}
			if _, ok, _ := st.Get(ctx, async.Key{TenantID: "a", ExecutionID: "1"}); ok {
				t.Fatal("the oldest finished execution is kept beyond MaxResults")
			}
			for _, id := range []string{"2", "3"} {
				if r, ok, _ := st.Get(ctx, async.Key{TenantID: "a", ExecutionID: id}); !ok || string(r.Envelope) != "env-"+id {
					t.Fatalf("%s: %+v %v", id, r, ok)
				}
			}
			if err := st.Create(ctx, async.Key{TenantID: "a", ExecutionID: "1"}); err != nil {
				t.Fatalf("a forgotten id is free again: %v", err)
			}
		})
	}
}

// Issue #23 §1: Head never carries the envelope; Envelope hands concurrent
// readers one copy, reserving its size once (Redis: a copy out of the
// backend; memory: the kept bytes, nothing reserved) and giving it back
// with the last reader; a dropped envelope is not found.
func TestAStoreHandsConcurrentReadersOfAResultOneCopy(t *testing.T) {
	ctx := context.Background()
	for name, st := range stores(t, async.Limits{TenantResultBytes: 1 << 20}) {
		t.Run(name, func(t *testing.T) {
			k := async.Key{TenantID: "a", ExecutionID: "big"}
			env := []byte(`{"status":"ok","result":"` + strings.Repeat("x", 600<<10) + `"}`)
			if err := st.Create(ctx, k); err != nil {
				t.Fatal(err)
			}
			if _, ok, err := st.Head(ctx, k); !ok || err != nil {
				t.Fatalf("Head of a queued execution: %v %v", ok, err)
			}
			if _, _, ok, err := st.Envelope(ctx, k, nil); ok || err != nil {
				t.Fatalf("Envelope of a queued execution: %v %v", ok, err)
			}
			if err := st.Finish(ctx, k, 200, env); err != nil {
				t.Fatal(err)
			}
			rec, ok, err := st.Head(ctx, k)
			if !ok || err != nil || rec.State != async.StateDone || rec.HTTPStatus != 200 || rec.Envelope != nil || rec.Expired {
				t.Fatalf("Head = %s %d expired %v, %d envelope bytes, %v %v", rec.State, rec.HTTPStatus, rec.Expired, len(rec.Envelope), ok, err)
			}
			var reserved, given int64
			reserve := func(_ context.Context, n int64) (func(), error) {
				reserved += n
				return func() { given += n }, nil
			}
			var releases []func()
			var first []byte
			for range 5 {
				b, release, ok, err := st.Envelope(ctx, k, reserve)
				if !ok || err != nil || string(b) != string(env) {
					t.Fatalf("Envelope: %v %v, %d bytes", ok, err, len(b))
				}
				if first == nil {
					first = b
				} else if &b[0] != &first[0] {
					t.Fatal("two readers got two copies")
				}
				releases = append(releases, release)
			}
			want := int64(0)
			if name == "redis" {
				want = int64(len(env))
			}
			if reserved != want {
				t.Fatalf("reserved %d bytes for 5 readers, want %d", reserved, want)
			}
			for i, release := range releases {
				release()
				release() // twice is once
				if i < len(releases)-1 && given != 0 {
					t.Fatalf("the copy was given back with %d readers left", len(releases)-1-i)
				}
			}
			if given != reserved {
				t.Fatalf("given back %d of %d", given, reserved)
			}
			// Another result over the tenant's budget drops this one.
			k2 := async.Key{TenantID: "a", ExecutionID: "big2"}
			if err := st.Create(ctx, k2); err != nil {
				t.Fatal(err)
			}
			if err := st.Finish(ctx, k2, 200, env); err != nil {
				t.Fatal(err)
			}
			if _, _, ok, err := st.Envelope(ctx, k, reserve); ok || err != nil {
				t.Fatalf("Envelope of a dropped result: %v %v", ok, err)
			}
			if rec, _, _ := st.Head(ctx, k); !rec.Expired {
				t.Fatalf("Head of a dropped result: %s expired %v", rec.State, rec.Expired)
			}
			if rec, ok, err := st.RequestCancel(ctx, k2); !ok || err != nil || rec.State != async.StateDone || rec.Envelope != nil {
				t.Fatalf("RequestCancel of a done execution = %s, %d envelope bytes, %v %v", rec.State, len(rec.Envelope), ok, err)
			}
		})
	}
}

// WithBulk routes what moves whole results (envelopes, artifacts) through
// the bulk client: with the small-command client pointing nowhere, a
// record created elsewhere is still finished, read and its artifact fetched.
func TestARedisStoreMovesResultsThroughItsBulkClient(t *testing.T) {
	ctx := context.Background()
	srv := testenv.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = dead.Close() })
	k := async.Key{TenantID: "a", ExecutionID: "1"}
	whole := async.NewRedisStore(rdb, "bulk", async.Limits{})
	if err := whole.Create(ctx, k); err != nil {
		t.Fatal(err)
	}
	if _, err := whole.Start(ctx, k); err != nil {
		t.Fatal(err)
	}
	st := async.NewRedisStore(dead, "bulk", async.Limits{}).WithBulk(rdb)
	env := []byte(`{"status":"ok","result":"` + strings.Repeat("r", 1<<20) + `"}`)
	if err := st.Finish(ctx, k, 200, env); err != nil {
		t.Fatalf("Finish through the bulk client: %v", err)
	}
	if rec, ok, err := st.Get(ctx, k); err != nil || !ok || len(rec.Envelope) != len(env) {
		t.Fatalf("Get through the bulk client: %v %v, %d envelope bytes", ok, err, len(rec.Envelope))
	}
	got, release, ok, err := st.Envelope(ctx, k, nil)
	if err != nil || !ok || string(got) != string(env) {
		t.Fatalf("Envelope through the bulk client: %v %v", ok, err)
	}
	release()
	if err := st.PutArtifacts(ctx, k.TenantID, k.ExecutionID, []sandbox.Artifact{art("chart.png", "png bytes")}); err != nil {
		t.Fatalf("PutArtifacts through the bulk client: %v", err)
	}
	a, release, ok, err := st.Artifact(ctx, k, "chart.png", nil)
	if err != nil || !ok || string(a.Data) != "png bytes" {
		t.Fatalf("Artifact through the bulk client: %v %v %q", ok, err, a.Data)
	}
	release()
	if _, _, err := st.Head(ctx, k); err == nil {
		t.Fatal("Head went through the bulk client too: the small commands should use the other one")
	}
}
