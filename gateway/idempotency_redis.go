package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/execgate/execgate/quota"
)

// RedisIdempotency keeps idempotency entries in Redis, shared by every
// gateway replica (it reuses the quota backend's client).
//
// Key layout: <prefix>:{t:<tenant>}:idem:<execution_id> (the tenant's hash
// tag, like the quota keys), holding either
//
//	P:<token>:<fingerprint>   a claim by one request, expiring after PendingTTL
//	D:<json StoredResponse>   the remembered response, expiring after the window
//
// A claim that outlives a crashed gateway expires and the next request
// claims again. Redis errors wrap quota.ErrUnavailable: it is the quota
// backend, and without it duplicates cannot be ruled out (503, fail closed).
type RedisIdempotency struct {
	rdb     redis.UniversalClient
	prefix  string
	window  time.Duration
	pending time.Duration

	mu     sync.Mutex // guards tokens
	tokens map[IdempotencyKey]string
}

// DefaultPendingTTL bounds how long a claim blocks duplicates if its gateway
// dies mid-run. It is longer than any run the policy allows.
const DefaultPendingTTL = 15 * time.Minute

// NewRedisIdempotency returns a store in rdb under prefix (quota.key_prefix).
func NewRedisIdempotency(rdb redis.UniversalClient, prefix string, window time.Duration) *RedisIdempotency {
	if prefix == "" {
		prefix = "execgate"
	}
	return &RedisIdempotency{rdb: rdb, prefix: prefix, window: window, pending: DefaultPendingTTL, tokens: map[IdempotencyKey]string{}}
}

var _ IdempotencyStore = (*RedisIdempotency)(nil)

func (r *RedisIdempotency) key(k IdempotencyKey) string {
	return r.prefix + ":{t:" + k.TenantID + "}:idem:" + k.ExecutionID
}

// Claim implements IdempotencyStore.
func (r *RedisIdempotency) Claim(ctx context.Context, k IdempotencyKey, fp string) (*StoredResponse, bool, error) {
	rk := r.key(k)
	wait := 20 * time.Millisecond
	for {
		token := newID()
		ok, err := r.rdb.SetNX(ctx, rk, "P:"+token+":"+fp, r.pending).Result()
		if err != nil {
			return nil, false, fmt.Errorf("%w: claiming idempotency key: %w", quota.ErrUnavailable, err)
		}
		if ok {
			r.mu.Lock()
			r.tokens[k] = token
			r.mu.Unlock()
			return nil, true, nil
		}
		val, err := r.rdb.Get(ctx, rk).Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue // expired or abandoned between SETNX and GET: claim again
		case err != nil:
			return nil, false, fmt.Errorf("%w: reading idempotency key: %w", quota.ErrUnavailable, err)
		}
		if body, ok := strings.CutPrefix(val, "D:"); ok {
			var sr StoredResponse
			if err := json.Unmarshal([]byte(body), &sr); err != nil {
				return nil, false, fmt.Errorf("decoding idempotency entry: %w", err)
			}
			if sr.Fingerprint != fp {
				return nil, false, ErrIdempotencyConflict
			}
			return &sr, false, nil
		}
		// Another request holds the claim: poll until it completes.
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, false, ctx.Err()
		case <-t.C:
		}
		if wait < 250*time.Millisecond {
			wait *= 2
		}
	}
}

// compareAndSet replaces KEYS[1] with ARGV[2] (PX ARGV[3]) only while it
// still holds our claim ARGV[1]; with ARGV[2] empty it deletes instead.
var compareAndSet = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, 1, string.len(ARGV[1])) ~= ARGV[1] then
  return 0
end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return 1
`)

func (r *RedisIdempotency) takeToken(k IdempotencyKey) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.tokens[k]
	delete(r.tokens, k)
	return t, ok
}

// Complete implements IdempotencyStore.
func (r *RedisIdempotency) Complete(ctx context.Context, k IdempotencyKey, resp StoredResponse) error {
	token, ok := r.takeToken(k)
	if !ok {
		return nil
	}
	if r.window <= 0 {
		return r.release(ctx, k, token)
	}
	if err := compareAndSet.Run(ctx, r.rdb, []string{r.key(k)}, "P:"+token+":", redisEntry(resp), r.window.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("storing idempotency entry: %w", err)
	}
	return nil
}

// Abandon implements IdempotencyStore.
func (r *RedisIdempotency) Abandon(ctx context.Context, k IdempotencyKey) error {
	token, ok := r.takeToken(k)
	if !ok {
		return nil
	}
	return r.release(ctx, k, token)
}

func (r *RedisIdempotency) release(ctx context.Context, k IdempotencyKey, token string) error {
	if err := compareAndSet.Run(ctx, r.rdb, []string{r.key(k)}, "P:"+token+":", "", 0).Err(); err != nil {
		return fmt.Errorf("releasing idempotency claim: %w", err)
	}
	return nil
}
