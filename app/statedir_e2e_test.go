package app_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
)

// Private state directories (issue #20, #11 §5): `execgate serve` as a new
// user runs it, on a state dir only root can enter, with and without a
// config file, side by side with another gateway, and after a crash.

// serveProc is one `execgate serve` subprocess.
type serveProc struct {
	cmd  *exec.Cmd
	base string
	logs *testenv.SyncBuffer
	done chan struct{}
}

// serveArgs starts `execgate serve args...` listening on a free port (added
// as --listen) with nothing of the test's EXECGATE_ environment, and waits
// for /readyz (a real jailed run succeeded).
func serveArgs(t *testing.T, bin string, args ...string) *serveProc {
	t.Helper()
	return serveUmask(t, "", bin, args...)
}

// serveUmask is serveArgs with the gateway started under umask (unless "").
func serveUmask(t *testing.T, umask, bin string, args ...string) *serveProc {
	t.Helper()
	return serveEnv(t, umask, nil, bin, args...)
}

// serveEnv is serveUmask with env (EXECGATE_… overrides) added to the
// gateway's environment.
func serveEnv(t *testing.T, umask string, env []string, bin string, args ...string) *serveProc {
	t.Helper()
	addr := obsFreeAddr(t)
	p := &serveProc{base: "http://" + addr, logs: &testenv.SyncBuffer{}, done: make(chan struct{})}
	argv := append(append([]string{bin, "serve"}, args...), "--listen", addr)
	if umask != "" {
		// exec keeps the pid: the gateway's own, for the view's name.
		argv = append([]string{"/bin/sh", "-c", "umask " + umask + ` && exec "$@"`, "sh"}, argv...)
	}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	// The default runtime only (privateStateDir holds it; a serve that
	// wanted another would build it from the Debian archive).
	p.cmd.Env = cleanEnv(append([]string{"EXECGATE_NSJAIL=" + testenv.Nsjail(t), "EXECGATE_SANDBOX_RUNTIMES=" + limits.DefaultRuntime}, env...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("execgate serve %v output:\n%s", args, p.logs.String())
		}
	})
	deadline := time.Now().Add(3 * time.Minute) // a first start may build the rootfs
	for {
		resp, err := http.Get(p.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-p.done:
			t.Fatalf("execgate serve %v exited:\n%s", args, p.logs.String())
		default:
		}
		if strings.Contains(p.logs.String(), "CANNOT RUN TOOLS") { // the start-up banner of a gateway without a sandbox
			t.Fatalf("execgate serve %v cannot run tools:\n%s", args, p.logs.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("execgate serve %v not ready within 3 minutes:\n%s", args, p.logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "EXECGATE_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// probeOK mints a token with `execgate token args...` and runs the DESIGN
// §4 probe for tenant through p.
func (p *serveProc) probeOK(t *testing.T, bin, tenant string, args ...string) {
	t.Helper()
	p.probeNetworkOK(t, bin, tenant, "none", args...)
}

// probeNetworkOK is probeOK in network mode network.
func (p *serveProc) probeNetworkOK(t *testing.T, bin, tenant, network string, args ...string) {
	t.Helper()
	tc := exec.Command(bin, append([]string{"token", "--tenant", tenant}, args...)...)
	tc.Env = cleanEnv()
	out, err := tc.Output()
	if err != nil {
		t.Fatalf("execgate token: %v", err)
	}
	body := fmt.Sprintf(`{"execution_id":"probe-%d","tenant_id":%q,"network_access":%q,"source":"async def run(args, context):\n    return {\"ok\": True}\n","entrypoint":"run"}`, time.Now().UnixNano(), tenant, network)
	req, _ := http.NewRequest(http.MethodPost, p.base+"/v1/execute", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(out)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var env struct {
		Status string          `json:"status"`
		Result json.RawMessage `json:"result"`
		Error  *struct{ Type, Message string }
	}
	var raw bytes.Buffer
	_, _ = raw.ReadFrom(resp.Body)
	_ = json.Unmarshal(raw.Bytes(), &env)
	if resp.StatusCode != http.StatusOK || env.Status != "ok" || string(env.Result) != `{"ok":true}` {
		t.Fatalf("probe through %s: HTTP %d %s", p.base, resp.StatusCode, raw.String())
	}
}

// privateStateDir is a fresh directory only root can enter (like mktemp -d)
// holding a copy of the default runtime's test rootfs at
// runtimes/<runtime>/, where serve looks for it.
func privateStateDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.MkdirAll(filepath.Join(dir, "runtimes"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", testenv.Rootfs(t), filepath.Join(dir, "runtimes", limits.DefaultRuntime)).CombinedOutput(); err != nil {
		t.Fatalf("copying the test rootfs: %v\n%s", err, out)
	}
	return dir
}

func TestServeRunsToolsOnAPrivateStateDir(t *testing.T) {
	testenv.Nsjail(t)
	bin := testenv.BuildExecgate(t)

	t.Run("embedded default with --state-dir of a fresh 0700 directory", func(t *testing.T) {
		state := privateStateDir(t)
		p := serveArgs(t, bin, "--state-dir", state)
		p.probeOK(t, bin, "demo", "--state-dir", state)
		if fi, err := os.Stat(state); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("the state dir's mode changed: %v %v", fi.Mode(), err)
		}
	})

	t.Run("config file whose state_dir does not exist yet, with a tenant, under umask 077", func(t *testing.T) {
		private := t.TempDir() // 0700
		state := filepath.Join(private, "new", "state")
		key := filepath.Join(t.TempDir(), "dev.key")
		if err := os.WriteFile(key, []byte("a-test-signing-key-of-32-bytes-or-more\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := filepath.Join(t.TempDir(), "execgate.yaml")
		yaml := fmt.Sprintf(`state_dir: %q
auth:
  hs256_secret_file: %q
tenants:
  - id: acme
    plan: standard
    policy:
      network: [none, proxy]
`, state, key)
		if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		// serve creates the state dir (the audit log's first) and builds
		// the rootfs in it; every directory it makes gets 0700 from the
		// umask unless execgate sets the mode the jail needs.
		p := serveUmask(t, "077", bin, "--config", cfg)
		p.probeOK(t, bin, "acme", "--config", cfg)
		// Proxy mode binds the run's egress directory, made below the
		// state dir at run time.
		p.probeNetworkOK(t, bin, "acme", "proxy", "--config", cfg)
	})
}

func TestTwoGatewaysSideBySideAndAfterACrash(t *testing.T) {
	testenv.Nsjail(t)
	bin := testenv.BuildExecgate(t)
	stateA, stateB := privateStateDir(t), privateStateDir(t)
	a := serveArgs(t, bin, "--state-dir", stateA)
	b := serveArgs(t, bin, "--state-dir", stateB)
	a.probeOK(t, bin, "demo", "--state-dir", stateA)
	b.probeOK(t, bin, "demo", "--state-dir", stateB)

	viewsOf := func(pid int) []string {
		m, _ := filepath.Glob(filepath.Join(sandbox.DefaultRuntimeDir, fmt.Sprintf("view-%d-*", pid)))
		return m
	}
	viewA, viewB := viewsOf(a.cmd.Process.Pid), viewsOf(b.cmd.Process.Pid)
	if len(viewA) != 1 || len(viewB) != 1 || viewA[0] == viewB[0] {
		t.Fatalf("views A %v, B %v: want one each, apart", viewA, viewB)
	}

	// A crashes: its view stays mounted until the next gateway starts.
	_ = a.cmd.Process.Kill()
	<-a.done
	if _, err := os.Stat(viewA[0]); err != nil {
		t.Fatalf("a killed gateway's view %s: %v (the test expects it left behind)", viewA[0], err)
	}
	b.probeOK(t, bin, "demo", "--state-dir", stateB)
	a2 := serveArgs(t, bin, "--state-dir", stateA)
	a2.probeOK(t, bin, "demo", "--state-dir", stateA)
	if _, err := os.Stat(viewA[0]); err == nil {
		t.Errorf("the crashed gateway's view %s is still there after the next start", viewA[0])
	}
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(mounts, []byte(viewA[0])) {
		t.Errorf("the crashed gateway's view %s is still mounted", viewA[0])
	}
}
