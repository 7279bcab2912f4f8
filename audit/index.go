package audit

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
)

// The per-tenant index of the file sink (issue #23 item 10): where each
// tenant's newest records are, so a search for one tenant reads that
// tenant's records and nothing else. Without it a search reads the newest
// DefaultScanBytes of the file, all tenants mixed, and one tenant writing
// fast (refused requests cost it no quota) hides every other tenant's
// records from their auditors.
//
// The index holds, per tenant, the location (file, offset, length) of its
// newest IndexPerTenant records, in memory: built at open from the
// current file, then added to by every flush once its lines are fsynced,
// and following rotations (a rotated file keeps its entries until it is
// pruned). After a restart, records in files rotated before it are not
// indexed. A search still reads at most ScanBytes, now of the tenant's own
// records.

// Index bounds.
const (
	// IndexPerTenant is how many of a tenant's newest records the index
	// locates (16 bytes each).
	IndexPerTenant = 4096
	// indexMaxTenants bounds the tenants indexed; a new one beyond it
	// replaces the tenant whose newest record is the oldest.
	indexMaxTenants = 1024
)

// loc is where one record's line is.
type loc struct {
	gen uint32 // the file's generation (tenantIndex.files)
	n   uint32 // line length without its newline
	off int64
}

func (a loc) compare(b loc) int {
	if c := cmp.Compare(a.gen, b.gen); c != 0 {
		return c
	}
	return cmp.Compare(a.off, b.off)
}

// locRing is a tenant's newest locations, oldest overwritten first.
type locRing struct {
	locs    []loc // grows to IndexPerTenant, then wraps
	next    int   // where the next one goes once full
	dropped bool  // older records of the tenant were overwritten
}

func (r *locRing) add(l loc) {
	if len(r.locs) < IndexPerTenant {
		r.locs = append(r.locs, l)
		return
	}
	r.locs[r.next] = l
	r.next = (r.next + 1) % IndexPerTenant
	r.dropped = true
}

func (r *locRing) newest() loc { return r.locs[(r.next+len(r.locs)-1)%len(r.locs)] }

// tenantIndex is the file sink's index.
type tenantIndex struct {
	mu       sync.Mutex // guards everything below; held across a rotation's rename
	gen      uint32     // the current file's generation
	files    map[uint32]string
	byTenant map[string]*locRing
	// partial: the current file was indexed at open; records in files
	// rotated before it are not.
	partial bool
}

func newTenantIndex(path string) *tenantIndex {
	return &tenantIndex{files: map[uint32]string{0: path}, byTenant: map[string]*locRing{}}
}

// add records that the line of tenant's record is at off in the current
// file. Called once the line is durable.
func (x *tenantIndex) add(tenant string, off int64, n int) {
	if tenant == "" || n > MaxRecordBytes {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.addLocked(tenant, loc{gen: x.gen, off: off, n: uint32(n)})
}

func (x *tenantIndex) addLocked(tenant string, l loc) {
	r := x.byTenant[tenant]
	if r == nil {
		if len(x.byTenant) >= indexMaxTenants {
			var stalest string
			var at loc
			for t, r := range x.byTenant {
				if stalest == "" || r.newest().compare(at) < 0 {
					stalest, at = t, r.newest()
				}
			}
			delete(x.byTenant, stalest)
			x.partial = true
		}
		r = &locRing{}
		x.byTenant[tenant] = r
	}
	r.add(l)
}

// rotate renames the current file to backup and starts a new generation,
// under the index's lock so a search never opens the new file for the old
// generation's offsets.
func (x *tenantIndex) rotate(path, backup string) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := os.Rename(path, backup); err != nil {
		return err
	}
	x.files[x.gen] = backup
	x.gen++
	x.files[x.gen] = path
	return nil
}

// pruned forgets a removed backup: its records can no longer be read.
func (x *tenantIndex) pruned(backup string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for g, p := range x.files {
		if p == backup {
			delete(x.files, g)
		}
	}
}

// build indexes the current file's first size bytes (at open); partial
// says files rotated before it exist (they are not indexed).
func (x *tenantIndex) build(f *os.File, size int64, partial bool) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.partial = partial
	br := bufio.NewReaderSize(io.NewSectionReader(f, 0, size), 256<<10)
	var off int64
	for {
		line, err := br.ReadSlice('\n')
		for errors.Is(err, bufio.ErrBufferFull) { // a line over the buffer: read the rest
			var more []byte
			more, err = br.ReadSlice('\n')
			line = append(slices.Clone(line), more...)
		}
		if len(line) > 0 && line[len(line)-1] == '\n' {
			if t, ok := lineTenant(line); ok {
				x.addLocked(t, loc{gen: x.gen, off: off, n: uint32(min(len(line)-1, MaxRecordBytes+1))})
			}
		}
		off += int64(len(line))
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("indexing audit file: %w", err)
		}
	}
}

// tenantKey is how Record's JSON names the tenant; it is the first
// occurrence in a line written by Log.Record (the fields before it are a
// number, a time and a JSON string, in which a quote is escaped).
var tenantKey = []byte(`"tenant_id":"`)

// lineTenant is the tenant_id of an encoded record, without decoding it.
func lineTenant(line []byte) (string, bool) {
	i := bytes.Index(line, tenantKey)
	if i < 0 {
		return "", false
	}
	rest := line[i+len(tenantKey):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return "", false
	}
	if bytes.IndexByte(rest[:j], '\\') >= 0 { // escapes: let the decoder read it
		var r struct {
			TenantID string `json:"tenant_id"`
		}
		if json.Unmarshal(bytes.TrimSpace(line), &r) != nil {
			return "", false
		}
		return r.TenantID, true
	}
	return string(rest[:j]), true
}

// search answers a query naming tenants from their indexed records,
// newest first, reading at most q.ScanBytes of them (q normalised by the
// caller).
func (x *tenantIndex) search(ctx context.Context, q Query) (SearchResult, error) {
	res := SearchResult{Records: []Record{}}
	var locs []loc
	files := map[uint32]*os.File{}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	x.mu.Lock()
	older := x.partial // the tenants may have records the index does not locate
	for _, t := range slices.Compact(slices.Sorted(slices.Values(q.Tenants))) {
		if r := x.byTenant[t]; r != nil {
			locs = append(locs, r.locs...)
			older = older || r.dropped
		}
	}
	// Open every file the locations name while no rotation can rename
	// one: each handle is the file its generation's offsets are in.
	for _, l := range locs {
		if _, done := files[l.gen]; done {
			continue
		}
		path, ok := x.files[l.gen]
		if !ok {
			files[l.gen] = nil // pruned
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			f = nil // pruned meanwhile
		}
		files[l.gen] = f
	}
	x.mu.Unlock()

	slices.SortFunc(locs, func(a, b loc) int { return b.compare(a) })
	buf := make([]byte, 0, 64<<10)
	for _, l := range locs {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		f := files[l.gen]
		if f == nil {
			res.Skipped++
			continue
		}
		if res.ScannedBytes+int64(l.n) > q.ScanBytes {
			res.ScanLimitReached = true
			return res, nil
		}
		buf = slices.Grow(buf[:0], int(l.n))[:l.n]
		if _, err := f.ReadAt(buf, l.off); err != nil {
			res.Skipped++
			continue
		}
		res.ScannedBytes += int64(l.n)
		if q.take(&res, buf, q.Tenants) {
			return res, nil
		}
	}
	res.ScanLimitReached = older
	return res, nil
}
