package execution

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/execgate/execgate/quota"
)

// RedisIdempotency keeps idempotency claims and responses in Redis, shared
// by every gateway replica (it reuses the quota backend's client), with the
// same guarantees as MemoryIdempotency.
//
// Key layout, all under the tenant's hash tag like the quota keys (so every
// script touches one slot: Redis-Cluster-safe), with P = <prefix>:{t:<tenant>}:
//
//	P:idem:<execution_id>     the claim, a small string:
//	                            P:<token>:<fingerprint>  held by one request, TTL PendingTTL
//	                            C:<json claimRecord>     the run happened, TTL = window
//	P:idemclaims              sorted set: execution_id → claim expiry (ms);
//	                            its size is the tenant's claim count
//	P:idemres:<execution_id>  the response body, TTL = window (may be dropped earlier)
//	P:idemres                 sorted set: execution_id → completion time (ms), oldest
//	                            bodies are dropped first when the tenant's budget is full
//	P:idemsize                hash: execution_id → body bytes
//	P:idembytes               the tenant's stored body bytes
//
// Claims are never evicted by responses; only the tenant's own bodies are.
// Redis must not evict keys on its own (maxmemory-policy noeviction, the
// default): an evicted claim would let its id run again; and persist every
// write (appendonly, appendfsync always) for claims to survive its crash. A claim that
// outlives a crashed gateway expires and the next request claims again.
// Time is Redis TIME. Redis errors wrap quota.ErrUnavailable: it is the
// quota backend, and without it duplicates cannot be ruled out (503, fail
// closed).
type RedisIdempotency struct {
	rdb     redis.UniversalClient
	bulk    redis.UniversalClient // claims (which may replay a response) and completions (WithBulk); rdb by default
	prefix  string
	window  time.Duration
	pending time.Duration
	limits  IdempotencyLimits

	mu     sync.Mutex // guards tokens
	tokens map[IdempotencyKey]string
}

// DefaultPendingTTL bounds how long a claim blocks duplicates if its gateway
// dies mid-run. It is longer than any run the policy allows.
const DefaultPendingTTL = 15 * time.Minute

// claimRecord is a completed claim as stored in Redis.
type claimRecord struct {
	Fingerprint string `json:"fp"`
	Status      int    `json:"status"`
	Outcome     string `json:"outcome"`
}

// NewRedisIdempotency returns a store in rdb under prefix (quota.key_prefix).
func NewRedisIdempotency(rdb redis.UniversalClient, prefix string, window time.Duration, limits IdempotencyLimits) *RedisIdempotency {
	if prefix == "" {
		prefix = "execgate"
	}
	return &RedisIdempotency{rdb: rdb, bulk: rdb, prefix: prefix, window: window, pending: DefaultPendingTTL,
		limits: limits.WithDefaults(), tokens: map[IdempotencyKey]string{}}
}

// WithBulk makes r store and replay responses (up to the largest
// envelope) through bulk, a client whose reads and writes may take longer
// (quota.NewRedisBulkClient): a claim may answer with a stored response,
// a completion writes one.
func (r *RedisIdempotency) WithBulk(bulk redis.UniversalClient) *RedisIdempotency {
	r.bulk = bulk
	return r
}

var _ IdempotencyStore = (*RedisIdempotency)(nil)

func (r *RedisIdempotency) tenantPrefix(k IdempotencyKey) string {
	return r.prefix + ":{t:" + k.TenantID + "}:"
}

// keys are the script keys of k, in the order the scripts use them.
func (r *RedisIdempotency) keys(k IdempotencyKey) []string {
	p := r.tenantPrefix(k)
	return []string{p + "idem:" + k.ExecutionID, p + "idemclaims", p + "idemres:" + k.ExecutionID, p + "idemres", p + "idemsize", p + "idembytes"}
}

// keep is how long the per-tenant bookkeeping keys outlive their newest
// member.
func (r *RedisIdempotency) keep() int64 {
	return max(r.pending, r.window).Milliseconds() + 1000
}

// claimScript: KEYS claim, claims, body; ARGV pending value, pending TTL
// ms, max claims, execution id, keep ms. Returns {0} claimed,
// {1, claim value, body or false} already there, {2, retry ms} refused.
var claimScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local v = redis.call('GET', KEYS[1])
if v then
  local body = false
  if string.sub(v, 1, 2) == 'C:' then body = redis.call('GET', KEYS[3]) end
  return {1, v, body}
end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {2, tostring(tonumber(first[2]) - now)}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return {0}
`)

// Claim implements IdempotencyStore.
func (r *RedisIdempotency) Claim(ctx context.Context, k IdempotencyKey, fp string) (*StoredResponse, bool, error) {
	keys := r.keys(k)
	wait := 20 * time.Millisecond
	for {
		token := NewID()
		res, err := claimScript.Run(ctx, r.bulk, keys[:3], "P:"+token+":"+fp, r.pending.Milliseconds(),
			r.limits.MaxClaims, k.ExecutionID, r.keep()).Slice()
		if err != nil {
			return nil, false, fmt.Errorf("%w: claiming idempotency key: %w", quota.ErrUnavailable, err)
		}
		switch res[0].(int64) {
		case 0:
			r.mu.Lock()
			r.tokens[k] = token
			r.mu.Unlock()
			return nil, true, nil
		case 2:
			ms, _ := strconv.ParseInt(res[1].(string), 10, 64)
			return nil, false, &ClaimsExhaustedError{Max: r.limits.MaxClaims, RetryAfter: time.Duration(ms) * time.Millisecond}
		}
		val, _ := res[1].(string)
		if rec, ok := strings.CutPrefix(val, "C:"); ok {
			var cr claimRecord
			if err := json.Unmarshal([]byte(rec), &cr); err != nil {
				return nil, false, fmt.Errorf("decoding idempotency claim: %w", err)
			}
			body, _ := res[2].(string)
			switch {
			case cr.Fingerprint != fp:
				return nil, false, ErrIdempotencyConflict
			case body == "":
				return nil, false, &ResultExpiredError{Outcome: cr.Outcome}
			}
			return &StoredResponse{Fingerprint: cr.Fingerprint, Status: cr.Status, Outcome: cr.Outcome, Body: []byte(body)}, false, nil
		}
		if legacy, ok := strings.CutPrefix(val, "D:"); ok {
			// Written by a gateway from before claims and bodies were
			// separate (rolling upgrade): the response itself.
			var sr StoredResponse
			if err := json.Unmarshal([]byte(legacy), &sr); err != nil {
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

// completeScript: KEYS claim, claims, body, responses, sizes, bytes; ARGV
// our claim prefix, claim value, window ms, execution id, body, budget,
// keep ms, body key prefix, per-body overhead. Replaces our pending claim with the completed
// one and stores the body within the tenant's budget, dropping the
// tenant's oldest bodies (never claims) to make room. Returns 0 when the
// claim was no longer ours.
var completeScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, 1, string.len(ARGV[1])) ~= ARGV[1] then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[3])
local budget = tonumber(ARGV[6])
redis.call('SET', KEYS[1], ARGV[2], 'PX', window)
redis.call('ZADD', KEYS[2], now + window, ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[7])
local function drop(id)
  redis.call('ZREM', KEYS[4], id)
  redis.call('DEL', ARGV[8] .. id)
  local size = tonumber(redis.call('HGET', KEYS[5], id) or '0')
  redis.call('HDEL', KEYS[5], id)
  redis.call('DECRBY', KEYS[6], size)
end
-- bodies whose window passed have expired on their own: settle the books
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now - window)) do drop(id) end
local size = string.len(ARGV[5]) + tonumber(ARGV[9])
if size <= budget then
  redis.call('SET', KEYS[3], ARGV[5], 'PX', window)
  redis.call('ZADD', KEYS[4], now, ARGV[4])
  redis.call('HSET', KEYS[5], ARGV[4], size)
  redis.call('INCRBY', KEYS[6], size)
end
while tonumber(redis.call('GET', KEYS[6]) or '0') > budget do
  local oldest = redis.call('ZRANGE', KEYS[4], 0, 0)
  if #oldest == 0 then redis.call('SET', KEYS[6], 0) break end
  drop(oldest[1])
end
for i = 4, 6 do redis.call('PEXPIRE', KEYS[i], ARGV[7]) end
return 1
`)

// releaseScript: KEYS claim, claims; ARGV our claim prefix, execution id.
// Deletes our pending claim.
var releaseScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, 1, string.len(ARGV[1])) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
return 1
`)

func (r *RedisIdempotency) takeToken(k IdempotencyKey) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.tokens[k]
	delete(r.tokens, k)
	return t, ok
}

// Complete implements IdempotencyStore. When Redis cannot be reached the
// run has still happened: the completion is retried in the background
// (with backoff, for as long as the pending claim lives), so duplicates
// waiting on the claim get the response rather than a second run once the
// claim would have expired. The first error is returned for the log.
func (r *RedisIdempotency) Complete(ctx context.Context, k IdempotencyKey, resp StoredResponse) error {
	token, ok := r.takeToken(k)
	if !ok {
		return nil
	}
	if r.window <= 0 {
		return r.release(ctx, k, token)
	}
	rec, err := json.Marshal(claimRecord{Fingerprint: resp.Fingerprint, Status: resp.Status, Outcome: resp.Outcome})
	if err != nil {
		return fmt.Errorf("encoding idempotency claim: %w", err)
	}
	// A body costs its bytes and the key's, like in the memory store.
	overhead := len(k.TenantID) + len(k.ExecutionID)
	complete := func(ctx context.Context) error {
		return completeScript.Run(ctx, r.bulk, r.keys(k), "P:"+token+":", "C:"+string(rec), r.window.Milliseconds(),
			k.ExecutionID, resp.Body, r.limits.TenantResponseBytes, r.keep(), r.tenantPrefix(k)+"idemres:", overhead).Err()
	}
	if err := complete(ctx); err != nil {
		go retryUntil(context.WithoutCancel(ctx), time.Now().Add(r.pending), complete)
		return fmt.Errorf("storing idempotency entry (retrying in the background): %w", err)
	}
	return nil
}

// retryUntil calls f with backoff until it succeeds or deadline passes.
func retryUntil(ctx context.Context, deadline time.Time, f func(context.Context) error) {
	wait := 50 * time.Millisecond
	for time.Now().Before(deadline) {
		time.Sleep(wait)
		if f(ctx) == nil {
			return
		}
		wait = min(2*wait, 2*time.Second)
	}
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
	if err := releaseScript.Run(ctx, r.rdb, r.keys(k)[:2], "P:"+token+":", k.ExecutionID).Err(); err != nil {
		return fmt.Errorf("releasing idempotency claim: %w", err)
	}
	return nil
}
