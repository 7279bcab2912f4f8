package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/execgate/execgate/internal/atomicfile"
	"github.com/execgate/execgate/jaillayout"
	"github.com/execgate/execgate/limits"
	"github.com/execgate/execgate/sandbox/cgroups"
	"github.com/execgate/execgate/sandbox/harness"
	"github.com/execgate/execgate/sandbox/internal/runid"
	"github.com/execgate/execgate/sandbox/pool"
	"github.com/execgate/execgate/sandbox/seccomp"
	"github.com/execgate/execgate/sandbox/uids"
	"github.com/execgate/execgate/sandbox/view"
	"github.com/execgate/execgate/sandbox/workspace"
	"github.com/execgate/execgate/sandbox/zygote"
	"github.com/execgate/execgate/secrets"
	"github.com/execgate/execgate/sourcecheck"
)

// Runner runs tools in nsjail. It is safe for concurrent use. Create it with
// NewRunner; Close stops its warm jails.
type Runner struct {
	cfg    Config
	nsjail string
	// nsjailFile is nsjail's directory (or, when that is private, the
	// binary itself), opened as root, and nsjailExec the path that starts
	// nsjail through it (openNsjail).
	nsjailFile *os.File
	nsjailExec string
	view       *view.View // the jail's view of the rootfs, deps and jails dirs
	// wsDir is where jails' workspaces are attached (the view's).
	wsDir    string
	uids     *uids.Pool // host uids, one per live jail
	version  string
	cg       *cgroups.Manager
	manifest *jaillayout.Manifest
	// seccompPolicy is the Kafel policy; tests swap in a broken one.
	seccompPolicy string
	log           *slog.Logger

	mu       sync.Mutex        // guards profiles
	profiles map[string]string // profile key → rendered config file

	closeOnce sync.Once
	closeErr  error

	pool   *pool.Pool[profile, warmJail] // nil without a warm pool
	egress EgressProxy                   // nil: network mode proxy is refused
	// importsUnchecked skips the import check of JavaScript and TypeScript
	// sources (WithoutImportCheck): trusted probes of the import map only.
	importsUnchecked bool

	// zygotes are the warm zygotes of isolation level process.
	zygotes *zygote.Pool

	fontCaches fontCaches // the environments whose font cache was built or tried (fontcache_linux.go)
}

// jailsDir holds, below WorkDir, the directories of jails that need one
// (jail_linux.go).
const jailsDir = "jails"

// NewRunner checks that this host can jail tools (nsjail present, running
// as root, a rootfs built by this binary, usable cgroups) and prepares the
// parent cgroups. A host that cannot jail gets an *UnavailableError; a bad
// Config a plain error naming the key. Options add collaborators
// (WithEgress for network mode proxy).
func NewRunner(cfg Config, opts ...Option) (*Runner, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(cfg.RootfsDir)
	if err != nil {
		return nil, fmt.Errorf("sandbox.rootfs_dir: %w", err)
	}
	cfg.RootfsDir = abs
	if err := checkConfigString(abs); err != nil {
		return nil, fmt.Errorf("sandbox.rootfs_dir %q: %w", abs, err)
	}
	nsjail, err := FindNsjail(cfg)
	if err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, &UnavailableError{
			Reason: "execgate must run as root to create jails",
			Hint:   "nsjail maps the tool to a host uid of sandbox.uid_range, mounts and creates cgroups, which needs root (in a container: run as root, --privileged)",
			Err:    ErrNotRoot,
		}
	}
	m, err := CheckRootfs(abs)
	if err != nil {
		return nil, err
	}
	lo, hi, err := ParseUIDRange(cfg.UIDRange) // checked by Validate
	if err != nil {
		return nil, fmt.Errorf("sandbox.uid_range: %w", err)
	}
	leases := uids.New(cfg.RuntimeDir, lo, hi)
	cg, err := cgroups.New(cfg.Cgroups, cfg.CgroupParent)
	if err != nil {
		return nil, err
	}
	if err := cg.Setup(); err != nil {
		return nil, err
	}
	if n := cg.Sweep(); n > 0 {
		slog.Default().Info("removed cgroups left by dead execgate processes", "component", "sandbox", "runs", n)
	}
	// WorkDir, its profiles and the deps dir may be private: the jail
	// reaches jails/ and the deps through the view. Directories execgate
	// makes are given their modes whatever the umask.
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{
		{cfg.WorkDir, 0o700},
		{filepath.Join(cfg.WorkDir, "profiles"), 0o700},
		{filepath.Join(cfg.WorkDir, jailsDir), 0o711},
		{cfg.DepsDir, 0o755},
	} {
		if err := makeDir(d.path, d.mode); err != nil {
			return nil, err
		}
	}
	nsjailFile, nsjailExec, err := openNsjail(nsjail)
	if err != nil {
		return nil, &UnavailableError{Reason: "opening nsjail " + nsjail, Hint: setupHint, Err: err}
	}
	v, err := view.Open(cfg.RuntimeDir, abs, cfg.DepsDir, filepath.Join(cfg.WorkDir, jailsDir))
	if err != nil {
		nsjailFile.Close()
		return nil, err
	}
	if err := v.Check(v.Rootfs); err != nil {
		nsjailFile.Close()
		_ = v.Close()
		return nil, err
	}
	r := &Runner{
		cfg:           cfg,
		nsjail:        nsjail,
		nsjailFile:    nsjailFile,
		nsjailExec:    nsjailExec,
		view:          v,
		wsDir:         v.Workspaces,
		uids:          leases,
		version:       nsjailVersion(nsjail),
		cg:            cg,
		manifest:      m,
		seccompPolicy: seccomp.Policy(),
		log:           slog.Default().With("component", "sandbox"),
		profiles:      map[string]string{},
	}
	for _, o := range opts {
		o(r)
	}
	sweepDirs(filepath.Join(cfg.WorkDir, jailsDir), cfg.DepsDir, 2*time.Duration(cfg.DepsTimeoutMS)*time.Millisecond)
	if r.egress != nil {
		// A proxy-mode jail's egress directory is bound from below the
		// jails dir.
		if err := v.Check(v.Jails); err != nil {
			nsjailFile.Close()
			_ = v.Close()
			return nil, fmt.Errorf("sandbox.work_dir (network mode proxy binds the egress socket from it): %w", err)
		}
	}
	if !cg.CPUAccounted() {
		r.log.Warn("no cgroup CPU accounting on this host: the CPU limit holds per process (RLIMIT_CPU), not for the jail as a whole",
			"cgroup_version", cg.Version())
	}
	if err := seccomp.AuditErr(); err != nil {
		r.log.Warn("SyscallDenied outcomes will not name the syscall: the kernel's seccomp audit records are out of reach", "error", err)
	}
	r.zygotes = zygote.New(cfg.Zygotes, cg, r.grace(), r.log)
	if cfg.WarmPool > 0 {
		r.pool = pool.New(cfg.WarmPool, cfg.DepsDir, r.startWarm, r.log)
		_, p, _ := normalize(Spec{Limits: limits.Default}) // the default profile starts warm
		r.pool.Want(p)
	}
	return r, nil
}

// ProbeCgroups detects the cgroups a runner with cfg would use (the rules
// of NewRunner) and proves the parent cgroup usable, changing nothing
// (cgroups.ProbeHost). A failure is an *UnavailableError whose Reason and
// Hint say what to do.
func ProbeCgroups(cfg Config) (cgroups.Probe, error) {
	cfg = cfg.WithDefaults()
	return cgroups.ProbeHost(cfg.Cgroups, cfg.CgroupParent)
}

// Info describes the runner.
func (r *Runner) Info() Info {
	in := Info{
		NsjailPath:      r.nsjail,
		NsjailVersion:   r.version,
		CgroupVersion:   r.cg.Version(),
		CgroupRoot:      r.cg.Root(),
		RootfsDir:       r.cfg.RootfsDir,
		ViewDir:         r.view.Dir,
		UIDRange:        r.cfg.UIDRange,
		PythonVersion:   r.manifest.PythonVersion,
		HarnessSHA256:   harness.Hash(),
		ProtocolVersion: jaillayout.ProtocolVersion,
		WarmPool:        r.cfg.WarmPool,
		CPUAccounting:   r.cg.Accounting(),
	}
	if r.pool != nil {
		in.WarmIdle = r.pool.IdleCount()
	}
	return in
}

// Close stops and removes the warm jails and unmounts the jail's view.
// Call it once the runs in flight have finished.
func (r *Runner) Close() error {
	r.closeOnce.Do(func() {
		var errs []error
		r.zygotes.Close()
		if r.pool != nil {
			errs = append(errs, r.pool.Close())
		}
		errs = append(errs, r.view.Close())
		r.nsjailFile.Close()
		r.closeErr = errors.Join(errs...)
	})
	return r.closeErr
}

// Run runs spec once in a fresh jail. The error is non-nil only when the
// jail could not be created (an *UnavailableError: nothing ran); everything
// that happened to the tool, including a bad spec (InvalidInput), is in the
// Result. A JavaScript or TypeScript source that imports anything, or does
// not parse, is InvalidSource before any jail starts (package sourcecheck).
//
// A run's packages are installed before it comes (package environments):
// the runner binds Spec.Deps read-only and installs nothing. A run with
// packages takes a warm jail only when its environment was warmed for its
// profile (Warm); otherwise it starts cold.
// Result.Usage.Warm says whether the run's jail was a warm one. In network mode
// proxy, the run's egress session is started on the jail's socket at the
// hand-off and closed when the jail is gone; Result.Egress lists every
// connection attempt.
func (r *Runner) Run(ctx context.Context, spec Spec) (Result, error) {
	// The run's secrets are masked out of its live output as it comes
	// (a secret split over two chunks included) and out of its Result.
	m := secrets.NewMasker(spec.Secrets)
	st := m.Stream(spec.Output)
	if st != nil {
		spec.Output = st.Write
	}
	res, err := r.run(ctx, spec)
	if st != nil {
		st.Flush()
	}
	MaskResult(&res, m)
	return res, err
}

// run is Run without the masking.
func (r *Runner) run(ctx context.Context, spec Spec) (Result, error) {
	return r.runSpec(ctx, spec, true)
}

// runSpec is run; fontCache says whether a Python run's environment gets
// its font cache built first (fontcache_linux.go), which the build run
// itself must not wait for.
func (r *Runner) runSpec(ctx context.Context, spec Spec, fontCache bool) (Result, error) {
	spec, prof, err := normalize(spec)
	if err != nil {
		return errorResult(ErrInvalidInput, "invalid run spec: "+err.Error(), ""), nil
	}
	var packages []string // a JavaScript environment's importable packages
	if prof.Deps, packages, err = r.environment(spec, prof); err != nil {
		return errorResult(ErrInvalidInput, "invalid run spec: "+err.Error(), ""), nil
	}
	if fontCache && prof.Deps != "" && !prof.Runtime.deno() {
		r.ensureFontCache(ctx, prof.Deps, spec.Runtime)
	}
	if prof.Runtime.deno() && !r.importsUnchecked {
		// Imports are refused before any jail starts (sourcecheck); the
		// import map in the jail is the second wall.
		problems, err := sourcecheck.Check(ctx, spec.Language, spec.Source, packages)
		if err != nil {
			// As a run cancelled in its jail ends: Timeout.
			return errorResult(ErrTimeout, "the run was cancelled while it waited for the import check: "+err.Error(), ""), nil
		}
		if problems != nil {
			return importRefusal(spec.Mode, problems), nil
		}
	}
	switch spec.Isolation {
	case "", IsolationJail, IsolationProcess:
	default:
		return errorResult(ErrInvalidInput, fmt.Sprintf("invalid run spec: isolation %q is not jail or process", spec.Isolation), ""), nil
	}
	if prof.Runtime.deno() {
		if err := denoReady(r.cfg.RootfsDir); err != nil {
			return Result{}, err
		}
	}
	if spec.Isolation == IsolationProcess {
		return r.runProcess(ctx, spec, prof)
	}
	if prof.Network == NetworkProxy && r.egress == nil {
		return Result{}, &UnavailableError{
			Reason: "network mode proxy: this runner has no egress proxy",
			Hint:   "the service must create its runner with sandbox.WithEgress (execgate serve and run do); until then only network none and host work",
			Err:    ErrNoEgressProxy,
		}
	}
	var j *jail
	warm := false
	if r.pool != nil {
		var w warmJail
		if w, warm = r.pool.Take(spec.TenantID, prof); warm {
			j = w.j
		}
	}
	if j == nil {
		if j, err = r.startJail(prof, false); err != nil {
			return Result{}, err
		}
	}
	var session EgressSession
	if prof.Network == NetworkProxy {
		if session, err = r.startEgress(j, spec.EgressAllow); err != nil {
			_ = j.discard(r.grace())
			if errors.Is(err, ErrInvalidEgressAllow) {
				return errorResult(ErrInvalidInput, "invalid run spec: egress: "+err.Error(), ""), nil
			}
			return Result{}, err
		}
	}
	if err := j.writeFiles(spec.Files); err != nil {
		_ = j.discard(r.grace())
		if session != nil {
			_ = session.Close()
		}
		return errorResult(ErrInvalidInput, "invalid run spec: "+err.Error(), ""), nil
	}
	handoff := time.Now()
	req, err := encodeRequest(spec, handoff.UnixMilli())
	if err != nil {
		_ = j.discard(r.grace())
		if session != nil {
			_ = session.Close()
		}
		return errorResult(ErrInvalidInput, err.Error(), ""), nil
	}
	bridge := r.runBridge(spec)
	bctx, bcancel := context.WithDeadline(ctx, handoff.Add(time.Duration(spec.Limits.TimeoutMS)*time.Millisecond))
	bsrv := serveBridge(bctx, j.bridgeChannel(), bridge, r.log.With("execution_id", spec.ExecutionID))
	j.watch(spec.Output)
	fin := j.run(ctx, req, time.Duration(spec.Limits.TimeoutMS)*time.Millisecond, r.grace(), handoff)
	j.watch(nil)
	bsrv.stop()
	bcancel()
	if err := j.cg.Remove(3 * time.Second); err != nil {
		r.log.Warn("removing a run's cgroup", "execution_id", spec.ExecutionID, "error", err)
	}
	var attempts []EgressAttempt
	var dropped int
	if session != nil {
		if err := session.Close(); err != nil {
			r.log.Warn("closing a run's egress session", "execution_id", spec.ExecutionID, "error", err)
		}
		attempts, dropped = session.Attempts(), session.Dropped()
	}
	if fin.outcome.childSignal() == syscall.SIGSYS {
		if pid := seccomp.ViolationPID(fin.outcome.Log); pid > 0 {
			fin.outcome.DeniedSyscall = seccomp.SyscallFor(pid, j.started, seccompRecordWait)
		}
	}
	v := classify(fin.outcome)
	if v.Unavailable != nil {
		j.release()
		return Result{NsjailLog: fin.outcome.Log}, v.Unavailable
	}
	// Every process of the jail is gone (nsjail exited, its cgroup
	// removed): nothing writes /workspace/out any more.
	collected := j.collectArtifacts(spec.Limits, v.MIMEs)
	j.release()
	res := runResult(v, fin.outcome, &j.stdout, &j.stderr, bridge, Usage{
		WallMS:       fin.wall.Milliseconds(),
		CPUMS:        fin.outcome.CPUMS,
		PeakMemoryKB: fin.stats.PeakBytes >> 10,
		Warm:         warm,
		Isolation:    IsolationJail,
	})
	res.Egress, res.EgressDropped = attempts, dropped
	res.NsjailLog = fin.outcome.Log
	withArtifacts(&res, collected)
	return res, nil
}

// withArtifacts puts what a run's collection found into its result.
func withArtifacts(res *Result, c workspace.Collected) {
	res.Artifacts = c.Artifacts
	res.Truncated.Artifacts, res.Truncated.ArtifactsDropped = c.Dropped, c.DroppedCount
}

// artifactBounds are what the collection of a run with limits l may take;
// mimes are the media types its envelope gave (by name).
func artifactBounds(l Limits, mimes map[string]string) workspace.Bounds {
	return workspace.Bounds{Artifacts: l.Artifacts, Bytes: l.ArtifactsBytes, MIMEs: mimes}
}

// runResult is the Result of a run (a jail's or a level-process one)
// classified as v: its captured output, tool calls and usage, the denied
// syscall named, and a null result when there is none.
func runResult(v verdict, o outcome, stdout, stderr *textCapture, bridge Bridge, usage Usage) Result {
	res := Result{
		Status:    v.Status,
		Result:    v.Result,
		Stdout:    stdout.String(),
		Stderr:    stderr.String(),
		Truncated: Truncated{Stdout: stdout.truncated, Stderr: stderr.truncated},
		Error:     v.Error,
		Logs:      v.Logs,
		ToolCalls: toolCalls(bridge),
		Usage:     usage,
	}
	if res.ErrorType() == ErrSyscallDenied {
		res.DeniedSyscall = seccomp.Label(o.DeniedSyscall)
	}
	if res.Result == nil {
		res.Result = nullJSON
	}
	return res
}

// Warm keeps up to n jails (at most the configured warm pool size)
// waiting for runs of spec's profile: its language, network and limits
// after defaults, and the package environment bound from spec.Deps. The profile is registered to spec.TenantID and
// counts against its share of the pool's places (package pool). It
// returns how many jails it keeps: 0 without a warm pool or when every
// place is pinned. A run takes one when it has the same profile: the same
// environment, network and limits. A bad spec is an error (nothing is
// warmed).
func (r *Runner) Warm(ctx context.Context, spec Spec, n int) (int, error) {
	spec, prof, err := normalize(spec)
	if err != nil {
		return 0, fmt.Errorf("invalid warm spec: %w", err)
	}
	if prof.Deps, _, err = r.environment(spec, prof); err != nil {
		return 0, fmt.Errorf("invalid warm spec: %w", err)
	}
	if r.pool == nil || n <= 0 {
		return 0, nil
	}
	return r.pool.Warm(spec.TenantID, prof, n), nil
}

// depsName is the name, below sandbox.deps_dir, of a run's package
// environment directory dir (Spec.Deps; "" for none): the runner binds
// only what its view of the deps dir shows.
func (r *Runner) depsName(dir string) (string, error) {
	if dir == "" {
		return "", nil
	}
	if filepath.Dir(filepath.Clean(dir)) != filepath.Clean(r.cfg.DepsDir) {
		return "", fmt.Errorf("deps: %q is not a directory of sandbox.deps_dir %s", dir, r.cfg.DepsDir)
	}
	return filepath.Base(dir), nil
}

// environment is the name of a run's package environment below
// sandbox.deps_dir (depsName) and, for JavaScript and TypeScript, the
// packages its import map lets the tool import. An environment of the
// other language's is refused: a JavaScript one (it has an import map) is
// no Python environment, and a Deno jail needs the import map.
func (r *Runner) environment(spec Spec, prof profile) (string, []string, error) {
	name, err := r.depsName(spec.Deps)
	if err != nil || name == "" {
		return name, nil, err
	}
	packages, err := envPackages(filepath.Join(r.cfg.DepsDir, name))
	switch {
	case prof.Runtime.deno() && err != nil:
		return "", nil, fmt.Errorf("deps: %s is not a JavaScript package environment: %w", name, err)
	case !prof.Runtime.deno() && err == nil:
		return "", nil, fmt.Errorf("deps: %s is a JavaScript package environment, not a Python one", name)
	}
	return name, packages, nil
}

// seccompRecordWait is how long a run killed by seccomp waits for the
// kernel's audit record naming the call: the kernel's audit thread sends it
// asynchronously, and on a loaded host (load 15 on 2 cores) it came later
// than a second, once later than three. Only such runs wait, and only
// until the record arrives: a record that never comes costs its run this.
const seccompRecordWait = 10 * time.Second

func errorResult(typ, msg, tb string) Result {
	return Result{Status: StatusError, Result: nullJSON, Error: &ErrorInfo{Type: typ, Message: msg, Traceback: tb}}
}

// maxSocketPath is the longest path a unix socket can be bound at.
const maxSocketPath = 107

// startEgress starts the run's egress session on the jail's socket. A
// socket path too long for bind(2) is reached through the directory's
// descriptor, kept open for the session's lifetime.
func (r *Runner) startEgress(j *jail, allow []string) (EgressSession, error) {
	path := j.egressSocket()
	if len(path) <= maxSocketPath {
		s, err := r.egress.Start(path, allow)
		return s, wrapEgressErr(err)
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return nil, &UnavailableError{Reason: "opening the jail's egress directory", Err: err}
	}
	s, err := r.egress.Start(fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), jaillayout.EgressSocketName), allow)
	if err != nil {
		dir.Close()
		return nil, wrapEgressErr(err)
	}
	return &dirSession{EgressSession: s, dir: dir}, nil
}

func wrapEgressErr(err error) error {
	if err == nil || errors.Is(err, ErrInvalidEgressAllow) {
		return err
	}
	return &UnavailableError{Reason: "starting the run's egress proxy session", Err: err}
}

// dirSession keeps the directory descriptor its socket path goes through
// open until the session is closed (closing unlinks the socket by path).
type dirSession struct {
	EgressSession
	dir *os.File
}

func (s *dirSession) Close() error {
	err := s.EgressSession.Close()
	s.dir.Close()
	return err
}

var nullJSON = []byte("null")

func (r *Runner) grace() time.Duration {
	return time.Duration(r.cfg.KillGraceMS) * time.Millisecond
}

// profileFile returns the nsjail config file for p, rendering and writing
// it on first use. Files are named by content, so runners (and processes)
// sharing a WorkDir share them safely and a file is written at most once.
func (r *Runner) profileFile(p profile, warm bool) (string, error) {
	key := fmt.Sprintf("%v|%t|%t", p, warm, p.Zygote) // String() leaves Zygote out
	r.mu.Lock()
	defer r.mu.Unlock()
	if path, ok := r.profiles[key]; ok {
		return path, nil
	}
	text, err := renderConfig(r.renderInputLocked(p, warm))
	if err == nil && p.Zygote {
		text, err = zygoteConfig(text, p)
	}
	if err != nil {
		return "", fmt.Errorf("rendering the nsjail config: %w", err)
	}
	sum := sha256.Sum256([]byte(text))
	path := filepath.Join(r.cfg.WorkDir, "profiles", hex.EncodeToString(sum[:12])+".cfg")
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if err := atomicfile.Write(path, []byte(text), 0o600); err != nil {
			return "", &UnavailableError{Reason: "writing the nsjail config", Err: err}
		}
	}
	r.profiles[key] = path
	return path, nil
}

// sweepDirs removes what dead execgate processes left behind: jail
// directories of runs whose owner is gone (named like their cgroups,
// run-<pid>-<random>), and requirement installs abandoned midway (older
// than twice the install timeout). Failures are ignored: it is
// housekeeping.
func sweepDirs(jails, deps string, abandoned time.Duration) {
	if entries, err := os.ReadDir(jails); err == nil {
		for _, e := range entries {
			if runid.Orphaned(e.Name()) {
				os.RemoveAll(filepath.Join(jails, e.Name()))
			}
		}
	}
	if entries, err := os.ReadDir(deps); err == nil {
		for _, e := range entries {
			fi, err := e.Info()
			if err == nil && strings.HasPrefix(e.Name(), ".tmp-") && time.Since(fi.ModTime()) > abandoned {
				os.RemoveAll(filepath.Join(deps, e.Name()))
			}
		}
	}
}

// renderInput is what renderConfig needs for profile p.
func (r *Runner) renderInput(p profile, warm bool) renderInput {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.renderInputLocked(p, warm)
}

func (r *Runner) renderInputLocked(p profile, warm bool) renderInput {
	grace := r.cfg.KillGraceMS
	if warm {
		grace += pool.MaxIdle.Milliseconds()
	}
	return renderInput{
		Profile:       p,
		RootfsDir:     r.view.Rootfs,
		CgroupVersion: r.cg.Version(),
		CgroupRoot:    r.cg.Root(),
		CgroupParent:  r.cg.Parent(),
		KillGraceMS:   grace,
		Seccomp:       r.seccompPolicy, // guarded by mu: tests swap it
	}
}

// nsjailFD is the descriptor number nsjail's directory (or binary) has in
// the child that executes it (jail_linux.go's fd contract).
const nsjailFD = 6

// openNsjail opens what a jail's start executes nsjail through. The child
// runs as the jail's uid, without effective capabilities until nsjail runs,
// so it may not traverse a private directory above the binary (a checkout
// under /root). It goes through a descriptor opened here, as root: of the
// binary's directory when the jail's uid may search it, so the process is
// still named "nsjail" (/proc/self/fd/6/nsjail), else of the binary itself
// (/proc/self/fd/6, named "6" in ps).
func openNsjail(path string) (*os.File, string, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, "", err
	}
	dir := filepath.Dir(real)
	if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o001 != 0 {
		f, err := os.Open(dir)
		if err != nil {
			return nil, "", err
		}
		return f, fmt.Sprintf("/proc/self/fd/%d/%s", nsjailFD, filepath.Base(real)), nil
	}
	f, err := os.Open(real)
	if err != nil {
		return nil, "", err
	}
	return f, fmt.Sprintf("/proc/self/fd/%d", nsjailFD), nil
}

// makeDir creates dir (and its parents) unless it exists, and gives it
// mode when this call created it.
func makeDir(dir string, mode os.FileMode) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, mode); err != nil {
		return &UnavailableError{Reason: "creating " + dir, Err: err}
	}
	if err := os.Chmod(dir, mode); err != nil {
		return &UnavailableError{Reason: "creating " + dir, Err: err}
	}
	return nil
}

// runBridge is the Bridge serving spec's run: its fixtures in test mode
// (nothing leaves the runner), else the spec's own, else none.
func (r *Runner) runBridge(spec Spec) Bridge {
	if spec.Mode == "test" {
		b, err := NewFixtureBridge(spec.ToolFixtures) // checked by normalize
		if err != nil {
			return noBridge{}
		}
		return b
	}
	if spec.Bridge == nil {
		return noBridge{}
	}
	return spec.Bridge
}

// toolCalls returns what b recorded, if it records.
func toolCalls(b Bridge) []ToolCall {
	if rec, ok := b.(ToolCallRecorder); ok {
		return rec.ToolCalls()
	}
	return nil
}
