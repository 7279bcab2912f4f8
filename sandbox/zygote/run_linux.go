package zygote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox/cgroups"
	"github.com/execgate/execgate/sandbox/internal/unavailable"
	"github.com/execgate/execgate/sandbox/internal/unixpair"
	"github.com/execgate/execgate/sandbox/workspace"
)

// Run is one run forked from a zygote (Pool.Fork): a process in its own
// cgroup, set up up to the hand-off, its harness waiting for the request
// on Stdin. The runner writes the request, reads Stdout, Stderr and Result
// to EOF (Output), serves the tool bridge on Bridge, then calls Wait and
// End (or Abort when it cannot hand the run its request). Wait closes
// Stdin and Bridge.
type Run struct {
	// Stdin takes the run's request; Stdout, Stderr and Result are the
	// runner's ends of the run's output pipes; Bridge is the runner's end
	// of its tool bridge socket.
	Stdin                  *os.File
	Stdout, Stderr, Result *os.File
	Bridge                 net.Conn
	// HostPID is the run's process as the host sees it.
	HostPID int
	// Forked is when the zygote was asked to fork: the kernel may stamp an
	// audit record of the process with the time of an earlier syscall
	// than the one that killed it, never earlier than its fork.
	Forked time.Time
	// Workspace is the run's /workspace: the runner writes the run's
	// input files into it before the request and collects its artifacts
	// after Wait. End (or Abort) closes it.
	Workspace *workspace.Workspace

	z     *zygote
	cg    *cgroups.Run
	pid   int // in the jail
	pidfd int // spare.pidfd, closed by finish
}

// Output is the runner's reading of a run's output pipes, which Wait needs
// to end the run.
type Output interface {
	// EnvelopeEOF is closed when the result pipe reached EOF: the harness
	// closes it right after a complete envelope, just before it exits.
	EnvelopeEOF() <-chan struct{}
	// EnvelopeWhole reports whether what the result pipe carried is a
	// whole envelope (not cut at its cap, valid JSON); asked once
	// EnvelopeEOF is closed.
	EnvelopeWhole() bool
	// Collect waits for the readers (EOF once every process of the run is
	// gone) and closes the read ends; readers still blocked after grace
	// are unblocked by closing their pipes.
	Collect(grace time.Duration)
	// CollectEnded is Collect for a run that ended with its envelope (its
	// one process, the harness, killed after it): everything the run
	// wrote is in the pipes by then, so each reader is unblocked as soon
	// as its pipe is empty (within grace) instead of at EOF, which comes
	// only once the kernel has torn the killed process down.
	CollectEnded(grace time.Duration)
}

// Exit is how a run ended, as Wait saw it.
type Exit struct {
	// ExitCode is the harness's exit status, or 128+n when it was killed
	// by signal n (as nsjail reports a jail's).
	ExitCode int
	// TimedOut: the deadline passed and the run was stopped. Cancelled:
	// ctx ended first (CancelErr is its cause). CPUKilled: the run's
	// processes together used more CPU time than the limit.
	TimedOut  bool
	Cancelled bool
	CancelErr error
	CPUKilled bool
	// Crashed: the zygote died before the run ended.
	Crashed bool
}

// exitSignalBase is added to a signal's number in an exit status.
const exitSignalBase = 128

// Cgroup is the run's cgroup: its counters are read after Wait, before End.
func (p *Run) Cgroup() *cgroups.Run { return p.cg }

// End ends the run's claim on its zygote, after Wait: its cgroup is reset
// for a later run or removed (in the background), a zygote that died
// (crashed) is dropped, and the zygote is released (a retired one stops
// after its last run).
func (p *Run) End(executionID string, crashed bool) {
	p.Workspace.Release()
	zs := p.z.pool
	zs.recycle(p.z, p.cg, executionID)
	if crashed {
		zs.discardDead(p.z)
	}
	zs.done(p.z)
}

// Abort ends a run that never got its request: it is killed, its output
// collected, its cgroup removed and its zygote released.
func (p *Run) Abort(out Output) {
	defer p.Workspace.Release()
	p.kill()
	p.finish(out, p.z.exitChan(p.pid), false)
	_ = p.cg.Remove(3 * time.Second)
	p.z.pool.done(p.z)
}

// StartFunc starts the jail of a zygote for the key it was given with.
type StartFunc func() (Jail, error)

// Fork returns a run of key's zygote (starting the zygote with start when
// there is none yet, within the budget), forked ahead as a spare or now.
// The error is ErrFull when the budget has no room (the run is to get a
// fresh jail), a *DiedError when the zygote died before the run started,
// and otherwise an *unavailable.Error.
func (zs *Pool) Fork(key Key, start StartFunc) (*Run, error) {
	z, err := zs.acquire(key, start)
	if err != nil {
		return nil, err
	}
	sp, err := z.takeSpare(key.Limits)
	if err != nil {
		defer zs.done(z)
		select {
		case <-z.dead:
			zs.discardDead(z)
			return nil, &DiedError{Err: err}
		default:
		}
		return nil, &unavailable.Error{Reason: "starting a run in its zygote (zygote stderr: " + clip(z.j.Stderr(), 2000) + ")", Err: err}
	}
	return &Run{
		Stdin: sp.stdin, Stdout: sp.stdout, Stderr: sp.stderr, Result: sp.result, Bridge: sp.bridge,
		HostPID: sp.hostPID, Forked: sp.forked, Workspace: sp.ws,
		z: z, cg: sp.cg, pid: sp.pid, pidfd: sp.pidfd,
	}, nil
}

// DiedError: the run's zygote died before the run started (nothing ran).
type DiedError struct{ Err error }

func (e *DiedError) Error() string { return e.Err.Error() }

func (e *DiedError) Unwrap() error { return e.Err }

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
	ws           *workspace.Workspace
}

// closeEnds closes the runner's ends of the spare's descriptors and its
// workspace.
func (sp *spare) closeEnds() {
	for _, f := range []*os.File{sp.stdin, sp.stdout, sp.stderr, sp.result} {
		f.Close()
	}
	sp.bridge.Close()
	syscall.Close(sp.pidfd)
	sp.ws.Release()
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
func (z *zygote) prepareSpare(l limits.Limits) (_ *spare, err error) {
	var cleanup []func()
	defer func() {
		if err != nil {
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
		}
	}()
	cg, err := z.newCgroup(l)
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, func() { _ = cg.Remove(time.Second) })
	ws, err := workspace.New(workspace.Config{Files: l.Files, FilesBytes: l.FilesBytes, OutBytes: l.TmpMB << 20, UID: int(z.j.UID())})
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, ws.Close)
	wsRO, wsOut, err := ws.Clones()
	if err != nil {
		return nil, err
	}
	defer wsRO.Close()
	defer wsOut.Close()
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
	pid, err := z.fork([]int{int(syncChild.Fd())}, l.TmpMB<<20, (l.CPUMS+999)/1000+1)
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
	bridgeConn, bridgeChild, err := unixpair.Open()
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, func() { bridgeConn.Close(); bridgeChild.Close() })
	fds := []int{int(in.r.Fd()), int(out.w.Fd()), int(errp.w.Fd()), int(res.w.Fd()), int(bridgeChild.Fd()), int(wsRO.Fd()), int(wsOut.Fd())}
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
		stdin: in.w, stdout: out.r, stderr: errp.r, result: res.r, bridge: bridgeConn, ws: ws,
	}, nil
}

// takeSpare returns z's spare process, or prepares one, and has the next
// one prepared in the background.
func (z *zygote) takeSpare(l limits.Limits) (*spare, error) {
	defer z.refill(l)
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
			return z.prepareSpare(l)
		}
	}
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

// Wait waits for the run to end (stopping it at the deadline of l's
// TimeoutMS from handoff, at its CPU limit, or when ctx ends), kills every
// process left in its cgroup and collects its output (out). Exit.Crashed
// says the zygote died first.
func (p *Run) Wait(ctx context.Context, l limits.Limits, handoff time.Time, out Output) (o Exit) {
	exit := p.z.exitChan(p.pid)
	defer p.z.forget(p.pid)
	timer := time.NewTimer(time.Duration(l.TimeoutMS)*time.Millisecond - time.Since(handoff))
	defer timer.Stop()
	cpuLimit := time.Duration(l.CPUMS) * time.Millisecond
	cpuBase, watching := p.cg.CPUUsage()
	var cpuTick <-chan time.Time
	cpuTimer := time.NewTimer(cgroups.CPUPollDelay(cpuLimit))
	defer cpuTimer.Stop()
	if watching {
		cpuTick = cpuTimer.C
	}
	status := -1
	envelopeEOF := out.EnvelopeEOF()
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
			if ended, killedWhole = p.endedWithEnvelope(out); ended {
				status = 0
				p.z.pool.endedEarly.Add(1)
				break wait
			}
		case <-p.z.dead:
			o.Crashed = true
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
			cpuTimer.Reset(cgroups.CPUPollDelay(cpuLimit - (used - cpuBase)))
		}
	}
	if !ended {
		p.kill()
	}
	if status < 0 && !o.Crashed {
		// Stopped by the runner: the zygote reports the kill.
		t := time.NewTimer(p.z.pool.grace)
		select {
		case status = <-exit:
		case <-p.z.dead:
			o.Crashed = true
		case <-t.C:
		}
		t.Stop()
	}
	p.finish(out, nil, ended)
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
	return o
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
// microseconds between its envelope and its exit is not seen. A harness
// already in its exit when the kill comes has the SIGKILL dropped by the
// kernel (its group is exiting) and shows neither PF_EXITING nor a pending
// SIGKILL until exit_signals, which can wait for a cgroup migration under
// way (the next spare's): it never returns to user space all the same.
func (p *Run) endedWithEnvelope(out Output) (ended, killed bool) {
	if p.cg.Version() != 1 || p.pidfd < 0 || !out.EnvelopeWhole() {
		return false, false
	}
	// The harness's work is done (its envelope is whole): it is killed
	// whether or not the run can end now.
	if err := unix.PidfdSendSignal(p.pidfd, syscall.SIGKILL, nil, 0); err != nil && err != syscall.ESRCH {
		return false, false
	}
	return p.cg.HoldsOnly(p.HostPID), true
}

// kill kills every process in the run's cgroup until none is left (a fork
// bomb is bounded by the pids limit, so this ends). None is left when the
// cgroup lists none and its pids controller charges none: a child whose
// fork passed the kernel's last signal check before its parent was killed
// is charged before it is listed, and would otherwise outlive the run
// (TestProcessRunEndsWithItsEnvelope caught one in CI); a zombie waits for
// the zygote to reap it.
func (p *Run) kill() {
	killPidfd(p.pidfd)
	// Every process of the run is in each of its hierarchies (born there;
	// nothing in the jail can move one), so one listing names them all.
	deadline := time.Now().Add(3 * time.Second)
	for delay := 100 * time.Microsecond; ; delay = min(delay*2, 20*time.Millisecond) {
		pids := p.cg.Pids()
		if (len(pids) == 0 && p.cg.Charged() <= 0) || time.Now().After(deadline) {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(delay)
	}
}

// finish waits for the output readers (EOF once every process of the run
// is gone; an empty pipe when the run ended with its envelope) and closes
// the runner's ends; exit, when not nil, is drained for the zygote's
// report of the killed child.
func (p *Run) finish(out Output, exit chan int, ended bool) {
	t := time.NewTimer(p.z.pool.grace) // the drain of exit waits until grace from here
	defer t.Stop()
	if ended {
		out.CollectEnded(p.z.pool.grace)
	} else {
		out.Collect(p.z.pool.grace)
	}
	p.Stdin.Close()
	p.Bridge.Close()
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
