package quota

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ToolServerStore keeps the tool servers an admin added over the API, per
// tenant: one opaque document (the server's JSON) per server name. It lives
// in the quota backend so that, like quota overrides, every replica sees
// the same servers (the memory backend: this process only). The caller
// validates documents; the store only bounds them.
type ToolServerStore interface {
	// ToolServers returns tenant's documents by server name.
	ToolServers(ctx context.Context, tenant string) (map[string][]byte, error)
	// SetToolServer adds or replaces one; ErrTooManyToolServers when the
	// tenant already has MaxToolServers others.
	SetToolServer(ctx context.Context, tenant, name string, doc []byte) error
	// DeleteToolServer removes one and reports whether it was there.
	DeleteToolServer(ctx context.Context, tenant, name string) (bool, error)
}

// Bounds of the tool server store.
const (
	MaxToolServers     = 32
	MaxToolServerBytes = 16 << 10
	maxToolServerName  = 64
)

// ErrTooManyToolServers: the tenant is at MaxToolServers (wraps ErrInvalid).
var ErrTooManyToolServers = fmt.Errorf("%w: at most %d tool servers per tenant over the API", ErrInvalid, MaxToolServers)

var (
	_ ToolServerStore = (*MemoryLimiter)(nil)
	_ ToolServerStore = (*RedisLimiter)(nil)
)

func validToolServer(tenant, name string, doc []byte) error {
	if err := validTenant(tenant); err != nil {
		return err
	}
	switch {
	case name == "" || len(name) > maxToolServerName:
		return fmt.Errorf("%w: tool server name must be 1 to %d bytes", ErrInvalid, maxToolServerName)
	case len(doc) > MaxToolServerBytes:
		return fmt.Errorf("%w: tool server document is %d bytes; at most %d", ErrInvalid, len(doc), MaxToolServerBytes)
	}
	return nil
}

// ToolServers returns tenant's API tool servers.
func (m *MemoryLimiter) ToolServers(_ context.Context, tenant string) (map[string][]byte, error) {
	if err := validTenant(tenant); err != nil {
		return nil, fmt.Errorf("reading tool servers: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string][]byte, len(m.tools[tenant]))
	for k, v := range m.tools[tenant] {
		out[k] = append([]byte(nil), v...)
	}
	return out, nil
}

// SetToolServer adds or replaces one of tenant's API tool servers.
func (m *MemoryLimiter) SetToolServer(_ context.Context, tenant, name string, doc []byte) error {
	if err := validToolServer(tenant, name, doc); err != nil {
		return fmt.Errorf("setting tool server: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tools == nil {
		m.tools = map[string]map[string][]byte{}
	}
	t := m.tools[tenant]
	if t == nil {
		t = map[string][]byte{}
		m.tools[tenant] = t
	}
	if _, ok := t[name]; !ok && len(t) >= MaxToolServers {
		return ErrTooManyToolServers
	}
	t[name] = append([]byte(nil), doc...)
	return nil
}

// DeleteToolServer removes one of tenant's API tool servers.
func (m *MemoryLimiter) DeleteToolServer(_ context.Context, tenant, name string) (bool, error) {
	if err := validTenant(tenant); err != nil {
		return false, fmt.Errorf("deleting tool server: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.tools[tenant]
	if _, ok := t[name]; !ok {
		return false, nil
	}
	delete(t, name)
	if len(t) == 0 {
		delete(m.tools, tenant)
	}
	return true, nil
}

// setToolServerScript adds or replaces a field of the tenant's tools hash
// unless that would pass the cap (one key: one Cluster slot).
var setToolServerScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
`)

// ToolServers returns tenant's API tool servers (HGETALL of
// <p>:{t:<id>}:tools).
func (r *RedisLimiter) ToolServers(ctx context.Context, tenant string) (map[string][]byte, error) {
	if err := validTenant(tenant); err != nil {
		return nil, fmt.Errorf("reading tool servers: %w", err)
	}
	m, err := r.client.HGetAll(ctx, r.keys(tenant).tools).Result()
	if err != nil {
		return nil, unavailable(ctx, "reading tool servers", err)
	}
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = []byte(v)
	}
	return out, nil
}

// SetToolServer adds or replaces one of tenant's API tool servers.
func (r *RedisLimiter) SetToolServer(ctx context.Context, tenant, name string, doc []byte) error {
	if err := validToolServer(tenant, name, doc); err != nil {
		return fmt.Errorf("setting tool server: %w", err)
	}
	n, err := setToolServerScript.Run(ctx, r.client, []string{r.keys(tenant).tools}, name, doc, MaxToolServers).Int()
	if err != nil {
		return unavailable(ctx, "setting tool server", err)
	}
	if n == 0 {
		return ErrTooManyToolServers
	}
	return nil
}

// DeleteToolServer removes one of tenant's API tool servers.
func (r *RedisLimiter) DeleteToolServer(ctx context.Context, tenant, name string) (bool, error) {
	if err := validTenant(tenant); err != nil {
		return false, fmt.Errorf("deleting tool server: %w", err)
	}
	n, err := r.client.HDel(ctx, r.keys(tenant).tools, name).Result()
	if err != nil {
		return false, unavailable(ctx, "deleting tool server", err)
	}
	return n > 0, nil
}
