package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// jail is one nsjail process: started (cold, or ahead of time for the warm
// pool), then handed exactly one request, then reaped and cleaned up. A jail
// is never reused.
//
// File descriptors of nsjail (and, except fd 4, of the harness):
//
//	0  stdin   the request (JSON), closed after writing
//	1  stdout  the tool's stdout, captured up to Limits.OutputBytes
//	2  stderr  the tool's stderr, same cap
//	3  result  the harness's envelope (pass_fd 3), capped
//	4  log     nsjail's own log (log_fd 4); nsjail does not pass it on, so the
//	           tool gets EBADF and cannot forge nsjail's lines
type jail struct {
	prof    profile
	cmd     *exec.Cmd
	cg      *runCgroup
	stdin   *os.File // write end of the request pipe
	readEnd []*os.File

	stdout, stderr, envelope capture
	log                      logCapture
	readers                  sync.WaitGroup

	exited  chan struct{} // closed once cmd.Wait returned
	waitErr error         // set before exited is closed
	started time.Time
}

// startJail starts nsjail for profile p, up to the point where the harness
// waits for its request on stdin.
func (r *Runner) startJail(p profile, warm bool) (_ *jail, err error) {
	cfgPath, err := r.profileFile(p, warm)
	if err != nil {
		return nil, err
	}
	var cleanup []func()
	defer func() {
		if err != nil {
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
		}
	}()

	cg, err := r.cg.create(newRunID(), p.Limits.MemoryMB<<20, p.Limits.Pids)
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, func() { _ = cg.remove(time.Second) })

	// Pipes: the parent keeps one end of each, the child gets the other.
	type pipe struct{ r, w *os.File }
	var pipes [5]pipe
	for i := range pipes {
		pr, pw, perr := os.Pipe()
		if perr != nil {
			return nil, &UnavailableError{Reason: "creating pipes for nsjail", Err: perr}
		}
		pipes[i] = pipe{pr, pw}
		cleanup = append(cleanup, func() { pr.Close(); pw.Close() })
	}
	in, out, errp, res, logp := pipes[0], pipes[1], pipes[2], pipes[3], pipes[4]

	args := []string{r.nsjail, "--config", cfgPath}
	args = append(args, cg.nsjailArgs()...)
	cmd := &exec.Cmd{
		Path:       r.nsjail,
		Args:       args,
		Env:        []string{}, // nothing of the gateway's environment reaches nsjail
		Dir:        "/",
		Stdin:      in.r,
		Stdout:     out.w,
		Stderr:     errp.w,
		ExtraFiles: []*os.File{res.w, logp.w}, // fd 3, fd 4
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid:   true,            // the runner signals nsjail's whole group
			Pdeathsig: syscall.SIGKILL, // and nsjail dies with the runner (the tool with nsjail)
		},
	}
	if err := cmd.Start(); err != nil {
		return nil, &UnavailableError{Reason: "starting nsjail " + r.nsjail, Hint: setupHint, Err: err}
	}
	// From here the jail owns everything; the child's ends are closed in
	// the parent so EOF arrives when the jail is gone.
	for _, f := range []*os.File{in.r, out.w, errp.w, res.w, logp.w} {
		f.Close()
	}
	l := p.Limits
	j := &jail{
		prof:     p,
		cmd:      cmd,
		cg:       cg,
		stdin:    in.w,
		readEnd:  []*os.File{out.r, errp.r, res.r, logp.r},
		stdout:   capture{max: int(l.OutputBytes)},
		stderr:   capture{max: int(l.OutputBytes)},
		envelope: capture{max: int(l.OutputBytes) + envelopeOverhead},
		exited:   make(chan struct{}),
		started:  time.Now(),
	}
	j.readers.Add(4)
	go func() { defer j.readers.Done(); j.stdout.readFrom(out.r) }()
	go func() { defer j.readers.Done(); j.stderr.readFrom(errp.r) }()
	go func() { defer j.readers.Done(); j.envelope.readFrom(res.r) }()
	go func() { defer j.readers.Done(); j.log.readFrom(logp.r) }()
	go func() {
		j.waitErr = cmd.Wait()
		close(j.exited)
	}()
	return j, nil
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
	stats   cgroupStats
}

// run hands req to the jail, waits for it to end (stopping it at the
// deadline or when ctx ends), and collects everything. The jail is dead and
// its cgroup removed when run returns.
func (j *jail) run(ctx context.Context, req []byte, timeout, grace time.Duration, handoff time.Time) finished {
	go func() {
		// A jail that died early makes this fail with EPIPE; the outcome
		// says why it died.
		_, _ = j.stdin.Write(req)
		j.stdin.Close()
	}()
	var o outcome
	timer := time.NewTimer(timeout - time.Since(handoff))
	defer timer.Stop()
	select {
	case <-j.exited:
	case <-timer.C:
		o.TimedOut = true
		j.stop(grace)
	case <-ctx.Done():
		o.Cancelled, o.CancelErr = true, ctx.Err()
		j.stop(grace)
	}
	<-j.exited
	wall := time.Since(handoff)
	j.collect(grace)
	ps := j.cmd.ProcessState
	o.ExitCode = ps.ExitCode()
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		o.Signal = ws.Signal()
	}
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		o.CPUMS = (ru.Utime.Nano() + ru.Stime.Nano()) / int64(time.Millisecond)
	}
	o.Log = j.log.lines
	o.Envelope = j.envelope.buf.Bytes()
	o.EnvelopeTruncated = j.envelope.truncated
	o.Limits = j.prof.Limits
	stats := j.cg.stats()
	o.MemoryLimitHit = stats.MemoryLimitHit
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
	done := make(chan struct{})
	go func() { j.readers.Wait(); close(done) }()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		for _, f := range j.readEnd {
			f.Close()
		}
		<-done
	}
	for _, f := range j.readEnd {
		f.Close()
	}
	j.stdin.Close()
}

// discard stops an unused (warm) jail and removes its cgroup.
func (j *jail) discard(grace time.Duration) error {
	j.stdin.Close()
	if j.alive() {
		j.stop(grace)
	}
	<-j.exited
	j.collect(grace)
	return j.cg.remove(3 * time.Second)
}

// newRunID names a run's cgroup "run-<pid>-<random>": random so runners
// sharing the parent cgroup never collide, and carrying the owner's pid so
// a later runner can remove what a dead process left behind (sweep).
func newRunID() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err)) // never fails on Linux
	}
	return fmt.Sprintf("run-%d-%s", os.Getpid(), hex.EncodeToString(b[:]))
}
