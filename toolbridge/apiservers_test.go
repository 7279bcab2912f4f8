package toolbridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/toolbridge"
	"github.com/execgate/execgate/toolbridge/toolbridgetest"
	"github.com/execgate/execgate/toolbridge/toolconfig"
)

// fakeStore is a ServerStore the test changes behind the Hub's back, as
// another replica would.
type fakeStore struct {
	mu    sync.Mutex
	docs  map[string][]byte
	err   error
	reads int
}

func (s *fakeStore) ToolServers(context.Context, string) (map[string][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	out := map[string][]byte{}
	for k, v := range s.docs {
		out[k] = v
	}
	return out, s.err
}

func (s *fakeStore) set(t *testing.T, c toolconfig.Server) {
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.docs[c.Name] = b
	s.mu.Unlock()
}

func (s *fakeStore) del(name string) {
	s.mu.Lock()
	delete(s.docs, name)
	s.mu.Unlock()
}

func TestAPIServersApplyAfterTheTTLAndReplacedSessionsClose(t *testing.T) {
	token := "api-" + strings.Repeat("t", 24)
	srv := toolbridgetest.Start(t, token)
	secret := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(secret, []byte("Bearer "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hdr := map[string]toolconfig.Secret{"Authorization": {File: secret}}
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	store := &fakeStore{docs: map[string][]byte{}}
	logs := &testenv.SyncBuffer{}
	hub, err := toolbridge.NewHub(map[string]toolconfig.Config{"acme": {Servers: []toolconfig.Server{
		{Name: "math", URL: srv.URL, Headers: hdr, Allow: []string{"add"}},
	}}}, toolbridge.Options{Policy: newEngine(t), Now: clock, Servers: store, ServersTTL: time.Second,
		APIScope: toolconfig.APIScope{SecretDirs: []string{filepath.Dir(secret)}},
		Logger:   slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hub.Close)
	ctx := context.Background()
	call := func(r *toolbridge.Run, tool string) string {
		t.Helper()
		out, err := r.Call(ctx, tool, json.RawMessage(`{"a":1,"b":2}`))
		var te *sandbox.ToolError
		if errors.As(err, &te) {
			return te.Type
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	run := func() *toolbridge.Run {
		return hub.NewRun(toolbridge.RunInfo{TenantID: "acme", Subject: "u", Roles: []string{"executor"}, DecisionID: "d", Granted: []string{"*.*"}})
	}
	sources := func() string {
		st, _, _ := hub.Status(ctx, "acme")
		var out []string
		for _, s := range st {
			out = append(out, s.Name+"="+s.Source)
		}
		return strings.Join(out, ",")
	}

	if got := call(run(), "math.add"); got != `{"sum":3}` {
		t.Fatalf("config server: %s", got)
	}
	// Added elsewhere: not seen before the TTL, seen after it.
	store.set(t, toolconfig.Server{Name: "crm", URL: srv.URL, Headers: hdr, Allow: []string{"add"}})
	if got := call(run(), "crm.add"); got != sandbox.ErrToolDenied {
		t.Errorf("within the TTL crm.add gave %s", got)
	}
	advance(1100 * time.Millisecond)
	held := run() // holds the snapshot with crm
	if got := call(held, "crm.add"); got != `{"sum":3}` {
		t.Fatalf("after the TTL crm.add gave %s", got)
	}
	if got := sources(); got != "math=config,crm=api" {
		t.Errorf("status: %s", got)
	}
	reads := store.reads
	for range 5 {
		run()
	}
	if store.reads != reads {
		t.Errorf("runs within the TTL read the store %d times", store.reads-reads)
	}

	// Replaced: the run holding the old server gets ToolUnavailable (its
	// session is closed, never reopened); a new run gets the new one; the
	// unchanged config server keeps its session.
	store.set(t, toolconfig.Server{Name: "crm", URL: srv.URL, Headers: hdr, Allow: []string{"add", "upper"}})
	hub.Refresh(ctx, "acme")
	if got := call(held, "crm.add"); got != sandbox.ErrToolUnavailable {
		t.Errorf("a run holding the replaced server: %s", got)
	}
	if got := call(run(), "crm.add"); got != `{"sum":3}` {
		t.Errorf("the replacement: %s", got)
	}
	st, _, _ := hub.Status(ctx, "acme")
	if !st[0].Connected {
		t.Errorf("the unchanged config server lost its session: %+v", st[0])
	}

	// The store down: the last servers stay.
	store.mu.Lock()
	store.err = errors.New("redis down")
	store.mu.Unlock()
	advance(2 * time.Second)
	if got := call(run(), "crm.add"); got != `{"sum":3}` {
		t.Errorf("with the store down: %s", got)
	}
	store.mu.Lock()
	store.err = nil
	store.mu.Unlock()

	// Overriding the config server, then deleting the override.
	store.set(t, toolconfig.Server{Name: "math", URL: srv.URL, Headers: hdr, Allow: []string{"upper"}})
	advance(2 * time.Second)
	if got := call(run(), "math.add"); got != sandbox.ErrToolDenied {
		t.Errorf("math.add under an override allowing upper: %s", got)
	}
	store.del("math")
	store.del("crm")
	advance(2 * time.Second)
	if got := sources(); got != "math=config" {
		t.Errorf("after the deletes: %s", got)
	}
	if got := call(run(), "math.add"); got != `{"sum":3}` {
		t.Errorf("the config server back: %s", got)
	}
	if got := call(run(), "crm.add"); got != sandbox.ErrToolDenied {
		t.Errorf("crm.add after delete: %s", got)
	}

	// A reference that does not resolve on this replica: reported, not used.
	store.set(t, toolconfig.Server{Name: "ghost", URL: srv.URL, Headers: map[string]toolconfig.Secret{"Authorization": {File: "/nonexistent/x"}}})
	advance(2 * time.Second)
	st, _, _ = hub.Status(ctx, "acme")
	if len(st) != 2 || st[1].Name != "ghost" || st[1].Problem == "" || st[1].Source != "api" {
		t.Errorf("status with an unusable server: %+v", st)
	}
	if strings.Contains(logs.String(), token) {
		t.Error("the log carries the token")
	}
}
