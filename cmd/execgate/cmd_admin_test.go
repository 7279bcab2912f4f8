package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/execgate/execgate/app"
	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/gateway"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/tenancy"
)

// runAdmin runs `admin quota args…` and returns stdout.
func runAdmin(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newAdminCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	cmd.SetArgs(append([]string{"quota"}, args...))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// startGateway starts the real in-process gateway (auth, policy, quota,
// audit) with a no-op runner: the admin routes never run anything.
func startGateway(t *testing.T, mutate func(*config.Config)) (*app.App, *auth.Signer) {
	t.Helper()
	cfg, err := config.Load("", []string{"EXECGATE_STATE_DIR=" + t.TempDir(), "EXECGATE_LISTEN=127.0.0.1:0"})
	if err != nil {
		t.Fatalf("config.Load: %v", err)
	}
	cfg.Sandbox = sandbox.Config{RootfsDir: t.TempDir(), WorkDir: t.TempDir()}
	acme := config.DemoTenant()
	acme.ID = "acme"
	cfg.Tenants = append(cfg.Tenants, acme)
	if mutate != nil {
		mutate(cfg)
	}
	a, err := app.New(context.Background(), app.Options{
		Config:   cfg,
		Runner:   app.NoopRunner{},
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Progress: io.Discard,
	})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	if err := a.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	signer, err := a.Signer()
	if err != nil {
		t.Fatalf("Signer: %v", err)
	}
	return a, signer
}

func mint(t *testing.T, s *auth.Signer, tenant string, roles ...string) string {
	t.Helper()
	tok, err := s.Mint(auth.Claims{Subject: "ops", TenantID: tenant, Roles: roles}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestAdminQuotaAgainstTheGateway(t *testing.T) {
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			a, signer := startGateway(t, func(cfg *config.Config) {
				if backend == "redis" {
					cfg.Quota.Backend = "redis"
					cfg.Quota.RedisURL = testenv.Redis(t).URL()
				}
			})
			testAdminQuota(t, a, signer)
		})
	}
}

func testAdminQuota(t *testing.T, a *app.App, signer *auth.Signer) {
	ctx := context.Background()
	outer := t
	admin := mint(t, signer, "acme", tenancy.RoleAdmin)
	common := []string{"--url", a.URL(), "--token", admin, "--tenant", "acme"}
	configured := config.DemoTenant().Quota
	view := func(t *testing.T, out string) gateway.QuotaResponse {
		t.Helper()
		var r gateway.QuotaResponse
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("output is not a quota response: %v\n%s", err, out)
		}
		return r
	}

	t.Run("get shows the configured quota and no override", func(t *testing.T) {
		out, err := runAdmin(t, append([]string{"get"}, common...)...)
		if err != nil {
			t.Fatal(err)
		}
		if r := view(t, out); r.Effective != configured || r.Override != nil || r.TenantID != "acme" {
			t.Fatalf("got %+v", r)
		}
	})

	t.Run("set with one flag keeps the others and the next admission obeys it", func(t *testing.T) {
		out, err := runAdmin(t, append([]string{"set", "--concurrency", "1"}, common...)...)
		if err != nil {
			t.Fatal(err)
		}
		want := configured
		want.Concurrency = 1
		if r := view(t, out); r.Effective != want || r.Override == nil || *r.Override != want || r.Configured != configured {
			t.Fatalf("got %+v, want effective %+v", r, want)
		}
		adm, err := a.Quota().Admit(ctx, quota.AdmitRequest{TenantID: "acme", ExecutionID: "first", Limits: configured, CPUReserveMS: 1500})
		if err != nil {
			t.Fatal(err)
		}
		outer.Cleanup(func() { _ = adm.Release(ctx) }) // in flight for the usage report below
		_, err = a.Quota().Admit(ctx, quota.AdmitRequest{TenantID: "acme", ExecutionID: "second", Limits: configured})
		var ex *quota.ExceededError
		if !errors.As(err, &ex) || ex.Kind != quota.KindConcurrency {
			t.Fatalf("second Admit = %v, want refused by the new concurrency of 1", err)
		}
	})

	t.Run("usage shows the run in flight and its reservation", func(t *testing.T) {
		out, err := runAdmin(t, append([]string{"usage"}, common...)...)
		if err != nil {
			t.Fatal(err)
		}
		var u quota.Usage
		if err := json.Unmarshal([]byte(out), &u); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if u.TenantID != "acme" || u.Concurrency != (quota.ConcurrencyUsage{Limit: 1, Running: 1}) ||
			u.Budget.ReservedMS != 1500 || u.Budget.LimitMS != configured.DailyCPUSeconds*1000 ||
			u.Rate.LimitPerMinute != configured.RatePerMinute || u.Rate.Remaining != configured.Burst-1 || u.Budget.ResetsAt.IsZero() {
			t.Fatalf("usage = %+v", u)
		}
	})

	t.Run("an invalid value is refused locally, naming the field", func(t *testing.T) {
		_, err := runAdmin(t, append([]string{"set", "--burst", "0"}, common...)...)
		if err == nil || !strings.Contains(err.Error(), "burst") {
			t.Fatalf("err = %v, want one naming burst", err)
		}
		if l, _ := a.Quota().Effective(ctx, "acme", configured); l.Burst != configured.Burst {
			t.Fatalf("burst changed to %d", l.Burst)
		}
	})

	t.Run("clear drops the override", func(t *testing.T) {
		out, err := runAdmin(t, append([]string{"clear"}, common...)...)
		if err != nil {
			t.Fatal(err)
		}
		if r := view(t, out); r.Override != nil || r.Effective != configured {
			t.Fatalf("got %+v", r)
		}
	})

	t.Run("a token without the admin role is refused with the gateway's error type", func(t *testing.T) {
		_, err := runAdmin(t, "get", "--url", a.URL(), "--tenant", "acme", "--token", mint(t, signer, "acme", tenancy.RoleExecutor))
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status != http.StatusForbidden || ae.Type != "Forbidden" {
			t.Fatalf("err = %v, want 403 Forbidden", err)
		}
	})

	t.Run("tenant-admin and auditor read their own tenant only and change nothing", func(t *testing.T) {
		for _, role := range []string{tenancy.RoleTenantAdmin, tenancy.RoleAuditor} {
			tok := mint(t, signer, "acme", role)
			own := []string{"--url", a.URL(), "--tenant", "acme", "--token", tok}
			if out, err := runAdmin(t, append([]string{"get"}, own...)...); err != nil || view(t, out).TenantID != "acme" {
				t.Fatalf("%s get own: %v %s", role, err, out)
			}
			if _, err := runAdmin(t, append([]string{"usage"}, own...)...); err != nil {
				t.Fatalf("%s usage own: %v", role, err)
			}
			for _, args := range [][]string{
				append([]string{"set", "--concurrency", "1"}, own...),
				append([]string{"clear"}, own...),
				{"get", "--url", a.URL(), "--tenant", "demo", "--token", tok},
				{"usage", "--url", a.URL(), "--tenant", "demo", "--token", tok},
			} {
				out, err := runAdmin(t, args...)
				var ae *apiError
				if !errors.As(err, &ae) || ae.Status != http.StatusForbidden || ae.Type != "Forbidden" || strings.Contains(out, "tenant_id") {
					t.Fatalf("%s %v: err = %v, out %q; want 403 Forbidden", role, args[0], err, out)
				}
			}
		}
	})

	t.Run("a bad token is refused as Unauthenticated", func(t *testing.T) {
		_, err := runAdmin(t, "get", "--url", a.URL(), "--tenant", "acme", "--token", "not-a-jwt")
		var ae *apiError
		if !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized || ae.Type != "Unauthenticated" {
			t.Fatalf("err = %v, want 401 Unauthenticated", err)
		}
	})

	t.Run("without --url the gateway is found at the listen address of --config", func(t *testing.T) {
		dir := t.TempDir()
		file := filepath.Join(dir, "config.yaml")
		key := filepath.Join(dir, "dev.key")
		yaml := "listen: " + a.Addr() + "\nstate_dir: " + dir + "\nauth:\n  hs256_secret_file: " + key + "\n"
		if err := os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		old := flags
		t.Cleanup(func() { flags = old })
		flags.configFile = file
		if _, err := runAdmin(t, "get", "--tenant", "acme", "--token", admin); err != nil {
			t.Fatalf("admin with --config %s (listen %s): %v", file, a.Addr(), err)
		}
	})

	t.Run("the token comes from EXECGATE_TOKEN when no flag is given", func(t *testing.T) {
		t.Setenv("EXECGATE_TOKEN", admin)
		if _, err := runAdmin(t, "get", "--url", a.URL(), "--tenant", "acme"); err != nil {
			t.Fatal(err)
		}
	})
}

func TestAdminQuotaClientEdges(t *testing.T) {
	var lastPath atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lastPath.Store(r.URL.EscapedPath())
		switch {
		case strings.HasSuffix(r.URL.Path, "/usage"):
			_, _ = io.WriteString(w, `{"something":"else"}`)
		case strings.Contains(r.URL.Path, "proxy"):
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "<html>bad gateway</html>")
		default:
			_ = json.NewEncoder(w).Encode(quota.Limits{RatePerMinute: 1, Burst: 1})
		}
	}))
	t.Cleanup(srv.Close)
	flags := []string{"--url", srv.URL, "--token", "t"}

	t.Run("the tenant is escaped into the path", func(t *testing.T) {
		if _, err := runAdmin(t, append([]string{"get", "--tenant", "a/b c"}, flags...)...); err != nil {
			t.Fatal(err)
		}
		if p, _ := lastPath.Load().(string); p != "/v1/admin/tenants/a%2Fb%20c/quota" {
			t.Fatalf("path = %q", p)
		}
	})

	t.Run("a bare quota object is accepted as an answer", func(t *testing.T) {
		out, err := runAdmin(t, append([]string{"get", "--tenant", "x"}, flags...)...)
		if err != nil || !strings.Contains(out, `"rate_per_minute": 1`) {
			t.Fatalf("out %q, err %v", out, err)
		}
	})

	t.Run("an answer of another shape is refused, not printed as zeros", func(t *testing.T) {
		if _, err := runAdmin(t, append([]string{"usage", "--tenant", "x"}, flags...)...); err == nil || !strings.Contains(err.Error(), "missing") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("a non-envelope error body is shown with the HTTP status", func(t *testing.T) {
		_, err := runAdmin(t, append([]string{"get", "--tenant", "proxy"}, flags...)...)
		if err == nil || !strings.Contains(err.Error(), "502 Bad Gateway") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("without any token the command says how to get one", func(t *testing.T) {
		t.Setenv("EXECGATE_TOKEN", "")
		_, err := runAdmin(t, "get", "--url", srv.URL, "--tenant", "acme")
		if err == nil || !strings.Contains(err.Error(), "EXECGATE_TOKEN") || !strings.Contains(err.Error(), "execgate token") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("bad flags are named", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"get", "--token", "x"}, "--tenant"},
			{[]string{"get", "--token", "x", "--tenant", "a", "--url", "127.0.0.1:8010"}, "--url"},
			{[]string{"set", "--token", "x", "--tenant", "a"}, "--concurrency"},
		} {
			if _, err := runAdmin(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: err = %v, want one naming %s", tc.args, err, tc.want)
			}
		}
	})

	t.Run("a gateway that is not listening is reported", func(t *testing.T) {
		dead := httptest.NewServer(http.NotFoundHandler())
		dead.Close()
		if _, err := runAdmin(t, "get", "--url", dead.URL, "--token", "x", "--tenant", "a"); err == nil || !strings.Contains(err.Error(), "connect") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestListenURLReachesWildcardListenersOnLoopback(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:8010":  "http://127.0.0.1:8010",
		":8010":           "http://127.0.0.1:8010",
		"0.0.0.0:9000":    "http://127.0.0.1:9000",
		"[::]:8010":       "http://[::1]:8010",
		"[::1]:8010":      "http://[::1]:8010",
		"gw.internal:443": "http://gw.internal:443",
	} {
		if got := listenURL(in); got != want {
			t.Errorf("listenURL(%q) = %q, want %q", in, got, want)
		}
	}
}
