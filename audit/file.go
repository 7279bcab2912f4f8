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
type fileSink struct {
	path       string
	maxBytes   int64
	maxBackups int
	now        func() time.Time

	mu     sync.Mutex // guards f, size, closed (and therefore the file's contents)
	f      *os.File
	size   int64
	closed bool

	lock *os.File // holds the flock for the sink's lifetime
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
	s := &fileSink{path: path, maxBytes: maxBytes, maxBackups: maxBackups, now: now, lock: lock}
	if err := s.open(); err != nil {
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

// writeLine appends one line (which must end in '\n') and fsyncs it.
func (s *fileSink) writeLine(line []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.size > 0 && s.size+int64(len(line)) > s.maxBytes {
		if err := s.rotate(); err != nil {
			return err
		}
	}
	n, err := s.f.Write(line)
	if err != nil {
		// Never leave half a record for the next one to be glued to.
		if n > 0 {
			if terr := s.f.Truncate(s.size); terr != nil {
				err = errors.Join(err, fmt.Errorf("truncating partial record: %w", terr))
			}
		}
		return fmt.Errorf("writing audit file: %w", err)
	}
	s.size += int64(n)
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("syncing audit file: %w", err)
	}
	return nil
}

// rotate moves the active file to a timestamped backup, opens a fresh one
// and prunes old backups. Called with mu held.
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
	if err := os.Rename(s.path, backup); err != nil {
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
		}
		backups = backups[1:]
	}
	return errors.Join(errs...)
}

func (s *fileSink) closeFile() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
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
