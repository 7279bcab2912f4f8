package gateway

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/quota"
	"github.com/redis/go-redis/v9"
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

// testStore runs the behaviour every IdempotencyStore must have.
func testStore(t *testing.T, newStore func(t *testing.T) IdempotencyStore) {
	ctx := context.Background()
	key := IdempotencyKey{TenantID: "acme", ExecutionID: "job-1"}

	t.Run("the first claim wins and a repeat replays the stored response", func(t *testing.T) {
		s := newStore(t)
		got, ok, err := s.Claim(ctx, key, "fp")
		if err != nil || !ok || got != nil {
			t.Fatalf("first Claim = %v, %v, %v", got, ok, err)
		}
		if err := s.Complete(ctx, key, StoredResponse{Fingerprint: "fp", Status: 200, Body: []byte(`{"n":1}`)}); err != nil {
			t.Fatal(err)
		}
		got, ok, err = s.Claim(ctx, key, "fp")
		if err != nil || ok || got == nil || string(got.Body) != `{"n":1}` || got.Status != 200 {
			t.Fatalf("repeat Claim = %+v, %v, %v", got, ok, err)
		}
	})
	t.Run("another tenant's same id is another key", func(t *testing.T) {
		s := newStore(t)
		if _, ok, _ := s.Claim(ctx, key, "fp"); !ok {
			t.Fatal("first claim refused")
		}
		if _, ok, err := s.Claim(ctx, IdempotencyKey{TenantID: "globex", ExecutionID: "job-1"}, "fp"); !ok || err != nil {
			t.Fatalf("other tenant's claim = %v, %v", ok, err)
		}
	})
	t.Run("a different request with the same id is a conflict", func(t *testing.T) {
		s := newStore(t)
		_, _, _ = s.Claim(ctx, key, "fp")
		_ = s.Complete(ctx, key, StoredResponse{Fingerprint: "fp", Status: 200, Body: []byte(`{}`)})
		if _, _, err := s.Claim(ctx, key, "other"); !errors.Is(err, ErrIdempotencyConflict) {
			t.Fatalf("err = %v, want ErrIdempotencyConflict", err)
		}
	})
	t.Run("an abandoned claim frees the id", func(t *testing.T) {
		s := newStore(t)
		_, _, _ = s.Claim(ctx, key, "fp")
		if err := s.Abandon(ctx, key); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := s.Claim(ctx, key, "fp"); !ok || err != nil {
			t.Fatalf("claim after abandon = %v, %v", ok, err)
		}
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
		_, _, _ = s.Claim(ctx, key, "fp")
		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		if _, _, err := s.Claim(cctx, key, "fp"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want DeadlineExceeded", err)
		}
	})
}

func TestMemoryIdempotency(t *testing.T) {
	testStore(t, func(*testing.T) IdempotencyStore { return NewMemoryIdempotency(time.Minute, nil) })

	t.Run("entries expire after the window", func(t *testing.T) {
		clk := &clock{t: time.Unix(1_000_000, 0)}
		s := NewMemoryIdempotency(time.Minute, clk.now)
		ctx := context.Background()
		key := IdempotencyKey{TenantID: "acme", ExecutionID: "x"}
		_, _, _ = s.Claim(ctx, key, "fp")
		_ = s.Complete(ctx, key, StoredResponse{Fingerprint: "fp", Status: 200, Body: []byte("r")})
		clk.add(59 * time.Second)
		if _, ok, _ := s.Claim(ctx, key, "fp"); ok {
			t.Fatal("entry expired inside the window")
		}
		clk.add(2 * time.Second)
		if _, ok, _ := s.Claim(ctx, key, "fp"); !ok {
			t.Fatal("entry still there after the window")
		}
	})
	t.Run("memory stays bounded", func(t *testing.T) {
		s := NewMemoryIdempotency(time.Hour, nil)
		ctx := context.Background()
		big := make([]byte, 1<<20)
		for i := 0; i < 100; i++ {
			key := IdempotencyKey{TenantID: "acme", ExecutionID: string(rune('a'+i%26)) + time.Duration(i).String()}
			_, _, _ = s.Claim(ctx, key, "fp")
			_ = s.Complete(ctx, key, StoredResponse{Fingerprint: "fp", Status: 200, Body: big})
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.bytes > memoryBudget {
			t.Fatalf("store holds %d bytes, budget %d", s.bytes, memoryBudget)
		}
	})
}

func TestRedisIdempotency(t *testing.T) {
	srv := testenv.Redis(t)
	n := 0
	testStore(t, func(t *testing.T) IdempotencyStore {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		n++
		return NewRedisIdempotency(rdb, "test"+time.Duration(n).String(), time.Minute)
	})

	t.Run("a dead backend fails closed as QuotaUnavailable", func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { _ = rdb.Close() })
		s := NewRedisIdempotency(rdb, "dead", time.Minute)
		_, _, err := s.Claim(context.Background(), IdempotencyKey{TenantID: "a", ExecutionID: "b"}, "fp")
		if !errors.Is(err, quota.ErrUnavailable) {
			t.Fatalf("err = %v, want quota.ErrUnavailable", err)
		}
	})
}
