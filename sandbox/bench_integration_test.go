package sandbox_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

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
