package seccomp

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// readLog reads an nsjail log recorded for the sandbox's classifier tests.
func readLog(t *testing.T, name string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", "nsjail-logs", name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

func TestSeccompRecordsNameTheSyscallOfTheHarnessNsjailReported(t *testing.T) {
	// Recorded on this project's build host (kernel 6.18, nsjail 3.6).
	const rec = `audit(1796134051.935:3): auid=4294967295 uid=99999 gid=99999 ses=4294967295 pid=16064 comm="python3" exe="/usr/bin/python3.11" sig=31 arch=c000003e syscall=272 compat=0 ip=0x7fef17708829 code=0x80000000`
	r, ok := parseSeccompRecord(rec)
	if !ok || r.PID != 16064 || r.Syscall != 272 || r.Signal != 31 || r.Arch != auditArchX86_64 || r.Compat {
		t.Fatalf("parsed %+v, %v", r, ok)
	}
	if want := time.UnixMilli(1796134051935); !r.Time.Equal(want) {
		t.Errorf("time %v, want %v", r.Time, want)
	}
	if got := deniedSyscallName(r); got != "unshare" {
		t.Errorf("name %q, want unshare", got)
	}
	if pid := ViolationPID(readLog(t, "sigsys.log")); pid != 16064 {
		t.Errorf("nsjail's violation pid = %d, want 16064", pid)
	}
	if pid := ViolationPID(readLog(t, "ok.log")); pid != 0 {
		t.Errorf("a run without a violation has pid %d", pid)
	}
}

func TestSeccompRecordsTheToolCannotShapeAreParsedSafely(t *testing.T) {
	tests := []struct {
		name, rec string
		ok        bool
		syscall   string
	}{
		// comm with spaces is hex-encoded by the kernel; a comm without
		// spaces stays one field: neither can add a pid or syscall field.
		{"a comm that looks like fields", `audit(1.000:1): pid=7 comm="pid=9" exe="/x" sig=31 arch=c000003e syscall=41 compat=0`, true, "socket"},
		{"the first pid counts", `audit(1.000:1): pid=7 pid=9 sig=31 arch=c000003e syscall=56 compat=0`, true, "clone"},
		{"a 32-bit call is not named from the 64-bit table", `audit(1.000:1): pid=7 sig=31 arch=40000003 syscall=41 compat=1`, true, "foreign_arch"},
		{"x32's unshare is the x32 rule's", `audit(1.000:1): pid=7 sig=31 arch=c000003e syscall=1073742096 compat=0`, true, "x32_abi"},
		{"x32 with the kernel's compat flag", `audit(1.000:1): pid=7 sig=31 arch=c000003e syscall=1073741863 compat=1`, true, "x32_abi"},
		{"a negative number has the x32 bit", `audit(1.000:1): pid=7 sig=31 arch=c000003e syscall=-1 compat=0`, true, "x32_abi"},
		{"a number outside the escape class", `audit(1.000:1): pid=7 sig=31 arch=c000003e syscall=0 compat=0`, true, "syscall 0 (arch c000003e)"},
		{"no syscall", `audit(1.000:1): pid=7 sig=31`, false, ""},
		{"not a record", `type=1326 pid=7 syscall=41`, false, ""},
		{"a pid that is not a number", `audit(1.000:1): pid=x sig=31 syscall=41`, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ok := parseSeccompRecord(tt.rec)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v (%+v)", ok, tt.ok, r)
			}
			if ok && r.PID != 7 {
				t.Errorf("pid %d, want 7", r.PID)
			}
			if ok && deniedSyscallName(r) != tt.syscall {
				t.Errorf("name %q, want %q", deniedSyscallName(r), tt.syscall)
			}
		})
	}
	for name, want := range map[string]string{"unshare": "unshare", "umount2": "umount2", "socketpair": "socketpair",
		"syscall 0 (arch c000003e)": "unknown", "": "unknown", "reboot": "unknown",
		"x32_abi": "x32_abi", "foreign_arch": "foreign_arch"} {
		if got := Label(name); got != want {
			t.Errorf("Label(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestEverySyscallOfThePolicyHasOneClassAndOneNumber(t *testing.T) {
	names, nrs := map[string]bool{}, map[int]bool{}
	for _, s := range syscallClasses {
		if names[s.name] || nrs[s.nr] {
			t.Errorf("%s (%d) is listed twice", s.name, s.nr)
		}
		names[s.name], nrs[s.nr] = true, true
		if s.when != "" && kafelArgs[s.name] == "" {
			t.Errorf("%s has a condition but no argument names", s.name)
		}
	}
	p := Policy()
	for _, want := range []string{"KILL_PROCESS { ptrace,", "ERRNO(1) { kcmp,", "ERRNO(38) { clone3,", "socket(domain, type, protocol) {"} {
		if !strings.Contains(p, want) {
			t.Errorf("policy lacks %q:\n%s", want, p)
		}
	}
}
