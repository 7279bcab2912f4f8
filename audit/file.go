package audit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// ErrLocked means another process holds the audit file (two gateways must
// never interleave records or rotate under each other).
var ErrLocked = errors.New("audit file is in use by another process")

// backupTimeFormat names rotated files: audit-2006-01-02T15-04-05.000000000.jsonl.
// It sorts lexically in time order.
const backupTimeFormat = "2006-01-02T15-04-05.000000000"

// fileSink appends JSON lines to one file, fsyncs each before returning,
// rotates it at maxBytes into timestamped backups beside it and keeps
// maxBackups of them (negative: keep all).
//
// Lifecycle: openFileSink takes an exclusive lock on path+".lock", repairs a
// torn last line left by a crash, and opens the file for appending; close
// releases both. A record is either wholly in the file or not at all: a
// failed write is truncated away before the error is returned.
//
// Group commit: concurrent writeLine calls share one write and one fsync.
// A caller queues its line in the pending batch; the first caller to find
// no flush in progress becomes the leader, takes the whole pending batch,
// writes it in one write (one per file when it spans a rotation), fsyncs
// once and releases every waiter of that batch with its result. Lines
// queued meanwhile form the next batch, whose first waiter to wake leads
// it. One fsync thus covers every record that arrived during the previous
// one, and no Record returns before its own line is on disk.
type fileSink struct {
	path       string
	maxBytes   int64
	maxBackups int
	now        func() time.Time
	// writeFile and syncFile are (*os.File).Write and Sync; tests replace
	// them to count fsyncs and to inject failures.
	writeFile func(f *os.File, b []byte) (int, error)
	syncFile  func(f *os.File) error

	mu       sync.Mutex // guards pending, flushing, closed and every batch's done/errs
	cond     *sync.Cond // on mu: a batch finished, or a flush ended
	pending  *batch     // lines waiting for the next flush; nil when none
	flushing bool       // a leader is writing; it alone touches f and size
	closed   bool

	// f and size belong to whoever holds the flush (flushing set under mu),
	// or to open/close when no flush can run.
	f    *os.File
	size int64

	lock *os.File // holds the flock for the sink's lifetime

	// index locates each tenant's newest records (index.go); the flush
	// leader adds to it once lines are durable.
	index *tenantIndex
}

// batch is the lines one leader writes and fsyncs together.
type batch struct {
	lines   [][]byte
	tenants []string // per line, for the index
	errs    []error  // per line, set when done
	done    bool
}

func openFileSink(path string, maxBytes int64, maxBackups int, now func() time.Time) (*fileSink, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("creating audit dir: %w", err)
	}
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening audit lock: %w", err)
	}
	if err := lockFile(lock); err != nil {
		lock.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	s := &fileSink{
		path: path, maxBytes: maxBytes, maxBackups: maxBackups, now: now, lock: lock,
		writeFile: (*os.File).Write,
		syncFile:  (*os.File).Sync,
		index:     newTenantIndex(path),
	}
	s.cond = sync.NewCond(&s.mu)
	if err := s.open(); err != nil {
		lock.Close()
		return nil, err
	}
	backups, err := s.listBackups()
	if err == nil {
		err = s.index.build(s.f, s.size, len(backups) > 0)
	}
	if err != nil {
		s.f.Close()
		lock.Close()
		return nil, err
	}
	return s, nil
}

// open opens (creating if needed) the active file and drops a torn tail.
func (s *fileSink) open() error {
	f, err := os.OpenFile(s.path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("opening audit file: %w", err)
	}
	size, err := repairTail(f)
	if err != nil {
		f.Close()
		return fmt.Errorf("repairing audit file %s: %w", s.path, err)
	}
	if err := syncDir(filepath.Dir(s.path)); err != nil {
		f.Close()
		return err
	}
	s.f, s.size = f, size
	return nil
}

// repairTail truncates f after its last newline. Bytes after it are a record
// whose write was cut short by a crash; its Record call never returned, so
// no response claimed it. Returns the resulting size.
func repairTail(f *os.File) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("stat: %w", err)
	}
	size := st.Size()
	if size == 0 {
		return 0, nil
	}
	const chunk = 64 << 10
	buf := make([]byte, chunk)
	end := size
	for end > 0 {
		start := max(end-chunk, 0)
		n, err := f.ReadAt(buf[:end-start], start)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("reading tail: %w", err)
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			keep := start + int64(i) + 1
			if keep == size {
				return size, nil
			}
			return keep, truncateSync(f, keep)
		}
		end = start
	}
	return 0, truncateSync(f, 0) // no newline at all: one torn record
}

func truncateSync(f *os.File, size int64) error {
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("truncating torn record: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing audit file: %w", err)
	}
	return nil
}

// writeLine appends one line (which must end in '\n'), the record of
// tenant, and returns once it is fsynced, sharing the write and fsync with
// concurrent callers (see fileSink).
func (s *fileSink) writeLine(line []byte, tenant string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	b := s.pending
	if b == nil {
		b = &batch{}
		s.pending = b
	}
	i := len(b.lines)
	b.lines = append(b.lines, line)
	b.tenants = append(b.tenants, tenant)
	for !b.done && s.flushing {
		s.cond.Wait()
	}
	if !b.done {
		// Lead: take the whole pending batch (ours) and flush it without
		// holding mu, so the next batch can gather meanwhile.
		s.flushing = true
		s.pending = nil
		s.mu.Unlock()
		errs := s.flush(b.lines, b.tenants)
		s.mu.Lock()
		b.errs, b.done = errs, true
		s.flushing = false
		s.cond.Broadcast()
	}
	return b.errs[i]
}

// flush appends lines to the file and fsyncs them, rotating first whenever
// the next line would take a non-empty file past maxBytes. It returns one
// error per line (nil: durable) and indexes the durable ones under their
// tenants. Called by the batch leader only.
func (s *fileSink) flush(lines [][]byte, tenants []string) []error {
	errs := make([]error, len(lines))
	var buf []byte
	first := 0 // index of buf's first line
	commit := func(end int) {
		off := s.size
		err := s.appendSync(buf)
		for j := first; j < end; j++ {
			errs[j] = err
			if err == nil {
				s.index.add(tenants[j], off, len(lines[j])-1)
			}
			off += int64(len(lines[j]))
		}
		buf, first = buf[:0], end
	}
	for i, line := range lines {
		if s.size+int64(len(buf)) > 0 && s.size+int64(len(buf)+len(line)) > s.maxBytes {
			if len(buf) > 0 {
				commit(i)
			}
			if err := s.rotate(); err != nil {
				// The file is still the old one (rotate reopens it); later
				// lines keep going to it rather than being lost.
				for j := i; j < len(lines); j++ {
					errs[j] = err
				}
				return errs
			}
		}
		buf = append(buf, line...)
	}
	if len(buf) > 0 {
		commit(len(lines))
	}
	return errs
}

// appendSync writes b (whole lines) in one write and fsyncs. A failed write
// is truncated away, so no half line is left for the next one to be glued to.
func (s *fileSink) appendSync(b []byte) error {
	n, err := s.writeFile(s.f, b)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		if n > 0 {
			if terr := s.f.Truncate(s.size); terr != nil {
				err = errors.Join(err, fmt.Errorf("truncating partial records: %w", terr))
			}
		}
		return fmt.Errorf("writing audit file: %w", err)
	}
	s.size += int64(n)
	if err := s.syncFile(s.f); err != nil {
		return fmt.Errorf("syncing audit file: %w", err)
	}
	return nil
}

// rotate moves the active file to a timestamped backup, opens a fresh one
// and prunes old backups. Called by the flush leader.
func (s *fileSink) rotate() error {
	if err := s.f.Close(); err != nil {
		return fmt.Errorf("closing audit file for rotation: %w", err)
	}
	backup, err := s.backupName()
	if err != nil {
		if oerr := s.open(); oerr != nil {
			return errors.Join(err, oerr)
		}
		return err
	}
	if err := s.index.rotate(s.path, backup); err != nil {
		// Keep writing to the old file rather than losing records.
		if oerr := s.open(); oerr != nil {
			return errors.Join(fmt.Errorf("rotating audit file: %w", err), oerr)
		}
		return fmt.Errorf("rotating audit file: %w", err)
	}
	if err := s.open(); err != nil {
		return err
	}
	return s.prune()
}

// backupName returns a fresh backup path for now. Rotations within one
// clock tick get a counter above any left by earlier ones, so the order of
// names stays the order of rotations even after pruning.
func (s *fileSink) backupName() (string, error) {
	dir, prefix, ext := s.parts()
	ts := s.now().UTC().Format(backupTimeFormat)
	existing, err := s.listBackups()
	if err != nil {
		return "", err
	}
	n := -1
	for _, b := range existing {
		if b.stamp == ts {
			n = max(n, b.n)
		}
	}
	if n < 0 {
		return filepath.Join(dir, prefix+ts+ext), nil
	}
	return filepath.Join(dir, fmt.Sprintf("%s%s-%d%s", prefix, ts, n+1, ext)), nil
}

// parts splits path into its directory, the backup prefix ("audit-") and
// the extension (".jsonl").
func (s *fileSink) parts() (dir, prefix, ext string) {
	dir = filepath.Dir(s.path)
	base := filepath.Base(s.path)
	ext = filepath.Ext(base)
	return dir, strings.TrimSuffix(base, ext) + "-", ext
}

// Backups returns the rotated files of the audit log at path, oldest first.
func Backups(path string) ([]string, error) {
	s := &fileSink{path: path}
	return s.backups()
}

func (s *fileSink) backups() ([]string, error) {
	found, err := s.listBackups()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(found))
	for i, b := range found {
		out[i] = b.path
	}
	return out, nil
}

// backupFile is one rotated file.
type backupFile struct {
	path  string
	stamp string // backupTimeFormat
	n     int    // collision counter; 0 for none
}

// listBackups returns the rotated files, oldest first.
func (s *fileSink) listBackups() ([]backupFile, error) {
	dir, prefix, ext := s.parts()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing audit backups: %w", err)
	}
	var found []backupFile
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, ext) {
			continue
		}
		rest := strings.TrimSuffix(strings.TrimPrefix(name, prefix), ext)
		if len(rest) < len(backupTimeFormat) {
			continue
		}
		stamp, counter := rest[:len(backupTimeFormat)], rest[len(backupTimeFormat):]
		if _, err := time.Parse(backupTimeFormat, stamp); err != nil {
			continue
		}
		n := 0
		if counter != "" {
			if _, err := fmt.Sscanf(counter, "-%d", &n); err != nil || n <= 0 || counter != fmt.Sprintf("-%d", n) {
				continue
			}
		}
		found = append(found, backupFile{filepath.Join(dir, name), stamp, n})
	}
	slices.SortFunc(found, func(a, b backupFile) int {
		if c := strings.Compare(a.stamp, b.stamp); c != 0 {
			return c
		}
		return a.n - b.n
	})
	return found, nil
}

func (s *fileSink) prune() error {
	if s.maxBackups < 0 {
		return nil
	}
	backups, err := s.backups()
	if err != nil {
		return err
	}
	var errs []error
	for len(backups) > s.maxBackups {
		if err := os.Remove(backups[0]); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing old audit backup: %w", err))
		} else {
			s.index.pruned(backups[0])
		}
		backups = backups[1:]
	}
	return errors.Join(errs...)
}

// closeFile refuses new lines, lets queued ones be flushed, then closes
// the file and releases the lock.
func (s *fileSink) closeFile() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	for s.flushing || s.pending != nil {
		s.cond.Wait()
	}
	err := s.f.Close()
	return errors.Join(err, s.lock.Close())
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening audit dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing audit dir: %w", err)
	}
	return nil
}
