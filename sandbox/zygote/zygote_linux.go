package zygote

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox/cgroups"
	"github.com/execgate/execgate/sandbox/internal/runid"
)

// zygoteHandshakeTimeout bounds a fork request and the child's report.
const zygoteHandshakeTimeout = 5 * time.Second

// zygote is one warm zygote jail. Runs are forked one at a time (mu) and
// run concurrently.
type zygote struct {
	key   Key
	pool  *Pool
	j     Jail
	ctl   *net.UnixConn
	ready chan struct{} // closed when the zygote said "R"
	// scoped: the zygote's runs get their Landlock scope on abstract unix
	// sockets (execgate_zygote.py, step 4); set before ready is closed.
	scoped  bool
	dead    chan struct{} // closed when its control socket ended
	replies chan string   // fork replies ("f <pid>", "e <errno>")

	mu       sync.Mutex // serialises fork requests
	stopOnce sync.Once  // the jail is discarded (its uid released) once

	emu   sync.Mutex       // guards exits
	exits map[int]chan int // pid in the jail → its wait status (buffered 1)

	// spares holds the processes forked ahead for the next runs (refill),
	// up to zygoteSpares; filling says they are being prepared.
	spares  chan *spare
	filling atomic.Bool
	// fillMu guards stopped; fillers counts the refill goroutines, which
	// stop waits for so that no spare (and no cgroup) outlives the zygote.
	fillMu  sync.Mutex
	stopped bool
	fillers sync.WaitGroup
	// cgroups holds finished runs' cgroups reset for the next spares
	// (recycle, cgroup v1 only); stop removes what is left.
	cgroups chan *cgroups.Run

	// Guarded by Pool.mu:
	inflight int
	runs     int
	used     time.Time
	retired  bool
}

// exitChan returns the channel pid's wait status arrives on.
func (z *zygote) exitChan(pid int) chan int {
	z.emu.Lock()
	defer z.emu.Unlock()
	c, ok := z.exits[pid]
	if !ok {
		c = make(chan int, 1)
		z.exits[pid] = c
	}
	return c
}

// waiting returns the channel of a run still waiting for pid's status,
// nil when none is (a run that ended with its envelope: endedWithEnvelope).
// A pid is in exits from its fork on, so a status never comes first.
func (z *zygote) waiting(pid int) chan int {
	z.emu.Lock()
	defer z.emu.Unlock()
	return z.exits[pid]
}

func (z *zygote) forget(pid int) {
	z.emu.Lock()
	delete(z.exits, pid)
	z.emu.Unlock()
}

// read dispatches the zygote's messages until its socket ends.
func (z *zygote) read() {
	defer close(z.dead)
	br := bufio.NewReaderSize(z.ctl, 4096)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "R" && (f[1] == "0" || f[1] == "1"):
			z.scoped = f[1] == "1"
			close(z.ready)
		case len(f) == 2 && (f[0] == "f" || f[0] == "e"):
			select {
			case z.replies <- line:
			default: // nobody asked: a broken zygote
				return
			}
		case len(f) == 3 && f[0] == "x":
			pid, err1 := strconv.Atoi(f[1])
			status, err2 := strconv.Atoi(f[2])
			if err1 != nil || err2 != nil {
				return
			}
			if c := z.waiting(pid); c != nil {
				select {
				case c <- status:
				default:
				}
			}
		default:
			return
		}
	}
}

// fork asks the zygote for a child with fds (stdin, stdout, stderr, result,
// bridge, sync) and returns its pid in the jail.
func (z *zygote) fork(fds []int, tmpBytes, cpuSeconds int64) (int, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	msg := fmt.Sprintf("F %d %d\n", tmpBytes, cpuSeconds)
	if err := z.ctl.SetWriteDeadline(time.Now().Add(zygoteHandshakeTimeout)); err != nil {
		return 0, err
	}
	if _, _, err := z.ctl.WriteMsgUnix([]byte(msg), unix.UnixRights(fds...), nil); err != nil {
		return 0, fmt.Errorf("sending the fork request: %w", err)
	}
	t := time.NewTimer(zygoteHandshakeTimeout)
	defer t.Stop()
	select {
	case line := <-z.replies:
		f := strings.Fields(line)
		n, err := strconv.Atoi(f[1])
		if err != nil {
			return 0, fmt.Errorf("zygote reply %q", line)
		}
		if f[0] == "e" {
			return 0, fmt.Errorf("the zygote could not fork: %w", syscall.Errno(n))
		}
		return n, nil
	case <-z.dead:
		return 0, errors.New("the zygote is gone")
	case <-t.C:
		return 0, errors.New("the zygote did not answer the fork request")
	}
}

// stop ends the zygote (its runs in flight die with it: it is PID 1 of
// their pid namespace) and removes its cgroup.
func (z *zygote) stop() {
	z.stopOnce.Do(func() {
		z.fillMu.Lock()
		z.stopped = true
		z.fillMu.Unlock()
		z.dropSpares()
		z.ctl.Close()
		if err := z.j.Discard(); err != nil {
			z.pool.log.Warn("removing a zygote's cgroup", "error", err)
		}
		// A spare being prepared fails now that the zygote is gone, or
		// lands in spares: either way its cgroup is removed before stop
		// returns.
		z.fillers.Wait()
		z.dropSpares()
		for {
			select {
			case cg := <-z.cgroups:
				_ = cg.Remove(time.Second)
				continue
			default:
			}
			break
		}
	})
}

// newCgroup returns a reset cgroup of an earlier run of z, or a new one.
func (z *zygote) newCgroup(l limits.Limits) (*cgroups.Run, error) {
	select {
	case cg := <-z.cgroups:
		return cg, nil
	default:
		return z.pool.cg.Create(runid.New(), l.MemoryMB<<20, l.Pids)
	}
}

// zygoteSpares is how many processes a zygote keeps ready for its next
// runs: two, so that a run that comes while the next is being prepared
// still finds one.
const zygoteSpares = 2

// refill prepares z's next spares, up to zygoteSpares, unless that is
// being done or z is retired or dead.
func (z *zygote) refill(l limits.Limits) {
	if !z.filling.CompareAndSwap(false, true) {
		return
	}
	z.fillMu.Lock()
	if z.stopped {
		z.fillMu.Unlock()
		z.filling.Store(false)
		return
	}
	z.fillers.Add(1)
	z.fillMu.Unlock()
	go func() {
		defer z.fillers.Done()
		defer z.filling.Store(false)
		for len(z.spares) < cap(z.spares) {
			select {
			case <-z.dead:
				return
			default:
			}
			if z.isRetired() {
				return
			}
			sp, err := z.prepareSpare(l)
			if err != nil {
				return
			}
			select {
			case z.spares <- sp:
			default:
				sp.discard(z)
				return
			}
			if z.isRetired() {
				z.dropSpares()
				return
			}
		}
	}()
}

func (z *zygote) isRetired() bool {
	z.pool.mu.Lock()
	defer z.pool.mu.Unlock()
	return z.retired
}

// dropSpares discards the spares z holds.
func (z *zygote) dropSpares() {
	for {
		select {
		case sp := <-z.spares:
			sp.discard(z)
		default:
			return
		}
	}
}
