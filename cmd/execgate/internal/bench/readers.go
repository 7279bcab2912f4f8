package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/execgate/execgate/internal/slowclient"
	"github.com/execgate/execgate/tenancy"
)

// ReadersReport is the resident memory of a real `execgate serve` process
// (its own, not this one's) while requests read an async execution and
// never take their responses (issue #23 §1, §6): readers of a stored
// result, and Server-Sent Events readers of a run's live output. RSS in
// KiB.
type ReadersReport struct {
	BudgetMB int64 // server.max_output_memory_mb of the gateway
	// Stored result: ResultReaders GET requests of one result of
	// ResultBytes, all admitted (server.tenant_max_result_readers set to
	// their number).
	ResultBytes   int
	ResultReaders int
	ResultIdleKB  int64 // after the result was stored, before the readers
	ResultPeakKB  int64 // with every reader stalled
	// Live output: LiveReaders …/events streams of one run opened by one
	// tenant, at the default server.tenant_max_live_readers.
	LiveReaders  int
	LiveAdmitted int // 200: streams held
	LiveRefused  int // 429 QuotaExceeded
	LiveIdleKB   int64
	LivePeakKB   int64
	// Another tenant's probe run, before and during the live readers.
	ProbeIdle, ProbeDuring time.Duration
}

// Stalled-reader counts of the report (DESIGN §11 rows of issue #23).
const (
	benchResultReaders = 20
	benchLiveReaders   = 800
)

// ReadersConstantMB is the documented constant of the bound these rows
// check: the gateway's RSS with stalled readers stays within
// server.max_output_memory_mb plus this (the process itself, and with the
// memory quota backend the results it keeps).
const ReadersConstantMB = 192

// readers measures ReadersReport against `execgate serve` started from
// r.Options.Binary with the bench's config.
func (r *Report) readers(ctx context.Context) error {
	g, err := r.startServe(ctx, fmt.Sprintf("EXECGATE_SERVER_TENANT_MAX_RESULT_READERS=%d", benchResultReaders))
	if err != nil {
		return err
	}
	defer g.stop()
	rep := &ReadersReport{BudgetMB: r.Options.Config.Server.WithDefaults().MaxOutputMemoryMB, ResultReaders: benchResultReaders, LiveReaders: benchLiveReaders}

	r.progress("output: %d stalled readers of a stored result", benchResultReaders)
	body, _ := json.Marshal(map[string]any{"execution_id": "bench-big", "source": slowclient.BigResultSource,
		"args":   map[string]any{"bytes": slowclient.BigResultBytes},
		"limits": map[string]any{"output_bytes": OutputFloodBytes, "timeout_ms": 30000, "memory_mb": 512}})
	if code, b := g.call(ctx, http.MethodPost, "/v1/executions", g.token, body); code != http.StatusAccepted {
		return fmt.Errorf("bench: readers: submit: %d %.300s", code, b)
	}
	full, err := g.waitDone(ctx, "bench-big")
	if err != nil {
		return err
	}
	rep.ResultBytes = len(full)
	rep.ResultIdleKB = slowclient.SettledRSSKB(g.cmd.Process.Pid)
	conns, err := g.stall(ctx, "/v1/executions/bench-big", "", benchResultReaders)
	if err != nil {
		return err
	}
	rep.ResultPeakKB = slowclient.PeakRSSKB(g.cmd.Process.Pid, 3*time.Second)
	slowclient.CloseAll(conns)
	for _, c := range conns {
		if c.Response.StatusCode != http.StatusOK {
			return fmt.Errorf("bench: readers: a stored-result reader got %d", c.Response.StatusCode)
		}
	}

	r.progress("output: %d stalled live readers of one run", benchLiveReaders)
	body, _ = json.Marshal(map[string]any{"execution_id": "bench-trickle", "source": slowclient.TrickleSource,
		"args": map[string]any{"seconds": 25}, "limits": map[string]any{"output_bytes": OutputFloodBytes, "timeout_ms": 30000}})
	if code, b := g.call(ctx, http.MethodPost, "/v1/executions", g.token, body); code != http.StatusAccepted {
		return fmt.Errorf("bench: readers: submit: %d %.300s", code, b)
	}
	defer g.call(ctx, http.MethodDelete, "/v1/executions/bench-trickle", g.token, nil)
	if rep.ProbeIdle, err = g.probe(ctx); err != nil {
		return err
	}
	first, err := g.stall(ctx, "/v1/executions/bench-trickle/events", "text/event-stream", 1)
	if err != nil {
		return err
	}
	slowclient.CloseAll(first)
	rep.LiveIdleKB = slowclient.SettledRSSKB(g.cmd.Process.Pid)
	conns, err = g.stall(ctx, "/v1/executions/bench-trickle/events", "text/event-stream", benchLiveReaders)
	if err != nil {
		return err
	}
	defer slowclient.CloseAll(conns)
	for _, c := range conns {
		switch c.Response.StatusCode {
		case http.StatusOK:
			rep.LiveAdmitted++
		case http.StatusTooManyRequests:
			rep.LiveRefused++
			_ = c.Close()
		}
	}
	if rep.ProbeDuring, err = g.probe(ctx); err != nil {
		return err
	}
	rep.LivePeakKB = slowclient.PeakRSSKB(g.cmd.Process.Pid, 3*time.Second)
	r.Readers = rep
	return nil
}

// serveProc is a gateway process of the readers rows.
type serveProc struct {
	cmd          *exec.Cmd
	addr         string
	token, other string // of the bench tenant and of a second one
	dir          string
	logs         bytes.Buffer
	done         chan struct{} // closed when the process has exited
}

// startServe starts `execgate serve` with the bench's config file and
// state dir, the bench tenant and a second one (other, for the probe),
// env added, and waits for /readyz.
func (r *Report) startServe(ctx context.Context, env ...string) (*serveProc, error) {
	dir, err := os.MkdirTemp("", "execgate-bench-")
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	other := Tenant()
	other.ID = TenantID + "-other"
	tenants, err := json.Marshal(append(slices.Clone(r.Options.Config.Tenants), Tenant(), other))
	if err != nil {
		return nil, err
	}
	env = append(append(os.Environ(), env...), "EXECGATE_TENANTS="+string(tenants), "EXECGATE_AUDIT_FILE="+filepath.Join(dir, "audit.jsonl"))
	args := []string{"--state-dir", r.Options.Config.StateDir}
	if r.Options.ConfigFile != "" {
		args = append(args, "--config", r.Options.ConfigFile)
	}
	g := &serveProc{addr: addr, dir: dir}
	g.cmd = exec.Command(r.Options.Binary, append([]string{"serve", "--listen", addr}, args...)...)
	g.cmd.Env = env
	g.cmd.Stdout, g.cmd.Stderr = &g.logs, &g.logs
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := g.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	g.done = make(chan struct{})
	go func() { _ = g.cmd.Wait(); close(g.done) }()
	for _, t := range []*string{&g.token, &g.other} {
		tenant := TenantID
		if t == &g.other {
			tenant = other.ID
		}
		tc := exec.CommandContext(ctx, r.Options.Binary, append([]string{"token", "--tenant", tenant, "--role", tenancy.RoleExecutor}, args...)...)
		tc.Env = env
		out, err := tc.Output()
		if err != nil {
			g.stop()
			return nil, fmt.Errorf("bench: execgate token: %w", err)
		}
		*t = strings.TrimSpace(string(out))
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return g, nil
			}
		}
		if time.Now().After(deadline) {
			g.stop()
			return nil, fmt.Errorf("bench: execgate serve not ready within 3 minutes:\n%s", g.logs.String())
		}
		select {
		case <-ctx.Done():
			g.stop()
			return nil, ctx.Err()
		case <-g.done:
			g.stop()
			return nil, fmt.Errorf("bench: execgate serve exited:\n%s", g.logs.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (g *serveProc) stop() {
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(30 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
	}
	os.RemoveAll(g.dir)
}

// call sends one request and reads the whole answer.
func (g *serveProc) call(ctx context.Context, method, path, token string, body []byte) (int, []byte) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+g.addr+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// waitDone polls GET until the execution is done and returns the body.
func (g *serveProc) waitDone(ctx context.Context, id string) ([]byte, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, b := g.call(ctx, http.MethodGet, "/v1/executions/"+id, g.token, nil)
		if code == http.StatusOK && bytes.Contains(b[:min(len(b), 200)], []byte(`"status":"done"`)) {
			return b, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("bench: readers: %s not done within 2 minutes: %d %.300s", id, code, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// probe times the other tenant's probe run.
func (g *serveProc) probe(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	code, b := g.call(ctx, http.MethodPost, "/v1/execute", g.other, []byte(probeBody("", "")))
	if code != http.StatusOK || !bytes.Contains(b, []byte(`"status":"ok"`)) {
		return 0, fmt.Errorf("bench: readers: the probe answered %d %.300s", code, b)
	}
	return time.Since(t0), nil
}

// stall opens n requests of path that are never read past their head.
func (g *serveProc) stall(ctx context.Context, path, accept string, n int) ([]*slowclient.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	h := http.Header{"Authorization": {"Bearer " + g.token}}
	if accept != "" {
		h.Set("Accept", accept)
	}
	return slowclient.OpenMany(ctx, g.addr, slowclient.Request{Method: http.MethodGet, Path: path, Header: h}, n, 8)
}
