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
	"sync"
	"time"

	"github.com/execgate/execgate/sandbox/harness"
)

// cgroupFSRoot is where the cgroup hierarchies are mounted.
const cgroupFSRoot = "/sys/fs/cgroup"

// warmIdleMax is how long a warm jail may wait for a request before the
// pool replaces it; nsjail's own time_limit for warm jails is raised by as
// much, since it counts from the jail's start, not from the request.
const warmIdleMax = 60 * time.Second

// Runner runs tools in nsjail. It is safe for concurrent use. Create it with
// NewRunner; Close stops its warm jails.
type Runner struct {
	cfg      Config
	nsjail   string
	version  string
	cg       *cgroups
	manifest *manifest
	seccomp  string // the Kafel policy; tests swap in a broken one
	log      *slog.Logger

	mu       sync.Mutex        // guards profiles
	profiles map[string]string // profile key → rendered config file

	pool *pool // nil without a warm pool
}

// NewRunner checks that this host can jail tools (nsjail present, running
// as root, a rootfs built by this binary, usable cgroups) and prepares the
// parent cgroups. A host that cannot jail gets an *UnavailableError; a bad
// Config a plain error naming the key.
func NewRunner(cfg Config) (*Runner, error) {
	cfg = cfg.withDefaults()
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
			Hint:   "nsjail maps the tool to host uid 99999 and creates cgroups, which needs root (in a container: run as root, --privileged)",
			Err:    ErrNotRoot,
		}
	}
	m, err := checkRootfs(abs)
	if err != nil {
		return nil, err
	}
	if err := checkSearchable(abs); err != nil {
		return nil, err
	}
	cg, err := detectCgroups(cfg.Cgroups, cgroupFSRoot, cfg.CgroupParent)
	if err != nil {
		return nil, err
	}
	if err := cg.setup(); err != nil {
		return nil, err
	}
	if n := cg.sweep(); n > 0 {
		slog.Default().Info("removed cgroups left by dead execgate processes", "component", "sandbox", "runs", n)
	}
	if err := os.MkdirAll(filepath.Join(cfg.WorkDir, "profiles"), 0o700); err != nil {
		return nil, fmt.Errorf("sandbox.work_dir: %w", err)
	}
	r := &Runner{
		cfg:      cfg,
		nsjail:   nsjail,
		version:  nsjailVersion(nsjail),
		cg:       cg,
		manifest: m,
		seccomp:  seccompPolicy(),
		log:      slog.Default().With("component", "sandbox"),
		profiles: map[string]string{},
	}
	if cfg.WarmPool > 0 {
		r.pool = newPool(r, cfg.WarmPool)
		_, p, _ := normalize(Spec{}) // the default profile starts warm
		r.pool.want(p)
	}
	return r, nil
}

// Info describes the runner.
func (r *Runner) Info() Info {
	in := Info{
		NsjailPath:      r.nsjail,
		NsjailVersion:   r.version,
		CgroupVersion:   r.cg.version,
		CgroupRoot:      r.cg.root,
		RootfsDir:       r.cfg.RootfsDir,
		PythonVersion:   r.manifest.PythonVersion,
		HarnessSHA256:   harness.Hash(),
		ProtocolVersion: ProtocolVersion,
		WarmPool:        r.cfg.WarmPool,
	}
	if r.pool != nil {
		in.WarmIdle = r.pool.idleCount()
	}
	return in
}

// Close stops and removes the warm jails. Runs in flight finish normally.
func (r *Runner) Close() error {
	if r.pool == nil {
		return nil
	}
	return r.pool.close()
}

// Run runs spec once in a fresh jail. The error is non-nil only when the
// jail could not be created (an *UnavailableError: nothing ran); everything
// that happened to the tool, including a bad spec (InvalidInput), is in the
// Result.
func (r *Runner) Run(ctx context.Context, spec Spec) (Result, error) {
	spec, prof, err := normalize(spec)
	if err != nil {
		return Result{Status: StatusError, Result: nullJSON, Error: &ErrorInfo{Type: ErrInvalidInput, Message: "invalid run spec: " + err.Error()}}, nil
	}
	var j *jail
	if r.pool != nil {
		j = r.pool.take(prof)
	}
	if j == nil {
		if j, err = r.startJail(prof, false); err != nil {
			return Result{}, err
		}
	}
	handoff := time.Now()
	req, err := encodeRequest(spec, handoff.UnixMilli())
	if err != nil {
		_ = j.discard(r.grace())
		return Result{Status: StatusError, Result: nullJSON, Error: &ErrorInfo{Type: ErrInvalidInput, Message: err.Error()}}, nil
	}
	fin := j.run(ctx, req, time.Duration(spec.Limits.TimeoutMS)*time.Millisecond, r.grace(), handoff)
	if err := j.cg.remove(3 * time.Second); err != nil {
		r.log.Warn("removing a run's cgroup", "execution_id", spec.ExecutionID, "error", err)
	}
	v := classify(fin.outcome)
	if v.Unavailable != nil {
		return Result{NsjailLog: fin.outcome.Log}, v.Unavailable
	}
	res := Result{
		Status:    v.Status,
		Result:    v.Result,
		Stdout:    j.stdout.buf.String(),
		Stderr:    j.stderr.buf.String(),
		Truncated: Truncated{Stdout: j.stdout.truncated, Stderr: j.stderr.truncated},
		Error:     v.Error,
		Logs:      v.Logs,
		Usage: Usage{
			WallMS:       fin.wall.Milliseconds(),
			CPUMS:        fin.outcome.CPUMS,
			PeakMemoryKB: fin.stats.PeakBytes >> 10,
		},
		NsjailLog: fin.outcome.Log,
	}
	if res.Result == nil {
		res.Result = nullJSON
	}
	return res, nil
}

var nullJSON = []byte("null")

func (r *Runner) grace() time.Duration {
	return time.Duration(r.cfg.KillGraceMS) * time.Millisecond
}

// profileFile returns the nsjail config file for p, rendering and writing
// it on first use. Files are named by content, so runners (and processes)
// sharing a WorkDir share them safely and a file is written at most once.
func (r *Runner) profileFile(p profile, warm bool) (string, error) {
	key := fmt.Sprintf("%v|%t", p, warm)
	r.mu.Lock()
	defer r.mu.Unlock()
	if path, ok := r.profiles[key]; ok {
		return path, nil
	}
	grace := r.cfg.KillGraceMS
	if warm {
		grace += warmIdleMax.Milliseconds()
	}
	text, err := renderConfig(renderInput{
		Profile:       p,
		RootfsDir:     r.cfg.RootfsDir,
		CgroupVersion: r.cg.version,
		CgroupRoot:    r.cg.root,
		CgroupParent:  r.cg.parent,
		KillGraceMS:   grace,
		Seccomp:       r.seccomp,
	})
	if err != nil {
		return "", fmt.Errorf("rendering the nsjail config: %w", err)
	}
	sum := sha256.Sum256([]byte(text))
	path := filepath.Join(r.cfg.WorkDir, "profiles", hex.EncodeToString(sum[:12])+".cfg")
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if err := writeAtomic(path, []byte(text)); err != nil {
			return "", &UnavailableError{Reason: "writing the nsjail config", Err: err}
		}
	}
	r.profiles[key] = path
	return path, nil
}

// checkSearchable makes sure the jail's user can reach dir: nsjail bind
// mounts it from inside the user namespace, as uid 99999, so dir and every
// parent need the search bit for others.
func checkSearchable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return &UnavailableError{Reason: "rootfs path: " + err.Error(), Err: err}
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return &UnavailableError{
				Reason: fmt.Sprintf("%s is not searchable by others, so the jail (uid %d) cannot reach the rootfs at %s", d, ToolUID, dir),
				Hint:   "chmod o+x " + d,
			}
		}
		if filepath.Dir(d) == d {
			return nil
		}
	}
}

func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
