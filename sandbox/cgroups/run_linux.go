package cgroups

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Run is the cgroup of one run: made by Manager.Create with the run's
// limits, and gone after Remove (or kept for another run by Reset).
type Run struct {
	cg   *Manager
	name string   // <parent>/<run>
	dirs []string // one per hierarchy (v1) or one (v2)
	// oomEvents (v1 only) is an eventfd the kernel signals when the run's
	// cgroup goes out of memory. v1 keeps OOM-kill counts in the victim's
	// own cgroup (nsjail's, deleted at exit), so the run's cgroup registers
	// for the notification instead. -1 when unused.
	oomEvents int
	oomCtl    *os.File
	// cpuFile is where the jail's CPU time is read ("" when the host has
	// no CPU accounting); cpuStat says it is a cpu.stat (usage_usec), not
	// a cpuacct.usage (nanoseconds).
	cpuFile string
	cpuStat bool
	// into is the open directory of the cgroup nsjail is started in
	// (CLONE_INTO_CGROUP), nil when it starts where the runner is.
	into *os.File
	// procs are the cgroup.procs files Enter moves a process in through
	// (Prepare).
	procs []string
	// cpuBase and oomKillBase are the cumulative counters' values when the
	// cgroup was last reset for a new run (Reset); zero for a new cgroup.
	cpuBase     time.Duration
	oomKillBase int64

	// files holds the cgroup's files a run reads or writes open, read and
	// written at offset 0 again and again (a run at level process uses
	// about 25 of them, and opening a kernfs file costs more than reading
	// it); -1 marks a file this host does not have. Closed by Remove.
	fmu   sync.Mutex
	files map[string]int
}

// file returns an open descriptor of the cgroup file at path, for reading
// or for writing.
func (rc *Run) file(path string, write bool) (int, error) {
	key, mode := path, syscall.O_RDONLY
	if write {
		key, mode = path+"\x00w", syscall.O_WRONLY
	}
	rc.fmu.Lock()
	defer rc.fmu.Unlock()
	if fd, ok := rc.files[key]; ok {
		if fd < 0 {
			return -1, &fs.PathError{Op: "open", Path: path, Err: syscall.ENOENT}
		}
		return fd, nil
	}
	fd, err := syscall.Open(path, mode|syscall.O_CLOEXEC, 0)
	if err != nil {
		if err == syscall.ENOENT {
			rc.setFile(key, -1)
		}
		return -1, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	rc.setFile(key, fd)
	return fd, nil
}

func (rc *Run) setFile(key string, fd int) {
	if rc.files == nil {
		rc.files = map[string]int{}
	}
	rc.files[key] = fd
}

// closeFiles closes the descriptors file opened.
func (rc *Run) closeFiles() {
	rc.fmu.Lock()
	defer rc.fmu.Unlock()
	for _, fd := range rc.files {
		if fd >= 0 {
			syscall.Close(fd)
		}
	}
	rc.files = nil
}

// read reads the whole cgroup file at path (from offset 0). A v1 list of
// processes or tasks is opened afresh each time: the kernel keeps the list
// an open file read first, for up to a second.
func (rc *Run) read(path string) ([]byte, error) {
	var fd int
	var err error
	if base := filepath.Base(path); base == "cgroup.procs" || base == "tasks" {
		if fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err != nil {
			return nil, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		defer syscall.Close(fd)
	} else if fd, err = rc.file(path, false); err != nil {
		return nil, err
	}
	buf := make([]byte, 512)
	for {
		n, err := syscall.Pread(fd, buf, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n < len(buf) {
			return buf[:n], nil
		}
		buf = make([]byte, 2*len(buf))
	}
}

// write writes value to the cgroup file at path, in one write.
func (rc *Run) write(path, value string) error {
	fd, err := rc.file(path, true)
	if err == nil {
		_, err = syscall.Pwrite(fd, []byte(value), 0)
	}
	if err != nil {
		return fmt.Errorf("writing %q to %s: %w", value, path, err)
	}
	return nil
}

// readInt is readInt (0 when unreadable) on the cgroup's open file.
func (rc *Run) readInt(path string) int64 {
	data, err := rc.read(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(string(bytes.TrimSpace(data)), 10, 64)
	return n
}

// readKey is readKeyOK on the cgroup's open file.
func (rc *Run) readKey(path, key string) (int64, bool) {
	data, err := rc.read(path)
	if err != nil {
		return 0, false
	}
	return keyValue(data, key)
}

// cpuPeriodUS is the CFS period of a run's CPU bandwidth.
const cpuPeriodUS = 100000

// Create makes the run's cgroup with its limits. On error nothing is left.
func (c *Manager) Create(run string, memBytes, pids int64) (*Run, error) {
	rc := &Run{cg: c, name: c.parent + "/" + run, oomEvents: -1}
	for _, d := range c.ParentDirs() {
		rc.dirs = append(rc.dirs, filepath.Join(d, run))
	}
	switch c.acct {
	case acctV2:
		rc.cpuFile, rc.cpuStat = filepath.Join(rc.dirs[0], "cpu.stat"), true
	case acctV1Cpuacct:
		rc.cpuFile = filepath.Join(rc.dirs[2], "cpuacct.usage")
	case acctUnified:
		rc.cpuFile, rc.cpuStat = filepath.Join(rc.dirs[3], "cpu.stat"), true
	}
	for _, d := range rc.dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			rc.Remove(time.Second)
			return nil, c.unavailable("creating the run's cgroup", err)
		}
	}
	var writes [][2]string
	mem := strconv.FormatInt(memBytes, 10)
	if c.version == 1 {
		writes = [][2]string{
			{filepath.Join(rc.dirs[0], "memory.limit_in_bytes"), mem},
			{filepath.Join(rc.dirs[0], "memory.memsw.limit_in_bytes"), mem}, // only with swap accounting
			{filepath.Join(rc.dirs[1], "pids.max"), strconv.FormatInt(pids, 10)},
			// One CPU of bandwidth, as nsjail gives a jail (cgroup_cpu_ms_per_sec):
			// a run at level process sits in this cgroup itself.
			{filepath.Join(rc.dirs[2], "cpu.cfs_period_us"), strconv.Itoa(cpuPeriodUS)},
			{filepath.Join(rc.dirs[2], "cpu.cfs_quota_us"), strconv.Itoa(CPUMsPerSec * cpuPeriodUS / 1000)},
		}
	} else {
		writes = [][2]string{
			{filepath.Join(rc.dirs[0], "cgroup.subtree_control"), "+" + strings.Join(c.v2Ctrls(), " +")},
			{filepath.Join(rc.dirs[0], "memory.max"), mem},
			{filepath.Join(rc.dirs[0], "memory.swap.max"), "0"}, // only with swap accounting
			{filepath.Join(rc.dirs[0], "pids.max"), strconv.FormatInt(pids, 10)},
			{filepath.Join(rc.dirs[0], "cpu.max"), fmt.Sprintf("%d %d", CPUMsPerSec*cpuPeriodUS/1000, cpuPeriodUS)},
		}
	}
	for _, w := range writes {
		err := writeFile(w[0], w[1])
		if err != nil && errors.Is(err, fs.ErrNotExist) && strings.Contains(w[0], "sw") {
			continue // no swap accounting on this host
		}
		if err != nil && errors.Is(err, fs.ErrNotExist) && strings.Contains(filepath.Base(w[0]), "cpu") {
			continue // no CPU bandwidth control on this host: nsjail's own limit still holds for jails
		}
		if err != nil {
			rc.Remove(time.Second)
			return nil, c.unavailable("setting "+filepath.Base(w[0]), err)
		}
	}
	if c.version == 1 {
		if err := rc.watchOOM(); err != nil {
			rc.Remove(time.Second)
			return nil, c.unavailable("registering for OOM notifications", err)
		}
	}
	if c.acct == acctUnified {
		f, err := os.Open(rc.dirs[3])
		if err != nil {
			rc.Remove(time.Second)
			return nil, c.unavailable("opening the run's CPU accounting cgroup", err)
		}
		rc.into = f
	}
	return rc, nil
}

// CPUUsage returns the CPU time every process of the jail has used so far
// (those that exited included); ok is false without CPU accounting.
func (rc *Run) CPUUsage() (used time.Duration, ok bool) {
	if rc.cpuFile == "" {
		return 0, false
	}
	if rc.cpuStat {
		us, found := rc.readKey(rc.cpuFile, "usage_usec")
		return time.Duration(us)*time.Microsecond - rc.cpuBase, found
	}
	data, err := rc.read(rc.cpuFile)
	if err != nil {
		return 0, false
	}
	ns, err := strconv.ParseInt(string(bytes.TrimSpace(data)), 10, 64)
	return time.Duration(ns) - rc.cpuBase, err == nil
}

// reuseSlackBytes is the most memory a finished run's v1 cgroup may still
// have charged and be reset for another run: the next run's effective
// limit and peak are off by at most this much. After a trivial run about
// 200-260 KiB stays charged (kernel objects freed lazily; only
// memory.force_empty, which costs as much as a new cgroup, reclaims them).
// A run at level jail starts with its interpreter's ≈ 10 MB charged; one
// at level process with none of the zygote's memory.
const reuseSlackBytes = 512 << 10

// Reset makes a finished run's cgroup ready for another run with the same
// limits, so that a run at level process does not pay for creating and
// removing four v1 cgroups; false when it cannot, and the cgroup is to be
// removed. It holds only on cgroup v1, where every counter a run's outcome
// is read from can be reset or given a base: memory.max_usage_in_bytes
// and memory.failcnt are reset, the OOM eventfd drained, oom_kill and the
// CPU usage given a base. The cgroup must hold no process (every process
// of the last run is gone: no process ever joins a later run's cgroup)
// and at most reuseSlackBytes of charge (a v1 memory cgroup keeps page
// cache charged after its processes are gone).
// On cgroup v2, memory.peak cannot be reset for a reader that opens it
// afresh, so its cgroups are never reused.
func (rc *Run) Reset() bool {
	if rc.cg.version != 1 || rc.oomEvents < 0 {
		return false
	}
	// A run that ended with its envelope (procRun.endedWithEnvelope) left
	// its killed harness exiting; a process is charged to the pids
	// controller until its parent (the zygote) reaps it, after it left
	// cgroup.procs. Every process of the run was killed already (by pid
	// here it could be another's, reused).
	for delay, deadline := 500*time.Microsecond, time.Now().Add(time.Second); ; delay = min(delay*2, 20*time.Millisecond) {
		data, err := rc.read(filepath.Join(rc.dirs[1], "cgroup.procs"))
		if err != nil {
			return false
		}
		if len(bytes.TrimSpace(data)) == 0 && rc.readInt(filepath.Join(rc.dirs[1], "pids.current")) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(delay)
	}
	// Empty in every hierarchy: a run's processes are in all of them
	// (moved into each before they ran anything; born there after).
	mem := rc.dirs[0]
	usage := filepath.Join(mem, "memory.usage_in_bytes")
	// What the run's exit charged (page tables, kernel stacks) is released
	// over a few milliseconds. Page cache it left charged is not reclaimed
	// here (memory.force_empty costs more than a new cgroup): the cgroup
	// is removed instead.
	for try := 0; rc.readInt(usage) > reuseSlackBytes; try++ {
		if try == 5 {
			return false
		}
		time.Sleep(2 * time.Millisecond)
	}
	for _, f := range []string{"memory.max_usage_in_bytes", "memory.failcnt", "memory.memsw.max_usage_in_bytes", "memory.memsw.failcnt"} {
		if err := rc.write(filepath.Join(mem, f), "0"); err != nil && !(errors.Is(err, fs.ErrNotExist) && strings.Contains(f, "memsw")) {
			return false
		}
	}
	rc.oomCount() // drains the eventfd
	rc.oomKillBase, _ = rc.readKey(filepath.Join(mem, "memory.oom_control"), "oom_kill")
	rc.cpuBase = 0
	used, _ := rc.CPUUsage()
	rc.cpuBase = used
	return true
}

// watchOOM registers an eventfd for the v1 memory cgroup's OOM notification.
func (rc *Run) watchOOM() error {
	dir := rc.dirs[0]
	ctl, err := os.Open(filepath.Join(dir, "memory.oom_control"))
	if err != nil {
		return err
	}
	efd, _, errno := syscall.Syscall(syscall.SYS_EVENTFD2, 0, syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if errno != 0 {
		ctl.Close()
		return fmt.Errorf("eventfd: %w", errno)
	}
	if err := writeFile(filepath.Join(dir, "cgroup.event_control"), fmt.Sprintf("%d %d", efd, ctl.Fd())); err != nil {
		syscall.Close(int(efd))
		ctl.Close()
		return err
	}
	rc.oomEvents, rc.oomCtl = int(efd), ctl
	return nil
}

// oomCount reads (and resets) the number of OOM notifications so far.
func (rc *Run) oomCount() uint64 {
	if rc.oomEvents < 0 {
		return 0
	}
	var b [8]byte
	n, err := syscall.Read(rc.oomEvents, b[:])
	if err != nil || n != 8 {
		return 0 // EAGAIN: none
	}
	return binary.NativeEndian.Uint64(b[:])
}

// NsjailArgs are the per-run nsjail flags placing the jail below this cgroup
// (they override the profile's config file).
func (rc *Run) NsjailArgs() []string {
	if rc.cg.version == 1 {
		return []string{"--cgroup_mem_parent", rc.name, "--cgroup_pids_parent", rc.name, "--cgroup_cpu_parent", rc.name}
	}
	return []string{"--cgroupv2_mount", rc.dirs[0]}
}

// Stats are the kernel's counters for one run, read after it ended.
type Stats struct {
	PeakBytes int64
	// OOMKilled: the run's memory limit was reached and the kernel's OOM
	// killer acted in the run's cgroup (v2 oom_kill; v1 the OOM
	// notification), whichever process it chose.
	OOMKilled bool
	// MemoryLimitHit: OOMKilled, or the kernel refused a charge at the
	// limit (v1 failcnt, v2 oom): weaker evidence, used only when the jail
	// also ended without an envelope.
	MemoryLimitHit bool
}

func (rc *Run) Stats() Stats {
	var s Stats
	d := rc.dirs[0]
	if rc.cg.version == 1 {
		s.PeakBytes = rc.readInt(filepath.Join(d, "memory.max_usage_in_bytes"))
		oomKills, _ := rc.readKey(filepath.Join(d, "memory.oom_control"), "oom_kill")
		s.OOMKilled = rc.oomCount() > 0 || oomKills > rc.oomKillBase
		// With swap accounting the memsw counter (same limit) is charged
		// first and records the failure.
		s.MemoryLimitHit = s.OOMKilled ||
			rc.readInt(filepath.Join(d, "memory.failcnt")) > 0 ||
			rc.readInt(filepath.Join(d, "memory.memsw.failcnt")) > 0
		return s
	}
	s.PeakBytes = rc.readInt(filepath.Join(d, "memory.peak"))
	ev := filepath.Join(d, "memory.events")
	kills, _ := rc.readKey(ev, "oom_kill")
	ooms, _ := rc.readKey(ev, "oom")
	s.OOMKilled = kills > 0
	s.MemoryLimitHit = s.OOMKilled || ooms > 0
	return s
}

// Remove deletes the run's cgroup and whatever nsjail left below it,
// retrying while the last tasks are still exiting, for at most wait.
func (rc *Run) Remove(wait time.Duration) error {
	if rc.oomEvents >= 0 {
		syscall.Close(rc.oomEvents)
		rc.oomCtl.Close()
		rc.oomEvents, rc.oomCtl = -1, nil
	}
	if rc.into != nil {
		rc.into.Close()
		rc.into = nil
	}
	rc.closeFiles()
	deadline := time.Now().Add(wait)
	var errs []error
	for _, d := range rc.dirs {
		if err := removeCgroupDir(d, deadline); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func removeCgroupDir(dir string, deadline time.Time) error {
	for delay := time.Millisecond; ; delay = min(delay*2, 50*time.Millisecond) {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		// Children (nsjail's NSJAIL.<pid> after a kill) go first.
		if entries, rerr := os.ReadDir(dir); rerr == nil {
			for _, e := range entries {
				if e.IsDir() {
					_ = syscall.Rmdir(filepath.Join(dir, e.Name()))
				}
			}
			if syscall.Rmdir(dir) == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("removing cgroup %s: %w", dir, err)
		}
		time.Sleep(delay)
	}
}

func writeFile(path, value string) error {
	fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	_, err = syscall.Write(fd, []byte(value))
	if cerr := syscall.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %q to %s: %w", value, path, err)
	}
	return nil
}

// keyValue finds "key value" in a flat-keyed cgroup file's content.
func keyValue(data []byte, key string) (int64, bool) {
	for line := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// Into is the open directory of the cgroup nsjail is to be started in
// (CLONE_INTO_CGROUP), nil when it starts where the runner is.
func (rc *Run) Into() *os.File { return rc.into }

// Version is the cgroup version of the run's cgroup, 1 or 2.
func (rc *Run) Version() int { return rc.cg.version }

// Prepare readies the run's cgroup for processes moved in by Enter (a run
// at level process): on v1 its cgroup in every hierarchy (and the hybrid
// accounting one); on v2 a leaf below it, "tool" (the run's cgroup
// delegates its controllers, so it cannot hold processes itself).
func (rc *Run) Prepare() error {
	if rc.cg.version == 2 {
		leaf := filepath.Join(rc.dirs[0], "tool")
		if err := os.Mkdir(leaf, 0o755); err != nil {
			return rc.cg.unavailable("creating the run's leaf cgroup", err)
		}
		rc.procs = []string{filepath.Join(leaf, "cgroup.procs")}
		return nil
	}
	files := make([]string, len(rc.dirs))
	for i, d := range rc.dirs {
		files[i] = filepath.Join(d, "cgroup.procs")
	}
	rc.procs = files
	return nil
}

// Enter moves the process of host pid pid into the run's cgroup (Prepare
// first), in every hierarchy.
func (rc *Run) Enter(pid int) error {
	for _, f := range rc.procs {
		if err := rc.write(f, strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// Pids lists the processes in the run's cgroup (Prepare first). Every
// process of a run is in each of its hierarchies (moved into each before
// it ran anything; born there after), so one listing names them all.
func (rc *Run) Pids() []int {
	seen := map[int]bool{}
	var out []int
	for _, f := range rc.procs[:1] {
		data, err := rc.read(f)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(s); err == nil && !seen[pid] {
				seen[pid] = true
				out = append(out, pid)
			}
		}
	}
	return out
}

// Charged is the number of tasks the run's pids controller charges: every
// task of the run, a fork under way (charged before it is listed) and a
// zombie not yet reaped included; -1 when it cannot be read.
func (rc *Run) Charged() int64 {
	dir := rc.dirs[0]
	if rc.cg.version == 1 {
		dir = rc.dirs[1] // pids
	}
	data, err := rc.read(filepath.Join(dir, "pids.current"))
	if err != nil {
		return -1
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(data)), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// HoldsOnly reports whether the run's cgroup holds nothing that can still
// execute but the process of host pid pid, which the caller killed
// already (cgroup v1): its pids hierarchy lists no process but pid, no
// task but pid's threads (/proc/<pid>/task, read before the list), and
// charges no more tasks than it lists, plus one for pid's zombie once it
// left the list. A fork under way when the kill came, or a child, even a
// zombie, is listed or charged beyond that.
func (rc *Run) HoldsOnly(pid int) bool {
	dir := rc.dirs[1] // pids
	harness := strconv.Itoa(pid)
	procs, err := rc.read(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return false
	}
	for _, p := range strings.Fields(string(procs)) {
		if p != harness {
			return false
		}
	}
	threads := map[string]bool{}
	if entries, err := os.ReadDir("/proc/" + harness + "/task"); err == nil {
		for _, e := range entries {
			threads[e.Name()] = true
		}
	}
	data, err := rc.read(filepath.Join(dir, "tasks"))
	if err != nil {
		return false
	}
	tasks := strings.Fields(string(data))
	listed := false
	for _, tid := range tasks {
		if !threads[tid] {
			return false
		}
		listed = listed || tid == harness
	}
	charged, err := rc.read(filepath.Join(dir, "pids.current"))
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(charged)))
	allowed := len(tasks)
	if !listed {
		allowed++ // the harness's zombie, until the zygote reaps it
	}
	return err == nil && n <= allowed
}

// ThreadFiles are the files that list the threads in the run's cgroup: on
// v1 the pids hierarchy's tasks, on v2 cgroup.threads of the run's cgroup
// and of every cgroup below it (the level-process leaf). For checks that
// nothing of an ended run still executes.
func (rc *Run) ThreadFiles() []string {
	if rc.cg.version == 1 {
		return []string{filepath.Join(rc.dirs[1], "tasks")} // pids
	}
	var files []string
	_ = filepath.WalkDir(rc.dirs[0], func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			files = append(files, filepath.Join(p, "cgroup.threads"))
		}
		return nil
	})
	return files
}
