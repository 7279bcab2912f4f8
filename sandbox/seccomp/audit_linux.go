package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Kernel audit netlink constants (linux/audit.h, linux/netlink.h).
const (
	netlinkAudit      = 9    // NETLINK_AUDIT
	auditNlgrpReadlog = 1    // AUDIT_NLGRP_READLOG
	auditSeccompType  = 1326 // AUDIT_SECCOMP
	nlmsgHdrLen       = 16
)

// seccompWatch keeps the kernel's recent AUDIT_SECCOMP records, read from
// the audit multicast group by one goroutine for the whole process (see
// audit.go). Started on first use; it lives as long as the process.
type seccompWatch struct {
	mu      sync.Mutex // guards the fields below
	records []seccompRecord
	err     error  // why there is no subscription; nil when there is
	dropped int    // times the socket overflowed (ENOBUFS): records lost
	misses  []miss // the latest lookups that found no record
	cond    *sync.Cond
}

// miss is a lookup that found no record: what was looked for, and when.
type miss struct {
	pid       int
	since, at time.Time
}

// maxMisses bounds the misses kept for AuditReport.
const maxMisses = 8

// maxSeccompRecords bounds the memory a burst of kills can take; a run
// looks its record up right after nsjail reaps the harness.
const maxSeccompRecords = 512

// auditRcvBuf is the audit socket's receive buffer: a record takes about
// 1 KiB of it, so thousands of kills may come while the reader sleeps.
const auditRcvBuf = 4 << 20

var (
	watchOnce   sync.Once
	theWatch    *seccompWatch
	watchPeriod = 50 * time.Millisecond
)

// seccompAudit returns the process's seccomp watch, subscribing on first use.
func seccompAudit() *seccompWatch {
	watchOnce.Do(func() {
		w := &seccompWatch{}
		w.cond = sync.NewCond(&w.mu)
		fd, err := subscribeAudit()
		if err != nil {
			w.err = err
		} else {
			go w.read(fd)
		}
		theWatch = w
	})
	return theWatch
}

func subscribeAudit() (int, error) {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, netlinkAudit)
	if err != nil {
		return -1, fmt.Errorf("opening the kernel audit socket: %w", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK, Groups: 1 << (auditNlgrpReadlog - 1)}); err != nil {
		syscall.Close(fd)
		return -1, fmt.Errorf("joining the kernel audit log group (needs CAP_AUDIT_READ): %w", err)
	}
	// Room for a burst of records while the reader is descheduled: every
	// subscriber on the host gets every record, and an overflowing socket
	// loses them. SO_RCVBUFFORCE (root) is not capped by net.core.rmem_max.
	if syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUFFORCE, auditRcvBuf) != nil {
		_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, auditRcvBuf)
	}
	// A bounded wait lets the reader wake its waiters regularly.
	tv := syscall.NsecToTimeval(watchPeriod.Nanoseconds())
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	return fd, nil
}

func (w *seccompWatch) read(fd int) {
	buf := make([]byte, 64<<10)
	for {
		n, _, err := syscall.Recvfrom(fd, buf, 0)
		if err != nil {
			if errors.Is(err, syscall.ENOBUFS) {
				w.mu.Lock()
				w.dropped++
				w.mu.Unlock()
			}
			if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.ENOBUFS) {
				w.cond.Broadcast()
				continue
			}
			w.mu.Lock()
			w.err = fmt.Errorf("reading the kernel audit log: %w", err)
			w.mu.Unlock()
			w.cond.Broadcast()
			return
		}
		var got []seccompRecord
		for msg := buf[:n]; len(msg) >= nlmsgHdrLen; {
			l := int(binary.NativeEndian.Uint32(msg[0:4]))
			typ := binary.NativeEndian.Uint16(msg[4:6])
			if l < nlmsgHdrLen || l > len(msg) {
				break
			}
			if typ == auditSeccompType {
				if rec, ok := parseSeccompRecord(string(msg[nlmsgHdrLen:l])); ok && rec.Signal == int(syscall.SIGSYS) {
					rec.Arrived = time.Now()
					got = append(got, rec)
				}
			}
			next := (l + 3) &^ 3 // netlink messages are 4-byte aligned
			if next >= len(msg) {
				break
			}
			msg = msg[next:]
		}
		if len(got) > 0 {
			w.mu.Lock()
			w.records = keepLast(append(w.records, got...), maxSeccompRecords)
			w.mu.Unlock()
			w.cond.Broadcast()
		}
	}
}

// SyscallFor waits up to wait for the kernel's record of the seccomp kill
// of host pid pid at or after since, and names its syscall (an
// escape-class name, an ABI rule's, or "syscall <n> (arch <a>)"); "" when
// there is none (or no access to the kernel's audit records: AuditErr).
func SyscallFor(pid int, since time.Time, wait time.Duration) string {
	return seccompAudit().syscallFor(pid, since, wait)
}

func (w *seccompWatch) syscallFor(pid int, since time.Time, wait time.Duration) string {
	deadline := time.Now().Add(wait)
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		// Newest first: pids are reused, records are not.
		for i := len(w.records) - 1; i >= 0; i-- {
			rec := w.records[i]
			// Audit stamps are wall-clock milliseconds: a record of this
			// pid from before the jail started is another process's.
			if rec.PID == pid && !rec.Time.Before(since.Truncate(time.Millisecond)) {
				return deniedSyscallName(rec)
			}
		}
		if w.err != nil || time.Now().After(deadline) {
			w.misses = keepLast(append(w.misses, miss{pid: pid, since: since, at: time.Now()}), maxMisses)
			return ""
		}
		w.cond.Wait() // woken by a record or the reader's period
	}
}

// keepLast is s without all but its last n elements, in place.
func keepLast[T any](s []T, n int) []T {
	if over := len(s) - n; over > 0 {
		return append(s[:0], s[over:]...)
	}
	return s
}

// AuditReport describes the watch for a diagnosis: overflows, the latest
// lookups that found no record, and the latest records (n at most).
func AuditReport(n int) string {
	w := seccompAudit()
	w.mu.Lock()
	defer w.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "audit watch: err %v, %d overflows, %d records kept", w.err, w.dropped, len(w.records))
	for _, m := range w.misses {
		fmt.Fprintf(&b, "\n  no record for pid %d since %s (gave up %s)", m.pid, m.since.Format(stampFormat), m.at.Format(stampFormat))
	}
	for _, r := range w.records[max(0, len(w.records)-n):] {
		fmt.Fprintf(&b, "\n  record: pid %d syscall %d arch %s stamped %s, read %s", r.PID, r.Syscall, r.Arch, r.Time.Format(stampFormat), r.Arrived.Format(stampFormat))
	}
	return b.String()
}

const stampFormat = "15:04:05.000000"

// AuditErr says why SyscallDenied outcomes cannot name the syscall on this
// host (no access to the kernel's audit log); nil when they can.
func AuditErr() error {
	w := seccompAudit()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}
