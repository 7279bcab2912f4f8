package bench

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuMeter starts measuring CPU time: this process's (the gateway and the
// load client, in-process) plus every jail and zygote below the sandbox's
// parent cgroup (hierarchical CPU accounting). The function it returns
// stores the time used since into *out.
func cpuMeter(parent string, out *time.Duration) func() {
	if parent == "" {
		parent = "execgate"
	}
	start := selfCPU() + cgroupCPU(parent)
	return func() { *out = selfCPU() + cgroupCPU(parent) - start }
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cgroupCPU reads the parent cgroup's CPU usage: cgroup v1 cpuacct, the
// hybrid cgroup2 mount, or cgroup v2; 0 where none is readable.
func cgroupCPU(parent string) time.Duration {
	if data, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpu", parent, "cpuacct.usage")); err == nil {
		ns, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		return time.Duration(ns)
	}
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		f, err := os.Open(filepath.Join(root, parent, "cpu.stat"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == "usage_usec" {
				us, _ := strconv.ParseInt(v, 10, 64)
				f.Close()
				return time.Duration(us) * time.Microsecond
			}
		}
		f.Close()
	}
	return 0
}
