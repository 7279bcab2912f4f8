package audit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/execgate/execgate/audit"
	"github.com/execgate/execgate/sandbox"
)

// writeRecords writes n records through a real Log: record i is tenant
// demo when i is even, acme otherwise; every third one is a ToolError;
// times step one minute from t0.
func writeRecords(t *testing.T, n int, t0 time.Time, pad int) (*audit.Log, string) {
	t.Helper()
	l, path := newFileLog(t, audit.Config{})
	for i := 0; i < n; i++ {
		r := audit.Record{
			Time:        t0.Add(time.Duration(i) * time.Minute),
			ExecutionID: fmt.Sprintf("run-%04d", i), TenantID: map[bool]string{true: "demo", false: "acme"}[i%2 == 0],
			Subject: "s", SourceSHA256: sha(strings.Repeat("x", pad)), Source: strings.Repeat("x", pad),
			Quota:   audit.Quota{Outcome: audit.QuotaAdmitted},
			Outcome: audit.Outcome{HTTPStatus: 200, Status: "ok"},
		}
		if i%3 == 0 {
			r.Outcome = audit.Outcome{HTTPStatus: 200, Status: "error", ErrorType: sandbox.ErrToolError}
		}
		if err := l.Record(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	return l, path
}

func ids(rs []audit.Record) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ExecutionID)
	}
	return out
}

func TestSearchReturnsMatchingRecordsNewestFirst(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	l, _ := writeRecords(t, 30, t0, 0)
	tests := []struct {
		name string
		q    audit.Query
		want []string
	}{
		{"a limit keeps the newest", audit.Query{Limit: 3}, []string{"run-0029", "run-0028", "run-0027"}},
		{"by tenant and error type", audit.Query{Tenants: []string{"demo"}, ErrorType: sandbox.ErrToolError, Limit: 3}, []string{"run-0024", "run-0018", "run-0012"}},
		{"by status ok", audit.Query{Tenants: []string{"acme"}, Status: "ok", Limit: 2}, []string{"run-0029", "run-0025"}},
		{"by execution id", audit.Query{ExecutionID: "run-0007"}, []string{"run-0007"}},
		{"since drops older records", audit.Query{Since: t0.Add(27 * time.Minute)}, []string{"run-0029", "run-0028", "run-0027"}},
		{"no match", audit.Query{Tenants: []string{"nosuch"}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := l.Search(context.Background(), tc.q)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(res.Records); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			if res.Skipped != 0 || res.ScanLimitReached {
				t.Fatalf("skipped %d, scan limit reached %v", res.Skipped, res.ScanLimitReached)
			}
		})
	}
}

func TestSearchLimitIsClippedTo200(t *testing.T) {
	l, _ := writeRecords(t, 230, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), 0)
	res, err := l.Search(context.Background(), audit.Query{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != audit.MaxSearchLimit {
		t.Fatalf("got %d records, want %d", len(res.Records), audit.MaxSearchLimit)
	}
}

// Records larger than one read chunk (64 KiB) join across chunks, and the
// scan never reads more than ScanBytes from the end.
func TestSearchReadsAtMostScanBytesAcrossChunks(t *testing.T) {
	l, path := writeRecords(t, 12, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), 100<<10)
	res, err := l.Search(context.Background(), audit.Query{Limit: 200})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 12 || res.Skipped != 0 || res.ScanLimitReached {
		t.Fatalf("whole file: %d records, %d skipped, limit reached %v", len(res.Records), res.Skipped, res.ScanLimitReached)
	}
	st, _ := os.Stat(path)
	res, err = audit.SearchFile(context.Background(), path, audit.Query{Limit: 200, ScanBytes: 350 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if res.ScannedBytes != 350<<10 || !res.ScanLimitReached {
		t.Fatalf("scanned %d of %d bytes, limit reached %v; want 350 KiB and true", res.ScannedBytes, st.Size(), res.ScanLimitReached)
	}
	// ~100 KiB per record: the last 3 whole ones fit, the cut one is dropped.
	if got := ids(res.Records); strings.Join(got, ",") != "run-0011,run-0010,run-0009" || res.Skipped != 0 {
		t.Fatalf("got %v (skipped %d)", got, res.Skipped)
	}
}

func TestSearchSkipsALineStillBeingWrittenAndGarbage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	rec, _ := json.Marshal(audit.Record{ExecutionID: "a", TenantID: "demo", Outcome: audit.Outcome{Status: "ok"}})
	body := "not json\n" + string(rec) + "\n" + `{"execution_id":"partial`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := audit.SearchFile(context.Background(), path, audit.Query{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(res.Records); strings.Join(got, ",") != "a" || res.Skipped != 1 {
		t.Fatalf("got %v, skipped %d; want [a], 1", got, res.Skipped)
	}
	if res, err := audit.SearchFile(context.Background(), filepath.Join(t.TempDir(), "none.jsonl"), audit.Query{}); err != nil || len(res.Records) != 0 {
		t.Fatalf("missing file: %v %v", res, err)
	}
}

func TestSearchWithoutAFileSinkSaysSo(t *testing.T) {
	l, err := audit.New(audit.Config{Sinks: []string{audit.SinkStdout}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Search(context.Background(), audit.Query{}); !errors.Is(err, audit.ErrNoFile) {
		t.Fatalf("got %v, want ErrNoFile", err)
	}
}
