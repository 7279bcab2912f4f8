package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
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

// newFileSinkLog is a Log with only a file sink in a temp dir, so tests
// can reach the sink's hooks.
func newFileSinkLog(t *testing.T, maxBytes int64, maxBackups int) (*fileSink, *Log, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	fs, err := openFileSink(path, maxBytes, maxBackups, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	l := &Log{sinks: []sink{fs}, now: time.Now}
	t.Cleanup(func() { l.Close() })
	return fs, l, path
}

// waitUntil polls cond until it holds or the deadline passes.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// heldFlush makes fs's first fsync wait until n-1 more lines queued behind
// it, so the rest arrive as one batch. release lets it go.
func heldFlush(t *testing.T, fs *fileSink, n int) (syncs *atomic.Int64, queued func(), release func()) {
	t.Helper()
	syncs = &atomic.Int64{}
	gate := make(chan struct{})
	fs.syncFile = func(f *os.File) error {
		if syncs.Add(1) == 1 {
			<-gate
		}
		return f.Sync()
	}
	queued = func() {
		t.Helper()
		waitUntil(t, "the other records to queue behind the first fsync", func() bool {
			fs.mu.Lock()
			defer fs.mu.Unlock()
			return fs.flushing && fs.pending != nil && len(fs.pending.lines) == n-1
		})
	}
	return syncs, queued, func() { close(gate) }
}

// recordAll writes n records named prefix-i concurrently and fails on any error.
func recordAll(t *testing.T, l *Log, n int, prefix, source string, between func()) {
	t.Helper()
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := Record{
				ExecutionID: fmt.Sprintf("%s-%d", prefix, i), TenantID: "demo", Quota: Quota{Outcome: QuotaSkipped},
				Outcome: Outcome{HTTPStatus: 200, Status: "error", ErrorType: "ToolError"}, Source: source,
			}
			errs <- l.Record(context.Background(), r)
		})
	}
	between()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Record: %v", err)
		}
	}
}

// idsIn reads the records of files, failing on a broken line.
func idsIn(t *testing.T, files ...string) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	for _, f := range files {
		recs, err := readRecords(f)
		if err != nil {
			t.Fatalf("%s has a broken line: %v", f, err)
		}
		for _, r := range recs {
			if seen[r.ExecutionID] {
				t.Fatalf("record %s written twice", r.ExecutionID)
			}
			seen[r.ExecutionID] = true
		}
	}
	return seen
}

func TestConcurrentRecordsShareOneFsync(t *testing.T) {
	fs, l, path := newFileSinkLog(t, 100<<20, 10)

	const n = 32
	syncs, queued, release := heldFlush(t, fs, n)
	recordAll(t, l, n, "g", "", func() {
		queued()
		if got := syncs.Load(); got != 1 {
			t.Errorf("%d fsyncs while the first was held, want 1", got)
		}
		release()
	})
	if got := syncs.Load(); got != 2 {
		t.Errorf("%d concurrent records took %d fsyncs, want 2 (the first alone, the other %d together)", n, got, n-1)
	}
	if got := len(idsIn(t, path)); got != n {
		t.Fatalf("%d records in the file, want %d", got, n)
	}
}

func TestABatchRotatesWhereALineWouldCrossMaxBytes(t *testing.T) {
	const maxBytes = 1000
	fs, l, path := newFileSinkLog(t, maxBytes, -1)

	const n = 12
	_, queued, release := heldFlush(t, fs, n)
	recordAll(t, l, n, "r", strings.Repeat("s", 200), func() { queued(); release() }) // ~400-byte lines: 2 per file
	backups, err := Backups(path)
	if err != nil {
		t.Fatal(err)
	}
	files := append(backups, path)
	if len(files) < n/2 {
		t.Errorf("%d files for %d records of ~400 bytes with max %d bytes, want at least %d", len(files), n, maxBytes, n/2)
	}
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > maxBytes {
			t.Errorf("%s: %d bytes, want <= %d", f, st.Size(), maxBytes)
		}
	}
	if got := len(idsIn(t, files...)); got != n {
		t.Fatalf("%d records across %d files, want %d", got, len(files), n)
	}
}

func TestAFailedWriteLeavesNoHalfLine(t *testing.T) {
	boom := errors.New("disk full")
	tests := []struct {
		name  string
		write func(f *os.File, b []byte) (int, error)
		sync  func(f *os.File) error
		want  error
		// kept: the failed record is in the file (an fsync error cannot
		// take back what the kernel already has).
		kept bool
	}{
		{name: "a write cut short is truncated away", want: boom, write: func(f *os.File, b []byte) (int, error) {
			n, _ := f.Write(b[:len(b)/2])
			return n, boom
		}},
		{name: "a short write without an error is an error too", want: io.ErrShortWrite, write: func(f *os.File, b []byte) (int, error) {
			return f.Write(b[:len(b)-1])
		}},
		{name: "an fsync error is returned", want: boom, kept: true, sync: func(*os.File) error { return boom }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, l, path := newFileSinkLog(t, 100<<20, 10)
			rec := func(id string) Record {
				return Record{ExecutionID: id, TenantID: "demo", Quota: Quota{Outcome: QuotaSkipped},
					Outcome: Outcome{HTTPStatus: 400, Status: "error", ErrorType: "BadRequest"}}
			}
			if err := l.Record(context.Background(), rec("before")); err != nil {
				t.Fatal(err)
			}
			if tt.write != nil {
				fs.writeFile = tt.write
			}
			if tt.sync != nil {
				fs.syncFile = tt.sync
			}
			if err := l.Record(context.Background(), rec("failed")); !errors.Is(err, tt.want) {
				t.Fatalf("Record = %v, want %v", err, tt.want)
			}
			fs.writeFile, fs.syncFile = (*os.File).Write, (*os.File).Sync
			if err := l.Record(context.Background(), rec("after")); err != nil {
				t.Fatal(err)
			}
			recs, err := readRecords(path)
			if err != nil {
				t.Fatalf("audit file has a broken line: %v", err)
			}
			var ids []string
			for _, r := range recs {
				ids = append(ids, r.ExecutionID)
			}
			want := "before,after"
			if tt.kept {
				want = "before,failed,after"
			}
			if got := strings.Join(ids, ","); got != want {
				t.Errorf("records %s, want %s", got, want)
			}
		})
	}
}
