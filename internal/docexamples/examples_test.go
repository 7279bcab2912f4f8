package docexamples

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/execgate/execgate/internal/testenv"
)

// docFiles are the documents whose examples run: README.md and every page
// of the site, in a fixed order (one gateway serves them all, and a page's
// blocks share one working directory, in document order).
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files[1:])
	return files
}

// gateway is a real `execgate serve` on the embedded default, with a
// private state dir and the shared test rootfs.
type gateway struct {
	bin, addr string
	env       []string
	stdout    *testenv.SyncBuffer
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func startGateway(t *testing.T, root string) *gateway {
	t.Helper()
	nsjail := testenv.Nsjail(t)
	deno := testenv.Deno(t)
	runtimes := testenv.RuntimesDir(t) // every runtime: the pages show python3.13 runs too

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "execgate")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./cmd/execgate")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/execgate: %v\n%s", err, out)
	}

	if err := os.WriteFile(filepath.Join(filepath.Dir(bin), "curl"), []byte(curlWrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	g := &gateway{bin: bin, addr: freeAddr(t), stdout: &testenv.SyncBuffer{}}
	cgroupParent := fmt.Sprintf("execgate-docexamples-%d", os.Getpid())
	g.env = []string{
		"PATH=" + filepath.Dir(bin) + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + t.TempDir(),
		"TMPDIR=" + t.TempDir(),
		"LANG=C.UTF-8",
		"EXECGATE_STATE_DIR=" + t.TempDir(),
		"EXECGATE_LISTEN=" + g.addr,
		"EXECGATE_SANDBOX_RUNTIMES_DIR=" + runtimes,
		"EXECGATE_SANDBOX_CGROUP_PARENT=" + cgroupParent,
		"EXECGATE_NSJAIL=" + nsjail,
		"EXECGATE_DENO=" + deno,
	}
	if testenv.TimeScale() > 1 {
		g.env = append(g.env, fmt.Sprintf("EXECGATE_SANDBOX_ZYGOTES_START_MS=%d", 10000*int64(testenv.TimeScale())))
	}
	srvCtx, stop := context.WithCancel(context.Background())
	cmd := exec.CommandContext(srvCtx, bin, "serve")
	cmd.Dir = root
	cmd.Env = g.env
	var stderr testenv.SyncBuffer
	cmd.Stdout, cmd.Stderr = g.stdout, &stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		stop()
		<-done
		for _, c := range []string{"memory", "pids", "cpu", "cpu,cpuacct", "unified", ""} {
			os.Remove(filepath.Join("/sys/fs/cgroup", c, cgroupParent))
		}
	})

	// Ready: /readyz answers 200 (a real jailed run succeeded).
	deadline := time.Now().Add(testenv.TimeScale() * 3 * time.Minute)
	for {
		select {
		case err := <-done:
			t.Fatalf("execgate serve exited: %v\n%s\n%s", err, g.stdout.String(), stderr.String())
		default:
		}
		resp, err := http.Get("http://" + g.addr + "/readyz")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("execgate serve not ready: %d %s\n%s", resp.StatusCode, body, stderr.String())
			}
		} else if time.Now().After(deadline) {
			t.Fatalf("execgate serve not reachable: %v\n%s", err, stderr.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	return g
}

// token mints a dev token of tenant demo with the given roles.
func (g *gateway) token(t *testing.T, roles ...string) string {
	t.Helper()
	args := []string{"token", "--tenant", "demo"}
	for _, r := range roles {
		args = append(args, "--role", r)
	}
	cmd := exec.Command(g.bin, args...)
	cmd.Env = g.env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("execgate token: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// workDir is a page's working directory: the repository's top-level
// entries linked in (deploy/, policies/, clients/, …) and bin/execgate, so
// the examples run as they would in a checkout, while the files they write
// stay out of it.
func workDir(t *testing.T, root, bin string) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Name() {
		case "bin", ".git", ".tools", "site":
			continue
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(dir, "bin", "execgate")); err != nil {
		t.Fatal(err)
	}
	return dir
}

const (
	stepMarker = "@@docexamples-step@@"
	httpMarker = "@@docexamples-http "
)

// curlWrapper records the HTTP status of every curl an example runs on its
// stderr, so a request that failed (4xx/5xx) where the document shows no
// output fails the test: `curl -s` itself exits 0 for those. A -w of the
// example's own comes later on the command line and wins.
const curlWrapper = "#!/bin/sh\nexec /usr/bin/curl -w '%{stderr}" + httpMarker + "%{http_code}@@\\n' \"$@\"\n"

// httpStatuses are the statuses curl recorded in a step's stderr.
func httpStatuses(stderr string) []int {
	var out []int
	for _, m := range regexp.MustCompile(regexp.QuoteMeta(httpMarker)+`([0-9]{3})@@`).FindAllStringSubmatch(stderr, -1) {
		var n int
		fmt.Sscan(m[1], &n)
		out = append(out, n)
	}
	return out
}

// run runs a block as one bash script (its steps share the shell's state)
// and returns each step's output and stderr.
func run(ctx context.Context, dir string, env []string, steps []Step) ([]string, []string, error) {
	var script strings.Builder
	script.WriteString("set -eo pipefail\n")
	for _, s := range steps {
		script.WriteString(s.Script + "\n")
		script.WriteString("printf '\\n" + stepMarker + "\\n'\n")
		script.WriteString("printf '\\n" + stepMarker + "\\n' >&2\n")
	}
	cmd := exec.CommandContext(ctx, "/bin/bash", "-c", script.String())
	cmd.Dir = dir
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	outs := strings.Split(stdout.String(), "\n"+stepMarker+"\n")
	errs := strings.Split(stderr.String(), "\n"+stepMarker+"\n")
	return outs, errs, err
}

// rewriteAddr points the documented address at the test's gateway.
func rewriteAddr(s, addr string) string {
	return strings.NewReplacer("127.0.0.1:8010", addr, "localhost:8010", addr).Replace(s)
}

// Every shell example of the README and the site runs against a real
// gateway (real nsjail, the embedded default config) and prints what the
// document shows; blocks marked <!-- not run: why --> are listed.
func TestEveryDocumentedExampleRuns(t *testing.T) {
	root := testenv.RepoRoot(t)
	g := startGateway(t, root)
	env := append(append([]string(nil), g.env...),
		"EXECGATE_URL=http://"+g.addr,
		"TOKEN="+g.token(t),
		"EXECGATE_TOKEN="+g.token(t),
		"ADMIN="+g.token(t, "admin"),
	)

	var notRun []string
	ran := 0
	for _, file := range docFiles(t, root) {
		md, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		dir := workDir(t, root, g.bin)
		for _, b := range Parse(file, string(md)) {
			if !b.Runnable() {
				continue
			}
			if b.NotRun != "" {
				notRun = append(notRun, fmt.Sprintf("%s:%d: %s", b.File, b.Line, b.NotRun))
				continue
			}
			ran++
			t.Run(fmt.Sprintf("%s:%d", file, b.Line), func(t *testing.T) {
				steps := b.Steps()
				for i := range steps {
					steps[i].Script = rewriteAddr(steps[i].Script, g.addr)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(testenv.TimeScale())*3*time.Minute)
				defer cancel()
				outs, errs, err := run(ctx, dir, env, steps)
				if err != nil {
					t.Fatalf("the example failed: %v\n--- script\n%s\n--- stdout\n%s\n--- stderr\n%s", err, b.Code, strings.Join(outs, "\n"), strings.Join(errs, "\n"))
				}
				if len(outs) < len(steps) || len(errs) < len(steps) {
					t.Fatalf("the example printed %d of %d step markers", len(outs)-1, len(steps))
				}
				for i, s := range steps {
					if err := Check(s.Expect, outs[i]); err != nil {
						t.Errorf("%s:%d: the output is not what the document shows: %v\n--- commands\n%s\n--- stderr\n%s", file, b.Line, err, s.Script, errs[i])
					}
					if s.Expect != "" {
						continue
					}
					for _, code := range httpStatuses(errs[i]) {
						if code >= 400 || code == 0 {
							t.Errorf("%s:%d: a curl got HTTP %d and the document shows no output for it:\n%s\n--- stdout\n%s", file, b.Line, code, s.Script, outs[i])
						}
					}
				}
			})
		}
	}
	if ran < 10 {
		t.Errorf("only %d examples ran: the parser lost them", ran)
	}
	t.Logf("%d examples ran; %d are marked not run:\n%s", ran, len(notRun), strings.Join(notRun, "\n"))

	// The curl line serve prints works as printed.
	t.Run("the curl line serve prints", func(t *testing.T) {
		var line string
		sc := bufio.NewScanner(strings.NewReader(g.stdout.String()))
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "curl ") {
				line = sc.Text()
			}
		}
		if line == "" {
			t.Fatalf("serve printed no curl line:\n%s", g.stdout.String())
		}
		outs, errs, err := run(context.Background(), t.TempDir(), env, []Step{{Script: line}})
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, strings.Join(errs, "\n"))
		}
		if err := Check(`{"status": "ok", "ok": true}`, outs[0]); err != nil {
			t.Error(err)
		}
	})
}

// Test names the documents cite as evidence exist.
func TestTheTestsTheDocsNameExist(t *testing.T) {
	root := testenv.RepoRoot(t)
	tests := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+|Benchmark[A-Za-z0-9_]+)\(`)
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".tools" || d.Name() == "node_modules" || d.Name() == "site") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, "_test.go") {
			src, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range decl.FindAllStringSubmatch(string(src), -1) {
				tests[m[1]] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cited := regexp.MustCompile("`((?:Test|Benchmark)[A-Z][A-Za-z0-9_]+)`")
	n := 0
	for _, file := range docFiles(t, root) {
		md, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range cited.FindAllStringSubmatch(string(md), -1) {
			n++
			if !tests[m[1]] {
				t.Errorf("%s names %s, which no test file declares", file, m[1])
			}
		}
	}
	if n == 0 {
		t.Error("no document names a test: the pattern is broken")
	}
}
