package zygote

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/execgate/execgate/sandbox/cgroups"
)

// Pool keeps the warm zygotes within the budget of Config,
// shared fairly: when the budget is full, a new zygote replaces an idle
// one (no run in flight) of the tenant holding the most zygotes, least
// recently used first; a tenant with fewer never gives way to one with
// more. When nothing can give way, the run gets a fresh jail (level
// jail's isolation is strictly stronger; the log says so).
type Pool struct {
	cg    *cgroups.Manager // the runs' cgroups
	log   *slog.Logger
	grace time.Duration // how long a stopped run or zygote may take to end
	cfg   Config

	mu       sync.Mutex // guards m, starting, closed and the zygotes' counters
	m        map[Key]*zygote
	starting map[Key]chan struct{} // closed when the start ended
	// next holds the successors started ahead of zygotes near MaxRuns
	// (startNextLocked), promoted to m when theirs is gone.
	next    map[Key]*zygote
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
	// (Run.endedWithEnvelope).
	endedEarly atomic.Int64
}

// New returns a pool of zygotes within cfg's budget, whose runs' cgroups
// are made by cg; grace is how long a stopped run or zygote may take to
// end (sandbox.kill_grace_ms). Close it to stop them all.
func New(cfg Config, cg *cgroups.Manager, grace time.Duration, log *slog.Logger) *Pool {
	zs := &Pool{cg: cg, log: log, grace: grace, cfg: cfg.WithDefaults(), m: map[Key]*zygote{}, starting: map[Key]chan struct{}{}, next: map[Key]*zygote{}, stopTic: make(chan struct{}), ended: map[*cgroups.Run]struct{}{}}
	zs.wg.Add(1)
	go zs.retireIdle()
	return zs
}

// ErrFull: the budget is full and nothing can give way (the run is to get
// a fresh jail instead).
var ErrFull = errors.New("the zygote budget is full")

// acquire returns a live zygote for key with one more run in flight
// (release it with done), starting one when needed.
func (zs *Pool) acquire(key Key, start StartFunc) (*zygote, error) {
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
				go z.stop()
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
				zs.startNextLocked(key, start)
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
			return nil, ErrFull
		}
		done := make(chan struct{})
		zs.starting[key] = done
		zs.mu.Unlock()
		for _, v := range victims {
			v.stop()
		}
		z, err := zs.start(key, start)
		zs.mu.Lock()
		delete(zs.starting, key)
		close(done)
		if err != nil {
			zs.mu.Unlock()
			return nil, err
		}
		if zs.closed {
			zs.mu.Unlock()
			z.stop()
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
func (zs *Pool) startNextLocked(key Key, start StartFunc) {
	if zs.closed || zs.next[key] != nil {
		return
	}
	if _, ok := zs.starting[key]; ok {
		return
	}
	if len(zs.m)+len(zs.starting)+len(zs.next)+1 > zs.cfg.Max || zs.memoryLocked()+key.Limits.MemoryMB > zs.cfg.MemoryMB {
		return
	}
	done := make(chan struct{})
	zs.starting[key] = done
	zs.wg.Add(1) // not closed, under mu: before close's Wait
	go func() {
		defer zs.wg.Done()
		z, err := zs.start(key, start)
		zs.mu.Lock()
		delete(zs.starting, key)
		close(done)
		switch {
		case err != nil:
			zs.mu.Unlock()
			zs.log.Warn("starting a zygote's successor", "tenant_id", key.Tenant, "error", err)
			return
		case zs.closed:
			zs.mu.Unlock()
			z.stop()
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
func (zs *Pool) done(z *zygote) {
	zs.mu.Lock()
	z.inflight--
	z.used = time.Now()
	stop := z.retired && z.inflight == 0
	zs.mu.Unlock()
	if stop {
		z.stop()
	}
}

// discardDead drops z if it died (its runs ended SandboxCrashed).
func (zs *Pool) discardDead(z *zygote) {
	zs.mu.Lock()
	if zs.m[z.key] == z {
		delete(zs.m, z.key)
	}
	z.retired = true
	zs.mu.Unlock()
}

// memoryLocked is the memory the live zygotes count, MiB.
func (zs *Pool) memoryLocked() int64 {
	var n int64
	for k := range zs.m {
		n += k.Limits.MemoryMB
	}
	for k := range zs.starting {
		n += k.Limits.MemoryMB
	}
	for k := range zs.next {
		n += k.Limits.MemoryMB
	}
	return n
}

// makeRoomLocked picks the zygotes to stop so that key fits the budget.
func (zs *Pool) makeRoomLocked(key Key) ([]*zygote, bool) {
	need := key.Limits.MemoryMB
	if need > zs.cfg.MemoryMB || zs.cfg.Max == 0 {
		return nil, false
	}
	var victims []*zygote
	count := len(zs.m) + len(zs.starting) + len(zs.next)
	mem := zs.memoryLocked()
	for count+1 > zs.cfg.Max || mem+need > zs.cfg.MemoryMB {
		v := zs.victimLocked(key.Tenant)
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
		mem -= v.key.Limits.MemoryMB
	}
	return victims, true
}

// victimLocked is the idle zygote of the tenant holding the most zygotes
// (tenant itself on a tie), least recently used; nil when that tenant has
// none idle, or holds fewer than tenant would after this start.
func (zs *Pool) victimLocked(tenant string) *zygote {
	held := map[string]int{}
	for k := range zs.m {
		held[k.Tenant]++
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
		if k.Tenant == top && z.inflight == 0 && (victim == nil || z.used.Before(victim.used)) {
			victim = z
		}
	}
	return victim
}

// start starts a zygote for key and waits until it is ready.
func (zs *Pool) start(key Key, start StartFunc) (*zygote, error) {
	j, err := start()
	if err != nil {
		return nil, err
	}
	z := &zygote{
		key: key, pool: zs, j: j, ctl: j.Control(),
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
			zs.log.Warn("this kernel has no Landlock scope for abstract unix sockets (Linux 6.12 and later, Landlock enabled): concurrent level-process runs of a tenant can pass each other descriptors that keep an ended run's IPC objects and memory alive", "tenant_id", key.Tenant)
		}
		return z, nil
	case <-z.dead:
	case <-t.C:
	}
	z.stop()
	<-j.Exited()
	return nil, j.Unavailable(fmt.Sprintf("the zygote did not start: %s", clip(strings.TrimSpace(j.Stderr()), 2000)))
}

// retireIdle stops zygotes idle for longer than IdleMS.
func (zs *Pool) retireIdle() {
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
			z.stop()
		}
	}
}

// zygoteCgroups is how many reset cgroups a zygote keeps for its next
// runs: enough for the spares and the runs in flight at c=8.
const zygoteCgroups = 8

// recycle resets a finished run's cgroup for z's next runs or removes it,
// in the background, off the run's path: every process of the run is gone
// or killed already (Run.kill, or Run.endedWithEnvelope), and reset waits
// until nothing is left in it. close waits for these.
func (zs *Pool) recycle(z *zygote, cg *cgroups.Run, executionID string) {
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
		defer zs.removing.Done()
		unlist := func() {
			zs.mu.Lock()
			delete(zs.ended, cg)
			zs.mu.Unlock()
		}
		if !cg.Reset() {
			zs.removeCgroup(cg, executionID)
			unlist()
			return
		}
		// Nothing of the run is left in it: it is no longer an ended
		// run's cgroup, and stops being listed as one before a spare of
		// the next run may enter it (State's EndedThreadFiles would list
		// that spare as a process of an ended run).
		unlist()
		if z.keepCgroup(cg) {
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

func (zs *Pool) removeCgroup(cg *cgroups.Run, executionID string) {
	if err := cg.Remove(3 * time.Second); err != nil {
		zs.log.Warn("removing a run's cgroup", "execution_id", executionID, "error", err)
	}
}

// Close stops every zygote. Runs in flight end SandboxCrashed.
func (zs *Pool) Close() {
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
		z.stop()
	}
	zs.removing.Wait()
}

// State is a snapshot of a Pool, for tests and diagnosis.
type State struct {
	// Live and Next count the live zygotes and the successors started
	// ahead and not yet promoted; IDs names the live ones
	// "<tenant>/<nsjail pid>", sorted.
	Live, Next int
	IDs        []string
	// Filling: some zygote is preparing a spare process.
	Filling bool
	// Cgroups counts the run cgroups the zygotes hold: each zygote's own,
	// its spares' and the finished runs' kept for the next spares.
	Cgroups int
	// CgroupsReused counts the finished runs' cgroups reset for another
	// run; EndedEarly the runs that ended with their envelope.
	CgroupsReused, EndedEarly int64
	// Scoped says a live zygote's runs get the Landlock scope on abstract
	// unix sockets (Linux 6.12+); ScopeKnown is false when none is live.
	Scoped, ScopeKnown bool
	// EndedThreadFiles list the threads in the cgroups of runs that ended
	// and are not reset or removed yet (cgroups.Run.ThreadFiles).
	EndedThreadFiles []string
}

// State returns a snapshot of the pool.
func (zs *Pool) State() State {
	zs.mu.Lock()
	defer zs.mu.Unlock()
	s := State{Live: len(zs.m), Next: len(zs.next), CgroupsReused: zs.cgroupsKept.Load(), EndedEarly: zs.endedEarly.Load()}
	for k, z := range zs.m {
		s.IDs = append(s.IDs, fmt.Sprintf("%s/%d", k.Tenant, z.j.Pid()))
		s.Filling = s.Filling || z.filling.Load()
		s.Cgroups += 1 + len(z.spares) + len(z.cgroups)
		s.Scoped, s.ScopeKnown = z.scoped, true
	}
	for _, z := range zs.next {
		s.Cgroups += 1 + len(z.spares) + len(z.cgroups)
	}
	sort.Strings(s.IDs)
	for cg := range zs.ended {
		s.EndedThreadFiles = append(s.EndedThreadFiles, cg.ThreadFiles()...)
	}
	return s
}
