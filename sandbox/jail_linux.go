package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/sandbox/cgroups"
	"github.com/execgate/execgate/sandbox/internal/runid"
	"github.com/execgate/execgate/sandbox/internal/unixpair"
	"github.com/execgate/execgate/sandbox/seccomp"
	"github.com/execgate/execgate/sandbox/uids"
	"github.com/execgate/execgate/sandbox/workspace"
)

// jail is one nsjail process: started (cold, or ahead of time for the warm
// pool), then handed exactly one request, then reaped and cleaned up. A jail
// is never reused.
//
// File descriptors of nsjail (and, except fd 4, of the harness):
//
//	0  stdin   the request (JSON), closed after writing; in a Deno jail the
//	           request as one frame (4-byte length | JSON), then the tool
//	           bridge's answers (bridge.go), open until the jail is gone
//	1  stdout  the tool's stdout, captured up to Limits.OutputBytes as encoded;
//	           in a Deno jail framed (demux.go): stdout, envelope and bridge
//	           requests
//	2  stderr  the tool's stderr, same cap
//	3  result  the harness's envelope (pass_fd 3), capped
//	4  log     nsjail's own log (log_fd 4); nsjail does not pass it on, so the
//	           tool gets EBADF and cannot forge nsjail's lines
//	5  bridge  one end of a unix socketpair (pass_fd 5): the tool bridge
//	           (bridge.go), served by the runner from the hand-off until the
//	           jail is gone (Python; Deno cannot open it and uses 0 and 1)
//	6  nsjail  nsjail's directory (or binary), opened by the runner as root,
//	           through which the child executes nsjail (openNsjail); nsjail
//	           does not pass it on
type jail struct {
	prof    profile
	cmd     *exec.Cmd
	cg      *cgroups.Run
	stdin   *os.File // write end of the request pipe
	readEnd []*os.File
	// uid is the jail's host uid, held until the jail is gone (release).
	uid *uids.Lease
	// dir is the jail's own host directory (WorkDir/jails/<run>) when it
	// needs one: its nsjail config and, in network mode proxy, the egress
	// directory bound at jaillayout.EgressDir. "" otherwise. Removed by release.
	dir string
	// ws is the jail's /workspace, attached below the view (nil for a
	// zygote's jail and mode validate). Closed by release.
	ws *workspace.Workspace

	// bridge is the runner's end of the tool bridge socket (bridge.go).
	bridge net.Conn

	stdout, stderr textCapture
	envelope       capture
	log            logCapture
	// framed is a Deno jail's stdout, demultiplexed (demux.go); nil for Python.
	framed  *framedChannel
	readers sync.WaitGroup

	exited  chan struct{} // closed once cmd.Wait returned
	waitErr error         // set before exited is closed
	started time.Time
}

// startJail starts nsjail for profile p, up to the point where the harness
// waits for its request on stdin. p.Deps, when not empty, names the
// directory of the run's packages under DepsDir, bound read-only at
// jaillayout.DepsDir. Each step pushes its undo on a stack that unwinds,
// last first, if a later step fails.
func (r *Runner) startJail(p profile, warm bool) (_ *jail, err error) {
	var undo cleanups
	defer func() {
		if err != nil {
			undo.run()
		}
	}()
	runID := runid.New()
	dir, cfgPath, err := r.jailConfig(p, warm, runID, &undo)
	if err != nil {
		return nil, err
	}
	cg, err := r.cg.Create(runID, p.Limits.MemoryMB<<20, p.Limits.Pids)
	if err != nil {
		return nil, err
	}
	undo.add(func() { _ = cg.Remove(time.Second) })
	// The jail's own host uid, held until the jail is gone (release).
	lease, err := r.uids.Acquire()
	if err != nil {
		return nil, err
	}
	undo.add(lease.Release)
	ws, err := r.newWorkspace(p, lease.UID, runID)
	if err != nil {
		return nil, err
	}
	if ws != nil {
		undo.add(ws.Close)
	}
	fds, err := openJailFDs(&undo)
	if err != nil {
		return nil, err
	}
	cmd := r.nsjailCommand(cfgPath, lease, cg, fds, ws)
	// Under the ABI filter (package seccomp), or not at all.
	if err := seccomp.StartConfined(cmd); err != nil {
		var unavailable *UnavailableError
		if errors.As(err, &unavailable) {
			return nil, unavailable
		}
		return nil, &UnavailableError{Reason: "starting nsjail " + r.nsjail, Hint: setupHint, Err: err}
	}
	// From here the jail owns everything; the child's ends are closed in
	// the parent so EOF arrives when the jail is gone.
	fds.closeChildEnds()
	j := &jail{
		prof:    p,
		cmd:     cmd,
		cg:      cg,
		uid:     lease,
		dir:     dir,
		ws:      ws,
		stdin:   fds.stdin.w,
		bridge:  fds.bridge,
		readEnd: []*os.File{fds.stdout.r, fds.stderr.r, fds.result.r, fds.log.r},
		exited:  make(chan struct{}),
		started: time.Now(),
	}
	j.capture(fds)
	return j, nil
}

// newWorkspace makes the /workspace of a jail of p and attaches it below
// the view (where the jail's uid reaches it), for nsjail to bind; nil for
// a jail without one (a zygote's: its runs get theirs; mode validate).
func (r *Runner) newWorkspace(p profile, uid uint32, runID string) (*workspace.Workspace, error) {
	if p.Zygote || p.Runtime == runtimeDenoCheck {
		return nil, nil
	}
	ws, err := workspace.New(workspaceConfig(p.Limits, uid))
	if err != nil {
		return nil, err
	}
	if err := ws.Attach(filepath.Join(r.wsDir, runID)); err != nil {
		ws.Close()
		return nil, err
	}
	return ws, nil
}

// workspaceConfig sizes the workspace of a run with limits l whose tool
// runs as the host uid uid.
func workspaceConfig(l Limits, uid uint32) workspace.Config {
	return workspace.Config{Files: l.Files, FilesBytes: l.FilesBytes, OutBytes: l.TmpMB << 20, UID: int(uid)}
}

// cleanups undoes the steps of a setup that failed half-way.
type cleanups []func()

func (c *cleanups) add(f func()) { *c = append(*c, f) }

// run undoes every step, last first.
func (c cleanups) run() {
	for i := len(c) - 1; i >= 0; i-- {
		c[i]()
	}
}

// jailConfig returns the nsjail config file for a jail of profile p, and
// the jail's own host directory ("" when it has none). A jail with host
// directories of its own (the egress socket's, the requirements) gets its
// own directory and config there; the others share their profile's file.
func (r *Runner) jailConfig(p profile, warm bool, runID string, undo *cleanups) (dir, cfgPath string, err error) {
	var binds []bind
	if p.Network == NetworkProxy {
		binds = append(binds, bind{Dst: jaillayout.EgressDir})
	}
	if p.Deps != "" {
		// The set's directory as the view shows it (package view).
		// Python environments may hold extension modules (mapped
		// executable); a JavaScript one is only read by Deno.
		binds = append(binds, bind{Src: filepath.Join(r.view.Deps, p.Deps), Dst: jaillayout.DepsDir, Exec: !p.Runtime.deno()})
	}
	if len(binds) == 0 {
		cfgPath, err = r.profileFile(p, warm)
		return "", cfgPath, err
	}
	dir = filepath.Join(r.cfg.WorkDir, jailsDir, runID)
	if err := os.Mkdir(dir, 0o711); err != nil {
		return "", "", &UnavailableError{Reason: "creating the jail's directory", Err: err}
	}
	undo.add(func() { os.RemoveAll(dir) })
	// The jail's uid passes through it to the egress directory,
	// whatever execgate's umask.
	if err := os.Chmod(dir, 0o711); err != nil {
		return "", "", &UnavailableError{Reason: "creating the jail's directory", Err: err}
	}
	if p.Network == NetworkProxy {
		egressDir := filepath.Join(dir, "egress")
		if err := os.Mkdir(egressDir, 0o755); err != nil {
			return "", "", &UnavailableError{Reason: "creating the jail's egress directory", Err: err}
		}
		if err := os.Chmod(egressDir, 0o755); err != nil {
			return "", "", &UnavailableError{Reason: "creating the jail's egress directory", Err: err}
		}
		binds[0].Src = filepath.Join(r.view.Jails, runID, "egress")
	}
	in := r.renderInput(p, warm)
	in.Binds = binds
	text, err := renderConfig(in)
	if err != nil {
		return "", "", fmt.Errorf("rendering the nsjail config: %w", err)
	}
	cfgPath = filepath.Join(dir, "nsjail.cfg")
	if err := os.WriteFile(cfgPath, []byte(text), 0o600); err != nil {
		return "", "", &UnavailableError{Reason: "writing the nsjail config", Err: err}
	}
	return dir, cfgPath, nil
}

// pipe is one pipe between the runner and nsjail.
type pipe struct{ r, w *os.File }

// jailFDs are the runner's and the child's ends of fds 0 to 5 of the fd
// contract above: the runner keeps one end of each, nsjail gets the other.
type jailFDs struct {
	stdin, stdout, stderr, result, log pipe
	// bridge is the runner's end of the tool bridge socket, bridgeChild
	// the jail's (fd 5).
	bridge      net.Conn
	bridgeChild *os.File
}

// openJailFDs creates the pipes and the bridge socket; undo closes them.
func openJailFDs(undo *cleanups) (*jailFDs, error) {
	var pipes [5]pipe
	for i := range pipes {
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, &UnavailableError{Reason: "creating pipes for nsjail", Err: err}
		}
		pipes[i] = pipe{pr, pw}
		undo.add(func() { pr.Close(); pw.Close() })
	}
	bridgeConn, bridgeChild, err := unixpair.Open()
	if err != nil {
		return nil, &UnavailableError{Reason: "creating the tool bridge socket", Err: err}
	}
	undo.add(func() { bridgeConn.Close(); bridgeChild.Close() })
	return &jailFDs{stdin: pipes[0], stdout: pipes[1], stderr: pipes[2], result: pipes[3], log: pipes[4],
		bridge: bridgeConn, bridgeChild: bridgeChild}, nil
}

// closeChildEnds closes, in the runner, the ends nsjail now holds.
func (f *jailFDs) closeChildEnds() {
	for _, c := range []*os.File{f.stdin.r, f.stdout.w, f.stderr.w, f.result.w, f.log.w, f.bridgeChild} {
		c.Close()
	}
}

// nsjailCommand is nsjail for one jail: its config, the jail's host uid
// (as nsjail's own credentials and in the id maps), its cgroups, and the
// fds of the contract above.
func (r *Runner) nsjailCommand(cfgPath string, lease *uids.Lease, cg *cgroups.Run, fds *jailFDs, ws *workspace.Workspace) *exec.Cmd {
	args := []string{r.nsjail, "--config", cfgPath}
	args = append(args, idMapArgs(lease.UID)...)
	args = append(args, cg.NsjailArgs()...)
	if ws != nil {
		// After the config's mounts: over the rootfs's empty /workspace.
		args = append(args, ws.BindArgs(jaillayout.WorkspaceDir)...)
	}
	cmd := &exec.Cmd{
		Path:       r.nsjailExec,
		Args:       args,
		Env:        []string{}, // nothing of the gateway's environment reaches nsjail
		Dir:        "/",
		Stdin:      fds.stdin.r,
		Stdout:     fds.stdout.w,
		Stderr:     fds.stderr.w,
		ExtraFiles: []*os.File{fds.result.w, fds.log.w, fds.bridgeChild, r.nsjailFile}, // fd 3, 4, 5, 6
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:   true,            // the runner signals nsjail's whole group
			Pdeathsig: syscall.SIGKILL, // and nsjail dies with the runner (the tool with nsjail)
			// nsjail runs as the jail's host uid, so the user namespace
			// it creates is owned by that uid: the kernel charges per-user
			// counts (inotify instances and watches, message queues,
			// processes) to the jail's uid at every level, never to root
			// shared by all jails (and the host's root services). The
			// capabilities it keeps are what it needs as a non-root
			// parent: writing the uid/gid maps, reading its root-owned
			// config, creating its cgroups.
			Credential:  &syscall.Credential{Uid: lease.UID, Gid: lease.UID, Groups: []uint32{}},
			AmbientCaps: nsjailCaps,
		},
	}
	if into := cg.Into(); into != nil {
		// Born in the run's CPU accounting cgroup, with everything the
		// jail will ever start: no process escapes the count.
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(into.Fd())
	}
	return cmd
}

// capture sets up the jail's output captures (capped at the profile's
// OutputBytes) and starts their readers and the reaper.
func (j *jail) capture(fds *jailFDs) {
	l := j.prof.Limits
	j.stdout = textCapture{max: int(l.OutputBytes), observe: &outputHook{stream: StreamStdout}}
	j.stderr = textCapture{max: int(l.OutputBytes), observe: &outputHook{stream: StreamStderr}}
	j.envelope = capture{max: int(l.OutputBytes) + envelopeOverhead}
	if j.prof.Runtime == runtimeDeno {
		j.framed = &framedChannel{envelope: capture{max: int(l.OutputBytes) + envelopeOverhead}, bridge: newStdioChannel(fds.stdin.w)}
	}
	j.readers.Add(4)
	go func() {
		defer j.readers.Done()
		if j.framed != nil {
			j.framed.demux(fds.stdout.r, &j.stdout)
			return
		}
		j.stdout.readFrom(fds.stdout.r)
	}()
	go func() { defer j.readers.Done(); j.stderr.readFrom(fds.stderr.r) }()
	go func() { defer j.readers.Done(); j.envelope.readFrom(fds.result.r) }()
	go func() { defer j.readers.Done(); j.log.readFrom(fds.log.r) }()
	go func() {
		j.waitErr = j.cmd.Wait()
		close(j.exited)
	}()
}

// watch passes the run's stdout and stderr to fn from now on (nil: to no
// one). The runner calls it before the hand-off.
func (j *jail) watch(fn OutputFunc) { watchCaptures(fn, &j.stdout, &j.stderr) }

// watchCaptures passes what the captures keep to fn from now on (nil: to
// no one).
func watchCaptures(fn OutputFunc, cs ...*textCapture) {
	for _, c := range cs {
		if fn == nil {
			c.observe.fn.Store(nil)
		} else {
			c.observe.fn.Store(&fn)
		}
	}
}

// bridgeChannel is the jail's tool bridge: the fd-5 socket, or in a Deno
// jail its stdout frames and stdin.
func (j *jail) bridgeChannel() bridgeChannel {
	if j.framed != nil {
		return j.framed.bridge
	}
	return connChannel{j.bridge}
}

// warmJail is a jail waiting in the warm pool (package pool).
type warmJail struct {
	j     *jail
	grace time.Duration
}

func (w warmJail) Alive() bool        { return w.j.alive() }
func (w warmJail) Started() time.Time { return w.j.started }
func (w warmJail) Discard() error     { return w.j.discard(w.grace) }

// Settle waits, at most max, until the jail's harness is blocked reading
// its request (the kernel says the jailed process is in read(0, ...)), the
// jail ended or stop returns true. A Deno jail (whose read is one of its
// runtime's threads' polls) does not wait.
func (w warmJail) Settle(max time.Duration, stop func() bool) {
	if w.j.prof.Runtime.deno() {
		return
	}
	deadline := time.Now().Add(max)
	for time.Now().Before(deadline) && w.j.alive() && !stop() {
		if readingStdin(w.j.cmd.Process.Pid) {
			return
		}
		time.Sleep(time.Millisecond) // a poll interval: a jail starts in 10-40 ms
	}
}

// readOfStdin is how /proc/<pid>/syscall begins for a process blocked in
// read(0, ...): the syscall's number, then its first argument.
var readOfStdin = fmt.Sprintf("%d 0x0 ", syscall.SYS_READ)

// readingStdin reports whether nsjail's child (the jail's process,
// /proc/<nsjail>/task/<nsjail>/children) is blocked in read(0, ...).
func readingStdin(nsjail int) bool {
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", nsjail, nsjail))
	if err != nil {
		return false
	}
	for _, kid := range strings.Fields(string(kids)) {
		if sc, err := os.ReadFile("/proc/" + kid + "/syscall"); err == nil && strings.HasPrefix(string(sc), readOfStdin) {
			return true
		}
	}
	return false
}

// startWarm starts a jail of p for the warm pool.
func (r *Runner) startWarm(p profile) (warmJail, error) {
	j, err := r.startJail(p, true)
	if err != nil {
		return warmJail{}, err
	}
	return warmJail{j: j, grace: r.grace()}, nil
}

// alive reports whether nsjail is still running (a warm jail may have died
// while it waited).
func (j *jail) alive() bool {
	select {
	case <-j.exited:
		return false
	default:
		return true
	}
}

// finished is what a jail left behind.
type finished struct {
	outcome outcome
	wall    time.Duration
	stats   cgroups.Stats
}

// run hands req to the jail, waits for it to end (stopping it at the
// deadline or when ctx ends), and collects everything. The jail is dead and
// its cgroup removed when run returns.
func (j *jail) run(ctx context.Context, req []byte, timeout, grace time.Duration, handoff time.Time) finished {
	go func() {
		// A jail that died early makes this fail with EPIPE; the outcome
		// says why it died.
		if j.framed != nil {
			// Deno: stdin stays open for the bridge's answers.
			_ = writeFrame(j.stdin, req)
			return
		}
		_, _ = j.stdin.Write(req)
		j.stdin.Close()
	}()
	var o outcome
	timer := time.NewTimer(timeout - time.Since(handoff))
	defer timer.Stop()
	// The CPU watch: the jail's CPU time from the hand-off on (a warm
	// jail's start-up is not the tool's), read from its cgroup while it
	// runs, checked more often as the limit nears.
	cpuLimit := time.Duration(j.prof.Limits.CPUMS) * time.Millisecond
	cpuBase, watching := j.cg.CPUUsage()
	var cpuTick <-chan time.Time // nil (never ready) without CPU accounting
	cpuTimer := time.NewTimer(cgroups.CPUPollDelay(cpuLimit))
	defer cpuTimer.Stop()
	if watching {
		cpuTick = cpuTimer.C
	}
wait:
	for {
		select {
		case <-j.exited:
			break wait
		case <-timer.C:
			o.TimedOut = true
			j.stop(grace)
			break wait
		case <-ctx.Done():
			o.Cancelled, o.CancelErr = true, context.Cause(ctx)
			j.stop(grace)
			break wait
		case <-cpuTick:
			used, _ := j.cg.CPUUsage()
			used -= cpuBase
			if used > cpuLimit && j.alive() {
				o.CPUKilled = true
				j.stop(grace)
				break wait
			}
			cpuTimer.Reset(cgroups.CPUPollDelay(cpuLimit - used))
		}
	}
	<-j.exited
	wall := time.Since(handoff)
	j.collect(grace)
	ps := j.cmd.ProcessState
	o.ExitCode = ps.ExitCode()
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		o.Signal = ws.Signal()
	}
	if used, ok := j.cg.CPUUsage(); ok {
		o.CPUMS = (used - cpuBase).Milliseconds()
	} else if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		o.CPUMS = (ru.Utime.Nano() + ru.Stime.Nano()) / int64(time.Millisecond)
	}
	o.Log = j.log.lines
	o.Envelope, o.EnvelopeTruncated = j.envelopeBytes()
	o.Runtime = j.prof.Runtime
	o.Limits = j.prof.Limits
	stats := j.cg.Stats()
	o.MemoryLimitHit = stats.MemoryLimitHit
	o.OOMKilled = stats.OOMKilled
	return finished{outcome: o, wall: wall, stats: stats}
}

// stop asks nsjail to end the jail (SIGTERM: it kills the tool and removes
// its cgroups), and kills nsjail's process group if it has not exited after
// grace.
func (j *jail) stop(grace time.Duration) {
	pgid := j.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-j.exited:
	case <-t.C:
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// collect waits for the output readers (they end at EOF once every process
// of the jail is gone) and closes the parent's pipe ends. Readers still
// blocked after grace are unblocked by closing their pipes.
func (j *jail) collect(grace time.Duration) {
	collectReaders(&j.readers, j.readEnd, grace)
	j.stdin.Close()
	j.bridge.Close()
}

// collectReaders waits for readers (they end at EOF once every process
// writing to readEnd is gone) and closes readEnd; readers still blocked
// after grace are unblocked by closing their pipes. Jails and runs at
// level process both end this way.
func collectReaders(readers *sync.WaitGroup, readEnd []*os.File, grace time.Duration) {
	done := make(chan struct{})
	go func() { readers.Wait(); close(done) }()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		for _, f := range readEnd {
			f.Close()
		}
		<-done
	}
	for _, f := range readEnd {
		f.Close()
	}
}

// collectDrained is collectReaders for a run whose writers are done (its
// harness ended it with a whole envelope and was killed): each pipe is
// waited for until it is empty (its reader has taken everything written),
// for at most grace in all, and then every read end is closed, which ends
// a reader blocked on it; it does not wait for EOF, which comes only once
// the kernel has torn the killed process down (≈ 4 ms for a Deno).
func collectDrained(readers *sync.WaitGroup, readEnd []*os.File, grace time.Duration) {
	deadline := time.Now().Add(grace)
	for _, f := range readEnd {
		for delay := 20 * time.Microsecond; pending(f) > 0 && time.Now().Before(deadline); delay = min(delay*2, time.Millisecond) {
			time.Sleep(delay)
		}
	}
	for _, f := range readEnd {
		f.Close()
	}
	readers.Wait()
}

// pending is how many bytes wait in the pipe of read end f (FIONREAD, which
// is TIOCINQ on Linux); 0 when it cannot tell.
func pending(f *os.File) int {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = rc.Control(func(fd uintptr) {
		n, _ = unix.IoctlGetInt(int(fd), unix.TIOCINQ) // FIONREAD
	})
	return n
}

// discard stops an unused (warm) jail and removes its cgroup and directory.
func (j *jail) discard(grace time.Duration) error {
	j.stdin.Close()
	if j.alive() {
		j.stop(grace)
	}
	<-j.exited
	j.collect(grace)
	err := j.cg.Remove(3 * time.Second)
	j.release()
	return err
}

// release removes the jail's own directory and frees its uid, once the
// jail is gone (nsjail exited, and its cgroup, with every process of the
// jail, removed).
func (j *jail) release() {
	if j.dir != "" {
		os.RemoveAll(j.dir)
	}
	j.ws.Release()
	j.uid.Release()
}

// nsjailCaps are the capabilities nsjail keeps (ambient) while running as
// the jail's host uid.
var nsjailCaps = []uintptr{unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_DAC_OVERRIDE}

// writeFiles writes the run's input files into the jail's workspace (at
// the hand-off: a warm jail sees them at once).
func (j *jail) writeFiles(files []File) error {
	if len(files) == 0 {
		return nil
	}
	if j.ws == nil {
		return errors.New("files: this run has no /workspace (mode validate)")
	}
	return j.ws.Write(files)
}

// collectArtifacts reads the artifacts of the jail's run, once nsjail has
// exited and the run's cgroup is gone; mimes are the media types its
// envelope gave them.
func (j *jail) collectArtifacts(l Limits, mimes map[string]string) workspace.Collected {
	if j.ws == nil {
		return workspace.Collected{}
	}
	return j.ws.Collect(artifactBounds(l, mimes))
}

// egressSocket is where the jail's egress socket is created on the host.
func (j *jail) egressSocket() string {
	return filepath.Join(j.dir, "egress", jaillayout.EgressSocketName)
}
