package quota

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/execgate/execgate/internal/testenv"
)

// testToolServerStore is what both backends (and a Cluster) must do with
// API tool servers: per tenant, bounded, shared by every limiter on the
// same backend.
func testToolServerStore(t *testing.T, a, b ToolServerStore) {
	ctx := context.Background()
	get := func(s ToolServerStore, tenant string) string {
		t.Helper()
		m, err := s.ToolServers(ctx, tenant)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for k, v := range m {
			out = append(out, k+"="+string(v))
		}
		sort.Strings(out)
		return strings.Join(out, ",")
	}
	if got := get(a, "acme"); got != "" {
		t.Fatalf("a fresh store holds %q", got)
	}
	if err := a.SetToolServer(ctx, "acme", "crm", []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := a.SetToolServer(ctx, "acme", "crm", []byte(`{"v":2}`)); err != nil {
		t.Fatal(err)
	}
	if got := get(b, "acme"); got != `crm={"v":2}` {
		t.Errorf("the other limiter sees %q", got)
	}
	if got := get(b, "globex"); got != "" {
		t.Errorf("another tenant sees %q", got)
	}
	for i := 1; i < MaxToolServers; i++ {
		if err := b.SetToolServer(ctx, "acme", fmt.Sprintf("s%d", i), []byte(`{}`)); err != nil {
			t.Fatalf("server %d of %d: %v", i+1, MaxToolServers, err)
		}
	}
	if err := a.SetToolServer(ctx, "acme", "one-too-many", []byte(`{}`)); !errors.Is(err, ErrTooManyToolServers) || !errors.Is(err, ErrInvalid) {
		t.Errorf("server %d: %v, want ErrTooManyToolServers", MaxToolServers+1, err)
	}
	if err := a.SetToolServer(ctx, "acme", "crm", []byte(`{"v":3}`)); err != nil {
		t.Errorf("replacing one at the cap: %v", err)
	}
	if err := a.SetToolServer(ctx, "acme", "big", make([]byte, MaxToolServerBytes+1)); !errors.Is(err, ErrInvalid) {
		t.Errorf("an oversized document: %v", err)
	}
	if err := a.SetToolServer(ctx, "a{b}", "crm", []byte(`{}`)); !errors.Is(err, ErrInvalid) {
		t.Errorf("a tenant id breaking the hash tag: %v", err)
	}
	if ok, err := b.DeleteToolServer(ctx, "acme", "crm"); err != nil || !ok {
		t.Errorf("delete: %v %v", ok, err)
	}
	if ok, err := a.DeleteToolServer(ctx, "acme", "crm"); err != nil || ok {
		t.Errorf("a second delete: %v %v", ok, err)
	}
	if err := a.SetToolServer(ctx, "acme", "new", []byte(`{}`)); err != nil {
		t.Errorf("after a delete there is room again: %v", err)
	}
	if got := get(a, "acme"); strings.Contains(got, "crm=") || !strings.Contains(got, "new={}") {
		t.Errorf("after delete and set: %q", got)
	}
}

func TestMemoryToolServerStore(t *testing.T) {
	m := NewMemory(Config{})
	testToolServerStore(t, m, m)
}

func TestRedisToolServerStore(t *testing.T) {
	srv := testenv.Redis(t)
	cfg := Config{KeyPrefix: uniquePrefix()}
	a := NewRedis(newTestClient(t, Config{RedisURL: srv.URL()}), cfg)
	b := NewRedis(newTestClient(t, Config{RedisURL: srv.URL()}), cfg)
	testToolServerStore(t, a, b)
	t.Run("on a Cluster", func(t *testing.T) {
		cs := clusterServer(t)
		cfg := Config{KeyPrefix: uniquePrefix()}
		a := NewRedis(newTestClient(t, Config{RedisURL: cs.URL(), RedisCluster: true}), cfg)
		b := NewRedis(newTestClient(t, Config{RedisURL: cs.URL(), RedisCluster: true}), cfg)
		testToolServerStore(t, a, b)
	})
}
