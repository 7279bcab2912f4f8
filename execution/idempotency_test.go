package execution

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/quota"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// idemBackend is what the shared behaviour suite needs from a backend.
type idemBackend struct {
	// newStore returns a store with isolated state and a function that
	// lets the window pass for key (a test clock, or waiting for Redis).
	newStore func(t *testing.T, window time.Duration, l IdempotencyLimits) (IdempotencyStore, func(t *testing.T, key IdempotencyKey))
}

func mustClaim(t *testing.T, s IdempotencyStore, key IdempotencyKey, fp string) {
	t.Helper()
	got, ok, err := s.Claim(context.Background(), key, fp)
	if err != nil || !ok || got != nil {
		t.Fatalf("Claim(%v) = %+v, %v, %v; want a fresh claim", key, got, ok, err)
	}
}

func mustComplete(t *testing.T, s IdempotencyStore, key IdempotencyKey, outcome string, body []byte) {
	t.Helper()
	if err := s.Complete(context.Background(), key, StoredResponse{Fingerprint: "fp", Status: 200, Outcome: outcome, Body: body}); err != nil {
		t.Fatalf("Complete(%v): %v", key, err)
	}
}

// mustReplay asserts a repeat of key gets body without a claim.
func mustReplay(t *testing.T, s IdempotencyStore, key IdempotencyKey, body []byte) {
	t.Helper()
	got, ok, err := s.Claim(context.Background(), key, "fp")
	if err != nil || ok || got == nil || !bytes.Equal(got.Body, body) || got.Status != 200 {
		t.Fatalf("repeat of %v = %v, %v, %v; want the stored response", key, got != nil, ok, err)
	}
}

// mustExpire asserts a repeat of key is ResultExpired with outcome: no
// claim, so no second run.
func mustExpire(t *testing.T, s IdempotencyStore, key IdempotencyKey, outcome string) {
	t.Helper()
	got, ok, err := s.Claim(context.Background(), key, "fp")
	var re *ResultExpiredError
	if !errors.As(err, &re) || ok || got != nil {
		t.Fatalf("repeat of %v = %v, %v, %v; want *ResultExpiredError and no claim", key, got != nil, ok, err)
	}
	if re.Outcome != outcome {
		t.Fatalf("ResultExpired outcome = %q, want %q", re.Outcome, outcome)
	}
}

// testStore runs the behaviour every IdempotencyStore must have.
func testStore(t *testing.T, b idemBackend) {
	ctx := context.Background()
	key := IdempotencyKey{TenantID: "acme", ExecutionID: "job-1"}
	newStore := func(t *testing.T) IdempotencyStore {
		s, _ := b.newStore(t, time.Minute, IdempotencyLimits{})
		return s
	}

	t.Run("the first claim wins and a repeat replays the stored response", func(t *testing.T) {
		s := newStore(t)
		mustClaim(t, s, key, "fp")
		mustComplete(t, s, key, "ok", []byte(`{"n":1}`))
		mustReplay(t, s, key, []byte(`{"n":1}`))
	})
	t.Run("another tenant's same id is another key", func(t *testing.T) {
		s := newStore(t)
		mustClaim(t, s, key, "fp")
		mustClaim(t, s, IdempotencyKey{TenantID: "globex", ExecutionID: "job-1"}, "fp")
	})
	t.Run("a different request with the same id is a conflict", func(t *testing.T) {
		s := newStore(t)
		mustClaim(t, s, key, "fp")
		mustComplete(t, s, key, "ok", []byte(`{}`))
		if _, _, err := s.Claim(ctx, key, "other"); !errors.Is(err, ErrIdempotencyConflict) {
			t.Fatalf("err = %v, want ErrIdempotencyConflict", err)
		}
	})
	t.Run("an abandoned claim frees the id", func(t *testing.T) {
		s := newStore(t)
		mustClaim(t, s, key, "fp")
		if err := s.Abandon(ctx, key); err != nil {
			t.Fatal(err)
		}
		mustClaim(t, s, key, "fp")
	})
	t.Run("concurrent duplicates: one claims, the others wait for its response", func(t *testing.T) {
		s := newStore(t)
		var claims atomic.Int64
		var wg sync.WaitGroup
		results := make(chan string, 8)
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, ok, err := s.Claim(ctx, key, "fp")
				switch {
				case err != nil:
					results <- "error: " + err.Error()
				case ok:
					claims.Add(1)
					time.Sleep(50 * time.Millisecond) // the "run"
					_ = s.Complete(ctx, key, StoredResponse{Fingerprint: "fp", Status: 200, Body: []byte("first")})
					results <- "first"
				default:
					results <- string(got.Body)
				}
			}()
		}
		wg.Wait()
		close(results)
		for r := range results {
			if r != "first" {
				t.Errorf("a duplicate got %q", r)
			}
		}
		if n := claims.Load(); n != 1 {
			t.Fatalf("%d requests claimed the key, want 1", n)
		}
	})
	t.Run("a waiter gives up when its context ends", func(t *testing.T) {
		s := newStore(t)
		mustClaim(t, s, key, "fp")
		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		if _, _, err := s.Claim(cctx, key, "fp"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
	})

	// issue #11 §2: the budget is 1000 bytes per tenant below.
	small := IdempotencyLimits{MaxClaims: 100, TenantResponseBytes: 1000}
	big := bytes.Repeat([]byte("b"), 900)
	t.Run("another tenant's large responses never evict a tenant's response", func(t *testing.T) {
		s, _ := b.newStore(t, time.Minute, small)
		mustClaim(t, s, key, "fp")
		mustComplete(t, s, key, "ok", []byte(`{"a":1}`))
		for i := range 5 {
			k := IdempotencyKey{TenantID: "globex", ExecutionID: fmt.Sprintf("flood-%d", i)}
			mustClaim(t, s, k, "fp")
			mustComplete(t, s, k, "ok", big)
		}
		mustReplay(t, s, key, []byte(`{"a":1}`))
		// globex's own newest response is kept, its older ones dropped.
		mustReplay(t, s, IdempotencyKey{TenantID: "globex", ExecutionID: "flood-4"}, big)
		mustExpire(t, s, IdempotencyKey{TenantID: "globex", ExecutionID: "flood-0"}, "ok")
	})
	t.Run("a dropped response keeps its claim: the repeat is ResultExpired with the original outcome, never a new run", func(t *testing.T) {
		s, _ := b.newStore(t, time.Minute, small)
		mustClaim(t, s, key, "fp")
		mustComplete(t, s, key, "error:ToolError", big)
		k2 := IdempotencyKey{TenantID: "acme", ExecutionID: "job-2"}
		mustClaim(t, s, k2, "fp")
		mustComplete(t, s, k2, "ok", big) // the budget holds one: job-1's body goes
		mustExpire(t, s, key, "error:ToolError")
		mustExpire(t, s, key, "error:ToolError") // and stays so
		if _, _, err := s.Claim(ctx, key, "other"); !errors.Is(err, ErrIdempotencyConflict) {
			t.Fatalf("another request with the dropped id: err = %v, want ErrIdempotencyConflict", err)
		}
		mustReplay(t, s, k2, big)
	})
	t.Run("a response larger than the whole budget is not stored but its claim is", func(t *testing.T) {
		s, _ := b.newStore(t, time.Minute, small)
		mustClaim(t, s, key, "fp")
		mustComplete(t, s, key, "ok", bytes.Repeat([]byte("x"), 2000))
		mustExpire(t, s, key, "ok")
	})
	t.Run("a tenant over its claim count is refused new ids; its claims and other tenants are untouched", func(t *testing.T) {
		s, _ := b.newStore(t, time.Minute, IdempotencyLimits{MaxClaims: 3, TenantResponseBytes: 1000})
		for i := range 3 {
			k := IdempotencyKey{TenantID: "acme", ExecutionID: fmt.Sprintf("c-%d", i)}
			mustClaim(t, s, k, "fp")
			if i < 2 { // the third stays pending: pending claims count too
				mustComplete(t, s, k, "ok", []byte("r"))
			}
		}
		_, ok, err := s.Claim(ctx, IdempotencyKey{TenantID: "acme", ExecutionID: "c-3"}, "fp")
		var ce *ClaimsExhaustedError
		if !errors.As(err, &ce) || ok {
			t.Fatalf("fourth claim = %v, %v; want *ClaimsExhaustedError", ok, err)
		}
		if ce.Max != 3 || ce.RetryAfter <= 0 || ce.RetryAfter > time.Minute {
			t.Fatalf("ClaimsExhaustedError = %+v", ce)
		}
		mustReplay(t, s, IdempotencyKey{TenantID: "acme", ExecutionID: "c-0"}, []byte("r"))
		mustClaim(t, s, IdempotencyKey{TenantID: "globex", ExecutionID: "c-3"}, "fp")
		// An abandoned claim gives its place back.
		if err := s.Abandon(ctx, IdempotencyKey{TenantID: "acme", ExecutionID: "c-2"}); err != nil {
			t.Fatal(err)
		}
		mustClaim(t, s, IdempotencyKey{TenantID: "acme", ExecutionID: "c-3"}, "fp")
	})
	t.Run("after the window an id is new again, whether or not its response was kept", func(t *testing.T) {
		s, passWindow := b.newStore(t, time.Second, IdempotencyLimits{MaxClaims: 2, TenantResponseBytes: 1000})
		kept := IdempotencyKey{TenantID: "acme", ExecutionID: "kept"}
		dropped := IdempotencyKey{TenantID: "acme", ExecutionID: "dropped"}
		mustClaim(t, s, kept, "fp")
		mustComplete(t, s, kept, "ok", []byte("r"))
		mustClaim(t, s, dropped, "fp")
		mustComplete(t, s, dropped, "ok", bytes.Repeat([]byte("x"), 2000))
		mustReplay(t, s, kept, []byte("r"))
		mustExpire(t, s, dropped, "ok")
		passWindow(t, kept)
		passWindow(t, dropped)
		// Both claims expired: the count is free again and both ids run.
		mustClaim(t, s, kept, "fp")
		mustClaim(t, s, dropped, "fp")
	})
}

func TestMemoryIdempotency(t *testing.T) {
	testStore(t, idemBackend{newStore: func(t *testing.T, window time.Duration, l IdempotencyLimits) (IdempotencyStore, func(*testing.T, IdempotencyKey)) {
		clk := &clock{t: time.Unix(1_000_000, 0)}
		return NewMemoryIdempotency(window, l, clk.now), func(*testing.T, IdempotencyKey) { clk.add(window) }
	}})

	t.Run("entries expire after the window, not before", func(t *testing.T) {
		clk := &clock{t: time.Unix(1_000_000, 0)}
		s := NewMemoryIdempotency(time.Minute, IdempotencyLimits{}, clk.now)
		key := IdempotencyKey{TenantID: "acme", ExecutionID: "x"}
		mustClaim(t, s, key, "fp")
		mustComplete(t, s, key, "ok", []byte("r"))
		clk.add(59 * time.Second)
		mustReplay(t, s, key, []byte("r"))
		clk.add(2 * time.Second)
		mustClaim(t, s, key, "fp")
	})
	t.Run("with the defaults, another tenant's 70 MB of responses leave a tenant's response alone", func(t *testing.T) {
		s := NewMemoryIdempotency(time.Hour, IdempotencyLimits{}, nil)
		a := IdempotencyKey{TenantID: "acme", ExecutionID: "a-1"}
		mustClaim(t, s, a, "fp")
		mustComplete(t, s, a, "ok", []byte(`{"a":1}`))
		flood := make([]byte, 14<<20) // one backing array: cheap to store five times
		for i := range 5 {
			k := IdempotencyKey{TenantID: "globex", ExecutionID: fmt.Sprintf("flood-%d", i)}
			mustClaim(t, s, k, "fp")
			mustComplete(t, s, k, "ok", flood)
		}
		mustReplay(t, s, a, []byte(`{"a":1}`))
	})
	t.Run("memory stays bounded per tenant", func(t *testing.T) {
		s := NewMemoryIdempotency(time.Hour, IdempotencyLimits{}, nil)
		big := make([]byte, 1<<20)
		for i := 0; i < 40; i++ {
			key := IdempotencyKey{TenantID: "acme", ExecutionID: fmt.Sprintf("id-%d", i)}
			mustClaim(t, s, key, "fp")
			mustComplete(t, s, key, "ok", big)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if got := s.tenants["acme"].bytes; got > DefaultIdempotencyResponseBytes || got < DefaultIdempotencyResponseBytes-(2<<20) {
			t.Fatalf("tenant holds %d bytes, budget %d", got, DefaultIdempotencyResponseBytes)
		}
		if n := len(s.claims); n != 40 {
			t.Fatalf("%d claims kept, want all 40 (responses are dropped, claims are not)", n)
		}
	})
}

func TestRedisIdempotency(t *testing.T) {
	srv := testenv.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	n := 0
	testStore(t, idemBackend{newStore: func(t *testing.T, window time.Duration, l IdempotencyLimits) (IdempotencyStore, func(*testing.T, IdempotencyKey)) {
		n++
		s := NewRedisIdempotency(rdb, fmt.Sprintf("test%d", n), window, l)
		return s, func(t *testing.T, k IdempotencyKey) {
			t.Helper()
			claim := s.keys(k)[0]
			deadline := time.Now().Add(10 * window)
			for rdb.Exists(context.Background(), claim).Val() == 1 {
				if time.Now().After(deadline) {
					t.Fatalf("claim %s still there %s after its window", claim, 10*window)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}})

	t.Run("the tenant's bookkeeping matches what is stored", func(t *testing.T) {
		s := NewRedisIdempotency(rdb, "books", time.Minute, IdempotencyLimits{MaxClaims: 100, TenantResponseBytes: 1000})
		for i := range 10 {
			k := IdempotencyKey{TenantID: "acme", ExecutionID: fmt.Sprintf("b-%d", i)}
			mustClaim(t, s, k, "fp")
			mustComplete(t, s, k, "ok", bytes.Repeat([]byte("x"), 300))
		}
		ctx := context.Background()
		p := s.tenantPrefix(IdempotencyKey{TenantID: "acme"})
		bytesHeld, _ := rdb.Get(ctx, p+"idembytes").Int64()
		if bytesHeld > 1000 || bytesHeld < 900 {
			t.Fatalf("idembytes = %d, want the 3 newest bodies (≈ 900) within 1000", bytesHeld)
		}
		if n := rdb.ZCard(ctx, p+"idemres").Val(); n != 3 {
			t.Fatalf("%d bodies listed, want 3", n)
		}
		if n := rdb.ZCard(ctx, p+"idemclaims").Val(); n != 10 {
			t.Fatalf("%d claims counted, want 10", n)
		}
		for _, key := range []string{p + "idemclaims", p + "idemres", p + "idemsize", p + "idembytes", p + "idem:b-9", p + "idemres:b-9"} {
			if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 {
				t.Errorf("%s has no expiry (PTTL %v)", key, ttl)
			}
		}
	})
	t.Run("WithBulk claims, completes and replays responses through the bulk client", func(t *testing.T) {
		dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
		t.Cleanup(func() { _ = dead.Close() })
		s := NewRedisIdempotency(dead, "bulk", time.Minute, IdempotencyLimits{}).WithBulk(rdb)
		k := IdempotencyKey{TenantID: "acme", ExecutionID: "big"}
		body := bytes.Repeat([]byte("b"), 1<<20)
		mustClaim(t, s, k, "fp")
		mustComplete(t, s, k, "ok", body)
		mustReplay(t, s, k, body)
	})
	t.Run("claims survive a Redis crash when Redis persists every write", func(t *testing.T) {
		aof := testenv.Redis(t, "--appendonly", "yes", "--appendfsync", "always")
		rdb := redis.NewClient(&redis.Options{Addr: aof.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { _ = rdb.Close() })
		s := NewRedisIdempotency(rdb, "crash", time.Minute, IdempotencyLimits{MaxClaims: 100, TenantResponseBytes: 1000})
		kept := IdempotencyKey{TenantID: "acme", ExecutionID: "kept"}
		dropped := IdempotencyKey{TenantID: "acme", ExecutionID: "dropped"}
		mustClaim(t, s, kept, "fp")
		mustComplete(t, s, kept, "ok", []byte("r"))
		mustClaim(t, s, dropped, "fp")
		mustComplete(t, s, dropped, "error:Timeout", bytes.Repeat([]byte("x"), 2000))
		aof.Kill()
		if _, ok, err := s.Claim(context.Background(), kept, "fp"); ok || !errors.Is(err, quota.ErrUnavailable) {
			t.Fatalf("with Redis down: claimed %v, err %v; want QuotaUnavailable", ok, err)
		}
		aof.Restart()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, ok, err := s.Claim(context.Background(), kept, "fp")
			if err == nil {
				if ok || got == nil || string(got.Body) != "r" {
					t.Fatalf("after the restart: claimed %v, got %v; want the stored response", ok, got)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Redis did not come back: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		mustExpire(t, s, dropped, "error:Timeout")
	})
	t.Run("a run that ends while Redis is down is still completed: its duplicate gets the response, not a run", func(t *testing.T) {
		aof := testenv.Redis(t, "--appendonly", "yes", "--appendfsync", "always")
		rdb := redis.NewClient(&redis.Options{Addr: aof.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { _ = rdb.Close() })
		s := NewRedisIdempotency(rdb, "late", time.Minute, IdempotencyLimits{})
		key := IdempotencyKey{TenantID: "acme", ExecutionID: "late"}
		mustClaim(t, s, key, "fp")
		aof.Kill() // the run is under way when Redis goes
		if err := s.Complete(context.Background(), key, StoredResponse{Fingerprint: "fp", Status: 200, Outcome: "ok", Body: []byte("r")}); err == nil {
			t.Fatal("Complete with Redis down returned no error")
		}
		aof.Restart()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for {
			got, ok, err := s.Claim(ctx, key, "fp")
			if errors.Is(err, quota.ErrUnavailable) {
				time.Sleep(20 * time.Millisecond) // the client is reconnecting
				continue
			}
			if err != nil || ok || got == nil || string(got.Body) != "r" {
				t.Fatalf("duplicate after the restart: %v, claimed %v, err %v; want the response", got, ok, err)
			}
			break
		}
	})
	t.Run("a dead backend fails closed as QuotaUnavailable", func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { _ = rdb.Close() })
		s := NewRedisIdempotency(rdb, "dead", time.Minute, IdempotencyLimits{})
		_, _, err := s.Claim(context.Background(), IdempotencyKey{TenantID: "a", ExecutionID: "b"}, "fp")
		if !errors.Is(err, quota.ErrUnavailable) {
			t.Fatalf("err = %v, want quota.ErrUnavailable", err)
		}
	})
}
