package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"time"
)

// Search bounds (GET /v1/admin/audit).
const (
	// MaxSearchLimit is the most records one search returns.
	MaxSearchLimit = 200
	// DefaultSearchLimit is the limit of a Query with Limit 0.
	DefaultSearchLimit = 50
	// DefaultScanBytes is how far back from the end of the file a search
	// reads at most: a search never costs more than this much I/O, however
	// large the file grew.
	DefaultScanBytes = 16 << 20
	// sinceSlack: records are appended nearly, not exactly, in time order
	// (a group commit writes the lines of concurrent requests together), so
	// a scan stops only at a record this much older than Query.Since.
	sinceSlack = time.Minute
)

// ErrNoFile is returned by Log.Search when the file sink is not configured:
// there is nothing to search.
var ErrNoFile = errors.New("the audit log has no file sink (audit.sinks must include file to search it)")

// Query selects audit records. Zero fields match everything.
type Query struct {
	// Tenants restricts the search to these tenants; nil or empty: any.
	Tenants []string
	// Status is the outcome status, "ok" or "error".
	Status string
	// ErrorType is the outcome's error type (e.g. ToolError, PolicyDenied).
	ErrorType string
	// ExecutionID finds one run.
	ExecutionID string
	// Since drops records older than this instant.
	Since time.Time
	// Limit is the most records returned, newest first: 0 means
	// DefaultSearchLimit; more than MaxSearchLimit is clipped to it.
	Limit int
	// ScanBytes is how many bytes from the end of the file are read at
	// most; 0 means DefaultScanBytes.
	ScanBytes int64
}

// SearchResult is what one search found.
type SearchResult struct {
	// Records match the query, newest first.
	Records []Record `json:"records"`
	// ScannedBytes is how much of the file was read.
	ScannedBytes int64 `json:"scanned_bytes"`
	// ScanLimitReached is true when the scan stopped at the byte budget
	// before the start of the file: older matching records may exist.
	ScanLimitReached bool `json:"scan_limit_reached"`
	// Skipped counts lines that did not decode as records.
	Skipped int `json:"skipped"`
}

// take decodes one record line (newest first) into res: counted as
// skipped when it does not decode or, with tenants, belongs to none of
// them; kept when it matches q. done: the search is over (the record is
// older than q.Since allows, or q.Limit records are kept).
func (q Query) take(res *SearchResult, line []byte, tenants []string) (done bool) {
	var r Record
	if err := json.Unmarshal(line, &r); err != nil || (tenants != nil && !slices.Contains(tenants, r.TenantID)) {
		res.Skipped++
		return false
	}
	if !q.Since.IsZero() && r.Time.Before(q.Since.Add(-sinceSlack)) {
		return true
	}
	if q.match(&r) {
		res.Records = append(res.Records, r)
		return len(res.Records) >= q.Limit
	}
	return false
}

func (q Query) match(r *Record) bool {
	if len(q.Tenants) > 0 {
		ok := false
		for _, t := range q.Tenants {
			ok = ok || t == r.TenantID
		}
		if !ok {
			return false
		}
	}
	return (q.Status == "" || q.Status == r.Outcome.Status) &&
		(q.ErrorType == "" || q.ErrorType == r.Outcome.ErrorType) &&
		(q.ExecutionID == "" || q.ExecutionID == r.ExecutionID) &&
		(q.Since.IsZero() || !r.Time.Before(q.Since))
}

// Search reads the current audit file (not the rotated ones) backwards
// from its end and returns the records matching q, newest first. It reads
// at most q.ScanBytes and stops as soon as it has q.Limit records or meets
// a record well before q.Since.
//
// A query naming tenants reads only their records, through the file
// sink's per-tenant index (index.go), which also covers the files rotated
// since the log was opened: other tenants' volume cannot push a tenant's
// records out of its own search.
func (l *Log) Search(ctx context.Context, q Query) (SearchResult, error) {
	for _, s := range l.sinks {
		if f, ok := s.(*fileSink); ok {
			if len(q.Tenants) > 0 {
				return f.index.search(ctx, q.normalize())
			}
			return SearchFile(ctx, f.path, q)
		}
	}
	return SearchResult{}, ErrNoFile
}

// normalize applies the defaults and bounds of Limit and ScanBytes.
func (q Query) normalize() Query {
	if q.Limit <= 0 {
		q.Limit = DefaultSearchLimit
	}
	q.Limit = min(q.Limit, MaxSearchLimit)
	if q.ScanBytes <= 0 {
		q.ScanBytes = DefaultScanBytes
	}
	return q
}

// searchChunk is how much is read per step.
const searchChunk = 64 << 10

// SearchFile is Search on the JSON-lines file at path. A missing file has
// no records.
func SearchFile(ctx context.Context, path string, q Query) (SearchResult, error) {
	res := SearchResult{Records: []Record{}}
	q = q.normalize()
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("opening audit file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return res, fmt.Errorf("reading audit file: %w", err)
	}
	size := st.Size()
	floor := max(0, size-q.ScanBytes)
	off := size
	var carry []byte // the start of a line whose beginning is not read yet
	first := true    // the first chunk's tail (after its last newline) is a line still being written
	buf := make([]byte, searchChunk)
	for off > floor {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		n := min(int64(len(buf)), off-floor)
		off -= n
		if _, err := f.ReadAt(buf[:n], off); err != nil {
			return res, fmt.Errorf("reading audit file: %w", err)
		}
		res.ScannedBytes += n
		data := make([]byte, 0, int(n)+len(carry))
		data = append(append(data, buf[:n]...), carry...)
		lines := bytes.Split(data, []byte{'\n'})
		if first {
			if len(lines) == 1 && off > 0 { // no newline yet: all of it is the tail
				carry = data
				continue
			}
			lines = lines[:len(lines)-1]
			first = false
		}
		// lines[0] may have begun before off: keep it for the next chunk
		// unless this is the start of the file.
		start := 1
		if off == 0 {
			start = 0
		}
		for i := len(lines) - 1; i >= start; i-- {
			line := bytes.TrimSpace(lines[i])
			if len(line) == 0 {
				continue
			}
			if q.take(&res, line, nil) {
				return res, nil
			}
		}
		if len(lines) > 0 && start == 1 {
			carry = append([]byte(nil), lines[0]...)
		} else {
			carry = nil
		}
	}
	res.ScanLimitReached = floor > 0
	return res, nil
}
