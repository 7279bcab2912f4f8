package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// uidLockFile, in Config.RuntimeDir, holds the uid leases of every execgate
// process on the host.
const uidLockFile = "uids.lock"

// uidPool hands out the host uids of Config.UIDRange, one per live jail.
// A uid is taken by an open file description lock (F_OFD_SETLK) on the
// byte at offset uid of RuntimeDir/uids.lock, through a descriptor of its
// own: leases conflict between goroutines and between processes alike, and
// the kernel drops the leases of a process that dies. Uids are tried
// round-robin from the last one handed out, so a freed uid is reused as
// late as possible.
type uidPool struct {
	path   string
	lo, hi uint32

	mu   sync.Mutex // guards next
	next uint32
}

// uidLease is one jail's host uid (used as its gid too). Close it once the
// jail and every process in it are gone.
type uidLease struct {
	uid uint32
	f   *os.File
}

func newUIDPool(runtimeDir, uidRange string) (*uidPool, error) {
	lo, hi, err := ParseUIDRange(uidRange)
	if err != nil {
		return nil, fmt.Errorf("sandbox.uid_range: %w", err)
	}
	return &uidPool{path: filepath.Join(runtimeDir, uidLockFile), lo: lo, hi: hi, next: lo}, nil
}

// ErrUIDsExhausted (in an *UnavailableError): every uid of
// sandbox.uid_range is held by a live jail.
var ErrUIDsExhausted = errors.New("every uid of sandbox.uid_range is in use")

// acquire leases a free uid of the range.
func (p *uidPool) acquire() (*uidLease, error) {
	f, err := os.OpenFile(p.path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, &UnavailableError{Reason: "opening the uid lease file", Hint: "sandbox.runtime_dir must be writable by root", Err: err}
	}
	p.mu.Lock()
	start := p.next
	p.mu.Unlock()
	n := uint64(p.hi-p.lo) + 1
	for i := uint64(0); i < n; i++ {
		uid := p.lo + uint32((uint64(start-p.lo)+i)%n)
		lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: int64(uid), Len: 1}
		err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
		if err == nil {
			p.mu.Lock()
			p.next = p.lo + uint32((uint64(uid-p.lo)+1)%n)
			p.mu.Unlock()
			return &uidLease{uid: uid, f: f}, nil
		}
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) {
			f.Close()
			return nil, &UnavailableError{Reason: "leasing a uid for the jail", Err: err}
		}
	}
	f.Close()
	return nil, &UnavailableError{
		Reason: fmt.Sprintf("no free host uid for the jail: %d-%d are all held by live jails", p.lo, p.hi),
		Hint:   "widen sandbox.uid_range or lower the number of concurrent runs and warm jails",
		Err:    ErrUIDsExhausted,
	}
}

// release frees the uid. Call it only once the jail is gone.
func (l *uidLease) release() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}
