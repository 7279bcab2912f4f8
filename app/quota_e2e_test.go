package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/execgate/execgate/auth"
	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/internal/testenv"
)

// System-level quota tests: real `execgate serve` processes (built once),
// one real redis-server shared by them, real nsjail runs. They prove at the
// process level what the quota package proves at the limiter level: no
// over-admission across gateways, leases of a killed gateway expire, and a
// Redis outage fails closed without taking the gateway down. Helpers are
// prefixed quotaE2E; the obs* helpers come from audit_e2e_test.go.

const (
	quotaE2ETenant = "qe2e"

	// quotaE2EIntervalSource sleeps args.sleep seconds and returns when it
	// ran, by the host's wall clock (the jail shares CLOCK_REALTIME).
	quotaE2EIntervalSource = "import time\n\ndef run(args, context):\n    start = time.time()\n    time.sleep(args['sleep'])\n    return {'start': start, 'end': time.time()}\n"
	quotaE2EOKSource       = "def run(args, context):\n    return {'ok': True}\n"
	quotaE2ELongSource     = "import time\n\ndef run(args, context):\n    time.sleep(60)\n"
)

// quotaE2EQuota is the tenant's quota block and the quota section's extras.
type quotaE2EQuota struct {
	concurrency int
	leaseTTLMS  int64 // 0: the default
}

// quotaE2ECluster is a set of gateway configs sharing one dev key and one
// Redis, each with its own listen address and state dir.
type quotaE2ECluster struct {
	bin     string
	configs []string // config file per gateway
	bases   []string // http://listen per gateway
	token   string   // executor token for quotaE2ETenant, valid on all
}

// quotaE2ENewCluster writes n gateway configs for the real sandbox (skipping
// where the host cannot jail) using the Redis at redisURL.
func quotaE2ENewCluster(t *testing.T, bin string, n int, redisURL string, q quotaE2EQuota) *quotaE2ECluster {
	t.Helper()
	sb := testenv.SandboxConfig(t) // skips without root or nsjail
	keyDir := t.TempDir()
	keyPath := filepath.Join(keyDir, obsDevKeyName)
	if _, err := auth.EnsureDevKey(keyPath); err != nil {
		t.Fatal(err)
	}
	c := &quotaE2ECluster{bin: bin}
	lease := ""
	if q.leaseTTLMS > 0 {
		lease = fmt.Sprintf("\n  lease_ttl_ms: %d", q.leaseTTLMS)
	}
	for i := range n {
		dir := t.TempDir()
		// The jail user must be able to traverse the state and run dirs.
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		listen := obsFreeAddr(t)
		yaml := e2eGatewayYAML(listen, dir, keyPath, sb) + fmt.Sprintf(`server:
  max_concurrent_runs: 8
  max_queue: 256
  shutdown_grace_seconds: 5
quota:
  backend: redis
  redis_url: %q%s
audit:
  file: %q
tenants:
  - id: %s
    plan: standard
    quota: { rate_per_minute: 600000, burst: 10000, concurrency: %d, daily_cpu_seconds: 1000000 }
    policy:
      network: [none]
      max_limits: { timeout_ms: 30000, memory_mb: 512 }
`, redisURL, lease, filepath.Join(dir, obsAuditFileName), quotaE2ETenant, q.concurrency)
		path := filepath.Join(dir, obsConfigName)
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		c.configs = append(c.configs, path)
		c.bases = append(c.bases, "http://"+listen)
		if i > 0 {
			continue
		}
		cfg, err := config.Load(path, nil)
		if err != nil {
			t.Fatalf("loading the test config: %v", err)
		}
		signer, err := auth.NewSigner(cfg.Auth, nil)
		if err != nil {
			t.Fatal(err)
		}
		c.token, err = signer.Mint(auth.Claims{Subject: "e2e-quota", TenantID: quotaE2ETenant, Roles: []string{"executor"}}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// serve starts gateway i and waits for /healthz; it is killed on cleanup.
func (c *quotaE2ECluster) serve(t *testing.T, i int) *exec.Cmd {
	t.Helper()
	return obsServe(t, c.bin, c.configs[i], c.bases[i])
}

// quotaE2EResult is one request and its answer, with client-side times.
type quotaE2EResult struct {
	gateway  int
	id       string
	sent     time.Time
	answered time.Time
	resp     obsResponse
	err      error
}

// quotaE2EClient is an HTTP client with room for many parallel requests.
func quotaE2EClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}
}

// quotaE2ESend posts one execute request to base.
func quotaE2ESend(client *http.Client, base, token string, gateway int, id, source string, args any, limits map[string]any) quotaE2EResult {
	body := map[string]any{"execution_id": id, "tenant_id": quotaE2ETenant, "source": source, "entrypoint": "run", "args": args}
	if limits != nil {
		body["limits"] = limits
	}
	r := quotaE2EResult{gateway: gateway, id: id, sent: time.Now()}
	r.resp, r.err = obsExecute(context.Background(), client, base, token, body, nil)
	r.answered = time.Now()
	return r
}

// quotaE2EOutcome names a response for messages and checks: "200 ok",
// "429 QuotaExceeded", "transport error: …".
func quotaE2EOutcome(r quotaE2EResult) string {
	if r.err != nil {
		return "transport error: " + r.err.Error()
	}
	if r.resp.HTTPStatus == http.StatusOK && r.resp.Env.Status == "ok" {
		return "200 ok"
	}
	msg := ""
	if r.resp.Env.Error != nil {
		msg = r.resp.Env.Error.Message
	}
	return strings.TrimSpace(fmt.Sprintf("%d %s %s", r.resp.HTTPStatus, obsErrType(r.resp.Env), msg))
}

func quotaE2EIsOK(r quotaE2EResult) bool {
	return r.err == nil && r.resp.HTTPStatus == http.StatusOK && r.resp.Env.Status == "ok"
}

func quotaE2EIsExceeded(r quotaE2EResult) bool {
	return r.err == nil && r.resp.HTTPStatus == http.StatusTooManyRequests && obsErrType(r.resp.Env) == "QuotaExceeded"
}

func quotaE2EIsUnavailable(r quotaE2EResult) bool {
	return r.err == nil && r.resp.HTTPStatus == http.StatusServiceUnavailable && obsErrType(r.resp.Env) == "QuotaUnavailable"
}

// quotaE2ECheckRetryAfter reports a 429 without a positive whole-second
// Retry-After header.
func quotaE2ECheckRetryAfter(t *testing.T, r quotaE2EResult) {
	t.Helper()
	ra := r.resp.Header.Get("Retry-After")
	if n, err := strconv.Atoi(ra); err != nil || n < 1 {
		t.Errorf("%s: 429 with Retry-After %q, want a positive number of seconds", r.id, ra)
	}
}

// quotaE2EInterval is when one tool ran, in seconds since the epoch.
type quotaE2EInterval struct {
	Start   float64 `json:"start"`
	End     float64 `json:"end"`
	gateway int
}

// quotaE2EMaxOverlap sweeps the intervals and returns the largest number
// running at one instant and how many distinct gateways ran those. An end
// sorts before a start at the same instant (a hand-over, not an overlap).
func quotaE2EMaxOverlap(iv []quotaE2EInterval) (most, gateways int) {
	type event struct {
		at    float64
		delta int
		i     int
	}
	var ev []event
	for i, v := range iv {
		ev = append(ev, event{v.Start, +1, i}, event{v.End, -1, i})
	}
	sort.Slice(ev, func(a, b int) bool {
		if ev[a].at != ev[b].at {
			return ev[a].at < ev[b].at
		}
		return ev[a].delta < ev[b].delta
	})
	running := map[int]bool{}
	for _, e := range ev {
		if e.delta < 0 {
			delete(running, e.i)
			continue
		}
		running[e.i] = true
		gws := map[int]bool{}
		for i := range running {
			gws[iv[i].gateway] = true
		}
		if len(running) > most || (len(running) == most && len(gws) > gateways) {
			most, gateways = len(running), len(gws)
		}
	}
	return most, gateways
}

func TestQuotaE2EMaxOverlap(t *testing.T) {
	iv := func(s, e float64, g int) quotaE2EInterval { return quotaE2EInterval{Start: s, End: e, gateway: g} }
	tests := []struct {
		name         string
		in           []quotaE2EInterval
		most, spread int
	}{
		{name: "none", in: nil, most: 0, spread: 0},
		{name: "disjoint", in: []quotaE2EInterval{iv(0, 1, 0), iv(2, 3, 0)}, most: 1, spread: 1},
		{name: "hand-over at the same instant", in: []quotaE2EInterval{iv(0, 1, 0), iv(1, 2, 1)}, most: 1, spread: 1},
		{name: "three across gateways", in: []quotaE2EInterval{iv(0, 3, 0), iv(1, 4, 1), iv(2, 5, 2), iv(3.5, 6, 0)}, most: 3, spread: 3},
		{name: "four nested", in: []quotaE2EInterval{iv(0, 10, 0), iv(1, 9, 0), iv(2, 8, 1), iv(3, 7, 1)}, most: 4, spread: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			most, spread := quotaE2EMaxOverlap(tc.in)
			if most != tc.most || spread != tc.spread {
				t.Errorf("got %d running on %d gateways, want %d on %d", most, spread, tc.most, tc.spread)
			}
		})
	}
}

// TestQuotaE2E runs the system-level quota scenarios against real gateway
// processes, built once.
func TestQuotaE2E(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.Nsjail(t)
	bin := testenv.BuildExecgate(t)

	t.Run("three gateways sharing Redis never over-admit", func(t *testing.T) {
		quotaE2ENoOverAdmission(t, bin)
	})
	t.Run("a killed gateway's lease expires within the TTL", func(t *testing.T) {
		quotaE2EKilledGatewayLease(t, bin)
	})
	t.Run("Redis killed under load fails closed and recovers", func(t *testing.T) {
		quotaE2ERedisOutage(t, bin)
	})
	t.Run("a run ending during a Redis outage is charged once Redis is back", func(t *testing.T) {
		quotaE2ESettleAfterOutage(t, bin)
	})
}

// quotaE2ESettleAfterOutage: a tool burns ~0.3 s of CPU, then sleeps; Redis
// is killed while it sleeps, so the settlement at the end of the run fails.
// The answer still comes back ok, and once Redis is back (empty: no
// persistence) the gateway's background retry charges exactly the run's
// measured CPU to the day's budget — once.
func quotaE2ESettleAfterOutage(t *testing.T, bin string) {
	const src = "import time\n\ndef run(args, context):\n    end = time.process_time() + 0.3\n    while time.process_time() < end:\n        pass\n    time.sleep(args['sleep'])\n    return {'ok': True}\n"
	rs := testenv.Redis(t)
	c := quotaE2ENewCluster(t, bin, 1, rs.URL(), quotaE2EQuota{concurrency: 2})
	gw, logs := obsServeLogged(t, c.bin, c.configs[0], c.bases[0])
	client := quotaE2EClient(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	leases := "execgate:{t:" + quotaE2ETenant + "}:leases"
	budget := "execgate:{t:" + quotaE2ETenant + "}:budget"

	done := make(chan quotaE2EResult, 1)
	go func() {
		done <- quotaE2ESend(client, c.bases[0], c.token, 0, "settle-after-outage", src, map[string]any{"sleep": 2}, nil)
	}()
	waitFor(t, "the run to hold its lease", 20*time.Second, func() bool { return rdb.ZCard(ctx, leases).Val() == 1 })
	// The tool has burnt its CPU and sleeps: a python process below the
	// gateway, asleep, with most of the 0.3 s of CPU used. /proc/<pid>/stat
	// truncates user and system time to whole ticks each, so a process that
	// used 0.302 s can read as 0.29 s: the bar is 0.25 s. A busy loop is
	// never asleep, so "asleep with 0.25 s used" is only ever after it.
	var seen []string
	defer func() {
		if t.Failed() {
			t.Logf("python processes below the gateway (pid comm state cpu), first %d looks: %v", len(seen), seen)
		}
	}()
	waitFor(t, "the tool to sleep after burning its CPU", 20*time.Second, func() bool {
		for _, p := range quotaE2EDescendants(t, gw.Process.Pid) {
			if strings.HasPrefix(p.comm, "python") {
				state, cpu, err := quotaE2ECPU(p.pid)
				if err == nil && state == "S" && cpu >= 250*time.Millisecond {
					return true
				}
				if err == nil && len(seen) < 32 {
					seen = append(seen, fmt.Sprintf("%d %s %s %v", p.pid, p.comm, state, cpu))
				}
			}
		}
		return false
	})
	rs.Kill()
	r := <-done
	if !quotaE2EIsOK(r) {
		t.Fatalf("the run ending during the outage: %s, want 200 ok (its answer stands)", quotaE2EOutcome(r))
	}
	cpu := r.resp.Env.Usage.CPUMS
	if cpu < 200 {
		t.Fatalf("the run's measured cpu_ms is %d, want about 300", cpu)
	}
	rs.Restart()
	used := func() int64 { n, _ := rdb.HGet(ctx, budget, "used_ms").Int64(); return n }
	// The gateway's background retry logs once it landed and then stops:
	// nothing is left that could charge the run a second time.
	waitFor(t, "the gateway to log the settlement retry that landed", 20*time.Second, func() bool {
		return strings.Contains(logs.String(), "quota settled after a retry")
	})
	if got := used(); got != cpu {
		t.Errorf("budget used_ms = %d after Redis came back, want the run's cpu_ms %d, charged once", got, cpu)
	}
}

// quotaE2ENoOverAdmission: concurrency 3 shared by three gateways; 200
// requests arrive spread over ~2 s across them while each admitted tool
// sleeps 0.25 s. The tools' own start/end times must never show more than 3
// running at once, and 3 must have been reached.
func quotaE2ENoOverAdmission(t *testing.T, bin string) {
	const (
		gateways    = 3
		concurrency = 3
		requests    = 200
		spacing     = 10 * time.Millisecond // 200 requests over ~2 s
		sleepS      = 0.25
	)
	rs := testenv.Redis(t)
	c := quotaE2ENewCluster(t, bin, gateways, rs.URL(), quotaE2EQuota{concurrency: concurrency})
	for i := range gateways {
		c.serve(t, i)
	}
	client := quotaE2EClient(t)

	results := make([]quotaE2EResult, requests)
	var wg sync.WaitGroup
	tick := time.NewTicker(spacing)
	for i := range requests {
		g := i % gateways
		wg.Go(func() {
			results[i] = quotaE2ESend(client, c.bases[g], c.token, g, fmt.Sprintf("overlap-%03d", i),
				quotaE2EIntervalSource, map[string]any{"sleep": sleepS}, nil)
		})
		<-tick.C // pacing the arrivals, not synchronisation
	}
	tick.Stop()
	wg.Wait()

	var intervals []quotaE2EInterval
	okPerGateway := map[int]int{}
	exceeded := 0
	for _, r := range results {
		switch {
		case quotaE2EIsOK(r):
			var iv quotaE2EInterval
			if err := json.Unmarshal(r.resp.Env.Result, &iv); err != nil {
				t.Errorf("%s: result %s: %v", r.id, r.resp.Env.Result, err)
				continue
			}
			if iv.Start <= 0 || iv.End-iv.Start < sleepS {
				t.Errorf("%s: interval %+v does not span the %.2fs sleep", r.id, iv, sleepS)
			}
			iv.gateway = r.gateway
			intervals = append(intervals, iv)
			okPerGateway[r.gateway]++
		case quotaE2EIsExceeded(r):
			exceeded++
			quotaE2ECheckRetryAfter(t, r)
		default:
			t.Errorf("%s on gateway %d: %s, want 200 ok or 429 QuotaExceeded", r.id, r.gateway, quotaE2EOutcome(r))
		}
	}
	most, spread := quotaE2EMaxOverlap(intervals)
	t.Logf("%d ok (per gateway %v), %d QuotaExceeded; at most %d tools ran at once (on %d gateways)",
		len(intervals), okPerGateway, exceeded, most, spread)
	if most > concurrency {
		t.Errorf("over-admission: %d tools ran at the same instant, quota concurrency is %d", most, concurrency)
	}
	if most < concurrency {
		t.Errorf("at most %d tools ran at once: the limit %d was never reached, so the test proved nothing", most, concurrency)
	}
	if spread < 2 {
		t.Errorf("the busiest instant had tools of %d gateway(s): the shared limit was not exercised across processes", spread)
	}
	if len(okPerGateway) < 2 {
		t.Errorf("runs were admitted on %d gateway(s) only: %v", len(okPerGateway), okPerGateway)
	}
	if exceeded == 0 {
		t.Error("no request was refused with 429 QuotaExceeded: the load never hit the limit")
	}
}

// quotaE2EProc identifies a process across pid reuse.
type quotaE2EProc struct {
	pid   int
	start string // starttime, field 22 of /proc/pid/stat
	comm  string
}

// quotaE2EStat reads a process's comm, state, parent and start time.
func quotaE2EStat(pid int) (comm, state string, ppid int, start string, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", "", 0, "", err
	}
	s := string(b)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return "", "", 0, "", fmt.Errorf("parsing /proc/%d/stat: %q", pid, s)
	}
	rest := strings.Fields(s[closing+1:]) // rest[0] is field 3 (state)
	if len(rest) < 20 {
		return "", "", 0, "", fmt.Errorf("parsing /proc/%d/stat: %d fields", pid, len(rest)+2)
	}
	ppid, err = strconv.Atoi(rest[1])
	if err != nil {
		return "", "", 0, "", fmt.Errorf("parsing /proc/%d/stat ppid: %w", pid, err)
	}
	return s[open+1 : closing], rest[0], ppid, rest[19], nil
}

// quotaE2ECPU reads a process's state and the CPU time it used (utime +
// stime, fields 14 and 15 of /proc/pid/stat, in USER_HZ ticks of 10 ms).
func quotaE2ECPU(pid int) (state string, cpu time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, err
	}
	s := string(b)
	rest := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // rest[0] is field 3 (state)
	if len(rest) < 13 {
		return "", 0, fmt.Errorf("parsing /proc/%d/stat: %d fields", pid, len(rest)+2)
	}
	var ticks int64
	for _, f := range rest[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return "", 0, fmt.Errorf("parsing /proc/%d/stat cpu times: %w", pid, err)
		}
		ticks += n
	}
	return rest[0], time.Duration(ticks) * 10 * time.Millisecond, nil
}

// quotaE2EDescendants lists the live descendants of root.
func quotaE2EDescendants(t *testing.T, root int) []quotaE2EProc {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	type info struct {
		proc quotaE2EProc
		ppid int
	}
	all := map[int]info{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, state, ppid, start, err := quotaE2EStat(pid)
		if err != nil || state == "Z" || state == "X" {
			continue // gone meanwhile, or dead
		}
		all[pid] = info{quotaE2EProc{pid: pid, start: start, comm: comm}, ppid}
	}
	var out []quotaE2EProc
	for pid, in := range all {
		for p, hops := in.ppid, 0; p > 1 && hops < 64; p, hops = all[p].ppid, hops+1 {
			if p == root {
				out = append(out, all[pid].proc)
				break
			}
			if _, ok := all[p]; !ok {
				break
			}
		}
	}
	return out
}

// quotaE2EAlive reports whether p still runs (not exited, not a zombie, pid
// not reused).
func quotaE2EAlive(p quotaE2EProc) bool {
	_, state, _, start, err := quotaE2EStat(p.pid)
	return err == nil && start == p.start && state != "Z" && state != "X"
}

// TestQuotaE2EProcessTracking checks the helpers the kill test relies on to
// see that a killed gateway's jail is gone: a child is found among our
// descendants, alive while it runs, and not alive once killed.
func TestQuotaE2EProcessTracking(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep binary to track: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var child quotaE2EProc
	waitFor(t, "the child among our descendants", 5*time.Second, func() bool {
		for _, p := range quotaE2EDescendants(t, os.Getpid()) {
			if p.pid == cmd.Process.Pid {
				child = p
				return true
			}
		}
		return false
	})
	if child.comm != "sleep" || !quotaE2EAlive(child) {
		t.Fatalf("child %+v: want comm sleep and alive", child)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the killed child to read as not alive (zombie counts as dead)", 5*time.Second, func() bool { return !quotaE2EAlive(child) })
	_ = cmd.Wait()
	if quotaE2EAlive(child) {
		t.Fatal("a reaped child reads as alive")
	}
}

// quotaE2EKilledGatewayLease: concurrency 1, lease TTL 2 s. Gateway A runs a
// long tool; B is refused for 1.5 TTL (A's heartbeats keep the lease). A is
// SIGKILLed: its jail must die with it, B must still be refused right after
// the kill, and admitted once the lease TTL has passed.
func quotaE2EKilledGatewayLease(t *testing.T, bin string) {
	const ttl = 2 * time.Second
	// The lease outlives the kill by at least TTL minus one heartbeat
	// interval (TTL/3); the new run must come within TTL plus this margin
	// (a loaded 2-core host, a jailed run).
	const margin = 3 * time.Second
	rs := testenv.Redis(t)
	c := quotaE2ENewCluster(t, bin, 2, rs.URL(), quotaE2EQuota{concurrency: 1, leaseTTLMS: ttl.Milliseconds()})
	a := c.serve(t, 0)
	c.serve(t, 1)
	client := quotaE2EClient(t)

	long := make(chan quotaE2EResult, 1)
	go func() {
		long <- quotaE2ESend(client, c.bases[0], c.token, 0, "long-on-a", quotaE2ELongSource, map[string]any{}, map[string]any{"timeout_ms": 30000})
	}()

	// Wait until A's jailed tool runs: a python process below A's nsjail.
	var tree []quotaE2EProc
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case r := <-long:
			t.Fatalf("the long run on gateway A ended before the kill: %s", quotaE2EOutcome(r))
		default:
		}
		tree = quotaE2EDescendants(t, a.Process.Pid)
		hasJail := slices.ContainsFunc(tree, func(p quotaE2EProc) bool { return p.comm == "nsjail" })
		hasTool := slices.ContainsFunc(tree, func(p quotaE2EProc) bool { return strings.HasPrefix(p.comm, "python") })
		if hasJail && hasTool {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway A's tool did not start within 30s; processes below A: %+v", tree)
		}
		time.Sleep(20 * time.Millisecond) // poll interval
	}
	t.Logf("processes below gateway A: %+v", tree)

	seq := 0
	probeB := func() quotaE2EResult {
		seq++
		return quotaE2ESend(client, c.bases[1], c.token, 1, fmt.Sprintf("probe-b-%03d", seq), quotaE2EOKSource, map[string]any{}, nil)
	}
	// While A lives, its heartbeats keep the lease well past one TTL: B is
	// refused all along.
	toolSeen := time.Now()
	for time.Since(toolSeen) < ttl*3/2 {
		r := probeB()
		if !quotaE2EIsExceeded(r) {
			t.Fatalf("%s after A's tool started, B got %s, want 429 QuotaExceeded (concurrency 1, A's lease heart-beaten)",
				r.sent.Sub(toolSeen).Round(time.Millisecond), quotaE2EOutcome(r))
		}
		quotaE2ECheckRetryAfter(t, r)
		time.Sleep(100 * time.Millisecond) // poll interval
	}
	select {
	case r := <-long:
		t.Fatalf("the long run on gateway A ended before the kill: %s", quotaE2EOutcome(r))
	default:
	}

	if err := a.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = a.Wait() // killed: the error is expected

	// Right after the kill the lease still stands.
	if r := probeB(); r.sent.Sub(killed) >= ttl/3 {
		t.Fatalf("the first probe after the kill was sent %s later; the host is too slow to check the lease outlives the kill", r.sent.Sub(killed))
	} else if !quotaE2EIsExceeded(r) {
		t.Fatalf("right after A was killed (%s), B got %s: the lease must outlive the kill until its TTL %s", r.sent.Sub(killed), quotaE2EOutcome(r), ttl)
	}

	// The jail dies with the gateway (nsjail has Pdeathsig, the tool dies
	// with nsjail's pid namespace).
	jailGone := make(chan []quotaE2EProc, 1)
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			var alive []quotaE2EProc
			for _, p := range tree {
				if quotaE2EAlive(p) {
					alive = append(alive, p)
				}
			}
			if len(alive) == 0 || time.Now().After(deadline) {
				jailGone <- alive
				return
			}
			time.Sleep(20 * time.Millisecond) // poll interval
		}
	}()

	// B is admitted once the lease has expired, and only then.
	var firstOK quotaE2EResult
	for {
		r := probeB()
		if quotaE2EIsOK(r) {
			firstOK = r
			break
		}
		if !quotaE2EIsExceeded(r) {
			t.Fatalf("after the kill B got %s, want 429 QuotaExceeded until the lease expires, then 200 ok", quotaE2EOutcome(r))
		}
		if time.Since(killed) > ttl+margin {
			t.Fatalf("B was still refused %s after A was killed (lease TTL %s)", time.Since(killed).Round(time.Millisecond), ttl)
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
	after := firstOK.sent.Sub(killed)
	t.Logf("B admitted %s after the kill (lease TTL %s, %d probes)", after.Round(time.Millisecond), ttl, seq)
	if firstOK.answered.Sub(killed) < ttl/3 {
		t.Errorf("B was admitted %s after the kill: before the lease could have expired (TTL %s)", firstOK.answered.Sub(killed), ttl)
	}
	if after > ttl+margin {
		t.Errorf("B was admitted %s after the kill, later than the lease TTL %s + %s", after, ttl, margin)
	}
	if alive := <-jailGone; len(alive) > 0 {
		t.Errorf("processes of the killed gateway still run 10s after the kill: %+v", alive)
	}
	r := <-long
	if r.err == nil {
		t.Errorf("the killed gateway's request got an answer: %s", quotaE2EOutcome(r))
	}
}

// quotaE2ERedisOutage: one gateway under a steady load from a few workers;
// Redis is killed for ~2 s then restarted on the same port. Every answer is
// 200 ok, 429 or 503 QuotaUnavailable (requests sent during the outage:
// QuotaUnavailable only), the gateway stays up, and runs are admitted again
// after the restart without restarting the gateway.
func quotaE2ERedisOutage(t *testing.T, bin string) {
	const (
		workers  = 3
		outage   = 2 * time.Second
		recovery = 10 * time.Second
	)
	rs := testenv.Redis(t)
	c := quotaE2ENewCluster(t, bin, 1, rs.URL(), quotaE2EQuota{concurrency: 8})
	gw := c.serve(t, 0)
	exited := make(chan error, 1)
	go func() { exited <- gw.Wait() }()
	client := quotaE2EClient(t)

	var (
		mu      sync.Mutex // guards results
		results []quotaE2EResult
	)
	okCount := func(since time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, r := range results {
			if quotaE2EIsOK(r) && !r.sent.Before(since) {
				n++
			}
		}
		return n
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				r := quotaE2ESend(client, c.bases[0], c.token, 0, fmt.Sprintf("outage-w%d-%04d", w, n), quotaE2EOKSource, map[string]any{}, nil)
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
				if !quotaE2EIsOK(r) {
					time.Sleep(20 * time.Millisecond) // refusals are instant: do not spin
				}
			}
		})
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopLoad)

	began := time.Now()
	waitFor(t, "5 runs before the outage", 30*time.Second, func() bool { return okCount(began) >= 5 })

	rs.Kill()
	killed := time.Now()
	waitFor(t, "the outage to last "+outage.String(), outage+time.Second, func() bool { return time.Since(killed) >= outage })
	restarting := time.Now()
	rs.Restart()
	restarted := time.Now()
	waitFor(t, "a run admitted after Redis restarted", recovery, func() bool { return okCount(restarted) >= 1 })
	recovered := time.Since(restarted)
	// A few more, to see it stays recovered.
	waitFor(t, "3 runs admitted after Redis restarted", recovery, func() bool { return okCount(restarted) >= 3 })
	stopLoad()

	select {
	case err := <-exited:
		t.Fatalf("the gateway exited during the outage: %v", err)
	default:
	}
	resp, err := http.Get(c.bases[0] + "/healthz")
	if err != nil {
		t.Fatalf("the gateway does not answer /healthz after the outage: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz after the outage: %d", resp.StatusCode)
	}

	counts := map[string]int{}
	duringOutage := 0
	for _, r := range results {
		switch {
		case quotaE2EIsOK(r):
			counts["200 ok"]++
		case quotaE2EIsExceeded(r):
			counts["429 QuotaExceeded"]++
			quotaE2ECheckRetryAfter(t, r)
		case r.err == nil && r.resp.HTTPStatus == http.StatusTooManyRequests:
			counts["429 "+obsErrType(r.resp.Env)]++
		case quotaE2EIsUnavailable(r):
			counts["503 QuotaUnavailable"]++
		default:
			t.Errorf("%s: %s, want 200 ok, 429 or 503 QuotaUnavailable", r.id, quotaE2EOutcome(r))
		}
		// Sent once Redis was dead and answered before it came back: the
		// limiter must have failed closed.
		if r.sent.After(killed) && r.answered.Before(restarting) {
			duringOutage++
			if !quotaE2EIsUnavailable(r) {
				t.Errorf("%s, sent %s into the outage: %s, want 503 QuotaUnavailable (fail closed)", r.id, r.sent.Sub(killed).Round(time.Millisecond), quotaE2EOutcome(r))
			}
		}
	}
	t.Logf("%d requests: %v; %d sent and answered during the %s outage; admitted again %s after the restart",
		len(results), counts, duringOutage, outage, recovered.Round(time.Millisecond))
	if duringOutage == 0 {
		t.Error("no request was sent and answered during the outage: the test did not exercise it")
	}
}
