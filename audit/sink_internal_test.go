package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestStdoutSinkWritesTheSameLineAsTheFile(t *testing.T) {
	var out bytes.Buffer
	fixed := time.Date(2030, 1, 2, 3, 4, 5, 6, time.FixedZone("X", 3600))
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := newLog(Config{File: path, Sinks: []string{SinkFile, SinkStdout}}, &out, func() time.Time { return fixed })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	r := Record{
		ExecutionID: "e1", TenantID: "demo", Quota: Quota{Outcome: QuotaSkipped},
		Outcome: Outcome{HTTPStatus: 403, Status: "error", ErrorType: "PolicyDenied"},
	}
	if err := l.Record(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	var got Record
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("stdout line %q: %v", out.String(), err)
	}
	if !got.Time.Equal(fixed) || got.Time.Location() != time.UTC {
		t.Errorf("time %v, want %v in UTC (from the injected clock)", got.Time, fixed)
	}
	if n := bytes.Count(out.Bytes(), []byte("\n")); n != 1 {
		t.Errorf("%d newlines on stdout, want 1", n)
	}
}

func TestRotationKeepsMaxBackupsNewest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	tick := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return tick } // every rotation in the same instant: collision names
	fs, err := openFileSink(path, 300, 3, now)
	if err != nil {
		t.Fatal(err)
	}
	l := &Log{sinks: []sink{fs}, now: now}
	t.Cleanup(func() { l.Close() })
	for i := range 12 {
		r := Record{
			ExecutionID: string(rune('a' + i)), TenantID: "demo", Quota: Quota{Outcome: QuotaSkipped},
			Outcome: Outcome{HTTPStatus: 400, Status: "error", ErrorType: "BadRequest"},
		}
		if err := l.Record(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	backups, err := Backups(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(backups) != 3 {
		t.Fatalf("%d backups, want 3: %v", len(backups), backups)
	}
	// One record per file (each line is > 150 bytes): the survivors are
	// the newest three before the active one, in order.
	var ids []string
	for _, f := range append(backups, path) {
		lines, err := readRecords(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range lines {
			ids = append(ids, r.ExecutionID)
		}
	}
	if got, want := joined(ids), "ijkl"; got != want {
		t.Errorf("surviving records %q, want %q", got, want)
	}
}

func joined(s []string) string {
	var b bytes.Buffer
	for _, x := range s {
		b.WriteString(x)
	}
	return b.String()
}

func readRecords(path string) ([]Record, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Record
	for _, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		var r Record
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}
