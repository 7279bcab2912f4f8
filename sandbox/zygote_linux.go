package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execgate/execgate/sandbox/cgroups"
	"github.com/execgate/execgate/sandbox/harness"
	"github.com/execgate/execgate/sandbox/internal/runid"
	"github.com/execgate/execgate/sandbox/seccomp"
)

// Level process: warm zygotes and the runs forked from them. A zygote is a
// jail started by startJail from the run's profile, like a warm jail, with
// four differences to its nsjail config (zygoteConfig): it runs
// execgate_zygote.py instead of the harness; nsjail's time_limit and
// RLIMIT_CPU are off for it (the zygote lives across runs; each run's
// process sets RLIMIT_CPU back to the profile's value before anything
// else); its /proc is mounted read-write so that its children can write
// their own uid and gid maps (each child then remounts it read-only for
// itself); and its seccomp policy lets
// unshare(CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWIPC) and mount with two exact
// flag sets through, which a child uses for its private /tmp and its own
// IPC namespace and then denies itself (killing, as at level jail) with a
// filter of its own before the harness starts. The tool's process is
// therefore under a seccomp policy at least as strict as level jail's.
// Descriptors of a zygote (startJail's contract, used differently): 0 a
// pipe from the runner, unused (closed when the zygote retires) 1, 2 the
// zygote's own output, captured for diagnosis 3 a pipe, unused 5 the
// control socket (startJail's bridge socketpair): fork requests carrying
// each run's descriptors (SCM_RIGHTS), fork replies and exit statuses
// (protocol in execgate_zygote.py) One run: ahead of it (prepareSpare), the
// runner creates a run's cgroup (cgroups.create, the same as a jail's) and
// a sync socketpair, sends one end to the zygote, which forks. The child
// reports on the sync socket; the kernel tells the runner its host pid
// (SCM_CREDENTIALS), the runner moves it into the run's cgroup and hands it
// the run's pipes (stdin, stdout, stderr, result) and tool bridge socket
// over the sync socket; the child does its setup (private /tmp, Landlock
// scope, capabilities, seccomp) and its harness waits for the request on
// stdin. A zygote keeps zygoteSpares such processes ready, and starts its
// successor before it retires (startNextLocked). When the run comes (forkRun), the
// runner writes the request. From then on the run is watched as a jail is
// (wall deadline, CPU from the cgroup, memory counters); when the child
// exits (the zygote reports its wait status) or is stopped, every process
// left in the run's cgroup is killed, so daemons, setsid and double-forked
// children end with the envelope. A harness that closed a whole envelope
// while it is the run's one process ends the run at once, killed rather
// than waited for (procRun.endedWithEnvelope). A finished run's cgroup is
// reset for the zygote's next spare where the host allows it (recycle,
// cgroup v1). A zygote that dies ends its runs in flight as SandboxCrashed;
// the next run starts a new one. Nothing is ever retried.

// zygoteHandshakeTimeout bounds a fork request and the child's report.
const zygoteHandshakeTimeout = 5 * time.Second

// zygoteConfig turns a rendered level-jail config into the zygote's (the
// differences are listed at the top of this file). Each replaced line must
// be there exactly once, so a change to renderConfig cannot silently leave
// the zygote with the wrong one.
func zygoteConfig(text string) (string, error) {
	lines := strings.Split(text, "\n")
	found := map[string]int{}
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "time_limit: "):
			lines[i] = "time_limit: 0"
			found["time_limit"]++
		case strings.HasPrefix(l, "rlimit_cpu: "):
			lines[i] = l + "\nrlimit_cpu_type: INF"
			found["rlimit_cpu"]++
		case strings.HasPrefix(l, `mount { dst: "/proc" fstype: "proc" rw: false `):
			lines[i] = strings.Replace(l, "rw: false", "rw: true", 1)
			found["proc"]++
		case strings.HasPrefix(l, "seccomp_string: "):
			lines[i] = "seccomp_string: " + q(seccomp.ZygotePolicy())
			found["seccomp"]++
		case l == "  arg: "+q(harness.Dir+"/"+harness.Entry):
			lines[i] = "  arg: " + q(harness.Dir+"/"+harness.ZygoteEntry)
			found["exec"]++
		}
	}
	for _, k := range []string{"time_limit", "rlimit_cpu", "proc", "seccomp", "exec"} {
		if found[k] != 1 {
			return "", fmt.Errorf("zygote config: the rendered profile has %d %s lines, not 1", found[k], k)
		}
	}
	return strings.Join(lines, "\n"), nil
}

// zygoteKey identifies a zygote: one per tenant and profile.
type zygoteKey struct {
	tenant string
	prof   profile
}

// zygote is one warm zygote jail. Runs are forked one at a time (mu) and
// run concurrently.
type zygote struct {
	key   zygoteKey
	j     *jail
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

	// Guarded by zygotes.mu:
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
func (z *zygote) stop(r *Runner) {
	z.stopOnce.Do(func() {
		z.fillMu.Lock()
		z.stopped = true
		z.fillMu.Unlock()
		z.dropSpares()
		z.ctl.Close()
		if err := z.j.discard(r.grace()); err != nil {
			r.log.Warn("removing a zygote's cgroup", "error", err)
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

// zygotes keeps the warm zygotes within the budget of ZygoteConfig,
// shared fairly: when the budget is full, a new zygote replaces an idle
// one (no run in flight) of the tenant holding the most zygotes, least
// recently used first; a tenant with fewer never gives way to one with
// more. When nothing can give way, the run gets a fresh jail (level
// jail's isolation is strictly stronger; the log says so).
type zygotes struct {
	r   *Runner
	cfg ZygoteConfig

	mu       sync.Mutex // guards m, starting, closed and the zygotes' counters
	m        map[zygoteKey]*zygote
	starting map[zygoteKey]chan struct{} // closed when the start ended
	// next holds the successors started ahead of zygotes near MaxRuns
	// (startNextLocked), promoted to m when theirs is gone.
	next    map[zygoteKey]*zygote
	closed  bool
	stopTic chan struct{}
	wg      sync.WaitGroup
	// removing counts the runs' cgroups being removed (removeLater); Add
	// only while not closed, under mu.
	removing sync.WaitGroup
	// ended holds the cgroups of ended runs until recycle is done with them.
	ended map[*cgroups.Run]struct{}
	// cgroupsKept counts the runs' cgroups reset for another run (recycle).
	cgroupsKept atomic.Int64
	// endedEarly counts the runs that ended with their envelope
	// (procRun.endedWithEnvelope).
	endedEarly atomic.Int64
}

func newZygotes(r *Runner, cfg ZygoteConfig) *zygotes {
	zs := &zygotes{r: r, cfg: cfg.withDefaults(), m: map[zygoteKey]*zygote{}, starting: map[zygoteKey]chan struct{}{}, next: map[zygoteKey]*zygote{}, stopTic: make(chan struct{}), ended: map[*cgroups.Run]struct{}{}}
	zs.wg.Add(1)
	go zs.retireIdle()
	return zs
}

// errNoZygote: the budget is full and nothing can give way.
var errNoZygote = errors.New("the zygote budget is full")

// acquire returns a live zygote for key with one more run in flight
// (release it with done), starting one when needed.
func (zs *zygotes) acquire(key zygoteKey) (*zygote, error) {
	for {
		zs.mu.Lock()
		if zs.closed {
			zs.mu.Unlock()
			return nil, errors.New("the runner is closed")
		}
		if n := zs.next[key]; n != nil && zs.m[key] == nil {
			delete(zs.next, key)
			zs.m[key] = n
		}
		if z := zs.m[key]; z != nil {
			select {
			case <-z.dead:
				delete(zs.m, key)
				zs.mu.Unlock()
				go z.stop(zs.r)
				continue
			default:
			}
			z.inflight++
			z.runs++
			z.used = time.Now()
			if z.runs >= zs.cfg.MaxRuns {
				// Its last run: the next one takes its successor, or
				// starts a new zygote.
				z.retired = true
				delete(zs.m, key)
			} else if zs.cfg.MaxRuns >= 2*zygoteSuccessorLead && z.runs == zs.cfg.MaxRuns-zygoteSuccessorLead {
				zs.startNextLocked(key)
			}
			zs.mu.Unlock()
			return z, nil
		}
		if wait, ok := zs.starting[key]; ok {
			zs.mu.Unlock()
			<-wait
			continue
		}
		victims, ok := zs.makeRoomLocked(key)
		if !ok {
			zs.mu.Unlock()
			return nil, errNoZygote
		}
		done := make(chan struct{})
		zs.starting[key] = done
		zs.mu.Unlock()
		for _, v := range victims {
			v.stop(zs.r)
		}
		z, err := zs.start(key)
		zs.mu.Lock()
		delete(zs.starting, key)
		close(done)
		if err != nil {
			zs.mu.Unlock()
			return nil, err
		}
		if zs.closed {
			zs.mu.Unlock()
			z.stop(zs.r)
			return nil, errors.New("the runner is closed")
		}
		zs.m[key] = z
		zs.mu.Unlock()
	}
}

// zygoteSuccessorLead is how many runs before a zygote's MaxRuns its
// successor is started (for a MaxRuns of at least twice that), so that no
// run waits for a zygote to start when one retires.
const zygoteSuccessorLead = 50

// startNextLocked starts key's successor in the background when the budget
// has room for it without stopping anything (else the run after the
// retirement starts one, as without a successor).
func (zs *zygotes) startNextLocked(key zygoteKey) {
	if zs.closed || zs.next[key] != nil {
		return
	}
	if _, ok := zs.starting[key]; ok {
		return
	}
	if len(zs.m)+len(zs.starting)+len(zs.next)+1 > zs.cfg.Max || zs.memoryLocked()+key.prof.Limits.MemoryMB > zs.cfg.MemoryMB {
		return
	}
	done := make(chan struct{})
	zs.starting[key] = done
	zs.wg.Add(1) // not closed, under mu: before close's Wait
	go func() {
		defer zs.wg.Done()
		z, err := zs.start(key)
		zs.mu.Lock()
		delete(zs.starting, key)
		close(done)
		switch {
		case err != nil:
			zs.mu.Unlock()
			zs.r.log.Warn("starting a zygote's successor", "tenant_id", key.tenant, "error", err)
			return
		case zs.closed:
			zs.mu.Unlock()
			z.stop(zs.r)
			return
		case zs.m[key] == nil:
			zs.m[key] = z
		default:
			zs.next[key] = z
		}
		zs.mu.Unlock()
	}()
}

// done ends one run of z; a retired zygote stops after its last run.
func (zs *zygotes) done(z *zygote) {
	zs.mu.Lock()
	z.inflight--
	z.used = time.Now()
	stop := z.retired && z.inflight == 0
	zs.mu.Unlock()
	if stop {
		z.stop(zs.r)
	}
}

// discardDead drops z if it died (its runs ended SandboxCrashed).
func (zs *zygotes) discardDead(z *zygote) {
	zs.mu.Lock()
	if zs.m[z.key] == z {
		delete(zs.m, z.key)
	}
	z.retired = true
	zs.mu.Unlock()
}

// memoryLocked is the memory the live zygotes count, MiB.
func (zs *zygotes) memoryLocked() int64 {
	var n int64
	for k := range zs.m {
		n += k.prof.Limits.MemoryMB
	}
	for k := range zs.starting {
		n += k.prof.Limits.MemoryMB
	}
	for k := range zs.next {
		n += k.prof.Limits.MemoryMB
	}
	return n
}

// makeRoomLocked picks the zygotes to stop so that key fits the budget.
func (zs *zygotes) makeRoomLocked(key zygoteKey) ([]*zygote, bool) {
	need := key.prof.Limits.MemoryMB
	if need > zs.cfg.MemoryMB || zs.cfg.Max == 0 {
		return nil, false
	}
	var victims []*zygote
	count := len(zs.m) + len(zs.starting) + len(zs.next)
	mem := zs.memoryLocked()
	for count+1 > zs.cfg.Max || mem+need > zs.cfg.MemoryMB {
		v := zs.victimLocked(key.tenant)
		if v == nil {
			for _, z := range victims { // put them back
				zs.m[z.key] = z
			}
			return nil, false
		}
		delete(zs.m, v.key)
		v.retired = true
		victims = append(victims, v)
		count--
		mem -= v.key.prof.Limits.MemoryMB
	}
	return victims, true
}

// victimLocked is the idle zygote of the tenant holding the most zygotes
// (tenant itself on a tie), least recently used; nil when that tenant has
// none idle, or holds fewer than tenant would after this start.
func (zs *zygotes) victimLocked(tenant string) *zygote {
	held := map[string]int{}
	for k := range zs.m {
		held[k.tenant]++
	}
	top, most := tenant, held[tenant]
	for t, n := range held {
		if n > most || (n == most && t < top && top != tenant) {
			top, most = t, n
		}
	}
	if most == 0 || (top != tenant && most <= held[tenant]) {
		return nil
	}
	var victim *zygote
	for k, z := range zs.m {
		if k.tenant == top && z.inflight == 0 && (victim == nil || z.used.Before(victim.used)) {
			victim = z
		}
	}
	return victim
}

// start starts a zygote for key and waits until it is ready.
func (zs *zygotes) start(key zygoteKey) (*zygote, error) {
	prof := key.prof
	prof.Zygote = true
	j, err := zs.r.startJail(prof, false)
	if err != nil {
		return nil, err
	}
	j.stdin.Close()
	ctl, ok := j.bridge.(*net.UnixConn)
	if !ok {
		_ = j.discard(zs.r.grace())
		return nil, &UnavailableError{Reason: "the zygote's control socket is not a unix socket"}
	}
	z := &zygote{
		key: key, j: j, ctl: ctl,
		ready: make(chan struct{}), dead: make(chan struct{}),
		replies: make(chan string, 1), exits: map[int]chan int{}, used: time.Now(),
		spares: make(chan *spare, zygoteSpares), cgroups: make(chan *cgroups.Run, zygoteCgroups),
	}
	go z.read()
	t := time.NewTimer(time.Duration(zs.cfg.StartMS) * time.Millisecond)
	defer t.Stop()
	select {
	case <-z.ready:
		if !z.scoped {
			zs.r.log.Warn("this kernel has no Landlock scope for abstract unix sockets (Linux 6.12 and later, Landlock enabled): concurrent level-process runs of a tenant can pass each other descriptors that keep an ended run's IPC objects and memory alive", "tenant_id", key.tenant)
		}
		return z, nil
	case <-z.dead:
	case <-t.C:
	}
	z.stop(zs.r)
	<-j.exited
	return nil, &UnavailableError{
		Reason: fmt.Sprintf("the zygote did not start: %s", clip(strings.TrimSpace(j.stderr.String()), 2000)),
		Log:    j.log.lines,
		Hint:   hostHint(j.log.lines),
	}
}

// retireIdle stops zygotes idle for longer than IdleMS.
func (zs *zygotes) retireIdle() {
	defer zs.wg.Done()
	idle := time.Duration(zs.cfg.IdleMS) * time.Millisecond
	t := time.NewTicker(max(idle/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-zs.stopTic:
			return
		case <-t.C:
		}
		var stale []*zygote
		zs.mu.Lock()
		for k, z := range zs.m {
			if z.inflight == 0 && time.Since(z.used) > idle {
				delete(zs.m, k)
				z.retired = true
				stale = append(stale, z)
			}
		}
		for k, z := range zs.next {
			if zs.m[k] == nil && time.Since(z.used) > idle {
				delete(zs.next, k)
				z.retired = true
				stale = append(stale, z)
			}
		}
		zs.mu.Unlock()
		for _, z := range stale {
			z.stop(zs.r)
		}
	}
}

// zygoteCgroups is how many reset cgroups a zygote keeps for its next
// runs: enough for the spares and the runs in flight at c=8.
const zygoteCgroups = 8

// recycle resets a finished run's cgroup for z's next runs or removes it,
// in the background, off the run's path: every process of the run is gone
// or killed already (procRun.kill, or endedWithEnvelope), and reset waits
// until nothing is left in it. close waits for these.
func (zs *zygotes) recycle(z *zygote, cg *cgroups.Run, executionID string) {
	zs.mu.Lock()
	if zs.closed {
		zs.mu.Unlock()
		zs.removeCgroup(cg, executionID)
		return
	}
	zs.removing.Add(1)
	zs.ended[cg] = struct{}{}
	zs.mu.Unlock()
	go func() {
		defer func() {
			zs.mu.Lock()
			delete(zs.ended, cg)
			zs.mu.Unlock()
			zs.removing.Done()
		}()
		if cg.Reset() && z.keepCgroup(cg) {
			zs.cgroupsKept.Add(1)
			return
		}
		zs.removeCgroup(cg, executionID)
	}()
}

// keepCgroup keeps a reset cgroup for z's next spare, unless z is stopped
// or has enough.
func (z *zygote) keepCgroup(cg *cgroups.Run) bool {
	z.fillMu.Lock()
	defer z.fillMu.Unlock()
	if z.stopped {
		return false
	}
	select {
	case z.cgroups <- cg:
		return true
	default:
		return false
	}
}

// runCgroup returns a reset cgroup of an earlier run of z, or a new one.
func (r *Runner) runCgroup(z *zygote, l Limits) (*cgroups.Run, error) {
	select {
	case cg := <-z.cgroups:
		return cg, nil
	default:
		return r.cg.Create(runid.New(), l.MemoryMB<<20, l.Pids)
	}
}

func (zs *zygotes) removeCgroup(cg *cgroups.Run, executionID string) {
	if err := cg.Remove(3 * time.Second); err != nil {
		zs.r.log.Warn("removing a run's cgroup", "execution_id", executionID, "error", err)
	}
}

// count is the number of live zygotes (for tests and Info).
func (zs *zygotes) count() int {
	zs.mu.Lock()
	defer zs.mu.Unlock()
	return len(zs.m)
}

// close stops every zygote. Runs in flight end SandboxCrashed.
func (zs *zygotes) close() {
	zs.mu.Lock()
	if zs.closed {
		zs.mu.Unlock()
		return
	}
	zs.closed = true
	close(zs.stopTic)
	var all []*zygote
	for k, z := range zs.m {
		z.retired = true // a spare being prepared is dropped, not kept
		all = append(all, z)
		delete(zs.m, k)
	}
	for k, z := range zs.next {
		z.retired = true
		all = append(all, z)
		delete(zs.next, k)
	}
	zs.mu.Unlock()
	zs.wg.Wait()
	for _, z := range all {
		z.stop(zs.r)
	}
	zs.removing.Wait()
}

// procRun is one run forked from a zygote.
type procRun struct {
	z       *zygote
	cg      *cgroups.Run
	pid     int // in the jail
	hostPID int
	pidfd   int // spare.pidfd, closed by finish
	// forked is when the zygote was asked to fork: the kernel may stamp an
	// audit record of the process with the time of an earlier syscall
	// than the one that killed it, never earlier than its fork.
	forked  time.Time
	stdin   *os.File
	bridge  net.Conn
	readEnd []*os.File

	stdout, stderr textCapture
	envelope       capture
	// envelopeEOF is closed when the result pipe reached EOF: the harness
	// closes it right after a complete envelope, just before it exits.
	envelopeEOF chan struct{}
	readers     sync.WaitGroup
}

// runProcess runs spec at level process.
func (r *Runner) runProcess(ctx context.Context, spec Spec, prof profile) (Result, error) {
	if err := checkProcessSpec(spec); err != nil {
		return errorResult(ErrInvalidInput, "invalid run spec: "+err.Error(), ""), nil
	}
	z, err := r.zygotes.acquire(zygoteKey{tenant: spec.TenantID, prof: prof})
	if errors.Is(err, errNoZygote) {
		r.log.Info("no zygote place free: running at level jail", "tenant_id", spec.TenantID, "execution_id", spec.ExecutionID)
		spec.Isolation = IsolationJail
		return r.Run(ctx, spec)
	}
	if err != nil {
		return Result{}, err
	}
	defer r.zygotes.done(z)
	p, err := r.forkRun(z, prof)
	if err != nil {
		select {
		case <-z.dead:
			r.zygotes.discardDead(z)
			return errorResult(ErrSandboxCrashed, "the run's zygote died before the run started: "+err.Error(), ""), nil
		default:
		}
		return Result{}, &UnavailableError{Reason: "starting a run in its zygote (zygote stderr: " + clip(z.j.stderr.String(), 2000) + ")", Err: err}
	}
	// The run's output goes to spec.Output as it comes (live output), as a
	// jail's does.
	watchCaptures(spec.Output, &p.stdout, &p.stderr)
	handoff := time.Now()
	req, err := encodeRequest(spec, handoff.UnixMilli())
	if err != nil {
		p.kill()
		p.finish(r, p.z.exitChan(p.pid))
		_ = p.cg.Remove(3 * time.Second)
		return errorResult(ErrInvalidInput, err.Error(), ""), nil
	}
	go func() {
		_, _ = p.stdin.Write(req)
		p.stdin.Close()
	}()
	bridge := r.runBridge(spec)
	bctx, bcancel := context.WithDeadline(ctx, handoff.Add(time.Duration(spec.Limits.TimeoutMS)*time.Millisecond))
	bsrv := serveBridge(bctx, connChannel{p.bridge}, bridge, r.log.With("execution_id", spec.ExecutionID))
	o, crashed := p.wait(ctx, r, prof.Limits, handoff)
	wall := time.Since(handoff)
	bsrv.stop()
	bcancel()
	stats := p.cg.Stats()
	if used, ok := p.cg.CPUUsage(); ok {
		o.CPUMS = used.Milliseconds()
	}
	r.zygotes.recycle(z, p.cg, spec.ExecutionID)
	usage := Usage{WallMS: wall.Milliseconds(), CPUMS: o.CPUMS, PeakMemoryKB: stats.PeakBytes >> 10, Warm: true, Isolation: IsolationProcess}
	if crashed {
		r.zygotes.discardDead(z)
		res := errorResult(ErrSandboxCrashed, "the run's zygote died during the run (nothing is retried)", "")
		res.Stdout, res.Stderr = p.stdout.String(), p.stderr.String()
		res.Usage = usage
		return res, nil
	}
	o.Envelope, o.EnvelopeTruncated = p.envelope.buf, p.envelope.truncated
	o.Runtime = prof.Runtime
	o.Limits = prof.Limits
	o.MemoryLimitHit = stats.MemoryLimitHit
	o.OOMKilled = stats.OOMKilled
	if o.childSignal() == syscall.SIGSYS && p.hostPID > 0 {
		o.DeniedSyscall = seccomp.SyscallFor(p.hostPID, p.forked, seccompRecordWait)
	}
	v := classify(o)
	if v.Unavailable != nil {
		return Result{}, v.Unavailable
	}
	return runResult(v, o, &p.stdout, &p.stderr, bridge, usage), nil
}

// spare is a process forked for a run ahead of it: in its cgroup, set up
// up to the hand-off, its harness waiting for the run's request on stdin.
// The runner holds the other ends of the run's descriptors.
type spare struct {
	pid, hostPID int
	pidfd        int // the process's pidfd (killPidfd); closed with the ends
	cg           *cgroups.Run
	exit         chan int
	forked       time.Time
	stdin        *os.File
	stdout       *os.File
	stderr       *os.File
	result       *os.File
	bridge       net.Conn
}

// closeEnds closes the runner's ends of the spare's descriptors.
func (sp *spare) closeEnds() {
	for _, f := range []*os.File{sp.stdin, sp.stdout, sp.stderr, sp.result} {
		f.Close()
	}
	sp.bridge.Close()
	syscall.Close(sp.pidfd)
}

// killPidfd kills the process of a pidfd (never another that reuses its
// pid).
func killPidfd(pidfd int) {
	_ = unix.PidfdSendSignal(pidfd, syscall.SIGKILL, nil, 0)
}

// discard kills a spare that will not run and removes its cgroup.
func (sp *spare) discard(z *zygote) {
	killPidfd(sp.pidfd)
	sp.closeEnds()
	t := time.NewTimer(time.Second)
	select {
	case <-sp.exit:
	case <-z.dead:
	case <-t.C:
	}
	t.Stop()
	z.forget(sp.pid)
	_ = sp.cg.Remove(time.Second)
}

// prepareSpare creates a run's cgroup, has z fork a process for it and
// moves that into the cgroup before it does anything else.
func (r *Runner) prepareSpare(z *zygote, prof profile) (_ *spare, err error) {
	var cleanup []func()
	defer func() {
		if err != nil {
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
		}
	}()
	l := prof.Limits
	cg, err := r.runCgroup(z, l)
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, func() { _ = cg.Remove(time.Second) })
	if err := cg.Prepare(); err != nil {
		return nil, err
	}
	sp, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	syncHost, syncChild := os.NewFile(uintptr(sp[0]), "sync"), os.NewFile(uintptr(sp[1]), "sync-child")
	cleanup = append(cleanup, func() { syncHost.Close() })
	defer syncChild.Close()
	if err := syscall.SetsockoptInt(sp[0], syscall.SOL_SOCKET, syscall.SO_PASSCRED, 1); err != nil {
		return nil, err
	}
	forked := time.Now()
	pid, err := z.fork([]int{int(syncChild.Fd())}, l.TmpMB<<20, ceilDiv(l.CPUMS, 1000)+1)
	if err != nil {
		return nil, err
	}
	exit := z.exitChan(pid)
	cleanup = append(cleanup, func() { z.forget(pid) })
	syncChild.Close()
	hostPID, err := readCredPID(syncHost, exit, z.dead)
	if err != nil {
		return nil, err
	}
	// The child waits for its descriptors, alive: its pidfd names it and
	// no process that reuses its pid later (pid_max is 32768 on some
	// hosts, so pids come round soon).
	pidfd, err := unix.PidfdOpen(hostPID, 0)
	if err != nil {
		_ = syscall.Kill(hostPID, syscall.SIGKILL)
		return nil, fmt.Errorf("opening the run's pidfd: %w", err)
	}
	cleanup = append(cleanup, func() { killPidfd(pidfd); syscall.Close(pidfd) })
	if err := cg.Enter(hostPID); err != nil {
		return nil, fmt.Errorf("moving the run into its cgroup: %w", err)
	}
	// In its cgroup: the child gets the run's descriptors and goes on with
	// its setup (its tmpfs mounts, capabilities, seccomp); its harness then
	// waits for the request.
	type pipe struct{ r, w *os.File }
	var pipes [4]pipe
	for i := range pipes {
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		pipes[i] = pipe{pr, pw}
		cleanup = append(cleanup, func() { pr.Close(); pw.Close() })
	}
	in, out, errp, res := pipes[0], pipes[1], pipes[2], pipes[3]
	bridgeConn, bridgeChild, err := bridgePair()
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, func() { bridgeConn.Close(); bridgeChild.Close() })
	fds := []int{int(in.r.Fd()), int(out.w.Fd()), int(errp.w.Fd()), int(res.w.Fd()), int(bridgeChild.Fd())}
	if err := syscall.Sendmsg(int(syncHost.Fd()), []byte("a"), unix.UnixRights(fds...), nil, 0); err != nil {
		return nil, fmt.Errorf("handing the run's descriptors to its process: %w", err)
	}
	syncHost.Close()
	// The child's ends now live in the child.
	for _, f := range []*os.File{in.r, out.w, errp.w, res.w, bridgeChild} {
		f.Close()
	}
	return &spare{
		pid: pid, hostPID: hostPID, pidfd: pidfd, cg: cg, exit: exit, forked: forked,
		stdin: in.w, stdout: out.r, stderr: errp.r, result: res.r, bridge: bridgeConn,
	}, nil
}

// takeSpare returns z's spare process, or prepares one, and has the next
// one prepared in the background.
func (r *Runner) takeSpare(z *zygote, prof profile) (*spare, error) {
	defer z.refill(r, prof)
	for {
		select {
		case sp := <-z.spares:
			select {
			case <-sp.exit: // killed while it waited (by a run of the same tenant)
				z.forget(sp.pid)
				sp.closeEnds()
				_ = sp.cg.Remove(time.Second)
				continue
			default:
				return sp, nil
			}
		default:
			return r.prepareSpare(z, prof)
		}
	}
}

// zygoteSpares is how many processes a zygote keeps ready for its next
// runs: two, so that a run that comes while the next is being prepared
// still finds one.
const zygoteSpares = 2

// refill prepares z's next spares, up to zygoteSpares, unless that is
// being done or z is retired or dead.
func (z *zygote) refill(r *Runner, prof profile) {
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
			if z.isRetired(r) {
				return
			}
			sp, err := r.prepareSpare(z, prof)
			if err != nil {
				return
			}
			select {
			case z.spares <- sp:
			default:
				sp.discard(z)
				return
			}
			if z.isRetired(r) {
				z.dropSpares()
				return
			}
		}
	}()
}

func (z *zygote) isRetired(r *Runner) bool {
	r.zygotes.mu.Lock()
	defer r.zygotes.mu.Unlock()
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

// forkRun takes a spare process of z for the run and starts reading its
// output; the run starts when its request is written on stdin.
func (r *Runner) forkRun(z *zygote, prof profile) (*procRun, error) {
	sp, err := r.takeSpare(z, prof)
	if err != nil {
		return nil, err
	}
	l := prof.Limits
	p := &procRun{
		z: z, cg: sp.cg, pid: sp.pid, hostPID: sp.hostPID, pidfd: sp.pidfd, forked: sp.forked,
		stdin: sp.stdin, bridge: sp.bridge,
		readEnd:     []*os.File{sp.stdout, sp.stderr, sp.result},
		stdout:      textCapture{max: int(l.OutputBytes), observe: &outputHook{stream: StreamStdout}},
		stderr:      textCapture{max: int(l.OutputBytes), observe: &outputHook{stream: StreamStderr}},
		envelope:    capture{max: int(l.OutputBytes) + envelopeOverhead},
		envelopeEOF: make(chan struct{}),
	}
	p.readers.Add(3)
	go func() { defer p.readers.Done(); p.stdout.readFrom(sp.stdout) }()
	go func() { defer p.readers.Done(); p.stderr.readFrom(sp.stderr) }()
	go func() { defer p.readers.Done(); p.envelope.readFrom(sp.result); close(p.envelopeEOF) }()
	return p, nil
}

// readCredPID waits for the child's report on the sync socket and returns
// its pid as the kernel gives it to this process (SCM_CREDENTIALS).
func readCredPID(sync *os.File, exit chan int, dead chan struct{}) (int, error) {
	type got struct {
		pid int
		err error
	}
	ch := make(chan got, 1)
	go func() {
		conn, err := net.FileConn(sync)
		if err != nil {
			ch <- got{err: err}
			return
		}
		defer conn.Close()
		uc := conn.(*net.UnixConn)
		_ = uc.SetReadDeadline(time.Now().Add(zygoteHandshakeTimeout))
		buf := make([]byte, 1)
		oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred))
		n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
		if err != nil || n != 1 || buf[0] != 'r' {
			ch <- got{err: fmt.Errorf("the run did not report (%v)", err)}
			return
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) == 0 {
			ch <- got{err: fmt.Errorf("the run's report carried no credentials (%v)", err)}
			return
		}
		cred, err := unix.ParseUnixCredentials(&msgs[0])
		if err != nil || cred.Pid <= 0 {
			ch <- got{err: fmt.Errorf("the run's report carried no pid (%v)", err)}
			return
		}
		ch <- got{pid: int(cred.Pid)}
	}()
	select {
	case g := <-ch:
		return g.pid, g.err
	case st := <-exit:
		exit <- st
		return 0, fmt.Errorf("the run's process exited during its setup (status %d)", st)
	case <-dead:
		return 0, errors.New("the zygote is gone")
	}
}

// wait waits for the run to end (stopping it at the deadline, at its CPU
// limit, or when ctx ends), kills every process left in its cgroup and
// collects its output. crashed says the zygote died first.
func (p *procRun) wait(ctx context.Context, r *Runner, l Limits, handoff time.Time) (o outcome, crashed bool) {
	exit := p.z.exitChan(p.pid)
	defer p.z.forget(p.pid)
	timer := time.NewTimer(time.Duration(l.TimeoutMS)*time.Millisecond - time.Since(handoff))
	defer timer.Stop()
	cpuLimit := time.Duration(l.CPUMS) * time.Millisecond
	cpuBase, watching := p.cg.CPUUsage()
	var cpuTick <-chan time.Time
	cpuTimer := time.NewTimer(cpuPollDelay(cpuLimit))
	defer cpuTimer.Stop()
	if watching {
		cpuTick = cpuTimer.C
	}
	status := -1
	envelopeEOF := p.envelopeEOF
	// ended: the run ended with its envelope; killedWhole: its harness was
	// killed after a whole envelope (its SIGKILL status is not the run's).
	ended, killedWhole := false, false
wait:
	for {
		select {
		case status = <-exit:
			break wait
		case <-envelopeEOF:
			envelopeEOF = nil
			if ended, killedWhole = p.endedWithEnvelope(); ended {
				status = 0
				r.zygotes.endedEarly.Add(1)
				break wait
			}
		case <-p.z.dead:
			crashed = true
			break wait
		case <-timer.C:
			o.TimedOut = true
			break wait
		case <-ctx.Done():
			o.Cancelled, o.CancelErr = true, context.Cause(ctx)
			break wait
		case <-cpuTick:
			used, _ := p.cg.CPUUsage()
			if used-cpuBase > cpuLimit {
				o.CPUKilled = true
				break wait
			}
			cpuTimer.Reset(cpuPollDelay(cpuLimit - (used - cpuBase)))
		}
	}
	if !ended {
		p.kill()
	}
	if status < 0 && !crashed {
		// Stopped by the runner: the zygote reports the kill.
		t := time.NewTimer(r.grace())
		select {
		case status = <-exit:
		case <-p.z.dead:
			crashed = true
		case <-t.C:
		}
		t.Stop()
	}
	p.finish(r, nil)
	if killedWhole && status >= 0 && syscall.WaitStatus(status).Signal() == syscall.SIGKILL {
		status = 0
	}
	ws := syscall.WaitStatus(status)
	switch {
	case status < 0:
		o.ExitCode = exitSignalBase + int(syscall.SIGKILL)
	case ws.Signaled():
		o.ExitCode = exitSignalBase + int(ws.Signal())
	default:
		o.ExitCode = ws.ExitStatus()
	}
	return o, crashed
}

// endedWithEnvelope ends a run whose harness closed a complete envelope
// without waiting for its process to be gone, which costs about a
// millisecond more (the kernel tears down a forked interpreter's memory
// and the zygote reaps it before it reports the exit). It holds only when
// the harness is the run's one process. The harness is killed first
// (SIGKILL to its whole thread group through its pidfd): from then on no
// fork of the run can succeed, so the tasks charged to the run's pids
// cgroup can only go. Then the cgroup must list no process but the
// harness, no task but its threads (/proc/<pid>/task, read before the
// list), and charge no more tasks than it lists, plus one for the
// harness's own zombie once it left the list: a fork under way when the
// kill came, or a child, even a zombie, is listed or charged beyond that.
// Then nothing of the run can execute again; its memory and CPU counters
// are final but for the kernel's own exit work. Otherwise (a child
// process, cgroup v2, an envelope not complete) the run ends as before,
// once every process is gone; killed says the harness was killed after its
// envelope all the same. The harness exits 0 after its envelope, which is
// the status the run gets; a signal that would have killed it in the
// microseconds between its envelope and its exit is not seen.
func (p *procRun) endedWithEnvelope() (ended, killed bool) {
	if p.cg.Version() != 1 || p.pidfd < 0 || p.envelope.truncated || !json.Valid(p.envelope.buf) {
		return false, false
	}
	// The harness's work is done (its envelope is whole): it is killed
	// whether or not the run can end now.
	if err := unix.PidfdSendSignal(p.pidfd, syscall.SIGKILL, nil, 0); err != nil && err != syscall.ESRCH {
		return false, false
	}
	return p.cg.HoldsOnly(p.hostPID), true
}

// kill kills every process in the run's cgroup until none is left (a fork
// bomb is bounded by the pids limit, so this ends).
func (p *procRun) kill() {
	killPidfd(p.pidfd)
	// Every process of the run is in each of its hierarchies (born there;
	// nothing in the jail can move one), so one listing names them all.
	deadline := time.Now().Add(3 * time.Second)
	for delay := 100 * time.Microsecond; ; delay = min(delay*2, 20*time.Millisecond) {
		pids := p.cg.Pids()
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(delay)
	}
}

// finish waits for the output readers (EOF once every process of the run
// is gone) and closes the runner's ends; exit, when not nil, is drained
// for the zygote's report of the killed child.
func (p *procRun) finish(r *Runner, exit chan int) {
	t := time.NewTimer(r.grace()) // the drain of exit waits until grace from here
	defer t.Stop()
	collectReaders(&p.readers, p.readEnd, r.grace())
	p.stdin.Close()
	p.bridge.Close()
	if exit != nil {
		select {
		case <-exit:
		case <-p.z.dead:
		case <-t.C:
		}
		p.z.forget(p.pid)
	}
	syscall.Close(p.pidfd)
	p.pidfd = -1
}
