package cgroups

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execgate/execgate/sandbox/internal/unavailable"
)

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The counters are plain files, so their parsing is checked on fakes; the
// real hierarchies are exercised by the integration tests (v1 on this
// project's build host).
func TestCgroupStats(t *testing.T) {
	tests := []struct {
		name    string
		version int
		files   map[string]string
		peak    int64
		hit     bool
		oom     bool
	}{
		{"v2 peak and an OOM kill", 2, map[string]string{"memory.peak": "73400320\n", "memory.events": "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n"}, 73400320, true, true},
		{"v2 an OOM without a kill", 2, map[string]string{"memory.peak": "73400320\n", "memory.events": "low 0\nhigh 0\nmax 12\noom 1\noom_kill 0\n"}, 73400320, true, false},
		{"v2 without an OOM", 2, map[string]string{"memory.peak": "1048576\n", "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n"}, 1048576, false, false},
		{"v1 failcnt", 1, map[string]string{"memory.max_usage_in_bytes": "67108864\n", "memory.failcnt": "3\n", "memory.memsw.failcnt": "0\n", "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"}, 67108864, true, false},
		{"v1 memsw failcnt", 1, map[string]string{"memory.max_usage_in_bytes": "1\n", "memory.failcnt": "0\n", "memory.memsw.failcnt": "2\n"}, 1, true, false},
		{"v1 oom_kill counted in the run's cgroup", 1, map[string]string{"memory.max_usage_in_bytes": "1\n", "memory.failcnt": "9\n", "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"}, 1, true, true},
		{"v1 quiet", 1, map[string]string{"memory.max_usage_in_bytes": "4096\n", "memory.failcnt": "0\n", "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"}, 4096, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tt.files)
			rc := &Run{cg: &Manager{version: tt.version}, dirs: []string{dir}, oomEvents: -1}
			s := rc.Stats()
			if s.PeakBytes != tt.peak || s.MemoryLimitHit != tt.hit || s.OOMKilled != tt.oom {
				t.Errorf("got %+v, want peak %d hit %t oom %t", s, tt.peak, tt.hit, tt.oom)
			}
		})
	}
}

func TestCgroupCPUUsage(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"cpu.stat":      "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\n",
		"cpuacct.usage": "987654321\n",
	})
	tests := []struct {
		name string
		rc   *Run
		want time.Duration
		ok   bool
	}{
		{"cgroup v2 cpu.stat", &Run{cpuFile: filepath.Join(dir, "cpu.stat"), cpuStat: true}, 1234567 * time.Microsecond, true},
		{"cgroup v1 cpuacct.usage", &Run{cpuFile: filepath.Join(dir, "cpuacct.usage")}, 987654321, true},
		{"no accounting", &Run{}, 0, false},
		{"a vanished cgroup", &Run{cpuFile: filepath.Join(dir, "gone", "cpu.stat"), cpuStat: true}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.rc.CPUUsage()
			tt.rc.closeFiles()
			if got != tt.want || ok != tt.ok {
				t.Errorf("got %v, %t; want %v, %t", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestCgroupNsjailArgs(t *testing.T) {
	v1 := &Run{cg: &Manager{version: 1}, name: "execgate/run-1"}
	want1 := []string{"--cgroup_mem_parent", "execgate/run-1", "--cgroup_pids_parent", "execgate/run-1", "--cgroup_cpu_parent", "execgate/run-1"}
	if got := v1.NsjailArgs(); !slices.Equal(got, want1) {
		t.Errorf("v1: %v", got)
	}
	v2 := &Run{cg: &Manager{version: 2}, name: "execgate/run-1", dirs: []string{"/sys/fs/cgroup/execgate/run-1"}}
	if got := v2.NsjailArgs(); !slices.Equal(got, []string{"--cgroupv2_mount", "/sys/fs/cgroup/execgate/run-1"}) {
		t.Errorf("v2: %v", got)
	}
}

func TestDetectCgroupsWithoutHierarchiesIsUnavailable(t *testing.T) {
	for _, mode := range []string{"auto", "v1", "v2"} {
		_, err := detectCgroupsWith(mode, t.TempDir(), "execgate", isFS)
		var u *unavailable.Error
		if !errors.As(err, &u) || u.Hint != Hint {
			t.Errorf("%s: got %v", mode, err)
		}
	}
}

func TestRemoveCgroupDirTakesNsjailLeftoversFirst(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run-1")
	for _, d := range []string{"NSJAIL.123", "NSJAIL.456"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := removeCgroupDir(dir, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there: %v", dir, err)
	}
}

func TestRemoveCgroupDirGivesUpAtTheDeadline(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run-1")
	writeFiles(t, dir, map[string]string{"busy": "x"}) // a file keeps rmdir failing, like live tasks
	err := removeCgroupDir(dir, time.Now().Add(20*time.Millisecond))
	if err == nil {
		t.Fatal("want an error naming the cgroup")
	}
}

func TestSweepRemovesOnlyDeadOwnersRuns(t *testing.T) {
	root := t.TempDir()
	c := &Manager{version: 2, root: root, parent: "execgate"}
	parent := filepath.Join(root, "execgate")
	dead := exitedPID(t)
	names := map[string]bool{ // name → should survive
		fmt.Sprintf("run-%d-aaaa", dead):        false,
		fmt.Sprintf("run-%d-bbbb", os.Getpid()): true, // this process: maybe a live runner
		fmt.Sprintf("run-%d-cccc", 1):           true, // alive
		"run-0123456789abcdef":                  true, // no owner recorded: left alone
		"something-else":                        true,
	}
	for n := range names {
		if err := os.MkdirAll(filepath.Join(parent, n, "NSJAIL.1"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.Sweep(); got != 1 {
		t.Errorf("sweep removed %d runs, want 1", got)
	}
	for n, survive := range names {
		_, err := os.Stat(filepath.Join(parent, n))
		if (err == nil) != survive {
			t.Errorf("%s: exists=%t, want %t", n, err == nil, survive)
		}
	}
}

// exitedPID returns the pid of a process that has exited and been reaped.
func exitedPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Skipf("/bin/true: %v", err)
	}
	return cmd.Process.Pid
}

// fakeCgroupFS lays out cgroup "mounts" in a temp dir; magic reports the
// filesystem type the test says each one has.
type fakeCgroupFS struct {
	root   string
	magics map[string]int64 // path relative to root → statfs magic
}

func (f fakeCgroupFS) isFS(p string, magic int64) bool {
	rel, err := filepath.Rel(f.root, p)
	return err == nil && f.magics[rel] == magic
}

func TestProbeCgroupsPicksTheVersionAndProbesTheParent(t *testing.T) {
	self := filepath.Join(t.TempDir(), "cgroup")
	if err := os.WriteFile(self, []byte("0::/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer func(old string) { selfCgroupFile = old }(selfCgroupFile)
	selfCgroupFile = self
	defer func(old func(string) (int64, error), oldCap func() bool) { statfsFlags, hasSysAdmin = old, oldCap }(statfsFlags, hasSysAdmin)
	const rdonly = unix.ST_RDONLY | unix.ST_NOSUID | unix.ST_NODEV | unix.ST_NOEXEC
	for _, tc := range []struct {
		name     string
		mode     string
		magics   map[string]int64
		files    map[string]string // path → content ("$PID": this process); a path ending in / is a directory
		flags    int64             // the cgroup2 mount's statfs flags
		sysAdmin bool              // the process holds CAP_SYS_ADMIN
		ok       bool
		detail   string
	}{
		{
			name:   "v1 hierarchies",
			mode:   "auto",
			magics: map[string]int64{"memory": cgroup1Magic, "pids": cgroup1Magic, "cpu": cgroup1Magic, "unified": cgroup2Magic},
			ok:     true, detail: "v1 (memory, pids, cpu)",
		},
		{
			name:   "v2 with delegated controllers",
			mode:   "auto",
			magics: map[string]int64{".": cgroup2Magic},
			files: map[string]string{"cgroup.controllers": "cpuset cpu io memory pids", "cgroup.subtree_control": "cpu memory pids",
				"cgroup.procs": "$PID", "execgate/diagnose-*/cgroup.controllers": "cpu memory pids"},
			ok: true, detail: "delegated down to it already",
		},
		{
			name:   "v2 host root without delegation yet: the first run enables it",
			mode:   "auto",
			magics: map[string]int64{".": cgroup2Magic},
			files:  map[string]string{"cgroup.controllers": "cpu memory pids", "cgroup.subtree_control": "", "cgroup.procs": "1 2 $PID"},
			ok:     true, detail: "enables +memory +pids +cpu in ",
		},
		{
			name:   "v2 container namespace root shared with other processes",
			mode:   "auto",
			magics: map[string]int64{".": cgroup2Magic},
			files: map[string]string{"cgroup.controllers": "memory pids", "cgroup.subtree_control": "", "cgroup.type": "domain",
				"cgroup.procs": "1 $PID"},
			ok: true, detail: "moves the 2 process(es) sharing its base cgroup (pids 1 $PID) into ",
		},
		{
			name:   "v2 container namespace root mounted read-only, with CAP_SYS_ADMIN: remounted first",
			mode:   "auto",
			magics: map[string]int64{".": cgroup2Magic},
			files: map[string]string{"cgroup.controllers": "memory pids", "cgroup.subtree_control": "", "cgroup.type": "domain",
				"cgroup.procs": "$PID"},
			flags: rdonly, sysAdmin: true,
			ok: true, detail: "read-write (its own cgroup namespace, mounted read-only as a container runtime does), then moves the 1 process(es)",
		},
		{
			name:   "v2 container namespace root mounted read-only, without CAP_SYS_ADMIN: an unprivileged container",
			mode:   "auto",
			magics: map[string]int64{".": cgroup2Magic},
			files: map[string]string{"cgroup.controllers": "memory pids", "cgroup.subtree_control": "", "cgroup.type": "domain",
				"cgroup.procs": "$PID"},
			flags:  rdonly,
			detail: "as an unprivileged container gets it, and this process lacks CAP_SYS_ADMIN",
		},
		{
			name:   "v2 host root mounted read-only: not execgate's to remount",
			mode:   "auto",
			magics: map[string]int64{".": cgroup2Magic},
			files:  map[string]string{"cgroup.controllers": "memory pids", "cgroup.subtree_control": "", "cgroup.procs": "$PID"},
			flags:  rdonly, sysAdmin: true,
			detail: "is mounted read-only and",
		},
		{
			name:     "v2 the host's cgroup2 bind-mounted into a private cgroup namespace",
			mode:     "auto",
			magics:   map[string]int64{".": cgroup2Magic},
			files:    map[string]string{"cgroup.controllers": "memory pids", "cgroup.subtree_control": "memory pids", "cgroup.procs": "1 2 3"},
			sysAdmin: true,
			detail:   "is not this process's cgroup namespace's hierarchy",
		},
		{
			name:   "v2 without the memory controller offered",
			mode:   "auto",
			magics: map[string]int64{".": cgroup2Magic},
			files: map[string]string{"cgroup.controllers": "cpu memory pids", "cgroup.subtree_control": "cpu memory pids",
				"cgroup.procs": "$PID", "execgate/diagnose-*/cgroup.controllers": "cpu pids"},
			detail: "lacks the memory or pids controller",
		},
		{
			name:   "v2 forced on a v1 host",
			mode:   "v2",
			magics: map[string]int64{"memory": cgroup1Magic, "pids": cgroup1Magic, "cpu": cgroup1Magic},
			detail: "sandbox.cgroups=v2",
		},
		{
			name:   "no cgroups at all",
			mode:   "auto",
			magics: map[string]int64{},
			detail: "no usable cgroups",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := fakeCgroupFS{root: t.TempDir(), magics: tc.magics}
			statfsFlags = func(string) (int64, error) { return tc.flags, nil }
			hasSysAdmin = func() bool { return tc.sysAdmin }
			tc.detail = strings.ReplaceAll(tc.detail, "$PID", strconv.Itoa(os.Getpid()))
			for path, content := range tc.files {
				content = strings.ReplaceAll(content, "$PID", strconv.Itoa(os.Getpid()))
				// A real cgroupfs fills a new cgroup's cgroup.controllers from
				// its parent's subtree_control; a temp dir cannot, so the
				// delegated case pre-creates the probe cgroup with what the
				// kernel would show.
				path = strings.ReplaceAll(path, "*", strconv.Itoa(os.Getpid()))
				full := filepath.Join(fs.root, path)
				if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			p, err := probeCgroups(tc.mode, fs.root, "execgate", fs.isFS)
			if tc.ok {
				if err != nil || !strings.Contains(p.Detail, tc.detail) {
					t.Fatalf("probe = %+v, %v; want ok with %q", p, err, tc.detail)
				}
				return
			}
			var u *unavailable.Error
			if !errors.As(err, &u) || !strings.Contains(err.Error(), tc.detail) || u.Hint == "" {
				t.Errorf("probe error = %v, want an UnavailableError with a hint, naming %q", err, tc.detail)
			}
		})
	}
}

func TestV2BaseIsTheOwnCgroupOnlyWhenDelegated(t *testing.T) {
	dir := t.TempDir()
	self := filepath.Join(dir, "cgroup")
	for _, tc := range []struct{ content, want string }{
		{"0::/\n", "its own cgroup namespace's"},
		{"12:pids:/x\n0::/system.slice/execgate.service\n", "is not delegated"},
		{"0::/../../outside\n", "its own cgroup namespace's"},
	} {
		if err := os.WriteFile(self, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		if base, why := v2Base(dir, self); base != dir || !strings.Contains(why, tc.want) {
			t.Errorf("%q: v2Base = %q, %q; want %q, naming %q", tc.content, base, why, dir, tc.want)
		}
	}
}

func TestSetupRemountsOnlyItsOwnNamespacesReadOnlyMount(t *testing.T) {
	self := filepath.Join(t.TempDir(), "cgroup")
	if err := os.WriteFile(self, []byte("0::/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer func(old string) { selfCgroupFile = old }(selfCgroupFile)
	selfCgroupFile = self
	defer func(f func(string) (int64, error), r func(string, uintptr) error) { statfsFlags, remountRW = f, r }(statfsFlags, remountRW)
	pid := strconv.Itoa(os.Getpid())
	for _, tc := range []struct {
		name      string
		nsRoot    bool  // the mount's root has a cgroup.type: a namespace's, not the host's
		flags     int64 // statfs flags of the mount
		remount   error // what the kernel answers a remount
		wantCall  uintptr
		wantCalls int
		wantErr   string
	}{
		{name: "a writable mount is left alone", nsRoot: true},
		{name: "its namespace's read-only mount is remounted keeping nosuid, nodev and noexec", nsRoot: true,
			flags: unix.ST_RDONLY | unix.ST_NOSUID | unix.ST_NODEV | unix.ST_NOEXEC | unix.ST_RELATIME, wantCalls: 1,
			wantCall: unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_RELATIME},
		{name: "a refused remount names the unprivileged container", nsRoot: true, flags: unix.ST_RDONLY,
			remount: unix.EPERM, wantCalls: 1, wantErr: "as an unprivileged container gets it, and remounting it read-write was refused"},
		{name: "the host's read-only root is not remounted", flags: unix.ST_RDONLY, wantErr: "is mounted read-only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			files := map[string]string{"cgroup.controllers": "memory pids", "cgroup.subtree_control": "", "cgroup.procs": pid}
			if tc.nsRoot {
				files["cgroup.type"] = "domain"
			}
			writeFiles(t, root, files)
			fs := fakeCgroupFS{root: root, magics: map[string]int64{".": cgroup2Magic}}
			c, err := detectCgroupsWith("v2", root, "execgate", fs.isFS)
			if err != nil {
				t.Fatal(err)
			}
			statfsFlags = func(string) (int64, error) { return tc.flags, nil }
			var calls []uintptr
			remountRW = func(path string, flags uintptr) error {
				if path != root {
					t.Errorf("remounted %s, want the mount %s", path, root)
				}
				calls = append(calls, flags)
				return tc.remount
			}
			err = c.makeWritable()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("makeWritable = %v, want %q", err, tc.wantErr)
			}
			if len(calls) != tc.wantCalls || tc.wantCalls == 1 && calls[0] != tc.wantCall {
				t.Fatalf("remounts %#x, want %d with %#x", calls, tc.wantCalls, tc.wantCall)
			}
			var u *unavailable.Error
			if err != nil && (!errors.As(err, &u) || u.Hint == "") {
				t.Fatalf("error %v is not an UnavailableError with a hint", err)
			}
		})
	}
}
