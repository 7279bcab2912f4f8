// Package uids leases the host uids jails run as (sandbox.uid_range): one
// per live jail, across every execgate process on the host, so per-user
// kernel limits (processes, inotify, message queues, pipe buffers) are per
// jail.
package uids

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/execgate/execgate/sandbox/internal/unavailable"
)

// lockFile, in sandbox.runtime_dir, holds the uid leases of every execgate
// process on the host.
const lockFile = "uids.lock"

// Pool hands out the host uids of a range, one per live jail.
// A uid is taken by an open file description lock (F_OFD_SETLK) on the
// byte at offset uid of RuntimeDir/uids.lock, through a descriptor of its
// own: leases conflict between goroutines and between processes alike, and
// the kernel drops the leases of a process that dies. Uids are tried
// round-robin from the last one handed out, so a freed uid is reused as
// late as possible.
type Pool struct {
	path   string
	lo, hi uint32

	mu   sync.Mutex // guards next
	next uint32
}

// Lease is one jail's host uid (used as its gid too). Release it once the
// jail and every process in it are gone.
type Lease struct {
	UID uint32
	f   *os.File
}

// New returns the pool of the uids lo to hi (inclusive), leased in
// runtimeDir/uids.lock.
func New(runtimeDir string, lo, hi uint32) *Pool {
	return &Pool{path: filepath.Join(runtimeDir, lockFile), lo: lo, hi: hi, next: lo}
}

// ErrExhausted (in an *unavailable.Error): every uid of sandbox.uid_range
// is held by a live jail.
var ErrExhausted = errors.New("every uid of sandbox.uid_range is in use")

// Acquire leases a free uid of the range.
func (p *Pool) Acquire() (*Lease, error) {
	f, err := os.OpenFile(p.path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, &unavailable.Error{Reason: "opening the uid lease file", Hint: "sandbox.runtime_dir must be writable by root", Err: err}
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
			return &Lease{UID: uid, f: f}, nil
		}
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) {
			f.Close()
			return nil, &unavailable.Error{Reason: "leasing a uid for the jail", Err: err}
		}
	}
	f.Close()
	return nil, &unavailable.Error{
		Reason: fmt.Sprintf("no free host uid for the jail: %d-%d are all held by live jails", p.lo, p.hi),
		Hint:   "widen sandbox.uid_range or lower the number of concurrent runs and warm jails",
		Err:    ErrExhausted,
	}
}

// Release frees the uid. Call it only once the jail is gone.
func (l *Lease) Release() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}
