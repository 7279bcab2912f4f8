package app_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/internal/testenv"
)

// connFDLimit is the gateway process's RLIMIT_NOFILE (soft and hard) in the
// connection-cap test: low enough that a flood of a few thousand
// connections reaches it quickly.
const connFDLimit = 1024

// keepAlive opens a connection to addr, sends one authenticated GET of path
// and reads its answer, leaving the connection open (kept alive). It
// returns nil when the gateway did not answer within timeout.
func keepAlive(addr, path, token string, timeout time.Duration) net.Conn {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	req := "GET " + path + " HTTP/1.1\r\nHost: execgate\r\nAuthorization: Bearer " + token + "\r\n\r\n"
	if _, err := c.Write([]byte(req)); err != nil {
		c.Close()
		return nil
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		c.Close()
		return nil
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_ = c.SetDeadline(time.Time{})
	return c
}

// Issue #23 item 7: one tenant's idle, authenticated keep-alive
// connections (many subjects, each under its own cap) cannot take the
// gateway's last file descriptors. The real `execgate serve` runs with
// RLIMIT_NOFILE 1024; tenant flood opens 1,200 connections from 40
// subjects and keeps them all open; tenant acme's next run on a fresh
// connection and /readyz must still answer at once. Before the cap the
// gateway hit EMFILE and the next tenant's connection waited in the accept
// backlog until flood's connections went idle past idle_timeout_seconds.
func TestATenantsIdleConnectionsLeaveDescriptorsForOthersAndTheProbe(t *testing.T) {
	sb := testenv.SandboxConfig(t) // skips without root or nsjail (a failure under CI)
	listen := obsFreeAddr(t)
	dir := t.TempDir()
	key := filepath.Join(dir, obsDevKeyName)
	if _, err := auth.EnsureDevKey(key); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, obsConfigName)
	yaml := e2eGatewayYAML(listen, dir, key, sb) + `server:
  idle_timeout_seconds: 600
tenants:
  - id: flood
    plan: standard
    policy: { network: [none] }
  - id: acme
    plan: standard
    policy: { network: [none] }
`
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath, nil)
	if err != nil {
		t.Fatalf("loading the test config: %v", err)
	}
	signer, err := auth.NewSigner(cfg.Auth, nil)
	if err != nil {
		t.Fatal(err)
	}
	mint := func(tenant, sub string) string {
		tok, err := signer.Mint(auth.Claims{Subject: sub, TenantID: tenant, Roles: []string{"executor"}}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}

	bin := testenv.BuildExecgate(t)
	base := "http://" + listen
	// ulimit -n sets the soft and the hard limit: Go raises the soft one
	// to the hard one at start-up, so both must be low.
	cmd := exec.Command("/bin/sh", "-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, connFDLimit), bin, "serve", "--config", cfgPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	proc, logs := obsStart(t, cmd, base)
	limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", proc.Process.Pid))
	if err != nil || !strings.Contains(string(limits), fmt.Sprintf("Max open files            %d                 %d", connFDLimit, connFDLimit)) {
		t.Fatalf("the gateway's RLIMIT_NOFILE is not %d: %v\n%s", connFDLimit, err, limits)
	}

	// The flood: 40 subjects × 30 connections, each authenticated by one
	// request and then left open and idle.
	const subjects, perSubject = 40, 30
	var (
		mu      sync.Mutex // guards held
		held    []net.Conn
		refused atomic.Int64
	)
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	work := make(chan string)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tok := range work {
				if c := keepAlive(listen, "/v1/tools", tok, 3*time.Second); c != nil {
					mu.Lock()
					held = append(held, c)
					mu.Unlock()
				} else {
					refused.Add(1)
				}
			}
		}()
	}
	floodStart := time.Now()
	for i := range subjects {
		tok := mint("flood", fmt.Sprintf("worker-%d", i))
		for range perSubject {
			work <- tok
		}
	}
	close(work)
	wg.Wait()
	mu.Lock()
	opened := len(held)
	mu.Unlock()
	t.Logf("flood: %d of %d connections answered in %s (%d not answered within 3 s)",
		opened, subjects*perSubject, time.Since(floodStart).Round(time.Millisecond), refused.Load())

	// Another tenant, on a fresh connection, while every flood connection
	// the gateway kept is still open.
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	timed := func(what string, req *http.Request, wantOK bool) {
		t.Helper()
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s with flood's connections open: %v after %s", what, err, time.Since(start).Round(time.Millisecond))
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		t.Logf("%s: %d in %s", what, resp.StatusCode, took.Round(time.Millisecond))
		if wantOK && resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", what, resp.StatusCode, b)
		}
		if took > 10*time.Second {
			t.Fatalf("%s took %s with flood's connections open, want well under 10 s", what, took)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/execute", strings.NewReader(probe("acme")))
	req.Header.Set("Authorization", "Bearer "+mint("acme", "alice"))
	req.Header.Set("Content-Type", "application/json")
	timed("acme's run", req, true)
	ready, _ := http.NewRequest(http.MethodGet, base+"/readyz", nil)
	timed("/readyz", ready, false) // answered at all (its verdict is the sandbox's)

	// The gateway closed flood's connections to stay inside the limit
	// (it logged so), not the other tenant's.
	if !strings.Contains(logs.String(), "connection caps reached") {
		t.Errorf("no log line about the connection caps:\n%s", logs.String())
	}
}
