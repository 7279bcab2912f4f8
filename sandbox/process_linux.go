package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/execgate/execgate/sandbox/seccomp"
	"github.com/execgate/execgate/sandbox/workspace"
	"github.com/execgate/execgate/sandbox/zygote"
)

// Level process (package zygote): the runner starts each zygote's jail
// from the run's profile (startZygote), hands a forked run its request,
// reads its output, serves its tool bridge and classifies the outcome as a
// jail's.

// runProcess runs spec at level process.
func (r *Runner) runProcess(ctx context.Context, spec Spec, prof profile) (Result, error) {
	if err := checkProcessSpec(spec); err != nil {
		return errorResult(ErrInvalidInput, "invalid run spec: "+err.Error(), ""), nil
	}
	key := zygote.Key{Tenant: spec.TenantID, Profile: prof.String(), Limits: prof.Limits}
	p, err := r.zygotes.Fork(key, func() (zygote.Jail, error) { return r.startZygote(prof) })
	var died *zygote.DiedError
	switch {
	case errors.Is(err, zygote.ErrFull):
		r.log.Info("no zygote place free: running at level jail", "tenant_id", spec.TenantID, "execution_id", spec.ExecutionID)
		spec.Isolation = IsolationJail
		return r.run(ctx, spec)
	case errors.As(err, &died):
		return errorResult(ErrSandboxCrashed, "the run's zygote died before the run started: "+died.Err.Error(), ""), nil
	case err != nil:
		return Result{}, err
	}
	out := newProcOutput(p, prof)
	// The run's output goes to spec.Output as it comes (live output), as a
	// jail's does.
	watchCaptures(spec.Output, &out.stdout, &out.stderr)
	if len(spec.Files) > 0 {
		if err := p.Workspace.Write(spec.Files); err != nil {
			p.Abort(out)
			return errorResult(ErrInvalidInput, "invalid run spec: "+err.Error(), ""), nil
		}
	}
	// The run's CPU time is counted from the hand-off, as a warm jail's:
	// its process's setup (and a Deno's start-up) came before the run.
	cpuBase, _ := p.Cgroup().CPUUsage()
	handoff := time.Now()
	req, err := encodeRequest(spec, handoff.UnixMilli())
	if err != nil {
		p.Abort(out)
		return errorResult(ErrInvalidInput, err.Error(), ""), nil
	}
	go func() {
		if out.framed != nil {
			// Deno: stdin stays open for the bridge's answers.
			_ = writeFrame(p.Stdin, req)
			return
		}
		_, _ = p.Stdin.Write(req)
		p.Stdin.Close()
	}()
	bridge := r.runBridge(spec)
	bctx, bcancel := context.WithDeadline(ctx, handoff.Add(time.Duration(spec.Limits.TimeoutMS)*time.Millisecond))
	var channel bridgeChannel = connChannel{p.Bridge}
	if out.framed != nil {
		channel = out.framed.bridge
	}
	bsrv := serveBridge(bctx, channel, bridge, r.log.With("execution_id", spec.ExecutionID))
	exit := p.Wait(ctx, prof.Limits, handoff, out)
	wall := time.Since(handoff)
	bsrv.stop()
	bcancel()
	o := outcome{ExitCode: exit.ExitCode, TimedOut: exit.TimedOut, Cancelled: exit.Cancelled, CancelErr: exit.CancelErr, CPUKilled: exit.CPUKilled}
	stats := p.Cgroup().Stats()
	if used, ok := p.Cgroup().CPUUsage(); ok {
		o.CPUMS = (used - cpuBase).Milliseconds()
	}
	o.Envelope, o.EnvelopeTruncated = out.envelopeBytes()
	env, envErr := parseEnvelope(o.Envelope, o.EnvelopeTruncated)
	collected := collectProcess(p, spec.Limits, env)
	p.End(spec.ExecutionID, exit.Crashed)
	usage := Usage{WallMS: wall.Milliseconds(), CPUMS: o.CPUMS, PeakMemoryKB: stats.PeakBytes >> 10, Warm: true, Isolation: IsolationProcess}
	if exit.Crashed {
		res := errorResult(ErrSandboxCrashed, "the run's zygote died during the run (nothing is retried)", "")
		res.Stdout, res.Stderr = out.stdout.String(), out.stderr.String()
		res.Usage = usage
		withArtifacts(&res, collected)
		return res, nil
	}
	o.Runtime = prof.Runtime
	o.Limits = prof.Limits
	o.MemoryLimitHit = stats.MemoryLimitHit
	o.OOMKilled = stats.OOMKilled
	if o.childSignal() == syscall.SIGSYS && p.HostPID > 0 {
		o.DeniedSyscall = seccomp.SyscallFor(p.HostPID, p.Forked, seccompRecordWait)
	}
	v := classifyParsed(o, env, envErr)
	if v.Unavailable != nil {
		return Result{}, v.Unavailable
	}
	res := runResult(v, o, &out.stdout, &out.stderr, bridge, usage)
	withArtifacts(&res, collected)
	return res, nil
}

// collectProcess reads the artifacts of a run at level process after
// Wait, which killed every process of its cgroup (or, when its harness
// ended it with a whole envelope, killed the harness, its one process):
// nothing of the run runs code any more. A process other than the harness
// still listed (one Wait could not kill in time) means the run is not
// stopped, and nothing is read. env is the run's envelope (nil without
// one: its media types label the artifacts).
func collectProcess(p *zygote.Run, l Limits, env *envelope) workspace.Collected {
	for _, pid := range p.Cgroup().Pids() {
		if pid != p.HostPID {
			return workspace.NotCollected(workspace.ReasonNotStopped)
		}
	}
	var mimes map[string]string
	if env != nil {
		mimes = env.Artifacts
	}
	return p.Workspace.Collect(artifactBounds(l, mimes))
}

// procOutput reads a level-process run's output: stdout and stderr capped
// at the profile's OutputBytes as a jail's, and its envelope: from the
// result pipe (Python), or demultiplexed from a Deno's stdout as at level
// jail (framed: demux.go; the result pipe then carries nothing).
type procOutput struct {
	stdout, stderr textCapture
	envelope       capture
	envelopeEOF    chan struct{} // closed when the result pipe reached EOF
	framed         *framedChannel
	readEnd        []*os.File
	readers        sync.WaitGroup
}

var _ zygote.Output = (*procOutput)(nil)

// newProcOutput starts reading p's output pipes (a run of prof).
func newProcOutput(p *zygote.Run, prof profile) *procOutput {
	l := prof.Limits
	out := &procOutput{
		readEnd:     []*os.File{p.Stdout, p.Stderr, p.Result},
		stdout:      textCapture{max: int(l.OutputBytes), observe: &outputHook{stream: StreamStdout}},
		stderr:      textCapture{max: int(l.OutputBytes), observe: &outputHook{stream: StreamStderr}},
		envelope:    capture{max: int(l.OutputBytes) + envelopeOverhead},
		envelopeEOF: make(chan struct{}),
	}
	if prof.Runtime == runtimeDeno {
		out.framed = &framedChannel{
			envelope:   capture{max: int(l.OutputBytes) + envelopeOverhead},
			bridge:     newStdioChannel(p.Stdin),
			envelopeIn: make(chan struct{}),
		}
	}
	out.readers.Add(3)
	go func() {
		defer out.readers.Done()
		if out.framed != nil {
			out.framed.demux(p.Stdout, &out.stdout)
			return
		}
		out.stdout.readFrom(p.Stdout)
	}()
	go func() { defer out.readers.Done(); out.stderr.readFrom(p.Stderr) }()
	go func() { defer out.readers.Done(); out.envelope.readFrom(p.Result); close(out.envelopeEOF) }()
	return out
}

func (o *procOutput) EnvelopeEOF() <-chan struct{} {
	if o.framed != nil {
		return o.framed.envelopeIn
	}
	return o.envelopeEOF
}

func (o *procOutput) EnvelopeWhole() bool {
	if o.framed != nil {
		return o.framed.whole
	}
	return !o.envelope.truncated && json.Valid(o.envelope.buf)
}

func (o *procOutput) Collect(grace time.Duration) { collectReaders(&o.readers, o.readEnd, grace) }

func (o *procOutput) CollectEnded(grace time.Duration) {
	collectDrained(&o.readers, o.readEnd, grace)
}

// envelopeBytes is the run's envelope, once Collect returned: a Deno's
// framed one (none when its framing broke), else the result pipe's.
func (o *procOutput) envelopeBytes() ([]byte, bool) {
	if o.framed == nil {
		return o.envelope.buf, o.envelope.truncated
	}
	if o.framed.broken != "" {
		return nil, false
	}
	return o.framed.envelope.buf, o.framed.envelope.truncated
}

// startZygote starts the jail of a zygote for runs of prof: prof's jail,
// its config changed by zygoteConfig, its stdin closed.
func (r *Runner) startZygote(prof profile) (zygote.Jail, error) {
	prof.Zygote = true
	j, err := r.startJail(prof, false)
	if err != nil {
		return nil, err
	}
	j.stdin.Close()
	ctl, ok := j.bridge.(*net.UnixConn)
	if !ok {
		_ = j.discard(r.grace())
		return nil, &UnavailableError{Reason: "the zygote's control socket is not a unix socket"}
	}
	return &zygoteJail{j: j, ctl: ctl, grace: r.grace()}, nil
}

// zygoteJail is a zygote's jail as package zygote uses it.
type zygoteJail struct {
	j     *jail
	ctl   *net.UnixConn
	grace time.Duration
}

var _ zygote.Jail = (*zygoteJail)(nil)

func (z *zygoteJail) Control() *net.UnixConn  { return z.ctl }
func (z *zygoteJail) Exited() <-chan struct{} { return z.j.exited }
func (z *zygoteJail) Discard() error          { return z.j.discard(z.grace) }
func (z *zygoteJail) Stderr() string          { return z.j.stderr.String() }
func (z *zygoteJail) Pid() int                { return z.j.cmd.Process.Pid }
func (z *zygoteJail) UID() uint32             { return z.j.uid.UID }

func (z *zygoteJail) Unavailable(reason string) error {
	return &UnavailableError{Reason: reason, Log: z.j.log.lines, Hint: hostHint(z.j.log.lines)}
}
