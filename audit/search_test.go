package audit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
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

// Issue #23 item 10: one tenant's volume cannot hide another's records.
// Tenant b writes 22 records, then tenant a writes past the 16 MiB a
// search reads and across rotations; b's search still finds all 22, after
// a reopen too (the index is rebuilt from the current file; b's records,
// rotated away before it, are then reported as possibly missing).
func TestATenantsSearchFindsItsRecordsUnderAnotherTenantsFlood(t *testing.T) {
	dir := t.TempDir()
	cfg := audit.Config{File: filepath.Join(dir, "audit.jsonl"), MaxSizeMB: 8, MaxBackups: 5}
	l, _ := newFileLog(t, cfg)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	rec := func(tenant, id string, pad int) audit.Record {
		return audit.Record{Time: t0, ExecutionID: id, TenantID: tenant, Subject: "s", SourceSHA256: sha(id),
			Source: strings.Repeat("x", pad), Quota: audit.Quota{Outcome: audit.QuotaSkipped},
			Outcome: audit.Outcome{HTTPStatus: 403, Status: "error", ErrorType: "PolicyDenied"}}
	}
	for i := range 22 {
		if err := l.Record(context.Background(), rec("b", fmt.Sprintf("b-%02d", i), 0)); err != nil {
			t.Fatal(err)
		}
	}
	const floodBytes, pad = 20 << 20, 8 << 10
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < floodBytes/pad/16; i++ {
				if err := l.Record(context.Background(), rec("a", fmt.Sprintf("a-%d-%d", w, i), pad)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if backups, _ := audit.Backups(cfg.File); len(backups) < 2 {
		t.Fatalf("%d rotations, want the flood to rotate the file at least twice", len(backups))
	}
	scan, err := l.Search(context.Background(), audit.Query{Limit: 200}) // every tenant: the newest 16 MiB
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range scan.Records {
		if r.TenantID == "b" {
			t.Fatalf("the unindexed scan found b's %s; the test no longer floods enough", r.ExecutionID)
		}
	}
	res, err := l.Search(context.Background(), audit.Query{Tenants: []string{"b"}, Limit: 200})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Records) != 22 || res.Records[0].ExecutionID != "b-21" || res.Records[21].ExecutionID != "b-00" || res.Skipped != 0 || res.ScanLimitReached {
		t.Fatalf("b's search under a's flood: %d records (first %v), skipped %d, limit reached %v; want all 22, newest first",
			len(res.Records), ids(res.Records), res.Skipped, res.ScanLimitReached)
	}
	if res.ScannedBytes > 22*2048 {
		t.Fatalf("b's search read %d bytes, more than b's own records", res.ScannedBytes)
	}
	a, err := l.Search(context.Background(), audit.Query{Tenants: []string{"a"}, Limit: 5})
	if err != nil || len(a.Records) != 5 || !strings.HasPrefix(a.Records[0].ExecutionID, "a-") {
		t.Fatalf("a's own search: %v %v", ids(a.Records), err)
	}

	// Reopened: the current file is indexed again; b's records were
	// rotated away before it, so the search says older ones may exist.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, _ := newFileLog(t, cfg)
	if err := l2.Record(context.Background(), rec("b", "b-after", 0)); err != nil {
		t.Fatal(err)
	}
	res, err = l2.Search(context.Background(), audit.Query{Tenants: []string{"b"}})
	if err != nil || len(res.Records) != 1 || res.Records[0].ExecutionID != "b-after" || !res.ScanLimitReached {
		t.Fatalf("after a reopen: %v, limit reached %v, %v", ids(res.Records), res.ScanLimitReached, err)
	}
	a, err = l2.Search(context.Background(), audit.Query{Tenants: []string{"a"}, Limit: 200})
	if err != nil || len(a.Records) != 200 {
		t.Fatalf("a's records in the reopened current file: %d, %v", len(a.Records), err)
	}
}
