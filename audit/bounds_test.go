package audit_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/execgate/execgate/audit"
	"github.com/execgate/execgate/audit/audittest"
	"github.com/execgate/execgate/sandbox"
)

// Issue #10 class 3: a run's egress attempts are chosen by the tool. 1000
// attempts, 40 of them with a 500 KB host repeated in the reason (what the
// proxy used to store), must leave a record with at most
// sandbox.MaxEgressAttempts clipped attempts and a count of the rest, within
// MaxRecordBytes, valid against the schema.
func TestRecordBoundsEgressAttempts(t *testing.T) {
	huge := strings.Repeat("a", 500<<10) + ".example.com"
	r := records()["ok run"]
	r.Egress = nil
	for i := range 1000 {
		a := sandbox.EgressAttempt{Host: "evil.example.com", Port: 443, Reason: "not in this run's egress allow-list"}
		if i < 40 {
			a.Host, a.Reason = huge, huge+":443 is not in this run's egress allow-list"
		}
		r.Egress = append(r.Egress, a)
	}
	l, path := newFileLog(t, audit.Config{})
	if err := l.Record(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	lines := audittest.ReadFile(t, path) // validates against the schema
	if len(lines) != 1 {
		t.Fatalf("got %d lines, want 1", len(lines))
	}
	got := lines[0].Record
	if n := len(lines[0].Raw); n > audit.MaxRecordBytes {
		t.Fatalf("the record is %d bytes, over MaxRecordBytes %d", n, audit.MaxRecordBytes)
	}
	if len(got.Egress) != sandbox.MaxEgressAttempts || got.EgressDropped != 1000-sandbox.MaxEgressAttempts {
		t.Fatalf("kept %d attempts, egress_dropped %d; want %d and %d", len(got.Egress), got.EgressDropped, sandbox.MaxEgressAttempts, 1000-sandbox.MaxEgressAttempts)
	}
	for _, a := range got.Egress {
		if len(a.Host) > sandbox.MaxEgressFieldBytes || len(a.Reason) > sandbox.MaxEgressFieldBytes {
			t.Fatalf("attempt not clipped: host %d bytes, reason %d bytes", len(a.Host), len(a.Reason))
		}
	}
	if got.Truncated {
		t.Error("a record that fits once bounded must not be marked truncated")
	}
}

// Whatever else grew (a recorded source past the gateway's default cap, a
// huge subject claim, policy reasons), the written record never exceeds
// MaxRecordBytes, keeps what identifies the request, and says it was cut.
func TestRecordNeverExceedsMaxRecordBytes(t *testing.T) {
	r := records()["tool error with source recorded"]
	big := strings.Repeat("\x01", 2<<20) // every byte a 6-byte JSON escape
	r.Source = big
	r.Subject = big
	r.Roles = []string{big, big, big}
	d := *r.Decision
	for range 1000 {
		d.Reasons = append(d.Reasons, big[:4<<10])
	}
	r.Decision = &d
	args, _ := json.Marshal(map[string]string{"q": big[:64<<10]})
	for range 200 { // code mode with record_args: 200 calls of 384 KiB arguments once encoded
		r.ToolCalls = append(r.ToolCalls, sandbox.ToolCall{Tool: "search." + big[:1<<10], Server: "search", Outcome: "ok", Args: args})
	}
	l, path := newFileLog(t, audit.Config{})
	if err := l.Record(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	lines := audittest.ReadFile(t, path)
	if len(lines) != 1 {
		t.Fatalf("got %d lines, want 1", len(lines))
	}
	got := lines[0].Record
	if len(got.ToolCalls) == 0 || got.ToolCalls[0].Args != nil || len(got.ToolCalls)+got.ToolCallsDropped != 200 {
		t.Fatalf("cut record's tool calls: %d kept (args %d bytes), %d dropped; want some kept without args and 200 counted",
			len(got.ToolCalls), len(got.ToolCalls[0].Args), got.ToolCallsDropped)
	}
	if n := len(lines[0].Raw); n > audit.MaxRecordBytes {
		t.Fatalf("the record is %d bytes, over MaxRecordBytes %d", n, audit.MaxRecordBytes)
	}
	if !got.Truncated || got.Source != "" || got.SourceSHA256 != r.SourceSHA256 || got.ExecutionID != r.ExecutionID || got.Outcome != r.Outcome {
		t.Fatalf("cut record lost its identity or its mark: truncated=%t source=%d bytes sha=%q id=%q outcome=%+v",
			got.Truncated, len(got.Source), got.SourceSHA256, got.ExecutionID, got.Outcome)
	}
}

// Issue #24: a request's input files and a run's artifacts are recorded
// (path or name, bytes, SHA-256, media type), bounded like the rest: at
// most audit.MaxFiles of each, the rest counted, paths clipped; valid
// against the schema.
func TestRecordBoundsFilesAndArtifacts(t *testing.T) {
	r := records()["ok run"]
	sum := strings.Repeat("ab", 32)
	for i := range 150 {
		r.Files = append(r.Files, audit.File{Path: "data/" + strings.Repeat("p", 2000) + string(rune('a'+i%26)), Bytes: int64(i), SHA256: sum})
		r.Artifacts = append(r.Artifacts, audit.Artifact{Name: "chart-" + string(rune('a'+i%26)) + ".png", Bytes: 10, SHA256: sum, MIME: "image/png"})
	}
	r.ArtifactsRefused = 7
	l, path := newFileLog(t, audit.Config{})
	if err := l.Record(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	lines := audittest.ReadFile(t, path) // validates against the schema
	got := lines[0].Record
	if len(got.Files) != audit.MaxFiles || got.FilesDropped != 50 || len(got.Artifacts) != audit.MaxFiles || got.ArtifactsDropped != 50 || got.ArtifactsRefused != 7 {
		t.Fatalf("files %d (+%d), artifacts %d (+%d), refused %d", len(got.Files), got.FilesDropped, len(got.Artifacts), got.ArtifactsDropped, got.ArtifactsRefused)
	}
	for _, f := range got.Files {
		if len(f.Path) > 1024 || f.SHA256 != sum {
			t.Fatalf("file not clipped: %d bytes", len(f.Path))
		}
	}
	if got.Artifacts[0].Name != "chart-a.png" || got.Artifacts[0].MIME != "image/png" {
		t.Errorf("artifact %+v", got.Artifacts[0])
	}
}
