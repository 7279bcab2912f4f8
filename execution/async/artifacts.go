package async

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/execgate/execgate/sandbox"
)

// Artifacts of runs (issue #24), kept where the results are: per tenant
// and execution, for ResultTTL, within the tenant's TenantArtifactBytes
// and MaxArtifacts (oldest first), for GET
// /v1/executions/{id}/artifacts/{name} on any replica. The flow puts
// every run's (execution.ArtifactStore), sync and async alike.

// artifactKey names one artifact.
type artifactKey struct {
	Key
	Name string
}

// memArtifacts are a MemoryStore's artifacts.
type memArtifacts struct {
	mu      sync.Mutex // guards arts and tenants and what they point to
	arts    map[artifactKey]*memArt
	tenants map[string]*memArtTenant
}

type memArt struct {
	StoredArtifact
	key     artifactKey
	expires time.Time
	elem    *list.Element // in its tenant's list
}

type memArtTenant struct {
	list  *list.List // of *memArt, oldest first (= expiry order)
	bytes int64
}

// PutArtifacts implements Store.
func (m *MemoryStore) PutArtifacts(_ context.Context, tenantID, executionID string, arts []sandbox.Artifact) error {
	a := &m.artifacts
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.arts == nil {
		a.arts, a.tenants = map[artifactKey]*memArt{}, map[string]*memArtTenant{}
	}
	now := m.now()
	t, ok := a.tenants[tenantID]
	if !ok {
		t = &memArtTenant{list: list.New()}
		a.tenants[tenantID] = t
	}
	a.expireLocked(t, now)
	for _, art := range arts {
		if int64(len(art.Data)) > m.limits.TenantArtifactBytes {
			continue
		}
		k := artifactKey{Key{TenantID: tenantID, ExecutionID: executionID}, art.Name}
		if old, ok := a.arts[k]; ok {
			a.dropLocked(t, old)
		}
		r := &memArt{StoredArtifact: StoredArtifact{Name: art.Name, MIME: art.MIME, SHA256: art.SHA256, Data: art.Data}, key: k, expires: now.Add(m.limits.ResultTTL)}
		r.elem = t.list.PushBack(r)
		a.arts[k] = r
		t.bytes += int64(len(art.Data))
	}
	for t.list.Len() > 0 && (t.bytes > m.limits.TenantArtifactBytes || t.list.Len() > m.limits.MaxArtifacts) {
		a.dropLocked(t, t.list.Front().Value.(*memArt))
	}
	return nil
}

func (a *memArtifacts) dropLocked(t *memArtTenant, r *memArt) {
	t.list.Remove(r.elem)
	t.bytes -= int64(len(r.Data))
	delete(a.arts, r.key)
}

func (a *memArtifacts) expireLocked(t *memArtTenant, now time.Time) {
	for t.list.Len() > 0 {
		r := t.list.Front().Value.(*memArt)
		if now.Before(r.expires) {
			return
		}
		a.dropLocked(t, r)
	}
}

// Artifact implements Store: the bytes it keeps (never copied, so reserve
// is not asked), kept alive by their readers if dropped meanwhile.
func (m *MemoryStore) Artifact(_ context.Context, k Key, name string, _ Reserve) (StoredArtifact, func(), bool, error) {
	a := &m.artifacts
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.tenants[k.TenantID]
	if !ok {
		return StoredArtifact{}, nil, false, nil
	}
	a.expireLocked(t, m.now())
	r, ok := a.arts[artifactKey{k, name}]
	if !ok {
		return StoredArtifact{}, nil, false, nil
	}
	return r.StoredArtifact, func() {}, true, nil
}

// The Redis layout of artifacts (RedisStore's), with P =
// <prefix>:{t:<tenant>}: as for executions:
//
//	P:a:<execution_id>/<name>  hash: mime, sha, data; TTL ResultTTL
//	P:aidx                     sorted set: "<execution_id>/<name>" → when it
//	                             was kept (ms); the tenant's oldest first
//	P:asize                    hash: "<execution_id>/<name>" → bytes
//	P:abytes                   the tenant's kept artifact bytes
//
// (execution ids and artifact names hold no "/").

// KEYS: idx, size, bytes. ARGV: ttl ms, budget bytes, max count, the
// artifact key prefix (P:a:), then member, mime, sha, data for each
// artifact. Every artifact key is of the tenant: same slot.
var putArtifactsScript = redis.NewScript(luaNow + `
local ttl, budget, maxn, prefix = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local function drop(m)
  local sz = tonumber(redis.call('HGET', KEYS[2], m) or '0')
  redis.call('DECRBY', KEYS[3], sz)
  redis.call('HDEL', KEYS[2], m)
  redis.call('ZREM', KEYS[1], m)
  redis.call('DEL', prefix .. m)
end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - ttl)) do drop(m) end
local i = 5
while i + 3 <= #ARGV do
  local m, data = ARGV[i], ARGV[i + 3]
  local n = string.len(data)
  if n <= budget then
    if redis.call('ZSCORE', KEYS[1], m) then drop(m) end
    redis.call('HSET', prefix .. m, 'mime', ARGV[i + 1], 'sha', ARGV[i + 2], 'data', data)
    redis.call('PEXPIRE', prefix .. m, ttl)
    redis.call('ZADD', KEYS[1], now, m)
    redis.call('HSET', KEYS[2], m, n)
    redis.call('INCRBY', KEYS[3], n)
  end
  i = i + 4
end
while tonumber(redis.call('GET', KEYS[3]) or '0') > budget or redis.call('ZCARD', KEYS[1]) > maxn do
  local first = redis.call('ZRANGE', KEYS[1], 0, 0)
  if #first == 0 then break end
  drop(first[1])
end
for k = 1, 3 do redis.call('PEXPIRE', KEYS[k], ttl) end
return 1
`)

func artifactMember(executionID, name string) string { return executionID + "/" + name }

// PutArtifacts implements Store: one script per run.
func (r *RedisStore) PutArtifacts(ctx context.Context, tenantID, executionID string, arts []sandbox.Artifact) error {
	if len(arts) == 0 {
		return nil
	}
	p := r.tenantPrefix(Key{TenantID: tenantID})
	args := make([]any, 0, 4+4*len(arts))
	args = append(args, r.limits.ResultTTL.Milliseconds(), r.limits.TenantArtifactBytes, r.limits.MaxArtifacts, p+"a:")
	for _, a := range arts {
		args = append(args, artifactMember(executionID, a.Name), a.MIME, a.SHA256, a.Data)
	}
	if err := putArtifactsScript.Run(ctx, r.bulk, []string{p + "aidx", p + "asize", p + "abytes"}, args...).Err(); err != nil {
		return unavailable("put artifacts", err)
	}
	return nil
}

// Artifact implements Store: one copy out of Redis for all the readers of
// an artifact at a time, its size reserved first.
func (r *RedisStore) Artifact(ctx context.Context, k Key, name string, reserve Reserve) (StoredArtifact, func(), bool, error) {
	key := r.tenantPrefix(k) + "a:" + artifactMember(k.ExecutionID, name)
	return r.artifacts.get(ctx, artifactKey{k, name}, func(ctx context.Context) (StoredArtifact, func(), bool, error) {
		var none StoredArtifact
		pipe := r.bulk.Pipeline()
		head := pipe.HMGet(ctx, key, "mime", "sha")
		size := pipe.HStrLen(ctx, key, "data")
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return none, nil, false, unavailable("artifact head", err)
		}
		vals := head.Val()
		mime, ok1 := vals[0].(string)
		sha, ok2 := vals[1].(string)
		if !ok1 || !ok2 {
			return none, nil, false, nil
		}
		release := func() {}
		if n := size.Val(); reserve != nil && n > 0 {
			var err error
			if release, err = reserve(ctx, n); err != nil {
				return none, nil, false, err
			}
		}
		data, err := r.bulk.HGet(ctx, key, "data").Bytes()
		if err != nil {
			release()
			if errors.Is(err, redis.Nil) { // dropped since
				return none, nil, false, nil
			}
			return none, nil, false, unavailable("artifact", err)
		}
		return StoredArtifact{Name: name, MIME: mime, SHA256: sha, Data: data}, release, true, nil
	})
}
