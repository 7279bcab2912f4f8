package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/execgate/execgate/limits"
)

// readLog loads a recorded nsjail log (testdata/nsjail-logs, recorded with
// nsjail 3.6 on this project's build host; mount-eperm-synthesized.log is
// written from the message nsjail prints on hosts that refuse user-namespace
// mounts, which cannot be provoked as root here).
func readLog(t *testing.T, name string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "nsjail-logs", name))
	if err != nil {
		t.Fatal(err)
	}
	var lc logCapture
	lc.readFrom(strings.NewReader(string(data)))
	return lc.lines
}

func TestClassify(t *testing.T) {
	limits := limits.Default
	okEnv := `{"result":{"ok":true},"protocol_version":1,"status":"ok","logs":[{"level":"info","message":"hi"}]}`
	tests := []struct {
		name string
		log  string // file in testdata/nsjail-logs
		o    outcome
		// want: either unavailable (with hint substring) or status/type
		unavailable string
		status      Status
		errType     string
		msg         string // substring of the error message
	}{
		{name: "a clean exit with an envelope is ok", log: "ok.log",
			o: outcome{ExitCode: 0, Envelope: []byte(okEnv)}, status: StatusOK},
		{name: "the runner's deadline is a Timeout", log: "oom-sigkill.log",
			o: outcome{ExitCode: 143, TimedOut: true}, status: StatusError, errType: ErrTimeout, msg: "time limit of 5000 ms"},
		{name: "nsjail's own time limit is a Timeout even though it is a SIGKILL", log: "time-limit.log",
			o: outcome{ExitCode: 137}, status: StatusError, errType: ErrTimeout},
		{name: "a timeout is never an OOM, even when the memory limit was also hit", log: "time-limit.log",
			o: outcome{ExitCode: 137, TimedOut: true, MemoryLimitHit: true}, status: StatusError, errType: ErrTimeout},
		{name: "a SIGKILL with a memory limit hit is a MemoryLimit", log: "oom-sigkill.log",
			o: outcome{ExitCode: 137, MemoryLimitHit: true}, status: StatusError, errType: ErrMemoryLimit, msg: "256 MiB"},
		{name: "an OOM is never a Timeout: no deadline, no time-limit line", log: "oom-sigkill.log",
			o: outcome{ExitCode: 137, MemoryLimitHit: true, CPUMS: 10}, status: StatusError, errType: ErrMemoryLimit},
		{name: "the harness's MemoryError envelope is a MemoryLimit when the cgroup recorded the limit hit", log: "ok.log",
			o:      outcome{ExitCode: 0, MemoryLimitHit: true, Envelope: []byte(`{"result":null,"protocol_version":1,"status":"error","logs":[],"error":{"type":"MemoryLimit","message":"the tool ran out of memory (MemoryError)"}}`)},
			status: StatusError, errType: ErrMemoryLimit},
		{name: "SIGXCPU is a CPULimit", log: "ok.log",
			o: outcome{ExitCode: 128 + int(syscall.SIGXCPU)}, status: StatusError, errType: ErrCPULimit},
		{name: "a SIGKILL after the CPU limit (hard RLIMIT_CPU) is a CPULimit", log: "oom-sigkill.log",
			o: outcome{ExitCode: 137, CPUMS: 6010}, status: StatusError, errType: ErrCPULimit},
		{name: "SIGSYS is SyscallDenied", log: "sigsys.log",
			o: outcome{ExitCode: 159}, status: StatusError, errType: ErrSyscallDenied},
		{name: "a segfault is SandboxCrashed with the nsjail log", log: "sigsegv.log",
			o: outcome{ExitCode: 139}, status: StatusError, errType: ErrSandboxCrashed, msg: "SIGSEGV"},
		{name: "an exit without an envelope is SandboxCrashed", log: "exit-3.log",
			o: outcome{ExitCode: 3}, status: StatusError, errType: ErrSandboxCrashed, msg: "status 3"},
		{name: "garbage on the result channel and a clean exit is the tool's error, not a crash", log: "ok.log",
			o: outcome{ExitCode: 0, Envelope: []byte("not json")}, status: StatusError, errType: ErrToolError, msg: "no valid envelope"},
		{name: "a clean exit without an envelope is the tool's error, not a crash", log: "ok.log",
			o: outcome{ExitCode: 0}, status: StatusError, errType: ErrToolError, msg: "status 0"},
		{name: "a harness that could not write on a closed channel is the tool's error", log: "exit-3.log",
			o: outcome{ExitCode: 71}, status: StatusError, errType: ErrToolError, msg: "closed"},
		{name: "SIGSYS names the syscall the kernel's audit record gave", log: "sigsys.log",
			o: outcome{ExitCode: 159, DeniedSyscall: "unshare"}, status: StatusError, errType: ErrSyscallDenied, msg: "unshare"},
		{name: "SIGSYS after a forged ok envelope is SyscallDenied", log: "sigsys.log",
			o: outcome{ExitCode: 159, Envelope: []byte(okEnv)}, status: StatusError, errType: ErrSyscallDenied},
		{name: "a segfault after a forged ok envelope is SandboxCrashed", log: "sigsegv.log",
			o: outcome{ExitCode: 139, Envelope: []byte(okEnv)}, status: StatusError, errType: ErrSandboxCrashed, msg: "SIGSEGV"},
		{name: "the hard CPU kill after a forged ok envelope is CPULimit", log: "oom-sigkill.log",
			o: outcome{ExitCode: 137, CPUMS: 6010, Envelope: []byte(okEnv)}, status: StatusError, errType: ErrCPULimit},
		{name: "a result over the output cap is OutputLimit, measured by the runner", log: "ok.log",
			o:      outcome{ExitCode: 0, Envelope: []byte(`{"result":"` + strings.Repeat("x", 1<<20) + `","protocol_version":1,"status":"ok"}`)},
			status: StatusError, errType: ErrOutputLimit, msg: "over the output cap"},
		{name: "a MemoryLimit claim the cgroup does not confirm is a ToolError", log: "ok.log",
			o:      outcome{ExitCode: 0, Envelope: []byte(`{"result":null,"protocol_version":1,"status":"error","error":{"type":"MemoryLimit","message":"the tool ran out of memory (MemoryError)"}}`)},
			status: StatusError, errType: ErrToolError, msg: "MemoryError"},
		{name: "a CPULimit claim with the CPU time used is a CPULimit", log: "ok.log",
			o:      outcome{ExitCode: 0, CPUMS: 4900, Envelope: []byte(`{"result":null,"protocol_version":1,"status":"error","error":{"type":"CPULimit","message":"the tool used more CPU time than allowed"}}`)},
			status: StatusError, errType: ErrCPULimit},
		{name: "an oversized envelope is OutputLimit naming the tenant's output_bytes, not the capture's cap", log: "ok.log",
			o:      outcome{ExitCode: 0, Envelope: []byte(`{"result":"xxxx`), EnvelopeTruncated: true},
			status: StatusError, errType: ErrOutputLimit, msg: "output limit of 1048576 bytes (output_bytes)"},
		{name: "an envelope of another protocol is ProtocolMismatch", log: "ok.log",
			o: outcome{ExitCode: 0, Envelope: []byte(`{"result":1,"protocol_version":2,"status":"ok"}`)}, status: StatusError, errType: ErrProtocolMismatch},
		{name: "an error type the harness may not claim becomes ToolError", log: "ok.log",
			o:      outcome{ExitCode: 0, Envelope: []byte(`{"result":null,"protocol_version":1,"status":"error","error":{"type":"Timeout","message":"fake"}}`)},
			status: StatusError, errType: ErrToolError, msg: `"Timeout"`},
		{name: "a forged Timeout envelope is a ToolError", log: "ok.log",
			o:      outcome{ExitCode: 0, CPUMS: 20, Envelope: []byte(`{"result":null,"protocol_version":1,"status":"error","error":{"type":"Timeout","message":"fake"}}`)},
			status: StatusError, errType: ErrToolError, msg: `"Timeout"`},
		{name: "a forged CPULimit envelope is a ToolError", log: "ok.log",
			o:      outcome{ExitCode: 0, CPUMS: 20, Envelope: []byte(`{"result":null,"protocol_version":1,"status":"error","error":{"type":"CPULimit","message":"fake"}}`)},
			status: StatusError, errType: ErrToolError, msg: `"CPULimit"`},
		{name: "a forged MemoryLimit envelope is a ToolError", log: "ok.log",
			o:      outcome{ExitCode: 0, CPUMS: 20, Envelope: []byte(`{"result":null,"protocol_version":1,"status":"error","error":{"type":"MemoryLimit","message":"fake"}}`)},
			status: StatusError, errType: ErrToolError, msg: `"MemoryLimit"`},
		{name: "a forged OutputLimit envelope is a ToolError", log: "ok.log",
			o:      outcome{ExitCode: 0, CPUMS: 20, Envelope: []byte(`{"result":null,"protocol_version":1,"status":"error","error":{"type":"OutputLimit","message":"fake"}}`)},
			status: StatusError, errType: ErrToolError, msg: `"OutputLimit"`},
		{name: "a forged SyscallDenied envelope is a ToolError", log: "ok.log",
			o:      outcome{ExitCode: 0, CPUMS: 20, Envelope: []byte(`{"result":null,"protocol_version":1,"status":"error","error":{"type":"SyscallDenied","message":"fake"}}`)},
			status: StatusError, errType: ErrToolError, msg: `"SyscallDenied"`},
		{name: "a forged SandboxCrashed envelope is a ToolError", log: "ok.log",
			o:      outcome{ExitCode: 0, CPUMS: 20, Envelope: []byte(`{"result":null,"protocol_version":1,"status":"error","error":{"type":"SandboxCrashed","message":"fake"}}`)},
			status: StatusError, errType: ErrToolError, msg: `"SandboxCrashed"`},
		{name: "a forged ProtocolMismatch envelope is a ToolError", log: "ok.log",
			o:      outcome{ExitCode: 0, CPUMS: 20, Envelope: []byte(`{"result":null,"protocol_version":1,"status":"error","error":{"type":"ProtocolMismatch","message":"fake"}}`)},
			status: StatusError, errType: ErrToolError, msg: `"ProtocolMismatch"`},
		{name: "an OOM kill in the run's cgroup is a MemoryLimit even with an ok envelope", log: "ok.log",
			o: outcome{ExitCode: 0, Envelope: []byte(okEnv), OOMKilled: true, MemoryLimitHit: true}, status: StatusError, errType: ErrMemoryLimit, msg: "killed a process"},
		{name: "an OOM kill beats a ToolError envelope", log: "ok.log",
			o:      outcome{ExitCode: 0, OOMKilled: true, Envelope: []byte(`{"result":null,"protocol_version":1,"status":"error","error":{"type":"ToolError","message":"child died"}}`)},
			status: StatusError, errType: ErrMemoryLimit},
		{name: "a charge refused at the limit without an OOM kill leaves an ok envelope ok", log: "ok.log",
			o: outcome{ExitCode: 0, Envelope: []byte(okEnv), MemoryLimitHit: true}, status: StatusOK},
		{name: "a timeout is never an OOM, even after an OOM kill", log: "time-limit.log",
			o: outcome{ExitCode: 137, TimedOut: true, OOMKilled: true}, status: StatusError, errType: ErrTimeout},
		{name: "the runner's CPU watch is a CPULimit for all processes together", log: "oom-sigkill.log",
			o: outcome{ExitCode: 143, CPUKilled: true, CPUMS: 510}, status: StatusError, errType: ErrCPULimit, msg: "all its processes together"},
		{name: "the CPU watch beats an envelope a child wrote", log: "ok.log",
			o: outcome{ExitCode: 0, CPUKilled: true, Envelope: []byte(okEnv)}, status: StatusError, errType: ErrCPULimit},
		{name: "SIGBUS from a mapping beyond /dev/shm is a MemoryLimit", log: "ok.log",
			o: outcome{ExitCode: 128 + int(syscall.SIGBUS)}, status: StatusError, errType: ErrMemoryLimit, msg: "/dev/shm"},
		{name: "a harness without its egress relay is SandboxCrashed saying so", log: "exit-3.log",
			o: outcome{ExitCode: 72}, status: StatusError, errType: ErrSandboxCrashed, msg: "egress relay"},
		{name: "a caller's deadline stops the run as a Timeout", log: "oom-sigkill.log",
			o: outcome{ExitCode: 143, Cancelled: true, CancelErr: context.DeadlineExceeded}, status: StatusError, errType: ErrTimeout, msg: "caller"},
		{name: "a caller that went away stops the run as Cancelled", log: "oom-sigkill.log",
			o: outcome{ExitCode: 143, Cancelled: true, CancelErr: context.Canceled}, status: StatusError, errType: ErrCancelled, msg: "went away"},
		{name: "a cancel request stops the run as Cancelled saying so", log: "oom-sigkill.log",
			o: outcome{ExitCode: 143, Cancelled: true, CancelErr: ErrCancelledByCaller}, status: StatusError, errType: ErrCancelled, msg: "cancelled by its caller"},
		{name: "a seccomp policy that does not compile is unavailable", log: "seccomp-compile.log",
			o: outcome{ExitCode: 255}, unavailable: "seccomp policy"},
		{name: "a missing cgroup parent is unavailable with the cgroup hint", log: "cgroup-parent-missing.log",
			o: outcome{ExitCode: 255}, unavailable: "cgroups"},
		{name: "a missing interpreter is unavailable with the rootfs hint", log: "execve-missing.log",
			o: outcome{ExitCode: 255}, unavailable: "execgate rootfs build"},
		{name: "an unsearchable rootfs path is unavailable with the chmod hint", log: "rootfs-not-searchable.log",
			o: outcome{ExitCode: 255}, unavailable: "chmod o+x"},
		{name: "a host refusing user-namespace mounts is unavailable with the privileges hint", log: "mount-eperm-synthesized.log",
			o: outcome{ExitCode: 255}, unavailable: "seccomp=unconfined"},
		{name: "a child's own exit status 255 after it ran is not a setup failure", log: "ok.log",
			o: outcome{ExitCode: 255}, status: StatusError, errType: ErrSandboxCrashed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.o
			o.Log = readLog(t, tt.log)
			o.Limits = limits
			v := classify(o)
			if tt.unavailable != "" {
				if v.Unavailable == nil {
					t.Fatalf("want unavailable, got %+v %+v", v, v.Error)
				}
				if !strings.Contains(v.Unavailable.Hint, tt.unavailable) {
					t.Errorf("hint %q lacks %q", v.Unavailable.Hint, tt.unavailable)
				}
				if len(v.Unavailable.Log) == 0 {
					t.Errorf("unavailable error carries no nsjail log")
				}
				return
			}
			if v.Unavailable != nil {
				t.Fatalf("unexpected unavailable: %v\n%s", v.Unavailable, v.Unavailable.Detail())
			}
			gotType := ""
			if v.Error != nil {
				gotType = v.Error.Type
			}
			if v.Status != tt.status || gotType != tt.errType {
				t.Fatalf("got %s/%q (%+v), want %s/%q", v.Status, gotType, v.Error, tt.status, tt.errType)
			}
			if tt.msg != "" && !strings.Contains(v.Error.Message, tt.msg) {
				t.Errorf("message %q lacks %q", v.Error.Message, tt.msg)
			}
			if gotType == ErrSandboxCrashed && !strings.Contains(v.Error.Traceback, "nsjail log:") {
				t.Errorf("SandboxCrashed without the nsjail log in its traceback")
			}
		})
	}
}

func TestEnvelopeLogsAreCapped(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"result":1,"protocol_version":1,"status":"ok","logs":[`)
	for i := 0; i < maxEnvelopeLogs+5; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"level":"shout","message":"m"}`)
	}
	b.WriteString("]}")
	v := classify(outcome{Envelope: []byte(b.String()), Log: []string{"Executing '/usr/bin/python3'"}, Limits: limits.Default})
	if len(v.Logs) != maxEnvelopeLogs+1 || v.Logs[0].Level != "info" || !strings.Contains(v.Logs[maxEnvelopeLogs].Message, "5 log lines dropped") {
		t.Errorf("logs: %d lines, first %+v, last %+v", len(v.Logs), v.Logs[0], v.Logs[len(v.Logs)-1])
	}
}

func TestLogsOfAnOverruledEnvelopeAreCappedToo(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"result":1,"protocol_version":1,"status":"ok","logs":[`)
	for i := 0; i < maxEnvelopeLogs+5; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"level":"shout","message":%q}`, strings.Repeat("m", maxEnvelopeLogLine+10))
	}
	b.WriteString("]}")
	// A forged ok envelope, then the wall deadline: the Timeout keeps the
	// envelope's logs, within the same caps.
	v := classify(outcome{ExitCode: 143, TimedOut: true, Envelope: []byte(b.String()), Log: []string{"Executing '/usr/bin/python3'"}, Limits: limits.Default})
	if v.Error == nil || v.Error.Type != ErrTimeout {
		t.Fatalf("verdict %+v", v.Error)
	}
	enc, err := json.Marshal(v.Logs)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Logs) > maxEnvelopeLogs+1 || len(enc) > maxEnvelopeLogBytes+1024 || v.Logs[0].Level != "info" || len(v.Logs[0].Message) > maxEnvelopeLogLine+len("…[truncated]") {
		t.Errorf("logs: %d lines, %d bytes encoded, first level %q, first length %d", len(v.Logs), len(enc), v.Logs[0].Level, len(v.Logs[0].Message))
	}
	if last := v.Logs[len(v.Logs)-1]; !strings.Contains(last.Message, "log lines dropped") {
		t.Errorf("no drop notice; last line %+v", last)
	}
}

func TestEnvelopeLogsAreCappedInEncodedBytes(t *testing.T) {
	// Lines of raw control bytes, each encoding to six times its length:
	// 1000 lines of 1 KiB are 6 MiB once encoded. (Small enough not to
	// raise this package's peak RSS, which a runner test measures.)
	line, _ := json.Marshal(LogLine{Level: "info", Message: strings.Repeat("\x01", 1<<10)})
	var b strings.Builder
	b.WriteString(`{"result":1,"protocol_version":1,"status":"ok","logs":[`)
	for i := 0; i < maxEnvelopeLogs; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(line)
	}
	b.WriteString("]}")
	v := classify(outcome{Envelope: []byte(b.String()), Log: []string{"Executing '/usr/bin/python3'"}, Limits: limits.Default})
	enc, err := json.Marshal(v.Logs)
	if err != nil {
		t.Fatal(err)
	}
	if len(enc) > maxEnvelopeLogBytes+1024 {
		t.Errorf("logs encode to %d bytes, cap %d", len(enc), maxEnvelopeLogBytes)
	}
	if last := v.Logs[len(v.Logs)-1]; !strings.Contains(last.Message, "log lines dropped") {
		t.Errorf("no drop notice; last line %+v", last)
	}
}

func TestAResultOverTheCapIsOutputLimitWhoeverWroteTheEnvelope(t *testing.T) {
	lim := limits.Default
	lim.OutputBytes = 100
	env := `{"protocol_version":1,"status":"ok","result":"` + strings.Repeat("x", 200) + `"}`
	v := classify(outcome{Envelope: []byte(env), Log: []string{"Executing '/usr/bin/python3'"}, Limits: lim})
	if v.Status != StatusError || v.Error == nil || v.Error.Type != ErrOutputLimit || v.Result != nil {
		t.Errorf("verdict %+v", v)
	}
}
