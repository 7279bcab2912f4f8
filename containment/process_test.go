package containment

import (
	"slices"
	"strings"
	"testing"

	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/sandbox"
)

// 38. Level process: the jail's seccomp, privilege and descriptor
// containment holds for a run forked from a zygote as for a fresh jail
// (the per-run guarantees of level process itself, fresh process, private
// /tmp, no survivors, limits and a dead zygote, are in
// sandbox/zygote_integration_test.go).

func processJob(tool string, args any) job {
	return job{tool: tool, args: args, isolation: sandbox.IsolationProcess}
}

func TestLevelProcessKillsEveryEscapeSyscall(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, "process-seccomp")
	escape := append(slices.Clone(escapeSyscalls),
		// The two calls the zygote's own filter lets through with exact
		// flags (sandbox/seccomp/zygote.go): with those very flags, from the tool.
		escapeCase{"unshare as the zygote does", map[string]any{"name": "raw", "nr": 272, "args": []int{0x18020000}}, "unshare"},
		escapeCase{"mount as the zygote does", map[string]any{"name": "raw", "nr": 165, "args": []int{0, 0, 0, 14, 0}}, "mount"},
	)
	runEscapes(t, escape, false, func(args map[string]any) sandbox.Result {
		return runTool(t, r, processJob("syscall", args))
	})
}

func TestLevelProcessHasNoPrivileges(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, "process-privileges")
	var out struct {
		Cap        map[string]string `json:"cap"`
		NoNewPrivs string            `json:"no_new_privs"`
		Seccomp    string            `json:"seccomp"`
		Setuid0    int               `json:"setuid0"`
		Mounts     []struct {
			Point   string `json:"point"`
			Options string `json:"options"`
		} `json:"mounts"`
	}
	decode(t, runTool(t, r, processJob("privileges", nil)), &out)
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb", "CapBnd"} {
		if out.Cap[k] != "0000000000000000" {
			t.Errorf("%s = %s, want 0 (the run's own user namespace gives it nothing)", k, out.Cap[k])
		}
	}
	if out.NoNewPrivs != "1" || out.Seccomp != "2" {
		t.Errorf("NoNewPrivs %q Seccomp %q, want 1 and 2", out.NoNewPrivs, out.Seccomp)
	}
	if out.Setuid0 != EINVAL && out.Setuid0 != EPERM {
		t.Errorf("setuid(0): errno %s", errnoName(out.Setuid0))
	}
	points := map[string]string{}
	for _, m := range out.Mounts {
		points[m.Point] = m.Options
		if !slices.Contains(strings.Split(m.Options, ","), "nosuid") {
			t.Errorf("mount %s (%s) is not nosuid", m.Point, m.Options)
		}
	}
	for _, p := range []string{"/", "/proc"} {
		if !slices.Contains(strings.Split(points[p], ","), "ro") {
			t.Errorf("%s is mounted %q, want read-only", p, points[p])
		}
	}
	for _, p := range []string{"/tmp", "/dev/shm"} {
		if !slices.Contains(strings.Split(points[p], ","), "rw") {
			t.Errorf("%s is mounted %q, want the run's own writable tmpfs", p, points[p])
		}
	}
}

func TestLevelProcessDescriptorsAndIDs(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, "process-identity")
	var out struct {
		FDs    map[string]string `json:"fds"`
		UIDMap string            `json:"uid_map"`
		IDs    []int             `json:"ids"`
	}
	decode(t, runTool(t, r, processJob("identity", map[string]any{"log_fd": 4})), &out)
	for fd, kind := range out.FDs {
		if !slices.Contains([]string{"0", "1", "2", "3", "5"}, fd) {
			t.Errorf("fd %s (%s) is open in the tool", fd, kind)
		}
	}
	if out.FDs["3"] != "fifo" || out.FDs["5"] != "sock" {
		t.Errorf("fds %v: want the result pipe at 3 and the tool bridge at 5", out.FDs)
	}
	if f := strings.Fields(out.UIDMap); len(f) != 3 || f[0] != "99999" || f[1] != "99999" || f[2] != "1" {
		t.Errorf("uid_map %q, want the run's own namespace mapping 99999 alone", out.UIDMap)
	}
	for _, id := range out.IDs {
		if id != jaillayout.ToolUID {
			t.Errorf("ids %v, want %d everywhere", out.IDs, jaillayout.ToolUID)
		}
	}
}

func TestLevelProcessCannotTraceOrReadOtherProcesses(t *testing.T) {
	t.Parallel()
	r, _ := newRunner(t, "process-ptrace")
	for _, target := range []string{"child", "init"} {
		t.Run("ptrace of "+target, func(t *testing.T) {
			wantSyscallDenied(t, "ptrace", func() sandbox.Result {
				return runTool(t, r, job{tool: "ptrace", args: map[string]any{"ptrace": target}, limits: sandbox.Limits{TimeoutMS: 20000}, isolation: sandbox.IsolationProcess})
			})
		})
	}
}
