package async

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/execgate/execgate/quota"
)

// RedisStore keeps executions in Redis (the quota backend's client), so
// every gateway replica answers GET and DELETE for any of its tenant's
// executions, with the bounds of MemoryStore.
//
// Key layout, under the tenant's hash tag like the quota and idempotency
// keys (every script touches one slot: Redis-Cluster-safe), with
// P = <prefix>:{t:<tenant>}:
//
//	P:x:<execution_id>  hash: state, cancel ("1"), sub, start, fin (ms),
//	                      http (status), env (the envelope), expired ("1");
//	                      TTL ActiveTTL while active, ResultTTL once done
//	P:xactive           sorted set: execution_id → expiry (ms) of the active
//	                      ones; its size is the tenant's active count
//	P:xdone             sorted set: execution_id → finish time (ms) of the
//	                      ones with a kept envelope, oldest dropped first
//	P:xsize             hash: execution_id → envelope bytes
//	P:xbytes            the tenant's kept envelope bytes
//	P:xall              sorted set: execution_id → finish time (ms) of every
//	                      finished one; beyond MaxResults the oldest are deleted
//	P:a:…, P:aidx, P:asize, P:abytes   the runs' artifacts (artifacts.go)
//
// Time is Redis TIME. Redis errors wrap quota.ErrUnavailable (503
// QuotaUnavailable at the edge).
type RedisStore struct {
	rdb    redis.UniversalClient
	bulk   redis.UniversalClient // envelopes and artifacts (WithBulk); rdb by default
	prefix string
	limits Limits
	shared sharedEnvelopes // the envelopes being read, one copy each
	// artifacts are the artifacts being read, one copy each.
	artifacts sharedCopies[artifactKey, StoredArtifact]
}

var _ Store = (*RedisStore)(nil)

// NewRedisStore returns a store in rdb under prefix (quota.key_prefix).
func NewRedisStore(rdb redis.UniversalClient, prefix string, l Limits) *RedisStore {
	if prefix == "" {
		prefix = "execgate"
	}
	return &RedisStore{rdb: rdb, bulk: rdb, prefix: prefix, limits: l.WithDefaults()}
}

// WithBulk makes r move envelopes and artifacts (writes and reads of
// whole results, tens of MiB) through bulk, a client whose reads and writes
// may take longer (quota.NewRedisBulkClient); the small commands stay on
// the client r was made with.
func (r *RedisStore) WithBulk(bulk redis.UniversalClient) *RedisStore {
	r.bulk = bulk
	return r
}

func (r *RedisStore) tenantPrefix(k Key) string { return r.prefix + ":{t:" + k.TenantID + "}:" }
func (r *RedisStore) recKey(k Key) string       { return r.tenantPrefix(k) + "x:" + k.ExecutionID }

func unavailable(op string, err error) error {
	return fmt.Errorf("async store: %s: %w: %w", op, quota.ErrUnavailable, err)
}

const luaNow = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// KEYS: rec, active. ARGV: id, max active, active TTL ms.
// Returns 0 created, -1 exists, -2 too many.
var createScript = redis.NewScript(luaNow + `
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[2]) then return -2 end
redis.call('HSET', KEYS[1], 'state', 'queued', 'sub', now)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 0
`)

// KEYS: rec. Returns 1 when a cancel was requested.
var startScript = redis.NewScript(luaNow + `
if redis.call('HGET', KEYS[1], 'state') == 'queued' then
  redis.call('HSET', KEYS[1], 'state', 'running', 'start', now)
end
if redis.call('HGET', KEYS[1], 'cancel') == '1' then return 1 end
return 0
`)

// KEYS: rec, active, done, size, bytes, all. ARGV: id, http status,
// envelope, result TTL ms, budget bytes, the record key prefix (P:x:), max
// results. The records
// whose envelopes are dropped are P:x:<id> of the same tenant: same slot.
var finishScript = redis.NewScript(luaNow + `
if redis.call('HGET', KEYS[1], 'state') == 'done' then return 0 end
local ttl = tonumber(ARGV[4])
local budget = tonumber(ARGV[5])
redis.call('ZREM', KEYS[2], ARGV[1])
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now - ttl)) do
  local sz = tonumber(redis.call('HGET', KEYS[4], id) or '0')
  redis.call('DECRBY', KEYS[5], sz)
  redis.call('HDEL', KEYS[4], id)
  redis.call('ZREM', KEYS[3], id)
end
redis.call('HSET', KEYS[1], 'state', 'done', 'fin', now, 'http', ARGV[2])
if redis.call('HEXISTS', KEYS[1], 'sub') == 0 then redis.call('HSET', KEYS[1], 'sub', now) end
local n = string.len(ARGV[3])
if n <= budget then
  redis.call('HSET', KEYS[1], 'env', ARGV[3])
  redis.call('HSET', KEYS[4], ARGV[1], n)
  redis.call('INCRBY', KEYS[5], n)
  redis.call('ZADD', KEYS[3], now, ARGV[1])
else
  redis.call('HSET', KEYS[1], 'expired', '1')
end
redis.call('PEXPIRE', KEYS[1], ttl)
local total = tonumber(redis.call('GET', KEYS[5]) or '0')
while total > budget do
  local first = redis.call('ZRANGE', KEYS[3], 0, 0)
  if #first == 0 then break end
  local id = first[1]
  local sz = tonumber(redis.call('HGET', KEYS[4], id) or '0')
  total = total - sz
  redis.call('DECRBY', KEYS[5], sz)
  redis.call('HDEL', KEYS[4], id)
  redis.call('ZREM', KEYS[3], id)
  local rk = ARGV[6] .. id
  if redis.call('EXISTS', rk) == 1 then
    redis.call('HDEL', rk, 'env')
    redis.call('HSET', rk, 'expired', '1')
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now - ttl)
redis.call('ZADD', KEYS[6], now, ARGV[1])
while redis.call('ZCARD', KEYS[6]) > tonumber(ARGV[7]) do
  local id = redis.call('ZRANGE', KEYS[6], 0, 0)[1]
  redis.call('ZREM', KEYS[6], id)
  local sz = redis.call('HGET', KEYS[4], id)
  if sz then
    redis.call('DECRBY', KEYS[5], tonumber(sz))
    redis.call('HDEL', KEYS[4], id)
    redis.call('ZREM', KEYS[3], id)
  end
  redis.call('DEL', ARGV[6] .. id)
end
for i = 3, 6 do redis.call('PEXPIRE', KEYS[i], ttl) end
return 1
`)

// headFields are the fields of a record hash but the envelope: what Head
// and a cancel read (never the envelope, which may be tens of MiB).
var headFields = []string{"state", "cancel", "sub", "start", "fin", "http", "expired"}

// KEYS: rec. ARGV: headFields. Returns the record's head fields before the
// cancel flag was set, as name, value pairs (empty: none).
var cancelScript = redis.NewScript(`
local vals = redis.call('HMGET', KEYS[1], unpack(ARGV))
if not vals[1] then return {} end
if vals[1] ~= 'done' then
  redis.call('HSET', KEYS[1], 'cancel', '1')
end
local was = {}
for i, name in ipairs(ARGV) do
  if vals[i] then
    was[#was + 1] = name
    was[#was + 1] = vals[i]
  end
end
return was
`)

// Create implements Store.
func (r *RedisStore) Create(ctx context.Context, k Key) error {
	n, err := createScript.Run(ctx, r.rdb, []string{r.recKey(k), r.tenantPrefix(k) + "xactive"},
		k.ExecutionID, r.limits.MaxActive, r.limits.ActiveTTL.Milliseconds()).Int()
	switch {
	case err != nil:
		return unavailable("create", err)
	case n == -1:
		return ErrExists
	case n == -2:
		return &TooManyError{Max: r.limits.MaxActive}
	}
	return nil
}

// Start implements Store.
func (r *RedisStore) Start(ctx context.Context, k Key) (bool, error) {
	n, err := startScript.Run(ctx, r.rdb, []string{r.recKey(k)}).Int()
	if err != nil {
		return false, unavailable("start", err)
	}
	return n == 1, nil
}

// Finish implements Store.
func (r *RedisStore) Finish(ctx context.Context, k Key, status int, env []byte) error {
	p := r.tenantPrefix(k)
	err := finishScript.Run(ctx, r.bulk, []string{r.recKey(k), p + "xactive", p + "xdone", p + "xsize", p + "xbytes", p + "xall"},
		k.ExecutionID, status, env, r.limits.ResultTTL.Milliseconds(), r.limits.TenantResultBytes, p+"x:", r.limits.MaxResults).Err()
	if err != nil {
		return unavailable("finish", err)
	}
	return nil
}

// Get implements Store.
func (r *RedisStore) Get(ctx context.Context, k Key) (Record, bool, error) {
	m, err := r.bulk.HGetAll(ctx, r.recKey(k)).Result() // the envelope too
	if err != nil {
		return Record{}, false, unavailable("get", err)
	}
	if len(m) == 0 {
		return Record{}, false, nil
	}
	return recordFrom(k, m), true, nil
}

// Head implements Store: the record's fields but the envelope.
func (r *RedisStore) Head(ctx context.Context, k Key) (Record, bool, error) {
	vals, err := r.rdb.HMGet(ctx, r.recKey(k), headFields...).Result()
	if err != nil {
		return Record{}, false, unavailable("head", err)
	}
	m := make(map[string]string, len(headFields))
	for i, v := range vals {
		if s, ok := v.(string); ok {
			m[headFields[i]] = s
		}
	}
	if m["state"] == "" {
		return Record{}, false, nil
	}
	return recordFrom(k, m), true, nil
}

// Envelope implements Store: one copy out of Redis for all the readers of
// an execution at a time, its size reserved first.
func (r *RedisStore) Envelope(ctx context.Context, k Key, reserve Reserve) ([]byte, func(), bool, error) {
	key := r.recKey(k)
	return r.shared.get(ctx, k, func(ctx context.Context) ([]byte, func(), bool, error) {
		n, err := r.bulk.HStrLen(ctx, key, "env").Result()
		if err != nil {
			return nil, nil, false, unavailable("envelope size", err)
		}
		if n == 0 {
			return nil, nil, false, nil
		}
		release := func() {}
		if reserve != nil {
			if release, err = reserve(ctx, n); err != nil {
				return nil, nil, false, err
			}
		}
		// Bytes hands over the reply's own buffer: one allocation.
		env, err := r.bulk.HGet(ctx, key, "env").Bytes()
		if err != nil {
			release()
			if errors.Is(err, redis.Nil) { // dropped since
				return nil, nil, false, nil
			}
			return nil, nil, false, unavailable("envelope", err)
		}
		return env, release, true, nil
	})
}

// RequestCancel implements Store.
func (r *RedisStore) RequestCancel(ctx context.Context, k Key) (Record, bool, error) {
	args := make([]any, len(headFields))
	for i, f := range headFields {
		args[i] = f
	}
	v, err := cancelScript.Run(ctx, r.rdb, []string{r.recKey(k)}, args...).StringSlice()
	if err != nil && !errors.Is(err, redis.Nil) {
		return Record{}, false, unavailable("cancel", err)
	}
	if len(v) == 0 {
		return Record{}, false, nil
	}
	m := make(map[string]string, len(v)/2)
	for i := 0; i+1 < len(v); i += 2 {
		m[v[i]] = v[i+1]
	}
	return recordFrom(k, m), true, nil
}

// CancelRequested implements Store.
func (r *RedisStore) CancelRequested(ctx context.Context, k Key) (bool, error) {
	v, err := r.rdb.HGet(ctx, r.recKey(k), "cancel").Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, unavailable("cancel requested", err)
	}
	return v == "1", nil
}

// recordFrom is the Record of a stored hash.
func recordFrom(k Key, m map[string]string) Record {
	ms := func(f string) time.Time {
		n, err := strconv.ParseInt(m[f], 10, 64)
		if err != nil || n == 0 {
			return time.Time{}
		}
		return time.UnixMilli(n)
	}
	rec := Record{Key: k, State: State(m["state"]), CancelRequested: m["cancel"] == "1",
		SubmittedAt: ms("sub"), StartedAt: ms("start"), FinishedAt: ms("fin"), Expired: m["expired"] == "1"}
	rec.HTTPStatus, _ = strconv.Atoi(m["http"])
	if env, ok := m["env"]; ok {
		rec.Envelope = []byte(env)
	}
	return rec
}
