package audit_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/execgate/execgate/audit"
	"github.com/execgate/execgate/audit/audittest"
	"github.com/execgate/execgate/sandbox"
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

const probe = "async def run(args, context):\n    return {\"ok\": True}\n"

// records covers every shape the gateway writes.
func records() map[string]audit.Record {
	allow := &audit.Decision{
		ID: "dec-1", Allow: true, NetworkAccess: "proxy",
		Limits: sandbox.Limits{TimeoutMS: 5000, CPUMS: 5000, MemoryMB: 256, Pids: 32, OutputBytes: 1 << 20, TmpMB: 64},
		Egress: []string{"*.example.com:443"},
	}
	return map[string]audit.Record{
		"ok run": {
			ExecutionID: "ok-1", TenantID: "demo", Subject: "alice", Roles: []string{"executor"},
			Decision: allow, Quota: audit.Quota{Outcome: audit.QuotaAdmitted},
			Language: "python", SourceSHA256: sha(probe),
			Outcome: audit.Outcome{HTTPStatus: 200, Status: "ok"},
			Usage:   sandbox.Usage{WallMS: 41, CPUMS: 30, PeakMemoryKB: 9000},
			Egress: []sandbox.EgressAttempt{
				{Host: "api.example.com", Port: 443, Allowed: true, IP: "93.184.216.34"},
				{Host: "169.254.169.254", Port: 80, Allowed: false, Reason: "metadata address"},
			},
			Secrets: []string{"API_KEY", "db_password"},
		},
		"javascript run with a package environment": {
			ExecutionID: "env-1", TenantID: "demo", Subject: "alice", Roles: []string{"executor"},
			Decision: allow, Quota: audit.Quota{Outcome: audit.QuotaAdmitted},
			Language: "javascript", EnvironmentID: sha("alpha==1.0"), SourceSHA256: sha("export function run() {}"),
			Outcome: audit.Outcome{HTTPStatus: 200, Status: "ok"},
			Usage:   sandbox.Usage{WallMS: 60, CPUMS: 40, PeakMemoryKB: 30000},
		},
		"tool error with source recorded": {
			ExecutionID: "err-1", TenantID: "demo", Subject: "alice", Roles: []string{"executor"},
			Decision: allow, Quota: audit.Quota{Outcome: audit.QuotaAdmitted},
			SourceSHA256: sha("raise"), Source: "def run(a, c):\n    raise ValueError('x')\n",
			Outcome: audit.Outcome{HTTPStatus: 200, Status: "error", ErrorType: sandbox.ErrToolError},
			Usage:   sandbox.Usage{WallMS: 20, CPUMS: 12, PeakMemoryKB: 8000},
		},
		"escape syscall denied": {
			ExecutionID: "sys-1", TenantID: "demo", Subject: "mallory", Roles: []string{"executor"},
			Decision: allow, Quota: audit.Quota{Outcome: audit.QuotaAdmitted},
			SourceSHA256: sha("unshare"),
			Outcome:      audit.Outcome{HTTPStatus: 200, Status: "error", ErrorType: sandbox.ErrSyscallDenied, Syscall: "unshare"},
			Usage:        sandbox.Usage{WallMS: 30, CPUMS: 20, PeakMemoryKB: 7000},
		},
		"policy denied": {
			ExecutionID: "deny-1", TenantID: "demo", Subject: "bob", Roles: []string{"executor"},
			Decision: &audit.Decision{ID: "dec-2", Allow: false, Reasons: []string{"network host is admin-only"}},
			Quota:    audit.Quota{Outcome: audit.QuotaSkipped}, SourceSHA256: sha(probe),
			Outcome: audit.Outcome{HTTPStatus: 403, Status: "error", ErrorType: "PolicyDenied"},
		},
		"quota exceeded": {
			ExecutionID: "q-1", TenantID: "demo", Subject: "bob",
			Decision: allow, Quota: audit.Quota{Outcome: audit.QuotaExceeded, Kind: "rate", RetryAfterMS: 1500},
			SourceSHA256: sha(probe),
			Outcome:      audit.Outcome{HTTPStatus: 429, Status: "error", ErrorType: "QuotaExceeded"},
		},
		"bad request before policy": {
			ExecutionID: "bad-1", TenantID: "demo", Subject: "bob",
			Quota:   audit.Quota{Outcome: audit.QuotaSkipped},
			Outcome: audit.Outcome{HTTPStatus: 400, Status: "error", ErrorType: "BadRequest"},
		},
		"refused requests limited (one record standing for many)": {
			ExecutionID: "lim-1", TenantID: "demo", Subject: "mallory", Roles: []string{"executor"},
			Quota:           audit.Quota{Outcome: audit.QuotaExceeded, Kind: "refusals", RetryAfterMS: 1000},
			Outcome:         audit.Outcome{HTTPStatus: 429, Status: "error", ErrorType: "QuotaExceeded"},
			RefusalsDropped: 3900,
		},
	}
}

func newFileLog(t *testing.T, cfg audit.Config) (*audit.Log, string) {
	t.Helper()
	if cfg.File == "" {
		cfg.File = filepath.Join(t.TempDir(), "audit.jsonl")
	}
	l, err := audit.New(cfg)
	if err != nil {
		t.Fatalf("audit.New: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l, cfg.File
}

func TestRecordsValidateAgainstSchemaAndRoundTrip(t *testing.T) {
	for name, want := range records() {
		t.Run(name, func(t *testing.T) {
			l, path := newFileLog(t, audit.Config{})
			if err := l.Record(context.Background(), want); err != nil {
				t.Fatalf("Record: %v", err)
			}
			lines := audittest.ReadFile(t, path) // validates every line
			if len(lines) != 1 {
				t.Fatalf("got %d lines, want 1", len(lines))
			}
			got := lines[0].Record
			if got.SchemaVersion != audit.SchemaVersion || got.Time.IsZero() {
				t.Errorf("schema_version %d time %v: want defaults filled", got.SchemaVersion, got.Time)
			}
			if got.ExecutionID != want.ExecutionID || got.Outcome != want.Outcome || got.Quota != want.Quota ||
				got.Source != want.Source || got.SourceSHA256 != want.SourceSHA256 || got.Usage != want.Usage ||
				got.Language != want.Language || got.EnvironmentID != want.EnvironmentID ||
				len(got.Egress) != len(want.Egress) || (got.Decision == nil) != (want.Decision == nil) {
				t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
			}
			for _, key := range []string{`"roles":[`, `"egress":[`} {
				if !bytes.Contains(lines[0].Raw, []byte(key)) {
					t.Errorf("line lacks %s (nil lists must encode as []): %s", key, lines[0].Raw)
				}
			}
		})
	}
}

func TestSchemaRejectsBrokenRecords(t *testing.T) {
	sch := audittest.Schema(t)
	var base map[string]any
	good := records()["ok run"]
	d := *good.Decision
	d.Reasons = []string{}
	good.Decision = &d
	good.Roles = []string{"executor"}
	good.SchemaVersion, good.Time, good.TraceID, good.SpanID = 1, time.Now().UTC(), strings.Repeat("a", 32), strings.Repeat("b", 16)
	raw, _ := json.Marshal(good)
	if err := audittest.ValidateLine(sch, raw); err != nil {
		t.Fatalf("the good record must validate: %v", err)
	}
	tests := []struct {
		name   string
		mutate func(m map[string]any)
	}{
		{"missing execution_id", func(m map[string]any) { delete(m, "execution_id") }},
		{"empty tenant_id", func(m map[string]any) { m["tenant_id"] = "" }},
		{"unknown field", func(m map[string]any) { m["args"] = "secret" }},
		{"wrong schema_version", func(m map[string]any) { m["schema_version"] = 2 }},
		{"time not a date-time", func(m map[string]any) { m["time"] = "yesterday" }},
		{"source_sha256 not hex", func(m map[string]any) { m["source_sha256"] = "xyz" }},
		{"language unknown", func(m map[string]any) { m["language"] = "ruby" }},
		{"environment_id not an id", func(m map[string]any) { m["environment_id"] = "../../etc" }},
		{"trace_id too short", func(m map[string]any) { m["trace_id"] = "abc" }},
		{"status unknown", func(m map[string]any) { m["outcome"].(map[string]any)["status"] = "maybe" }},
		{"error without error_type", func(m map[string]any) { m["outcome"].(map[string]any)["status"] = "error" }},
		{"ok with error_type", func(m map[string]any) { m["outcome"].(map[string]any)["error_type"] = "ToolError" }},
		{"quota outcome unknown", func(m map[string]any) { m["quota"].(map[string]any)["outcome"] = "maybe" }},
		{"negative usage", func(m map[string]any) { m["usage"].(map[string]any)["cpu_ms"] = -1 }},
		{"decision without id", func(m map[string]any) { delete(m["decision"].(map[string]any), "id") }},
		{"egress port out of range", func(m map[string]any) { m["egress"].([]any)[0].(map[string]any)["port"] = 70000 }},
		{"roles null", func(m map[string]any) { m["roles"] = nil }},
		{"syscall on an ok run", func(m map[string]any) { m["outcome"].(map[string]any)["syscall"] = "unshare" }},
		{"syscall on another error type", func(m map[string]any) {
			o := m["outcome"].(map[string]any)
			o["status"], o["error_type"], o["syscall"] = "error", "ToolError", "unshare"
		}},
		{"a secret that is not a name", func(m map[string]any) { m["secrets"] = []any{"API_KEY", "sk_live value"} }},
		{"too many secrets", func(m map[string]any) {
			var names []any
			for i := range 17 {
				names = append(names, fmt.Sprintf("S%d", i))
			}
			m["secrets"] = names
		}},
		{"syscall not a name", func(m map[string]any) {
			o := m["outcome"].(map[string]any)
			o["status"], o["error_type"], o["syscall"] = "error", "SyscallDenied", "unshare; rm -rf /"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base = nil
			if err := json.Unmarshal(raw, &base); err != nil {
				t.Fatal(err)
			}
			tt.mutate(base)
			bad, _ := json.Marshal(base)
			if err := audittest.ValidateLine(sch, bad); err == nil {
				t.Errorf("schema accepted %s", bad)
			}
		})
	}
}

func TestRecordRefusesInvalidRecordNamingTheField(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(r *audit.Record)
		field  string
	}{
		{"no execution id", func(r *audit.Record) { r.ExecutionID = "" }, "execution_id"},
		{"no tenant", func(r *audit.Record) { r.TenantID = "" }, "tenant_id"},
		{"no quota outcome", func(r *audit.Record) { r.Quota.Outcome = "" }, "quota.outcome"},
		{"bad quota outcome", func(r *audit.Record) { r.Quota.Outcome = "ok" }, "quota.outcome"},
		{"bad status", func(r *audit.Record) { r.Outcome.Status = "fine" }, "outcome.status"},
		{"error without type", func(r *audit.Record) { r.Outcome.Status = "error" }, "outcome.error_type"},
		{"no http status", func(r *audit.Record) { r.Outcome.HTTPStatus = 0 }, "outcome.http_status"},
		{"uppercase sha", func(r *audit.Record) { r.SourceSHA256 = strings.ToUpper(r.SourceSHA256) }, "source_sha256"},
		{"decision without id", func(r *audit.Record) { r.Decision = &audit.Decision{} }, "decision.id"},
		{"bad trace id", func(r *audit.Record) { r.TraceID = "nope" }, "trace_id"},
		{"future schema version", func(r *audit.Record) { r.SchemaVersion = 9 }, "schema_version"},
		{"syscall without SyscallDenied", func(r *audit.Record) { r.Outcome.Syscall = "unshare" }, "outcome.syscall"},
		{"a secret's value where its name goes", func(r *audit.Record) { r.Secrets = []string{"sk_live value"} }, "secrets[0]"},
		{"unknown language", func(r *audit.Record) { r.Language = "ruby" }, "language"},
		{"environment id not an id", func(r *audit.Record) { r.EnvironmentID = "latest" }, "environment_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, path := newFileLog(t, audit.Config{})
			r := records()["ok run"]
			tt.mutate(&r)
			err := l.Record(context.Background(), r)
			if !errors.Is(err, audit.ErrInvalidRecord) {
				t.Fatalf("Record = %v, want ErrInvalidRecord", err)
			}
			if !strings.Contains(err.Error(), tt.field+":") {
				t.Errorf("error %q does not name %s", err, tt.field)
			}
			if data, _ := os.ReadFile(path); len(data) != 0 {
				t.Errorf("an invalid record was written: %s", data)
			}
		})
	}
}

func TestRecordTakesTraceIDsFromContext(t *testing.T) {
	l, path := newFileLog(t, audit.Config{})
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled,
	}))
	if err := l.Record(ctx, records()["ok run"]); err != nil {
		t.Fatal(err)
	}
	explicit := records()["policy denied"]
	explicit.TraceID, explicit.SpanID = strings.Repeat("1", 32), strings.Repeat("2", 16)
	if err := l.Record(ctx, explicit); err != nil {
		t.Fatal(err)
	}
	lines := audittest.ReadFile(t, path)
	if got := lines[0].Record; got.TraceID != tid.String() || got.SpanID != sid.String() {
		t.Errorf("trace %s span %s, want %s %s from ctx", got.TraceID, got.SpanID, tid, sid)
	}
	if got := lines[1].Record; got.TraceID != explicit.TraceID || got.SpanID != explicit.SpanID {
		t.Errorf("explicit ids were overwritten: %s %s", got.TraceID, got.SpanID)
	}
}

func TestRecordIsWrittenEvenWhenContextIsCancelled(t *testing.T) {
	l, path := newFileLog(t, audit.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Record(ctx, records()["ok run"]); err != nil {
		t.Fatalf("Record with a cancelled ctx: %v", err)
	}
	if n := len(audittest.ReadFile(t, path)); n != 1 {
		t.Fatalf("%d records, want 1", n)
	}
}

func TestConcurrentRecordsProduceIntactLines(t *testing.T) {
	l, path := newFileLog(t, audit.Config{})
	const workers, each = 16, 40
	big := strings.Repeat("x = 1\n", 2000) // 12 KB lines: larger than a pipe buffer
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				r := records()["tool error with source recorded"]
				r.ExecutionID = fmt.Sprintf("w%d-%d", w, i)
				r.Source = big
				if err := l.Record(context.Background(), r); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Record: %v", err)
	}
	lines := audittest.ReadFile(t, path)
	if len(lines) != workers*each {
		t.Fatalf("%d lines, want %d", len(lines), workers*each)
	}
	seen := map[string]bool{}
	for _, ln := range lines {
		if seen[ln.Record.ExecutionID] {
			t.Fatalf("duplicate record %s", ln.Record.ExecutionID)
		}
		seen[ln.Record.ExecutionID] = true
		if ln.Record.Source != big {
			t.Fatalf("%s: source damaged", ln.Record.ExecutionID)
		}
	}
}

func TestRotationAtMaxSizeKeepsEveryRecord(t *testing.T) {
	l, path := newFileLog(t, audit.Config{MaxSizeMB: 1, MaxBackups: -1})
	src := strings.Repeat("y", 300<<10) // four records cross 1 MiB
	const n = 7
	for i := range n {
		r := records()["tool error with source recorded"]
		r.ExecutionID = fmt.Sprintf("rot-%d", i)
		r.Source = src
		if err := l.Record(context.Background(), r); err != nil {
			t.Fatalf("Record %d: %v", i, err)
		}
	}
	backups, err := audit.Backups(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(backups) != 2 {
		t.Fatalf("%d backups %v, want 2 (3+3 records, then 1 in the active file)", len(backups), backups)
	}
	for _, f := range append(backups, path) {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 1<<20 {
			t.Errorf("%s is %d bytes, over the 1 MiB cap", f, st.Size())
		}
	}
	lines := audittest.ReadFile(t, path)
	if len(lines) != n {
		t.Fatalf("%d records across files, want %d", len(lines), n)
	}
	for i, ln := range lines {
		if want := fmt.Sprintf("rot-%d", i); ln.Record.ExecutionID != want {
			t.Errorf("record %d is %s, want %s (backups out of order?)", i, ln.Record.ExecutionID, want)
		}
	}
}

func TestSecondLogOnTheSameFileIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	first, _ := newFileLog(t, audit.Config{File: path})
	if _, err := audit.New(audit.Config{File: path}); !errors.Is(err, audit.ErrLocked) {
		t.Fatalf("second New = %v, want ErrLocked", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if err := first.Record(context.Background(), records()["ok run"]); !errors.Is(err, audit.ErrClosed) {
		t.Fatalf("Record after Close = %v, want ErrClosed", err)
	}
	second, err := audit.New(audit.Config{File: path})
	if err != nil {
		t.Fatalf("New after Close: %v", err)
	}
	second.Close()
}

func TestReopenDropsATornLastLine(t *testing.T) {
	tests := []struct {
		name string
		tail string
	}{
		{"half a record after good ones", `{"schema_version":1,"execution_id":"to`},
		{"only a torn record", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.jsonl")
			if tt.tail != "" {
				l, _ := newFileLog(t, audit.Config{File: path})
				if err := l.Record(context.Background(), records()["ok run"]); err != nil {
					t.Fatal(err)
				}
				l.Close()
				appendFile(t, path, tt.tail)
			} else {
				appendFile(t, path, strings.Repeat(`{"torn":`, 20000)) // no newline at all, > one read chunk
			}
			l, _ := newFileLog(t, audit.Config{File: path})
			if err := l.Record(context.Background(), records()["policy denied"]); err != nil {
				t.Fatal(err)
			}
			lines := audittest.ReadFile(t, path) // fails on any invalid line
			if got := lines[len(lines)-1].Record.ExecutionID; got != "deny-1" {
				t.Errorf("last record %s, want deny-1", got)
			}
		})
	}
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	tests := []struct {
		name string
		cfg  audit.Config
		want string
	}{
		{"unknown sink", audit.Config{File: "/tmp/x", Sinks: []string{"kafka"}}, `audit.sinks: "kafka"`},
		{"sink twice", audit.Config{File: "/tmp/x", Sinks: []string{"file", "file"}}, "listed twice"},
		{"file sink without file", audit.Config{Sinks: []string{"file"}}, "audit.file"},
		{"default sink without file", audit.Config{}, "audit.file"},
		{"negative size", audit.Config{File: "/tmp/x", MaxSizeMB: -1}, "audit.max_size_mb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := audit.New(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
