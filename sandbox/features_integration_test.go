package sandbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/execgate/execgate/egress"
	"github.com/execgate/execgate/environments"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
)

func TestMultiprocessingPoolQueueLockAndSharedMemoryWork(t *testing.T) {
	r := newRunner(t, nil)
	src := `
import multiprocessing as mp
from multiprocessing import shared_memory

def square(x):
    return x * x

def fill(name, n, lock, q):
    shm = shared_memory.SharedMemory(name=name)
    with lock:
        shm.buf[:n] = bytes(range(n))
    q.put(sum(shm.buf[:n]))
    shm.close()

def run(args, context):
    with mp.Pool(2) as pool:
        squares = pool.map(square, range(10))
    shm = shared_memory.SharedMemory(create=True, size=1 << 20)
    lock, q = mp.Lock(), mp.Queue()
    p = mp.Process(target=fill, args=(shm.name, 100, lock, q))
    p.start()
    total = q.get(timeout=10)
    p.join()
    seen = bytes(shm.buf[:3])
    shm.close()
    shm.unlink()
    return {"squares": squares, "total": total, "seen": list(seen), "exitcode": p.exitcode}
`
	res := run(t, r, sandbox.Spec{Source: src, Limits: sandbox.Limits{TimeoutMS: 20000, CPUMS: 20000, MemoryMB: 256}.Or(limits.Default)})
	if res.Status != sandbox.StatusOK {
		t.Fatalf("%s", dump(res))
	}
	want := `{"squares":[0,1,4,9,16,25,36,49,64,81],"total":4950,"seen":[0,1,2],"exitcode":0}`
	if string(res.Result) != want {
		t.Errorf("result %s, want %s", res.Result, want)
	}
}

func TestTimeZonesWork(t *testing.T) {
	if _, err := os.Stat("/usr/share/zoneinfo/Europe/Berlin"); err != nil {
		t.Skipf("the host has no time zone database to ship: %v", err)
	}
	r := newRunner(t, nil)
	src := `
import datetime, zoneinfo

def run(args, context):
    berlin = zoneinfo.ZoneInfo("Europe/Berlin")
    summer = datetime.datetime(2024, 7, 1, 12, tzinfo=berlin)
    winter = datetime.datetime(2024, 1, 1, 12, tzinfo=berlin)
    return [summer.utcoffset().total_seconds(), winter.utcoffset().total_seconds(), summer.tzname(), "Europe/Berlin" in zoneinfo.available_timezones()]
`
	res := run(t, r, sandbox.Spec{Source: src, Limits: limits.Default})
	if res.Status != sandbox.StatusOK || string(res.Result) != `[7200.0,3600.0,"CEST",true]` {
		t.Fatalf("%s", dump(res))
	}
}

func TestCPULimitHoldsForAllProcessesTogether(t *testing.T) {
	r := newRunner(t, nil)
	if r.Info().CPUAccounting == "none" {
		t.Skip("this host offers no cgroup CPU accounting")
	}
	burn := `
import os, time

def spin(ms):
    end = time.process_time() + ms / 1000
    while time.process_time() < end:
        pass

def run(args, context):
    pids = []
    for _ in range(args["children"]):
        pid = os.fork()
        if pid == 0:
            spin(args["ms"])
            os._exit(0)
        pids.append(pid)
    return [os.waitpid(p, 0)[1] for p in pids]
`
	t.Run("children over the limit together end in CPULimit", func(t *testing.T) {
		res := run(t, r, sandbox.Spec{Source: burn, Args: json.RawMessage(`{"children": 3, "ms": 400}`),
			Limits: sandbox.Limits{CPUMS: 600, TimeoutMS: 20000}.Or(limits.Default)})
		if res.ErrorType() != sandbox.ErrCPULimit {
			t.Fatalf("%s", dump(res))
		}
		if res.Usage.CPUMS < 600 {
			t.Errorf("usage %d ms CPU, below the 600 ms limit it was stopped for", res.Usage.CPUMS)
		}
	})
	t.Run("children under the limit are counted in the usage", func(t *testing.T) {
		res := run(t, r, sandbox.Spec{Source: burn, Args: json.RawMessage(`{"children": 2, "ms": 200}`),
			Limits: sandbox.Limits{CPUMS: 5000, TimeoutMS: 20000}.Or(limits.Default)})
		if res.Status != sandbox.StatusOK {
			t.Fatalf("%s", dump(res))
		}
		if res.Usage.CPUMS < 400 {
			t.Errorf("usage %d ms CPU; the children alone burnt 2 × 200 ms", res.Usage.CPUMS)
		}
	})
}

// ---- requirements ----

func depsRunner(t *testing.T) (*sandbox.Runner, *environments.Cache, string) {
	t.Helper()
	deps := filepath.Join(testenv.JailDir(t), "deps")
	r := newRunner(t, func(c *sandbox.Config) { c.DepsDir = deps })
	envs, err := environments.New(sandbox.Config{RootfsDir: rootfsDir(t), DepsDir: deps}, nil)
	if err != nil {
		t.Fatalf("environments.New: %v", err)
	}
	return r, envs, deps
}

// runPinned installs the exact pins reqs with envs, as a runner's caller
// does, and runs spec with their directory bound.
func runPinned(t *testing.T, r *sandbox.Runner, envs *environments.Cache, spec sandbox.Spec, reqs ...string) sandbox.Result {
	t.Helper()
	dir, failure, err := envs.PreparePins(context.Background(), reqs)
	if err != nil || failure != nil {
		t.Fatalf("PreparePins: %v %+v", err, failure)
	}
	spec.Deps = dir
	return run(t, r, spec)
}

func TestRequirements(t *testing.T) {
	r, envs, deps := depsRunner(t)
	six := `
import os, six

def run(args, context):
    probe = {}
    for p in ("/opt/execgate/deps/x.py", "/opt/execgate/deps/six.py"):
        try:
            open(p, "a").close()
            probe[p] = "writable"
        except OSError as e:
            probe[p] = e.errno
    return {"version": six.__version__, "file": six.__file__, "probe": probe}
`
	t.Run("a pinned wheel is installed and importable, read-only", func(t *testing.T) {
		res := runPinned(t, r, envs, sandbox.Spec{Source: six, Limits: limits.Default}, "six==1.16.0")
		if res.Status != sandbox.StatusOK {
			t.Fatalf("%s", dump(res))
		}
		var out struct {
			Version string         `json:"version"`
			File    string         `json:"file"`
			Probe   map[string]int `json:"probe"`
		}
		if err := json.Unmarshal(res.Result, &out); err != nil {
			t.Fatalf("%v: %s", err, res.Result)
		}
		if out.Version != "1.16.0" || out.File != "/opt/execgate/deps/six.py" {
			t.Errorf("six %s from %s", out.Version, out.File)
		}
		for p, errno := range out.Probe {
			if errno != 30 && errno != 13 { // EROFS, EACCES
				t.Errorf("%s: %d, want EROFS or EACCES", p, errno)
			}
		}
	})
	t.Run("the same set, spelled differently, reuses the installed directory", func(t *testing.T) {
		before := depsDirs(t, deps)
		var wg sync.WaitGroup
		results := make([]sandbox.Result, 3)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				dir, failure, err := envs.PreparePins(context.Background(), []string{" Six == 1.16.0 "})
				if err != nil || failure != nil {
					t.Errorf("PreparePins: %v %+v", err, failure)
					return
				}
				res, err := r.Run(context.Background(), sandbox.Spec{Source: six, Deps: dir, Limits: limits.Default})
				if err != nil {
					t.Errorf("Run: %v", err)
				}
				results[i] = res
			}()
		}
		wg.Wait()
		for _, res := range results {
			if res.Status != sandbox.StatusOK {
				t.Errorf("%s", dump(res))
			}
		}
		if after := depsDirs(t, deps); fmt.Sprint(after) != fmt.Sprint(before) || len(after) != 1 {
			t.Errorf("deps dir holds %v, before %v: want the one installed set", after, before)
		}
	})
	t.Run("a package that does not exist is a DependencyError with uv's output", func(t *testing.T) {
		_, failure, err := envs.PreparePins(context.Background(), []string{"nonexistent-pkg-zz==1.0"})
		if err != nil || failure == nil || failure.Type != sandbox.ErrDependencyError {
			t.Fatalf("PreparePins: %v %+v", err, failure)
		}
		if !strings.Contains(failure.Message, "nonexistent-pkg-zz==1.0") || !strings.Contains(failure.Traceback, "nonexistent-pkg-zz") {
			t.Errorf("the error does not carry the installer's output: %+v", failure)
		}
		for _, d := range depsDirs(t, deps) {
			if strings.HasPrefix(d, ".tmp-") {
				t.Errorf("a failed install left %s behind", d)
			}
		}
	})
	t.Run("a range is refused naming the entry", func(t *testing.T) {
		_, _, err := envs.PreparePins(context.Background(), []string{"six>=1"})
		if err == nil || !strings.Contains(err.Error(), `"six>=1"`) {
			t.Fatalf("PreparePins of a range: %v", err)
		}
	})
	t.Run("a run without requirements sees an empty deps directory", func(t *testing.T) {
		res := run(t, r, sandbox.Spec{Source: "import os\ndef run(a, c):\n    return os.listdir('/opt/execgate/deps')\n", Limits: limits.Default})
		if res.Status != sandbox.StatusOK || string(res.Result) != "[]" {
			t.Fatalf("%s", dump(res))
		}
	})
}

// depsDirs lists the installed sets (and leftovers) in a deps directory.
func depsDirs(t *testing.T, deps string) []string {
	t.Helper()
	entries, err := os.ReadDir(deps)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && e.Name() != ".cache" {
			out = append(out, e.Name())
		}
	}
	return out
}

// ---- network mode proxy ----

// testResolver maps test names to addresses; nothing reaches real DNS.
type testResolver map[string]string

func (f testResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// backend is an HTTP server on the host's loopback, standing in for an
// allowed API.
func backend(t *testing.T, body string) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, body+" "+r.URL.Path)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

func proxyRunner(t *testing.T, mod func(*sandbox.Config)) *sandbox.Runner {
	t.Helper()
	needJail(t)
	p, err := egress.New(egress.Config{AllowCIDRs: []string{"127.0.0.1/32"}},
		egress.Options{Resolver: testResolver{"api.test": "127.0.0.1", "other.test": "127.0.0.1", "untrusted.test": "127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := sandbox.Config{RootfsDir: rootfsDir(t), WorkDir: testenv.JailDir(t), CgroupParent: cgroupParent}
	if mod != nil {
		mod(&cfg)
	}
	r, err := sandbox.NewRunner(cfg, sandbox.WithEgress(p))
	if err != nil {
		t.Fatalf("NewRunner: %v\n%s", err, detail(err))
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		assertNoCgroupsLeft(t, r)
	})
	return r
}

const fetchTool = `
import urllib.request, urllib.error

def run(args, context):
    out = {}
    for url in args["urls"]:
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                out[url] = {"status": r.status, "body": r.read().decode()}
        except urllib.error.HTTPError as e:
            out[url] = {"status": e.code, "error": e.read().decode()[:200]}
        except Exception as e:
            out[url] = {"status": 0, "error": "%s: %s" % (type(e).__name__, e)}
    return out
`

type fetched struct {
	Status int    `json:"status"`
	Body   string `json:"body"`
	Error  string `json:"error"`
}

func TestNetworkProxy(t *testing.T) {
	port := backend(t, "hello from the api")
	allowed := fmt.Sprintf("http://api.test:%d/v1", port)
	denied := fmt.Sprintf("http://other.test:%d/", port)
	spec := sandbox.Spec{Source: fetchTool, Network: sandbox.NetworkProxy,
		EgressAllow: []string{fmt.Sprintf("api.test:%d", port)},
		Args:        mustJSON(t, map[string]any{"urls": []string{allowed, denied}}),
		Limits:      limits.Default}
	check := func(t *testing.T, res sandbox.Result) {
		t.Helper()
		if res.Status != sandbox.StatusOK {
			t.Fatalf("%s", dump(res))
		}
		var out map[string]fetched
		if err := json.Unmarshal(res.Result, &out); err != nil {
			t.Fatal(err)
		}
		if got := out[allowed]; got.Status != 200 || got.Body != "hello from the api /v1" {
			t.Errorf("allowed host: %+v", got)
		}
		if got := out[denied]; got.Status != http.StatusForbidden || !strings.Contains(got.Error, "allow-list") {
			t.Errorf("denied host: %+v, want 403 naming the allow-list", got)
		}
		var sawAllowed, sawDenied bool
		for _, a := range res.Egress {
			sawAllowed = sawAllowed || (a.Host == "api.test" && a.Port == port && a.Allowed && a.IP == "127.0.0.1")
			sawDenied = sawDenied || (a.Host == "other.test" && a.Port == port && !a.Allowed && a.Reason != "")
		}
		if !sawAllowed || !sawDenied {
			t.Errorf("egress attempts %+v: want the allowed and the denied one recorded", res.Egress)
		}
	}
	t.Run("cold", func(t *testing.T) {
		check(t, run(t, proxyRunner(t, nil), spec))
	})
	t.Run("warm", func(t *testing.T) {
		r := proxyRunner(t, func(c *sandbox.Config) { c.WarmPool = 1 })
		run(t, r, spec) // registers the proxy profile; the pool warms it
		waitWarm(t, r, 2)
		hits := sandbox.WarmHits(r)
		res := run(t, r, spec)
		if sandbox.WarmHits(r) != hits+1 {
			t.Fatalf("the proxy-mode run was not served warm")
		}
		check(t, res)
	})
	t.Run("large bodies flow both ways through the relay", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "%d\n", n)
			w.Write([]byte(strings.Repeat("x", 8<<20)))
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		bigPort := ln.Addr().(*net.TCPAddr).Port
		src := `
import urllib.request

def run(args, context):
    req = urllib.request.Request(args["url"], data=b"y" * (3 << 20), method="POST")
    with urllib.request.urlopen(req, timeout=20) as r:
        head, _, body = r.read().partition(b"\n")
    return [int(head), len(body)]
`
		res := run(t, proxyRunner(t, nil), sandbox.Spec{Source: src, Network: sandbox.NetworkProxy,
			EgressAllow: []string{fmt.Sprintf("api.test:%d", bigPort)},
			Args:        mustJSON(t, map[string]string{"url": fmt.Sprintf("http://api.test:%d/big", bigPort)}),
			Limits:      sandbox.Limits{TimeoutMS: 30000, CPUMS: 30000}.Or(limits.Default)})
		if res.Status != sandbox.StatusOK || string(res.Result) != fmt.Sprintf("[%d,%d]", 3<<20, 8<<20) {
			t.Fatalf("%s", dump(res))
		}
	})
	t.Run("a work dir too deep for a socket path still works", func(t *testing.T) {
		deep := filepath.Join(testenv.JailDir(t), strings.Repeat("d", 60), strings.Repeat("e", 60))
		if err := os.MkdirAll(deep, 0o755); err != nil {
			t.Fatal(err)
		}
		check(t, run(t, proxyRunner(t, func(c *sandbox.Config) { c.WorkDir = deep }), spec))
	})
	t.Run("a bad allow-list entry is InvalidInput", func(t *testing.T) {
		bad := spec
		bad.EgressAllow = []string{"*"}
		res := run(t, proxyRunner(t, nil), bad)
		if res.ErrorType() != sandbox.ErrInvalidInput || !strings.Contains(res.Error.Message, `"*"`) {
			t.Fatalf("%s", dump(res))
		}
	})
	t.Run("a runner without an egress proxy refuses proxy mode", func(t *testing.T) {
		r := newRunner(t, nil)
		_, err := r.Run(context.Background(), spec)
		var u *sandbox.UnavailableError
		if !errors.As(err, &u) || !errors.Is(err, sandbox.ErrNoEgressProxy) {
			t.Fatalf("got %v, want an *UnavailableError for ErrNoEgressProxy", err)
		}
	})
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
