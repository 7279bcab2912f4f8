package app_test

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/gateway"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/telemetry"
	"github.com/execgate/execgate/telemetry/otlptest"
	"github.com/execgate/execgate/tenancy"
)

// Every build of the binary in the repository (setup.sh, image.sh,
// schemathesis.sh, the Dockerfile) uses -trimpath.
func TestEveryBuildOfTheBinaryTrimsPaths(t *testing.T) {
	root := testenv.RepoRoot(t)
	files, _ := filepath.Glob(filepath.Join(root, "scripts", "*.sh"))
	files = append(files, filepath.Join(root, "Dockerfile"))
	var builds int
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for n := 1; sc.Scan(); n++ {
			l := sc.Text()
			if strings.Contains(l, "go build") && strings.Contains(l, "./cmd/execgate") && !strings.HasPrefix(strings.TrimSpace(l), "#") {
				builds++
				if !strings.Contains(l, "-trimpath") {
					t.Errorf("%s:%d builds the binary without -trimpath: %s", f, n, l)
				}
			}
		}
		fh.Close()
	}
	if builds < 3 {
		t.Fatalf("found %d builds of ./cmd/execgate in scripts/ and the Dockerfile, want setup.sh's, image.sh's, the Dockerfile's…", builds)
	}
	if !strings.Contains(strings.Join(testenv.BuildFlags, " "), "-trimpath") {
		t.Fatalf("the tests build the binary without -trimpath: %v", testenv.BuildFlags)
	}
}

// builtGateway is `execgate serve` of a built binary in role gateway
// (decides and dispatches: no sandbox needed) with the Redis quota backend.
type builtGateway struct {
	base  string
	admin string // an admin token of tenant demo
	proc  *exec.Cmd
	out   *testenv.SyncBuffer // its stdout and stderr
}

func startBuiltGateway(t *testing.T, env []string, args ...string) *builtGateway {
	t.Helper()
	redis := testenv.Redis(t)
	bin := testenv.BuildExecgate(t)
	dir := t.TempDir()
	listen := obsFreeAddr(t)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	for name, content := range map[string]string{
		"spec.key": hex.EncodeToString(key) + "\n",
		"config.yaml": fmt.Sprintf(`listen: %q
state_dir: %q
server: { role: gateway }
auth: { hs256_secret_file: %q }
quota: { backend: redis, redis_url: %q }
dispatch: { spec_key_file: %q }
tenants: [{ id: demo }]
`, listen, dir, filepath.Join(dir, "dev.key"), redis.URL(), filepath.Join(dir, "spec.key")),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := auth.EnsureDevKey(filepath.Join(dir, "dev.key")); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(filepath.Join(dir, "config.yaml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := auth.NewSigner(cfg.Auth, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := signer.Mint(auth.Claims{Subject: "t", TenantID: "demo", Roles: []string{tenancy.RoleAdmin}}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"serve", "--config", filepath.Join(dir, "config.yaml")}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	g := &builtGateway{base: "http://" + listen, admin: tok}
	g.proc, g.out = obsStart(t, cmd, g.base)
	return g
}

// get sends GET path with the admin token and returns the status and body.
func (g *builtGateway) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, g.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+g.admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// stop ends the gateway with SIGTERM (its exporters flush).
func (g *builtGateway) stop() {
	_ = g.proc.Process.Signal(syscall.SIGTERM)
	_ = g.proc.Wait()
}

// A span the built binary exports carries no path of the machine it was
// built on: redisotel's code.filepath is module-relative.
func TestSpansOfTheBuiltBinaryCarryNoBuildPaths(t *testing.T) {
	otlp := otlptest.NewReceiver(t)
	g := startBuiltGateway(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + otlp.URL, "OTEL_BSP_SCHEDULE_DELAY=100"})
	if status, body := g.get(t, "/v1/admin/tenants/demo/usage"); status != http.StatusOK {
		t.Fatalf("usage: %d %s", status, body)
	}
	g.stop() // flushes the exporter

	forbidden := []string{testenv.RepoRoot(t)}
	for _, v := range []string{"GOROOT", "GOMODCACHE"} {
		if out, err := exec.Command("go", "env", v).Output(); err == nil && strings.TrimSpace(string(out)) != "" {
			forbidden = append(forbidden, strings.TrimSpace(string(out)))
		}
	}
	var files int
	for _, s := range otlp.Spans() {
		for _, kv := range s.Span.GetAttributes() {
			v := kv.GetValue().GetStringValue()
			if kv.GetKey() == "code.filepath" {
				files++
				if strings.HasPrefix(v, "/") {
					t.Errorf("span %q: code.filepath %q is a path of the build machine", s.Span.GetName(), v)
				}
			}
			for _, p := range forbidden {
				if p != "" && strings.Contains(v, p) {
					t.Errorf("span %q: %s = %q carries the build path %s", s.Span.GetName(), kv.GetKey(), v, p)
				}
			}
		}
	}
	if files == 0 {
		t.Fatalf("no exported span has code.filepath (%d spans): the test no longer sees what it checks", len(otlp.Spans()))
	}
}

// serve --traces stdout writes each span as a JSON line, and without an
// OTLP endpoint the gateway serves a trace's spans from memory.
func TestServeTracesToStdoutAndFromMemory(t *testing.T) {
	g := startBuiltGateway(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="}, "--traces", "stdout")
	defer g.stop()
	if status, body := g.get(t, "/v1/admin/tenants/demo/usage"); status != http.StatusOK {
		t.Fatalf("usage: %d %s", status, body)
	}
	var edge telemetry.Span
	deadline := time.Now().Add(30 * time.Second)
	for edge.TraceID == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no span line for the request on stdout:\n%s", g.out.String())
		}
		time.Sleep(100 * time.Millisecond)
		for _, l := range strings.Split(g.out.String(), "\n") {
			var s telemetry.Span
			if json.Unmarshal([]byte(l), &s) == nil && s.Name == "GET /v1/admin/tenants/:id/usage" {
				edge = s
			}
		}
	}
	if edge.DurationMS <= 0 || edge.TenantID != "demo" || edge.Kind != "server" {
		t.Fatalf("the request's span line: %+v", edge)
	}
	status, body := g.get(t, "/v1/admin/traces/"+edge.TraceID)
	var tr gateway.TraceResponse
	if status != http.StatusOK || json.Unmarshal(body, &tr) != nil {
		t.Fatalf("GET the trace: %d %s", status, body)
	}
	names := map[string]bool{}
	for _, s := range tr.Spans {
		names[s.Name] = true
	}
	if !names["GET /v1/admin/tenants/:id/usage"] || !names["auth"] {
		t.Fatalf("the kept spans of the trace: %v", names)
	}
}
