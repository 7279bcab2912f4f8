package app_test

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/internal/testenv"
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

// A span the built binary exports carries no path of the machine it was
// built on: redisotel's code.filepath is module-relative.
func TestSpansOfTheBuiltBinaryCarryNoBuildPaths(t *testing.T) {
	redis := testenv.Redis(t)
	otlp := otlptest.NewReceiver(t)
	bin := testenv.BuildExecgate(t)
	dir := t.TempDir()
	listen := obsFreeAddr(t)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	for name, content := range map[string]string{
		"spec.key": hex.EncodeToString(key) + "\n",
		"config.yaml": fmt.Sprintf(`listen: %q
state_dir: %q
server: { role: gateway }       # decides and dispatches: no sandbox needed
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

	cmd := exec.Command(bin, "serve", "--config", filepath.Join(dir, "config.yaml"))
	cmd.Env = append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT="+otlp.URL, "OTEL_BSP_SCHEDULE_DELAY=100")
	proc, _ := obsStart(t, cmd, "http://"+listen)
	req, _ := http.NewRequest(http.MethodGet, "http://"+listen+"/v1/admin/tenants/demo/usage", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("usage: %d", resp.StatusCode)
	}
	_ = proc.Process.Signal(syscall.SIGTERM) // flushes the exporter
	_ = proc.Wait()

	forbidden := []string{testenv.RepoRoot(t), runtime.GOROOT()}
	if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil && strings.TrimSpace(string(out)) != "" {
		forbidden = append(forbidden, strings.TrimSpace(string(out)))
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
