package sandbox_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox"
)

var probe = sandbox.Spec{Source: "async def run(args, context):\n    return {\"ok\": True}\n", Limits: limits.Default}

// BenchmarkRunCold is one cold run of the probe through the Runner.
func BenchmarkRunCold(b *testing.B) {
	r := benchRunner(b, 0)
	b.ResetTimer()
	for b.Loop() {
		res, err := r.Run(context.Background(), probe)
		if err != nil || res.Status != sandbox.StatusOK {
			b.Fatalf("%v %s", err, dump(res))
		}
	}
}

// BenchmarkRunWarm is one run of the probe served by the warm pool.
func BenchmarkRunWarm(b *testing.B) {
	r := benchRunner(b, 2)
	b.ResetTimer()
	for b.Loop() {
		res, err := r.Run(context.Background(), probe)
		if err != nil || res.Status != sandbox.StatusOK {
			b.Fatalf("%v %s", err, dump(res))
		}
	}
}

// BenchmarkRunProcess is one run of the probe at isolation level process
// (a fresh process forked from the tenant's warm zygote).
func BenchmarkRunProcess(b *testing.B) {
	r := benchRunner(b, 0)
	spec := probe
	spec.Isolation, spec.TenantID = sandbox.IsolationProcess, "bench"
	if res, err := r.Run(context.Background(), spec); err != nil || res.Status != sandbox.StatusOK { // starts the zygote
		b.Fatalf("%v %s", err, dump(res))
	}
	cpu := benchCPU(b, r)
	b.ResetTimer()
	for b.Loop() {
		res, err := r.Run(context.Background(), spec)
		if err != nil || res.Status != sandbox.StatusOK {
			b.Fatalf("%v %s", err, dump(res))
		}
	}
	cpu()
}

// BenchmarkRunProcessPaced is BenchmarkRunProcess with a pause of
// 8 ms after each run, so that each run finds the host idle (the work a
// run leaves behind, the next spare process and its cgroup, done):
// latency as a caller sending now and then sees it, reported as
// percentiles of Run's wall time.
func BenchmarkRunProcessPaced(b *testing.B) {
	r := benchRunner(b, 0)
	spec := probe
	spec.Isolation, spec.TenantID = sandbox.IsolationProcess, "bench"
	if res, err := r.Run(context.Background(), spec); err != nil || res.Status != sandbox.StatusOK { // starts the zygote
		b.Fatalf("%v %s", err, dump(res))
	}
	var walls []time.Duration
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		res, err := r.Run(context.Background(), spec)
		walls = append(walls, time.Since(start))
		if err != nil || res.Status != sandbox.StatusOK {
			b.Fatalf("%v %s", err, dump(res))
		}
		b.StopTimer()
		time.Sleep(8 * time.Millisecond) // the pause between runs, outside the timer
		b.StartTimer()
	}
	slices.Sort(walls)
	for _, q := range []struct {
		name string
		at   float64
	}{{"p50-ms", 0.5}, {"p90-ms", 0.9}, {"p99-ms", 0.99}} {
		b.ReportMetric(float64(walls[int(q.at*float64(len(walls)-1))].Microseconds())/1000, q.name)
	}
}

// benchCPU reports the CPU time per run of this process (the runner) and
// of every jail below r's parent cgroup (zygotes and runs), read when the
// returned func is called.
func benchCPU(b *testing.B, r *sandbox.Runner) func() {
	parent := sandbox.CgroupParentName(r)
	jails := func() time.Duration {
		for _, f := range []string{"/sys/fs/cgroup/unified/" + parent + "/cpu.stat", "/sys/fs/cgroup/" + parent + "/cpu.stat"} {
			data, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			for _, l := range strings.Split(string(data), "\n") {
				if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
					us, _ := strconv.ParseInt(v, 10, 64)
					return time.Duration(us) * time.Microsecond
				}
			}
		}
		return 0
	}
	self := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	s0, j0 := self(), jails()
	return func() {
		n := float64(b.N)
		b.ReportMetric(float64((self()-s0).Microseconds())/1000/n, "runner-cpu-ms/op")
		b.ReportMetric(float64((jails()-j0).Microseconds())/1000/n, "jail-cpu-ms/op")
	}
}

// BenchmarkRawNsjail runs the same jail by hand: nsjail with the runner's
// rendered config, the harness and the probe request on stdin, without the
// runner (no per-run cgroup, no output capture, no classification).
func BenchmarkRawNsjail(b *testing.B) {
	r := benchRunner(b, 0)
	if _, err := r.Run(context.Background(), probe); err != nil { // renders the profile
		b.Fatal(err)
	}
	cfgs, _ := filepath.Glob(filepath.Join(benchWorkDir, "profiles", "*.cfg"))
	if len(cfgs) != 1 {
		b.Fatalf("profiles: %v", cfgs)
	}
	req := sandbox.ProbeRequest()
	devnull, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	defer devnull.Close()
	nsjail := sandbox.NsjailPath(r)
	parent := sandbox.CgroupParentName(r)
	b.ResetTimer()
	for b.Loop() {
		cmd := exec.Command(nsjail, "--config", cfgs[0], "--cgroup_mem_parent", parent, "--cgroup_pids_parent", parent, "--cgroup_cpu_parent", parent)
		cmd.Stdin = bytes.NewReader(req)
		cmd.ExtraFiles = []*os.File{devnull, devnull}
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
	}
}

var benchWorkDir string

func benchRunner(b *testing.B, warm int) *sandbox.Runner {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	benchWorkDir = b.TempDir()
	dir := rootfsDir(b)
	r, err := sandbox.NewRunner(sandbox.Config{RootfsDir: dir, WorkDir: benchWorkDir, CgroupParent: cgroupParent, WarmPool: warm})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.Close() })
	return r
}

// BenchmarkFileAndArtifact is what one input file and one small artifact
// add to the probe's run through the Runner, at level process and with a
// warm jail: the plain probe and the probe reading a file and saving it as
// an artifact run alternately (so both see the same host), and the p50 of
// each and their difference are reported.
func BenchmarkFileAndArtifact(b *testing.B) {
	withFiles := sandbox.Spec{Limits: limits.Default,
		Source: "def run(args, context):\n    context.artifacts.save(\"copy.txt\", open(\"in.txt\").read())\n    return {\"ok\": True}\n",
		Files:  []sandbox.File{{Path: "in.txt", Content: []byte("one small input file\n")}}}
	for _, level := range []string{sandbox.IsolationProcess, sandbox.IsolationJail} {
		b.Run(level, func(b *testing.B) {
			r := benchRunner(b, 2)
			plain, files := probe, withFiles
			plain.Isolation, plain.TenantID = level, "bench"
			files.Isolation, files.TenantID = level, "bench"
			run := func(spec sandbox.Spec) time.Duration {
				t0 := time.Now()
				res, err := r.Run(context.Background(), spec)
				d := time.Since(t0)
				if err != nil || res.Status != sandbox.StatusOK || (len(spec.Files) > 0 && len(res.Artifacts) != 1) {
					b.Fatalf("%v %s", err, dump(res))
				}
				return d
			}
			run(plain) // the zygote, or the pool's profile
			run(files)
			var a, f []time.Duration
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if i%2 == 0 {
					a, f = append(a, run(plain)), append(f, run(files))
				} else {
					f, a = append(f, run(files)), append(a, run(plain))
				}
			}
			slices.Sort(a)
			slices.Sort(f)
			pa, pf := a[len(a)/2], f[len(f)/2]
			b.ReportMetric(float64(pa.Microseconds()), "plain-p50-µs")
			b.ReportMetric(float64(pf.Microseconds()), "files-p50-µs")
			b.ReportMetric(float64((pf - pa).Microseconds()), "added-p50-µs")
		})
	}
}
